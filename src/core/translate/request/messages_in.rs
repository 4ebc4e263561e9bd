//! Messages → Chat Completions, for a `/v1/messages` client served by an OpenAI-compatible
//! target.

use super::{kind, present, refuse, take, Obj, Target, Untranslatable};
use serde_json::{json, Value};

/// OpenAI Chat Completions, `stop`: up to 4 sequences.
const MAX_STOP: usize = 4;

/// The whole translation of a Messages request (parsed) for `target`.
pub(super) fn translate(mut req: Obj, target: &Target) -> Result<Obj, Untranslatable> {
    for field in ["container", "mcp_servers"] {
        let empty = present(&req, field).is_none_or(|v| v.as_array().is_some_and(Vec::is_empty));
        if !empty {
            let reason = "runs on Anthropic's side; an OpenAI-compatible target has no equivalent";
            return Err(refuse(field, reason));
        }
    }
    let mut messages = Vec::new();
    if let Some(system) = system(take(&mut req, "system"))? {
        messages.push(json!({"role": "system", "content": system}));
    }
    turns(take(&mut req, "messages"), &mut messages)?;
    let mut out = Obj::new();
    out.insert("model".into(), target.model.into());
    out.insert("messages".into(), Value::Array(messages));
    tools(&mut req, &mut out)?;
    scalars(&req, &mut out)?;
    if let Some(format) = response_format(&mut req)? {
        out.insert("response_format".into(), format);
    }
    Ok(out)
}

/// `system`: a string or text blocks → one system message's text.
fn system(system: Option<Value>) -> Result<Option<String>, Untranslatable> {
    let text = match system {
        None => return Ok(None),
        Some(Value::String(s)) => s,
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.iter().enumerate() {
                match block.get("text").and_then(Value::as_str) {
                    Some(t) => texts.push(t),
                    None => return Err(refuse(format!("system[{i}]"), "expected a text block")),
                }
            }
            texts.join("\n\n")
        }
        Some(_) => return Err(refuse("system", "expected a string or text blocks")),
    };
    Ok((!text.is_empty()).then_some(text))
}

/// `messages` → Chat Completions messages. Consecutive same-role messages are read as one turn
/// (Anthropic Messages API, `messages`: they are combined); a user turn's `tool_result` blocks
/// become `tool` messages right after the assistant message with the calls (OpenAI requires
/// them there), its other blocks one user message after them.
fn turns(messages: Option<Value>, out: &mut Vec<Value>) -> Result<(), Untranslatable> {
    let Some(Value::Array(list)) = messages else {
        return Err(refuse("messages", "expected an array of messages"));
    };
    let mut open: Vec<OpenCall> = Vec::new();
    let mut last_role: Option<String> = None;
    for (i, message) in list.into_iter().enumerate() {
        let Value::Object(mut m) = message else {
            return Err(refuse(format!("messages[{i}]"), "expected an object"));
        };
        let blocks = blocks(i, take(&mut m, "content"))?;
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let continues = last_role.as_deref() == Some(role);
        match role {
            "user" => user_turn(blocks, &mut open, out)?,
            "assistant" => {
                if !continues {
                    check_answered(&open)?;
                    open.clear();
                }
                assistant_turn(i, blocks, &mut open, out, continues)?;
            }
            _ => {
                return Err(refuse(
                    format!("messages[{i}].role"),
                    "expected user or assistant",
                ))
            }
        }
        last_role = Some(role.to_owned());
    }
    check_answered(&open)
}

/// A message's content as blocks, with the field path of each: a string is one text block.
fn blocks(i: usize, content: Option<Value>) -> Result<Vec<(String, Obj)>, Untranslatable> {
    match content {
        Some(Value::String(text)) => {
            let mut block = Obj::new();
            block.insert("type".into(), "text".into());
            block.insert("text".into(), Value::String(text));
            Ok(vec![(format!("messages[{i}].content"), block)])
        }
        Some(Value::Array(list)) => {
            let mut out = Vec::with_capacity(list.len());
            for (j, block) in list.into_iter().enumerate() {
                let field = format!("messages[{i}].content[{j}]");
                let Value::Object(block) = block else {
                    return Err(refuse(field, "expected a content block"));
                };
                out.push((field, block));
            }
            Ok(out)
        }
        _ => Err(refuse(
            format!("messages[{i}].content"),
            "expected a string or content blocks",
        )),
    }
}

