//! The Chat Completions API's checks of a `POST /v1/chat/completions` body:
//! unknown top-level fields, message roles and content part types, and tool
//! messages answering the assistant's `tool_calls` (and only them).
//!
//! Extra keys inside a message are not refused: OpenAI's current models ignore them.

use super::{quoted_list, type_name};
use serde_json::Value;
use std::collections::HashSet;

/// A refusal's `message`, `param` and `code` (`type` is always `invalid_request_error`).
#[derive(Debug, PartialEq)]
pub struct Fault {
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl Fault {
    fn new(message: String, param: Option<String>, code: Option<&'static str>) -> Self {
        Self {
            message,
            param,
            code,
        }
    }
}

type Checked = Result<(), Fault>;

/// OpenAI Chat Completions API, create chat completion: the request body's fields.
const FIELDS: [&str; 35] = [
    "messages",
    "model",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];
/// The message roles, in the order OpenAI's error lists them.
const ROLES: [&str; 6] = [
    "system",
    "assistant",
    "user",
    "function",
    "tool",
    "developer",
];

/// The content part types each role's array content may hold.
fn part_types(role: &str) -> &'static [&'static str] {
    match role {
        "user" => &["text", "image_url", "input_audio", "file"],
        "assistant" => &["text", "refusal"],
        _ => &["text"],
    }
}

pub fn check(body: &Value) -> Checked {
    let Some(map) = body.as_object() else {
        return Ok(());
    };
    if let Some(key) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Fault::new(
            format!("Unrecognized request argument supplied: {key}"),
            None,
            None,
        ));
    }
    if !map.contains_key("model") {
        return Err(Fault::new(
            "you must provide a model parameter".to_owned(),
            None,
            None,
        ));
    }
    let messages = match map.get("messages") {
        None => {
            return Err(Fault::new(
                "Missing required parameter: 'messages'.".to_owned(),
                Some("messages".to_owned()),
                Some("missing_required_parameter"),
            ))
        }
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(Fault::new(
                format!(
                    "Invalid type for 'messages': expected an array of objects, but got {} \
                     instead.",
                    type_name(other)
                ),
                Some("messages".to_owned()),
                Some("invalid_type"),
            ))
        }
    };
    if messages.is_empty() {
        return Err(Fault::new(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but \
             got an empty array instead."
                .to_owned(),
            Some("messages".to_owned()),
            Some("empty_array"),
        ));
    }
    for (i, message) in messages.iter().enumerate() {
        message_shape(i, message)?;
    }
    tool_pairing(messages)
}

/// One message: an object with a known role and, for array content, known part types.
fn message_shape(i: usize, message: &Value) -> Checked {
    let Some(role) = message.get("role") else {
        return Err(Fault::new(
            format!("Missing required parameter: 'messages[{i}].role'."),
            Some(format!("messages[{i}].role")),
            Some("missing_required_parameter"),
        ));
    };
    let role = role.as_str().unwrap_or("");
    if !ROLES.contains(&role) {
        return Err(Fault::new(
            format!(
                "Invalid value: '{role}'. Supported values are: {}.",
                quoted_list(&ROLES, ", and ")
            ),
            Some(format!("messages[{i}].role")),
            Some("invalid_value"),
        ));
    }
    let parts = message.get("content").and_then(Value::as_array);
    let accepted = part_types(role);
    for (j, part) in parts.into_iter().flatten().enumerate() {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        if !accepted.contains(&kind) {
            return Err(Fault::new(
                format!(
                    "Invalid value: '{kind}'. Supported values are: {}.",
                    quoted_list(accepted, ", and ")
                ),
                Some(format!("messages[{i}].content[{j}].type")),
                Some("invalid_value"),
            ));
        }
    }
    Ok(())
}

/// OpenAI Chat Completions, tool messages: each `tool` message follows an
/// assistant message with `tool_calls` (other tool messages between them)
/// and names one of its ids; each of those ids gets its tool message.
fn tool_pairing(messages: &[Value]) -> Checked {
    // The open assistant message: its index and the call ids not yet answered.
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (i, message) in messages.iter().enumerate() {
        if role(message) == "tool" {
            let Some((_, pending)) = open.as_mut() else {
                return Err(Fault::new(
                    "Invalid parameter: messages with role 'tool' must be a response to a \
                     preceeding message with 'tool_calls'."
                        .to_owned(),
                    Some(format!("messages.[{i}].role")),
                    None,
                ));
            };
            let id = message.get("tool_call_id").and_then(Value::as_str);
            let Some(at) = id.and_then(|id| pending.iter().position(|p| *p == id)) else {
                return Err(Fault::new(
                    format!(
                        "Invalid parameter: 'tool_call_id' of '{}' not found in 'tool_calls' \
                         of previous message.",
                        id.unwrap_or("")
                    ),
                    Some(format!("messages.[{i}].tool_call_id")),
                    None,
                ));
            };
            pending.swap_remove(at);
            continue;
        }
        unanswered(open.take())?;
        open = call_ids(message).map(|ids| (i, ids));
    }
    unanswered(open)
}

