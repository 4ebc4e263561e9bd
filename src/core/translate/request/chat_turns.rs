//! Chat Completions → Messages: `messages` → `system` and alternating user / assistant turns.

use super::chat_parts::{self, tool_id};
use super::{kind, present, refuse, take, Obj, Untranslatable};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    User,
    Assistant,
}

/// One Anthropic turn: its content blocks, and for an assistant turn the tool calls it made
/// with the index of the message each came from (to name it in a refusal).
#[derive(Debug)]
pub(super) struct Turn {
    pub role: Role,
    pub content: Vec<Value>,
    calls: Vec<(String, usize)>,
}

/// The conversation as Anthropic takes it.
#[derive(Debug, Default)]
pub(super) struct Conversation {
    /// `system` text blocks.
    pub system: Vec<Value>,
    pub turns: Vec<Turn>,
}

/// `messages` → the conversation. Anthropic Messages API, `system`: there is no system role in
/// `messages`, so system and developer messages, wherever they stand, go to `system` in order.
pub(super) fn convert(messages: Option<Value>) -> Result<Conversation, Untranslatable> {
    let Some(Value::Array(list)) = messages else {
        return Err(refuse("messages", "expected an array of messages"));
    };
    let mut conv = Conversation::default();
    for (i, message) in list.into_iter().enumerate() {
        let Value::Object(mut m) = message else {
            return Err(refuse(format!("messages[{i}]"), "expected an object"));
        };
        let role = match m.remove("role") {
            Some(Value::String(role)) => role,
            _ => return Err(refuse(format!("messages[{i}].role"), "expected a string")),
        };
        match role.as_str() {
            "system" | "developer" => {
                let blocks = chat_parts::system_content(i, take(&mut m, "content"))?;
                conv.system.extend(blocks);
            }
            "user" => {
                let blocks = chat_parts::user_content(i, take(&mut m, "content"))?;
                conv.push(Role::User, blocks, Vec::new());
            }
            "assistant" => conv.assistant(i, m)?,
            "tool" => conv.tool(i, m)?,
            "function" => {
                let reason = "deprecated function messages: use tool calls and tool messages";
                return Err(refuse(format!("messages[{i}]"), reason));
            }
            other => {
                let reason = format!("unknown role `{other}`");
                return Err(refuse(format!("messages[{i}].role"), reason));
            }
        }
    }
    conv.check_answered()?;
    conv.trim_final_assistant();
    if conv.turns.is_empty() {
        return Err(refuse("messages", "no user or assistant content to send"));
    }
    Ok(conv)
}

impl Conversation {
    /// Appends blocks to the last turn when it has the same role (Anthropic's turns alternate).
    fn push(&mut self, role: Role, blocks: Vec<Value>, calls: Vec<(String, usize)>) {
        if blocks.is_empty() {
            return;
        }
        match self.turns.last_mut() {
            Some(turn) if turn.role == role => {
                turn.content.extend(blocks);
                turn.calls.extend(calls);
            }
            _ => self.turns.push(Turn {
                role,
                content: blocks,
                calls,
            }),
        }
    }

    fn assistant(&mut self, i: usize, mut m: Obj) -> Result<(), Untranslatable> {
        for field in ["audio", "function_call"] {
            if present(&m, field).is_some() {
                let reason = "has no Anthropic Messages equivalent";
                return Err(refuse(format!("messages[{i}].{field}"), reason));
            }
        }
        let mut blocks = chat_parts::assistant_content(i, take(&mut m, "content"))?;
        if let Some(Value::String(refusal)) = take(&mut m, "refusal") {
            if !refusal.is_empty() {
                blocks.push(json!({"type": "text", "text": refusal}));
            }
        }
        let uses = chat_parts::tool_uses(i, take(&mut m, "tool_calls"))?;
        let calls = uses.iter().map(|(id, _)| (id.clone(), i)).collect();
        blocks.extend(uses.into_iter().map(|(_, block)| block));
        self.push(Role::Assistant, blocks, calls);
        Ok(())
    }

    /// A `tool` message → a `tool_result` block in the user turn that follows the assistant
    /// turn whose call it answers. Anthropic tool use: tool_result blocks come first in that
    /// turn, any text after them.
    fn tool(&mut self, i: usize, mut m: Obj) -> Result<(), Untranslatable> {
        let field = format!("messages[{i}].tool_call_id");
        let Some(Value::String(raw)) = take(&mut m, "tool_call_id") else {
            return Err(refuse(field, "expected a string"));
        };
        let id = tool_id(&raw).ok_or_else(|| refuse(field.clone(), "expected a tool call id"))?;
        if !self.open_call(&id) {
            let reason = format!("`{raw}` answers no tool call of the assistant turn before it");
            return Err(refuse(field, reason));
        }
        let content = chat_parts::tool_content(i, take(&mut m, "content"))?;
        let mut block = json!({"type": "tool_result", "tool_use_id": id});
        if let (Some(content), Some(obj)) = (content, block.as_object_mut()) {
            obj.insert("content".into(), content);
        }
        match self.turns.last_mut() {
            Some(turn) if turn.role == Role::User => {
                let at = turn
                    .content
                    .iter()
                    .take_while(|b| is_tool_result(b))
                    .count();
                turn.content.insert(at, block);
            }
            _ => self.push(Role::User, vec![block], Vec::new()),
        }
        Ok(())
    }