/// A `tool_use` of the last assistant turn: its id, the message it came from, and whether a
/// `tool_result` answered it yet.
struct OpenCall {
    id: String,
    message: usize,
    answered: bool,
}

/// A user turn: `tool_result` blocks → tool messages (each answering an open call), text and
/// image blocks → one user message.
fn user_turn(
    blocks: Vec<(String, Obj)>,
    open: &mut [OpenCall],
    out: &mut Vec<Value>,
) -> Result<(), Untranslatable> {
    let mut parts = Vec::new();
    for (field, mut block) in blocks {
        match kind(&block) {
            "text" => {
                if let Some(Value::String(text)) = take(&mut block, "text") {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            "image" => parts.push(image_part(&field, &mut block)?),
            "tool_result" => {
                let (id, message) = tool_message(&field, block)?;
                let Some(call) = open.iter_mut().find(|c| c.id == id && !c.answered) else {
                    let reason =
                        format!("`{id}` answers no tool_use of the assistant turn before it");
                    return Err(refuse(field, reason));
                };
                call.answered = true;
                out.push(message);
            }
            "thinking" | "redacted_thinking" => {}
            other => {
                let reason = format!("a `{other}` block has no Chat Completions equivalent");
                return Err(refuse(field, reason));
            }
        }
    }
    let content = match parts.as_slice() {
        [] => return Ok(()),
        [only] if kind_of(only) == "text" => only.get("text").cloned().unwrap_or_default(),
        _ => Value::Array(parts),
    };
    out.push(json!({"role": "user", "content": content}));
    Ok(())
}

fn kind_of(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

/// An image block → an `image_url` part: base64 → a `data:` URL, url → the URL.
fn image_part(field: &str, block: &mut Obj) -> Result<Value, Untranslatable> {
    let source = match take(block, "source") {
        Some(Value::Object(source)) => source,
        _ => return Err(refuse(format!("{field}.source"), "expected an object")),
    };
    let text = |key: &str| source.get(key).and_then(Value::as_str);
    let url = match (kind(&source), text("media_type"), text("data"), text("url")) {
        ("base64", Some(media_type), Some(data), _) => {
            format!("data:{media_type};base64,{data}")
        }
        ("url", _, _, Some(url)) => url.to_owned(),
        _ => {
            let reason = "only base64 and url image sources have a Chat Completions equivalent";
            return Err(refuse(format!("{field}.source"), reason));
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A `tool_result` block → its `tool_use_id` and a tool message: text content joined, an
/// error said so at the start (Chat Completions has no error flag).
fn tool_message(field: &str, mut block: Obj) -> Result<(String, Value), Untranslatable> {
    let Some(Value::String(id)) = take(&mut block, "tool_use_id") else {
        return Err(refuse(format!("{field}.tool_use_id"), "expected a string"));
    };
    let mut text = match take(&mut block, "content") {
        None => String::new(),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (k, part) in parts.iter().enumerate() {
                match (kind_of(part), part.get("text").and_then(Value::as_str)) {
                    ("text", Some(t)) => texts.push(t),
                    (other, _) => {
                        let reason =
                            format!("a `{other}` block cannot be a Chat Completions tool message");
                        return Err(refuse(format!("{field}.content[{k}]"), reason));
                    }
                }
            }
            texts.join("\n")
        }
        Some(_) => {
            return Err(refuse(
                format!("{field}.content"),
                "expected a string or blocks",
            ))
        }
    };
    if block.get("is_error") == Some(&Value::Bool(true)) {
        text.insert_str(0, "Error: ");
    }
    let message = json!({"role": "tool", "tool_call_id": id, "content": text});
    Ok((id, message))
}

/// An assistant turn: text blocks → `content`, `tool_use` blocks → `tool_calls` (`input`
/// serialized to `arguments`); thinking blocks dropped. A turn continuing the one before
/// (same role) extends its message.
fn assistant_turn(
    i: usize,
    blocks: Vec<(String, Obj)>,
    open: &mut Vec<OpenCall>,
    out: &mut Vec<Value>,
    continues: bool,
) -> Result<(), Untranslatable> {
    let mut texts: Vec<String> = Vec::new();
    let mut calls = Vec::new();
    for (field, mut block) in blocks {
        match kind(&block) {
            "text" => {
                if let Some(Value::String(t)) = take(&mut block, "text") {
                    texts.push(t);
                }
            }
            "tool_use" => {
                let call = tool_call(&field, &mut block)?;
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    open.push(OpenCall {
                        id: id.to_owned(),
                        message: i,
                        answered: false,
                    });
                }
                calls.push(call);
            }
            "thinking" | "redacted_thinking" => {}
            other => {
                let reason = format!("a `{other}` block has no Chat Completions equivalent");
                return Err(refuse(field, reason));
            }
        }
    }
    let text = texts.join("\n");
    let previous = out.last_mut().filter(|_| continues);
    match previous {
        Some(prev) => merge_assistant(prev, text, calls),
        None if text.is_empty() && calls.is_empty() => {}
        None => out.push(assistant_message(text, calls)),
    }
    Ok(())
}

fn assistant_message(text: String, calls: Vec<Value>) -> Value {
    let mut message = json!({"role": "assistant"});
    if let Some(obj) = message.as_object_mut() {
        // OpenAI Chat Completions, assistant message: content may be null with tool_calls.
        let content = if text.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        };
        obj.insert("content".into(), content);
        if !calls.is_empty() {
            obj.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    message
}

/// Adds a continuing assistant turn's text and calls to the message before.
fn merge_assistant(prev: &mut Value, text: String, calls: Vec<Value>) {
    let Some(obj) = prev.as_object_mut() else {
        return;
    };
    if !text.is_empty() {
        let joined = match obj.get("content").and_then(Value::as_str) {
            Some(before) if !before.is_empty() => format!("{before}\n{text}"),
            _ => text,
        };
        obj.insert("content".into(), Value::String(joined));
    }
    if !calls.is_empty() {
        let list = obj
            .entry("tool_calls")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = list.as_array_mut() {
            list.extend(calls);
        }
    }
}

/// A `tool_use` block → a function tool call.
fn tool_call(field: &str, block: &mut Obj) -> Result<Value, Untranslatable> {
    let (Some(Value::String(id)), Some(Value::String(name))) =
        (take(block, "id"), take(block, "name"))
    else {
        return Err(refuse(field, "expected a tool_use with an id and a name"));
    };
    let input = take(block, "input").unwrap_or_else(|| json!({}));
    let arguments = serde_json::to_string(&input).unwrap_or_default();
    Ok(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
}

/// Anthropic tool use: each tool_use needs its tool_result in the next turn (OpenAI refuses an
/// unanswered tool call too).
fn check_answered(open: &[OpenCall]) -> Result<(), Untranslatable> {
    match open.iter().find(|c| !c.answered) {
        None => Ok(()),
        Some(c) => {
            let reason = format!("tool_use `{}` has no tool_result in the next message", c.id);
            Err(refuse(format!("messages[{}].content", c.message), reason))
        }
    }
}

/// `tools` → function tools, `tool_choice` → its Chat Completions form.
fn tools(req: &mut Obj, out: &mut Obj) -> Result<(), Untranslatable> {
    let list = match take(req, "tools") {
        None => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(refuse("tools", "expected an array")),
    };
    let mut tools = Vec::with_capacity(list.len());
    for (i, tool) in list.into_iter().enumerate() {
        tools.push(function_tool(i, tool)?);
    }
    let choice = take(req, "tool_choice");
    if tools.is_empty() {
        // OpenAI takes tool_choice and parallel_tool_calls only with tools.
        return Ok(());
    }
    out.insert("tools".into(), Value::Array(tools));
    let Some(Value::Object(choice)) = choice else {
        return Ok(());
    };
    let mapped = match (kind(&choice), choice.get("name")) {
        ("auto", _) => json!("auto"),
        ("any", _) => json!("required"),
        ("none", _) => json!("none"),
        ("tool", Some(name @ Value::String(_))) => {
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return Err(refuse(
                "tool_choice",
                "expected auto, any, tool (with a name) or none",
            ))
        }
    };
    out.insert("tool_choice".into(), mapped);
    if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
        out.insert("parallel_tool_calls".into(), false.into());
    }
    Ok(())
}

/// A client tool → a function tool. A server tool (a `type` such as `web_search_20250305`)
/// runs on Anthropic's side: refused.
fn function_tool(i: usize, tool: Value) -> Result<Value, Untranslatable> {
    let field = format!("tools[{i}]");
    let Value::Object(mut tool) = tool else {
        return Err(refuse(field, "expected an object"));
    };
    if !matches!(kind(&tool), "" | "custom") {
        let reason = format!("`{}` is an Anthropic server tool", kind(&tool));
        return Err(refuse(field, reason));
    }
    let Some(Value::String(name)) = take(&mut tool, "name") else {
        return Err(refuse(field + ".name", "expected a string"));
    };
    let Some(schema @ Value::Object(_)) = take(&mut tool, "input_schema") else {
        return Err(refuse(field + ".input_schema", "expected an object"));
    };
    let mut function = json!({"name": name, "parameters": schema});
    if let (Some(Value::String(d)), Some(obj)) =
        (take(&mut tool, "description"), function.as_object_mut())
    {
        obj.insert("description".into(), Value::String(d));
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `metadata.user_id`, `stream`.
fn scalars(req: &Obj, out: &mut Obj) -> Result<(), Untranslatable> {
    if let Some(v) = present(req, "max_tokens") {
        let n = v.as_u64().filter(|n| *n >= 1);
        let n = n.ok_or_else(|| refuse("max_tokens", "expected a positive integer"))?;
        out.insert("max_tokens".into(), n.into());
    }
    if let Some(stop) = present(req, "stop_sequences") {
        let list = stop.as_array().filter(|l| l.iter().all(Value::is_string));
        let list = list.ok_or_else(|| refuse("stop_sequences", "expected an array of strings"))?;
        if list.len() > MAX_STOP {
            let reason = "Chat Completions takes at most 4 stop sequences";
            return Err(refuse("stop_sequences", reason));
        }
        if !list.is_empty() {
            out.insert("stop".into(), stop.clone());
        }
    }
    for field in ["temperature", "top_p"] {
        if let Some(v) = present(req, field) {
            if !v.is_number() {
                return Err(refuse(field, "expected a number"));
            }
            out.insert(field.into(), v.clone());
        }
    }
    let user = present(req, "metadata").and_then(|m| m.get("user_id"));
    if let Some(Value::String(user)) = user {
        out.insert("user".into(), Value::String(user.clone()));
    }
    match present(req, "stream") {
        None | Some(Value::Bool(false)) => {}
        // The answer side builds message_delta's usage from the usage chunk.
        Some(Value::Bool(true)) => {
            out.insert("stream".into(), true.into());
            out.insert("stream_options".into(), json!({"include_usage": true}));
        }
        Some(_) => return Err(refuse("stream", "expected a boolean")),
    }
    Ok(())
}

/// Anthropic structured outputs (`output_config.format`, or the beta's `output_format`) →
/// `response_format` with the same JSON schema.
fn response_format(req: &mut Obj) -> Result<Option<Value>, Untranslatable> {
    let (field, format) =
        match take(req, "output_config").and_then(|mut c| c.get_mut("format").map(Value::take)) {
            Some(f) if !f.is_null() => ("output_config.format", f),
            _ => match take(req, "output_format") {
                Some(f) => ("output_format", f),
                None => return Ok(None),
            },
        };
    let schema = format.get("schema").filter(|s| s.is_object());
    match (format.get("type").and_then(Value::as_str), schema) {
        (Some("json_schema"), Some(schema)) => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": true}
        }))),
        _ => Err(refuse(field, "expected a json_schema format with a schema")),
    }
}