/// The ids of an assistant message's non-empty `tool_calls`.
fn call_ids(message: &Value) -> Option<Vec<&str>> {
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let calls = message.get("tool_calls").and_then(Value::as_array)?;
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c.get("id").and_then(Value::as_str).unwrap_or(""))
        .collect();
    (!ids.is_empty()).then_some(ids)
}

/// The refusal of an assistant message whose calls were not all answered
/// before the next non-tool message (or the end).
fn unanswered(open: Option<(usize, Vec<&str>)>) -> Checked {
    let Some((i, pending)) = open else {
        return Ok(());
    };
    if pending.is_empty() {
        return Ok(());
    }
    let mut seen = HashSet::new();
    let ids: Vec<&str> = pending.into_iter().filter(|id| seen.insert(*id)).collect();
    Err(Fault::new(
        format!(
            "An assistant message with 'tool_calls' must be followed by tool messages \
             responding to each 'tool_call_id'. The following tool_call_ids did not have \
             response messages: {}",
            ids.join(", ")
        ),
        Some(format!("messages.[{i}].role")),
        None,
    ))
}

/// A message's `role` ("" without one).
fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The function calling guide's second request: the call and its result.
    fn tool_conversation() -> Value {
        json!({
            "model": "gpt-4.1",
            "messages": [
                {"role": "developer", "content": "You are a weather bot."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is the weather like in Paris today?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_12345xyz", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"},
                }]},
                {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                               "required": ["location"], "additionalProperties": false},
                "strict": true,
            }}],
            "tool_choice": "auto",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 100,
        })
    }

    fn refused(edit: impl FnOnce(&mut Value)) -> Fault {
        let mut body = tool_conversation();
        edit(&mut body);
        check(&body).unwrap_err()
    }

    #[test]
    fn a_real_conversation_passes() {
        assert_eq!(check(&tool_conversation()), Ok(()));
    }

    #[test]
    fn unknown_fields_in_openais_shape() {
        assert_eq!(
            refused(|b| b["max_tokens_to_sample"] = json!(5)),
            Fault::new(
                "Unrecognized request argument supplied: max_tokens_to_sample".into(),
                None,
                None
            )
        );
        assert_eq!(
            refused(|b| b["system"] = json!("x")).message,
            "Unrecognized request argument supplied: system"
        );
        let missing = refused(|b| {
            b.as_object_mut().unwrap().remove("messages");
        });
        assert_eq!(missing.code, Some("missing_required_parameter"));
    }

    #[test]
    fn roles_and_part_types() {
        let role = refused(|b| b["messages"][0]["role"] = json!("model"));
        assert_eq!(
            role.message,
            "Invalid value: 'model'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
        );
        assert_eq!(role.param.as_deref(), Some("messages[0].role"));
        assert_eq!(role.code, Some("invalid_value"));
        let part = refused(|b| {
            b["messages"][1]["content"][1] = json!({"type": "image", "source": {"type": "base64"}});
        });
        assert_eq!(
            part.message,
            "Invalid value: 'image'. Supported values are: 'text', 'image_url', 'input_audio', and 'file'."
        );
        assert_eq!(part.param.as_deref(), Some("messages[1].content[1].type"));
    }

    #[test]
    fn tool_messages_answer_the_assistants_calls() {
        let orphan = refused(|b| {
            b["messages"].as_array_mut().unwrap().remove(2);
        });
        assert_eq!(
            orphan,
            Fault::new(
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(),
                Some("messages.[2].role".into()),
                None
            )
        );
        let wrong_id = refused(|b| b["messages"][3]["tool_call_id"] = json!("call_other"));
        assert_eq!(
            wrong_id.message,
            "Invalid parameter: 'tool_call_id' of 'call_other' not found in 'tool_calls' of previous message."
        );
        assert_eq!(wrong_id.param.as_deref(), Some("messages.[3].tool_call_id"));
        let unanswered = refused(|b| b["messages"][3] = json!({"role": "user", "content": "?"}));
        assert_eq!(
            unanswered.message,
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_12345xyz"
        );
        assert_eq!(unanswered.param.as_deref(), Some("messages.[2].role"));
        // A tool message answers only its own assistant message's calls.
        let twice = refused(|b| {
            let again = b["messages"][3].clone();
            b["messages"].as_array_mut().unwrap().push(again);
        });
        assert_eq!(twice.param.as_deref(), Some("messages.[4].tool_call_id"));
    }
}