    /// Whether `id` is a call of the assistant turn just before the current user turn, not
    /// answered yet.
    fn open_call(&self, id: &str) -> bool {
        let mut rev = self.turns.iter().rev();
        let (assistant, answers) = match rev.next() {
            Some(t) if t.role == Role::User => (rev.next(), Some(t)),
            last => (last, None),
        };
        let called = assistant.is_some_and(|t| t.calls.iter().any(|(c, _)| c == id));
        called && !answers.is_some_and(|t| answers_call(t, id))
    }

    /// Anthropic tool use: each tool_use needs its tool_result in the next turn (400 otherwise;
    /// OpenAI refuses an unanswered tool call too).
    fn check_answered(&self) -> Result<(), Untranslatable> {
        for (k, turn) in self.turns.iter().enumerate() {
            let next = self.turns.get(k + 1);
            for (id, i) in &turn.calls {
                if !next.is_some_and(|n| answers_call(n, id)) {
                    let reason = format!("tool call `{id}` has no tool message answering it");
                    return Err(refuse(format!("messages[{i}].tool_calls"), reason));
                }
            }
        }
        Ok(())
    }

    /// Anthropic Messages API, `messages`: a final assistant turn (a prefill) cannot end with
    /// whitespace.
    fn trim_final_assistant(&mut self) {
        let Some(turn) = self.turns.last_mut().filter(|t| t.role == Role::Assistant) else {
            return;
        };
        if let Some(Value::String(text)) = turn.content.last_mut().and_then(|b| b.get_mut("text")) {
            text.truncate(text.trim_end().len());
            if text.is_empty() {
                turn.content.pop();
            }
        }
        if turn.content.is_empty() {
            self.turns.pop();
        }
    }

    /// Whether any turn holds a tool_use or tool_result block.
    pub fn has_tool_blocks(&self) -> bool {
        self.turns.iter().flat_map(|t| &t.content).any(|b| {
            matches!(
                b.get("type").and_then(Value::as_str),
                Some("tool_use" | "tool_result")
            )
        })
    }

    /// Whether the last assistant turn called tools.
    pub fn last_assistant_calls_tools(&self) -> bool {
        let last = self.turns.iter().rev().find(|t| t.role == Role::Assistant);
        last.is_some_and(|t| !t.calls.is_empty())
    }

    /// Anthropic's `system` (a string when one plain text block does, else the blocks) and
    /// `messages`.
    pub fn into_parts(self) -> (Option<Value>, Vec<Value>) {
        let system = match self.system.as_slice() {
            [] => None,
            [only] if only.get("cache_control").is_none() => only.get("text").cloned(),
            _ => Some(Value::Array(self.system)),
        };
        let messages = self
            .turns
            .into_iter()
            .map(|t| {
                let role = match t.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                json!({"role": role, "content": t.content})
            })
            .collect();
        (system, messages)
    }
}

fn is_tool_result(block: &Value) -> bool {
    block.as_object().is_some_and(|b| kind(b) == "tool_result")
}

fn answers_call(turn: &Turn, id: &str) -> bool {
    turn.role == Role::User
        && turn
            .content
            .iter()
            .any(|b| is_tool_result(b) && b.get("tool_use_id").and_then(Value::as_str) == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(messages: Value) -> Result<Vec<Value>, Untranslatable> {
        convert(Some(messages)).map(|c| c.into_parts().1)
    }

    #[test]
    fn consecutive_same_role_messages_become_one_turn() {
        let out = turns(json!([
            {"role": "user", "content": "Hello"},
            {"role": "user", "content": [{"type": "text", "text": "Are you there?"}]},
            {"role": "assistant", "content": "Yes."},
            {"role": "assistant", "content": "How can I help?"},
            {"role": "user", "content": "Thanks"}
        ]))
        .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[0]["content"],
            json!([{"type": "text", "text": "Hello"}, {"type": "text", "text": "Are you there?"}])
        );
        assert_eq!(out[1]["content"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn an_empty_assistant_message_leaves_no_empty_turn() {
        let out = turns(json!([
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "b"}
        ]))
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["role"], "user");
    }

    #[test]
    fn a_final_assistant_prefill_loses_its_trailing_whitespace() {
        let out = turns(json!([
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "The colour is "}
        ]))
        .unwrap();
        assert_eq!(out[1]["content"][0]["text"], "The colour is");
    }

    #[test]
    fn tool_results_go_before_the_users_text_in_their_turn() {
        let call = |id: &str| {
            json!({"id": id, "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"a.png\"}"}})
        };
        let out = turns(json!([
            {"role": "user", "content": "Read both files."},
            {"role": "assistant", "content": null, "tool_calls": [call("call_a"), call("call_b")]},
            {"role": "tool", "tool_call_id": "call_a", "content": "image attached below"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "tool", "tool_call_id": "call_b", "content": "empty file"}
        ]))
        .unwrap();
        let kinds: Vec<&str> = out[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "image"]);
    }

    #[test]
    fn a_second_answer_to_one_call_is_refused() {
        let err = turns(json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ]))
        .unwrap_err();
        assert_eq!(err.field, "messages[3].tool_call_id");
    }

    #[test]
    fn a_tool_message_answering_no_call_is_refused() {
        let err = turns(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_x", "content": "42"}
        ]))
        .unwrap_err();
        assert_eq!(err.field, "messages[1].tool_call_id");
    }

    #[test]
    fn a_tool_call_left_unanswered_is_refused() {
        let err = turns(json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "user", "content": "never mind"}
        ]))
        .unwrap_err();
        assert_eq!(err.field, "messages[1].tool_calls");
    }

    #[test]
    fn only_system_messages_are_refused() {
        let err = turns(json!([{"role": "system", "content": "Be brief."}])).unwrap_err();
        assert_eq!(err.field, "messages");
    }
}
