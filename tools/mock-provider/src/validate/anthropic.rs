//! The Messages API's checks of a `POST /v1/messages` body. `Err` is the
//! `invalid_request_error` message, worded as the API words it (field paths
//! like `messages.1.content.0.tool_use.id`, then the fault).

use super::{quoted_list, type_name};
use serde_json::{Map, Value};
use std::collections::HashSet;

type Checked = Result<(), String>;

/// Anthropic Messages API, create a message: the request body's fields.
const FIELDS: [&str; 18] = [
    "model",
    "messages",
    "max_tokens",
    "cache_control",
    "container",
    "inference_geo",
    "metadata",
    "output_config",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];
/// The beta create's further fields, accepted with an `anthropic-beta` header.
const BETA_FIELDS: [&str; 8] = [
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "mcp_servers",
    "output_format",
    "speed",
    "user_profile_id",
];

/// Content blocks a translation produces: `(type, required fields, optional fields)`.
const BLOCKS: [(&str, &[&str], &[&str]); 8] = [
    ("text", &["text"], &["cache_control", "citations"]),
    ("image", &["source"], &["cache_control"]),
    (
        "document",
        &["source"],
        &["cache_control", "citations", "context", "title"],
    ),
    (
        "search_result",
        &["source", "title", "content"],
        &["cache_control", "citations"],
    ),
    (
        "tool_use",
        &["id", "name", "input"],
        &["cache_control", "caller"],
    ),
    (
        "tool_result",
        &["tool_use_id"],
        &["content", "is_error", "cache_control"],
    ),
    ("thinking", &["thinking", "signature"], &[]),
    ("redacted_thinking", &["data"], &[]),
];
/// Server-tool blocks, sent back as the API returned them: only their type is checked.
const SERVER_BLOCKS: [&str; 8] = [
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
];
/// The blocks a `tool_result`'s `content` array may hold.
const TOOL_RESULT_CONTENT: [&str; 4] = ["text", "image", "document", "search_result"];
/// Anthropic Messages API, images: the accepted base64 media types.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];
/// Anthropic prompt caching: at most four cache breakpoints per request.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The whole body, in the API's order: the schema (required and unknown
/// fields, types, blocks), then the conversation's rules.
pub fn check(body: &Value, beta: bool) -> Checked {
    let Some(map) = body.as_object() else {
        return Err("Input should be a valid dictionary".to_owned());
    };
    // Anthropic Messages API: `model`, `messages` and `max_tokens` are required.
    for required in ["model", "messages", "max_tokens"] {
        if !map.contains_key(required) {
            return Err(format!("{required}: Field required"));
        }
    }
    let beta_field = |key: &str| beta && BETA_FIELDS.contains(&key);
    if let Some(key) = map
        .keys()
        .find(|k| !FIELDS.contains(&k.as_str()) && !beta_field(k))
    {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    let max_tokens = map
        .get("max_tokens")
        .and_then(Value::as_u64)
        .ok_or("max_tokens: Input should be a valid integer")?;
    let messages = map
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Input should be a valid list")?;
    for (i, message) in messages.iter().enumerate() {
        message_shape(i, message)?;
    }
    system(map.get("system"))?;
    tools(map.get("tools"))?;
    tool_choice(map.get("tool_choice"))?;
    metadata(map.get("metadata"))?;
    sampling(map)?;
    thinking(map, max_tokens)?;
    conversation(messages)?;
    cache_breakpoints(map)
}

/// One message: `{role, content}` and nothing else.
fn message_shape(i: usize, message: &Value) -> Checked {
    let Some(map) = message.as_object() else {
        return Err(format!("messages.{i}: Input should be a valid dictionary"));
    };
    if let Some(key) = map.keys().find(|k| *k != "role" && *k != "content") {
        return Err(format!(
            "messages.{i}.{key}: Extra inputs are not permitted"
        ));
    }
    match map.get("role").and_then(Value::as_str) {
        None => return Err(format!("messages.{i}.role: Field required")),
        // Anthropic Messages API: system prompts go in the top-level `system`.
        Some("system") => {
            return Err(
                "messages: Unexpected role \"system\". The Messages API accepts a \
                 top-level `system` parameter, not \"system\" as an input message role."
                    .to_owned(),
            )
        }
        Some("user" | "assistant") => {}
        Some(_) => {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ))
        }
    }
    match map.get("content") {
        None => Err(format!("messages.{i}.content: Field required")),
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .try_for_each(|(j, b)| block(&format!("messages.{i}.content.{j}"), b, None)),
        Some(_) => Err(format!(
            "messages.{i}.content: Input should be a valid list"
        )),
    }
}

/// One content block at `path`; `only` narrows the accepted types.
fn block(path: &str, value: &Value, only: Option<&[&str]>) -> Checked {
    let Some(map) = value.as_object() else {
        return Err(format!("{path}: Input should be a valid dictionary"));
    };
    let Some(kind) = map.get("type").and_then(Value::as_str) else {
        return Err(format!(
            "{path}: Unable to extract tag using discriminator 'type'"
        ));
    };
    let allowed = |t: &str| only.is_none_or(|only| only.contains(&t));
    let known = BLOCKS.iter().find(|(t, _, _)| *t == kind && allowed(t));
    let Some((_, required, optional)) = known else {
        if only.is_none() && SERVER_BLOCKS.contains(&kind) {
            return Ok(());
        }
        let mut tags: Vec<&str> = BLOCKS
            .iter()
            .map(|(t, _, _)| *t)
            .filter(|t| allowed(t))
            .collect();
        if only.is_none() {
            tags.extend(SERVER_BLOCKS);
        }
        return Err(format!(
            "{path}: Input tag '{kind}' found using 'type' does not match any of the \
             expected tags: {}",
            quoted_list(&tags, ", ")
        ));
    };
    let at = format!("{path}.{kind}");
    fields(&at, map, required, optional)?;
    if let Some(cache) = map.get("cache_control") {
        cache_control(&format!("{at}.cache_control"), cache)?;
    }
    block_values(&at, kind, map)
}

/// `required` present, nothing beyond `required`, `optional` and `type`.
fn fields(at: &str, map: &Map<String, Value>, required: &[&str], optional: &[&str]) -> Checked {
    if let Some(missing) = required.iter().find(|f| !map.contains_key(**f)) {
        return Err(format!("{at}.{missing}: Field required"));
    }
    let known = |k: &str| k == "type" || required.contains(&k) || optional.contains(&k);
    match map.keys().find(|k| !known(k)) {
        Some(extra) => Err(format!("{at}.{extra}: Extra inputs are not permitted")),
        None => Ok(()),
    }
}

/// The values of the blocks a translation writes.
fn block_values(at: &str, kind: &str, map: &Map<String, Value>) -> Checked {
    let string = |field: &str| match map.get(field) {
        Some(Value::String(_)) | None => Ok(()),
        Some(_) => Err(format!("{at}.{field}: Input should be a valid string")),
    };
    match kind {
        "text" => string("text"),
        "tool_use" => {
            string("id")?;
            string("name")?;
            match map.get("input") {
                Some(Value::Object(_)) => Ok(()),
                _ => Err(format!("{at}.input: Input should be a valid dictionary")),
            }
        }
        "tool_result" => {
            string("tool_use_id")?;
            match map.get("content") {
                None | Some(Value::String(_)) => Ok(()),
                Some(Value::Array(items)) => items.iter().enumerate().try_for_each(|(k, b)| {
                    block(&format!("{at}.content.{k}"), b, Some(&TOOL_RESULT_CONTENT))
                }),
                Some(_) => Err(format!("{at}.content: Input should be a valid list")),
            }
        }
        "image" => image_source(&format!("{at}.source"), map.get("source")),
        _ => Ok(()),
    }
}

/// Anthropic Messages API, image source: base64 (with an image media type), url or file.
fn image_source(at: &str, source: Option<&Value>) -> Checked {
    let Some(map) = source.and_then(Value::as_object) else {
        return Err(format!("{at}: Input should be a valid dictionary"));
    };
    let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
    let (required, optional): (&[&str], &[&str]) = match kind {
        "base64" => (&["media_type", "data"], &[]),
        "url" => (&["url"], &[]),
        "file" => (&["file_id"], &[]),
        _ => {
            return Err(format!(
                "{at}: Input tag '{kind}' found using 'type' does not match any of the \
                 expected tags: 'base64', 'url', 'file'"
            ))
        }
    };
    fields(&format!("{at}.{kind}"), map, required, optional)?;
    let media_type = map.get("media_type").and_then(Value::as_str);
    if kind == "base64" && !media_type.is_some_and(|m| IMAGE_TYPES.contains(&m)) {
        return Err(format!(
            "{at}.base64.media_type: Input should be {}",
            quoted_list(&IMAGE_TYPES, " or ")
        ));
    }
    Ok(())
}

/// Anthropic prompt caching: `{"type": "ephemeral"}`, with an optional `ttl` of 5m or 1h.
fn cache_control(at: &str, value: &Value) -> Checked {
    let Some(map) = value.as_object() else {
        return Err(format!("{at}: Input should be a valid dictionary"));
    };
    if map.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(format!(
            "{at}: Input tag '{}' found using 'type' does not match any of the expected \
             tags: 'ephemeral'",
            map.get("type").and_then(Value::as_str).unwrap_or("")
        ));
    }
    let at = format!("{at}.ephemeral");
    fields(&at, map, &[], &["ttl"])?;
    match map.get("ttl").map(|t| t.as_str()) {
        None | Some(Some("5m" | "1h")) => Ok(()),
        Some(_) => Err(format!("{at}.ttl: Input should be '5m' or '1h'")),
    }
}

/// `system`: a string or a list of text blocks.
fn system(value: Option<&Value>) -> Checked {
    match value {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .try_for_each(|(j, b)| block(&format!("system.{j}"), b, Some(&["text"]))),
        Some(other) => Err(format!(
            "system: Input should be a valid string (got {})",
            type_name(other)
        )),
    }
}

/// `tools`: custom tools (`name`, `input_schema` of type object) or versioned server tools.
fn tools(value: Option<&Value>) -> Checked {
    let Some(value) = value else {
        return Ok(());
    };
    let list = value
        .as_array()
        .ok_or("tools: Input should be a valid list")?;
    let mut names = HashSet::new();
    for (i, tool) in list.iter().enumerate() {
        let map = tool
            .as_object()
            .ok_or_else(|| format!("tools.{i}: Input should be a valid dictionary"))?;
        match map.get("type").and_then(Value::as_str) {
            None | Some("custom") => custom_tool(i, map)?,
            Some(kind) if is_server_tool(kind) => {}
            Some(kind) => {
                return Err(format!(
                    "tools.{i}: Input tag '{kind}' found using 'type' does not match any of \
                     the expected tags: 'custom' or a versioned server tool such as \
                     'web_search_20250305'"
                ))
            }
        }
        // Anthropic Messages API, tools: names are unique.
        if let Some(name) = map.get("name").and_then(Value::as_str) {
            if !names.insert(name) {
                return Err("tools: Tool names must be unique.".to_owned());
            }
        }
    }
    Ok(())
}

/// `web_search_20250305`, `bash_20250124`: a name, `_`, an eight-digit date.
fn is_server_tool(kind: &str) -> bool {
    kind.rsplit_once('_').is_some_and(|(name, date)| {
        !name.is_empty() && date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit())
    })
}

fn custom_tool(i: usize, map: &Map<String, Value>) -> Checked {
    let at = format!("tools.{i}.custom");
    let optional = [
        "description",
        "cache_control",
        "strict",
        "input_examples",
        "defer_loading",
        "allowed_callers",
        "eager_input_streaming",
    ];
    fields(&at, map, &["name", "input_schema"], &optional)?;
    // Anthropic Messages API, tools: `name` matches ^[a-zA-Z0-9_-]{1,128}$.
    let name = map.get("name").and_then(Value::as_str).unwrap_or("");
    let name_ok = (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !name_ok {
        return Err(format!(
            "{at}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        ));
    }
    let schema = map.get("input_schema").and_then(Value::as_object);
    match schema.map(|s| s.get("type").and_then(Value::as_str)) {
        None => Err(format!(
            "{at}.input_schema: Input should be a valid dictionary"
        )),
        Some(Some("object")) => Ok(()),
        Some(_) => Err(format!("{at}.input_schema.type: Input should be 'object'")),
    }?;
    match map.get("cache_control") {
        Some(cache) => cache_control(&format!("{at}.cache_control"), cache),
        None => Ok(()),
    }
}

/// `tool_choice`: `{"type": "auto" | "any" | "tool" (with `name`) | "none"}`.
fn tool_choice(value: Option<&Value>) -> Checked {
    let Some(value) = value else {
        return Ok(());
    };
    let map = value.as_object().ok_or(
        "tool_choice: Input should be a valid dictionary or object to extract fields from",
    )?;
    let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
    let (required, optional): (&[&str], &[&str]) = match kind {
        "auto" | "any" => (&[], &["disable_parallel_tool_use"]),
        "tool" => (&["name"], &["disable_parallel_tool_use"]),
        "none" => (&[], &[]),
        _ => {
            return Err(format!(
                "tool_choice: Input tag '{kind}' found using 'type' does not match any of \
                 the expected tags: 'auto', 'any', 'tool', 'none'"
            ))
        }
    };
    fields(&format!("tool_choice.{kind}"), map, required, optional)
}

/// `metadata`: only `user_id`.
fn metadata(value: Option<&Value>) -> Checked {
    let Some(value) = value else {
        return Ok(());
    };
    let map = value
        .as_object()
        .ok_or("metadata: Input should be a valid dictionary")?;
    fields("metadata", map, &[], &["user_id"])?;
    match map.get("user_id") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(_) => Err("metadata.user_id: Input should be a valid string".to_owned()),
    }
}

/// Anthropic Messages API: `temperature` and `top_p` in [0, 1] (OpenAI's
/// temperature goes to 2), `top_k` a count, `stop_sequences` strings.
fn sampling(map: &Map<String, Value>) -> Checked {
    for field in ["temperature", "top_p"] {
        let Some(value) = map.get(field) else {
            continue;
        };
        let number = value
            .as_f64()
            .ok_or_else(|| format!("{field}: Input should be a valid number"))?;
        if number > 1.0 {
            return Err(format!("{field}: Input should be less than or equal to 1"));
        }
        if number < 0.0 {
            return Err(format!(
                "{field}: Input should be greater than or equal to 0"
            ));
        }
    }
    if map.get("top_k").is_some_and(|k| k.as_u64().is_none()) {
        return Err("top_k: Input should be a valid integer".to_owned());
    }
    match map.get("stop_sequences") {
        None => Ok(()),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => Ok(()),
        Some(_) => Err("stop_sequences: Input should be a valid list of strings".to_owned()),
    }
}

/// Anthropic extended thinking: `enabled` with `budget_tokens` >= 1024 and
/// below `max_tokens`, `disabled` or `adaptive`; temperature only 1 with it on.
fn thinking(map: &Map<String, Value>, max_tokens: u64) -> Checked {
    let Some(value) = map.get("thinking") else {
        return Ok(());
    };
    let config = value
        .as_object()
        .ok_or("thinking: Input should be a valid dictionary")?;
    let kind = config.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "enabled" => {
            fields("thinking.enabled", config, &["budget_tokens"], &["display"])?;
            let budget = config
                .get("budget_tokens")
                .and_then(Value::as_u64)
                .ok_or("thinking.enabled.budget_tokens: Input should be a valid integer")?;
            if budget < 1024 {
                return Err(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                        .to_owned(),
                );
            }
            if budget >= max_tokens {
                return Err("`max_tokens` must be greater than `thinking.budget_tokens`".to_owned());
            }
        }
        "disabled" => return fields("thinking.disabled", config, &[], &[]),
        "adaptive" => fields("thinking.adaptive", config, &[], &["display"])?,
        _ => {
            return Err(format!(
                "thinking: Input tag '{kind}' found using 'type' does not match any of the \
                 expected tags: 'enabled', 'disabled', 'adaptive'"
            ))
        }
    }
    let temperature = map.get("temperature").and_then(Value::as_f64);
    if temperature.is_some_and(|t| (t - 1.0).abs() > f64::EPSILON) {
        return Err("`temperature` may only be set to 1 when thinking is enabled".to_owned());
    }
    Ok(())
}

/// The rules across messages: a first user turn, non-empty content, and each
/// `tool_result` answering a `tool_use` of the turn before (and each
/// `tool_use` answered in the turn after). Consecutive same-role messages are
/// one turn, as the API combines them.
fn conversation(messages: &[Value]) -> Checked {
    if messages.is_empty() {
        return Err("messages: at least one message is required".to_owned());
    }
    if messages.first().map(role) != Some("user") {
        return Err("messages: first message must use the \"user\" role".to_owned());
    }
    let last = messages.len() - 1;
    for (i, message) in messages.iter().enumerate() {
        let empty = match message.get("content") {
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(blocks)) => blocks.is_empty(),
            _ => false,
        };
        // Anthropic Messages API: only a final assistant message (a prefill) may be empty.
        if empty && !(i == last && role(message) == "assistant") {
            return Err(format!(
                "messages.{i}: all messages must have non-empty content except for the \
                 optional final assistant message"
            ));
        }
        text_blocks(message)?;
    }
    let turns = turns(messages);
    if let Some(first) = turns.first() {
        answered(&Turn::default(), first)?;
    }
    for pair in turns.windows(2) {
        if let [before, after] = pair {
            answered(before, after)?;
        }
    }
    Ok(())
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Anthropic Messages API: text blocks must hold non-whitespace text.
fn text_blocks(message: &Value) -> Checked {
    let blocks = message.get("content").and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
        if text.is_empty() {
            return Err("messages: text content blocks must be non-empty".to_owned());
        }
        if text.trim().is_empty() {
            return Err(
                "messages: text content blocks must contain non-whitespace text".to_owned(),
            );
        }
    }
    Ok(())
}

/// A turn's blocks of one type: `(message index, block index, id)`.
type Ids<'a> = Vec<(usize, usize, &'a str)>;

/// One role's consecutive messages, by the ids of their tool blocks.
#[derive(Default)]
struct Turn<'a> {
    role: &'a str,
    tool_uses: Ids<'a>,
    tool_results: Ids<'a>,
}

fn turns(messages: &[Value]) -> Vec<Turn<'_>> {
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = role(message);
        if turns.last().is_none_or(|t| t.role != role) {
            turns.push(Turn {
                role,
                tool_uses: Vec::new(),
                tool_results: Vec::new(),
            });
        }
        let Some(turn) = turns.last_mut() else {
            continue;
        };
        let blocks = message.get("content").and_then(Value::as_array);
        for (j, block) in blocks.into_iter().flatten().enumerate() {
            let id = |field| block.get(field).and_then(Value::as_str).unwrap_or("");
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => turn.tool_uses.push((i, j, id("id"))),
                Some("tool_result") => turn.tool_results.push((i, j, id("tool_use_id"))),
                _ => {}
            }
        }
    }
    turns
}

/// `after` answers only `tool_use` blocks of `before` (checked first), and all of them.
fn answered(before: &Turn<'_>, after: &Turn<'_>) -> Checked {
    let uses: HashSet<&str> = before.tool_uses.iter().map(|(_, _, id)| *id).collect();
    if let Some((message, block, id)) = after
        .tool_results
        .iter()
        .find(|(_, _, id)| !uses.contains(id))
    {
        return Err(format!(
            "messages.{message}.content.{block}: unexpected `tool_use_id` found in \
             `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding \
             `tool_use` block in the previous message."
        ));
    }
    let results: HashSet<&str> = after.tool_results.iter().map(|(_, _, id)| *id).collect();
    let unanswered: Vec<&(usize, usize, &str)> = before
        .tool_uses
        .iter()
        .filter(|(_, _, id)| !results.contains(id))
        .collect();
    match unanswered.first() {
        Some((message, _, _)) => {
            let ids: Vec<&str> = unanswered.iter().map(|(_, _, id)| *id).collect();
            Err(format!(
                "messages.{message}: `tool_use` ids were found without `tool_result` blocks \
                 immediately after: {}. Each `tool_use` block must have a corresponding \
                 `tool_result` block in the next message.",
                ids.join(", ")
            ))
        }
        None => Ok(()),
    }
}

/// Anthropic prompt caching: at most four `cache_control` breakpoints across
/// tools, system and messages (a top-level `cache_control` takes one).
fn cache_breakpoints(map: &Map<String, Value>) -> Checked {
    fn marked(list: Option<&Value>) -> usize {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|item| {
                let own = usize::from(item.get("cache_control").is_some());
                own + marked(item.get("content"))
            })
            .sum()
    }
    if let Some(top) = map.get("cache_control") {
        cache_control("cache_control", top)?;
    }
    let messages = map.get("messages").and_then(Value::as_array);
    let in_messages: usize = messages
        .into_iter()
        .flatten()
        .map(|m| marked(m.get("content")))
        .sum();
    let found = usize::from(map.contains_key("cache_control"))
        + marked(map.get("tools"))
        + marked(map.get("system"))
        + in_messages;
    if found > MAX_CACHE_BREAKPOINTS {
        return Err(format!(
            "A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. \
             Found {found}."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The tool use guide's two-step conversation, as a client sends its second request.
    fn tool_conversation() -> Value {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
                    "required": ["location"],
                },
            }],
            "tool_choice": {"type": "auto"},
            "metadata": {"user_id": "user-1"},
            "messages": [
                {"role": "user", "content": "What's the weather like in San Francisco?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "I'll check the weather in San Francisco."},
                    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                     "input": {"location": "San Francisco, CA"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                     "content": [{"type": "text", "text": "15 degrees"}]},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ]},
            ],
            "stream": true,
            "temperature": 0.5,
            "stop_sequences": ["\n\nHuman:"],
        })
    }

    fn refused(edit: impl FnOnce(&mut Value)) -> String {
        let mut body = tool_conversation();
        edit(&mut body);
        check(&body, false).unwrap_err()
    }

    #[test]
    fn a_real_conversation_passes() {
        assert_eq!(check(&tool_conversation(), false), Ok(()));
        let simple = json!({"model": "claude-opus-4-1", "max_tokens": 1024,
                            "messages": [{"role": "user", "content": "Hello, Claude"}]});
        assert_eq!(check(&simple, false), Ok(()));
    }

    #[test]
    fn required_and_unknown_fields() {
        let missing = refused(|b| {
            b.as_object_mut().unwrap().remove("max_tokens");
        });
        assert_eq!(missing, "max_tokens: Field required");
        assert_eq!(
            refused(|b| b["n"] = json!(2)),
            "n: Extra inputs are not permitted"
        );
        assert_eq!(
            refused(|b| b["stop"] = json!(["x"])),
            "stop: Extra inputs are not permitted"
        );
        assert_eq!(
            refused(|b| b["max_tokens"] = json!("10")),
            "max_tokens: Input should be a valid integer"
        );
        assert_eq!(
            refused(|b| b["metadata"] = json!({"user_id": "u", "session": "s"})),
            "metadata.session: Extra inputs are not permitted"
        );
    }

    #[test]
    fn roles_and_first_turn() {
        let system = refused(|b| {
            b["messages"][0] = json!({"role": "system", "content": "Be brief."});
        });
        assert!(
            system.starts_with("messages: Unexpected role \"system\""),
            "{system}"
        );
        assert_eq!(
            refused(|b| b["messages"][0]["role"] = json!("developer")),
            "messages.0.role: Input should be 'user' or 'assistant'"
        );
        let assistant_first = json!({"model": "c", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Hello"}]});
        assert_eq!(
            check(&assistant_first, false).unwrap_err(),
            "messages: first message must use the \"user\" role"
        );
        assert_eq!(
            refused(|b| b["messages"][1]["tool_calls"] = json!([])),
            "messages.1.tool_calls: Extra inputs are not permitted"
        );
        assert_eq!(
            refused(|b| b["messages"] = json!([])),
            "messages: at least one message is required"
        );
    }

    #[test]
    fn content_blocks() {
        assert_eq!(
            refused(|b| b["messages"][2]["content"][1] = json!({"type": "image_url", "image_url": {"url": "https://x"}})),
            "messages.2.content.1: Input tag 'image_url' found using 'type' does not match any of the expected tags: 'text', 'image', 'document', 'search_result', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking', 'server_tool_use', 'web_search_tool_result', 'web_fetch_tool_result', 'code_execution_tool_result', 'bash_code_execution_tool_result', 'text_editor_code_execution_tool_result', 'tool_search_tool_result', 'container_upload'"
        );
        assert_eq!(
            refused(|b| b["messages"][1]["content"][1]["index"] = json!(0)),
            "messages.1.content.1.tool_use.index: Extra inputs are not permitted"
        );
        assert_eq!(
            refused(|b| b["messages"][1]["content"][1]["input"] = json!("{\"location\": \"SF\"}")),
            "messages.1.content.1.tool_use.input: Input should be a valid dictionary"
        );
        assert_eq!(
            refused(|b| b["messages"][2]["content"][1]["source"]["media_type"] = json!("image/bmp")),
            "messages.2.content.1.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
        );
        assert_eq!(
            refused(|b| b["messages"][1]["content"][0]["text"] = json!("")),
            "messages: text content blocks must be non-empty"
        );
        assert_eq!(
            refused(|b| b["messages"][1]["content"] = json!([])),
            "messages.1: all messages must have non-empty content except for the optional final assistant message"
        );
        assert_eq!(
            refused(|b| b["messages"][2]["content"][0]["content"] = json!([{"type": "tool_use"}])),
            "messages.2.content.0.tool_result.content.0: Input tag 'tool_use' found using 'type' does not match any of the expected tags: 'text', 'image', 'document', 'search_result'"
        );
        let mut prefill = tool_conversation();
        prefill["messages"] =
            json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]);
        assert_eq!(
            check(&prefill, false),
            Ok(()),
            "an empty final assistant turn is a prefill"
        );
    }

    #[test]
    fn tool_results_answer_the_turn_before() {
        let orphan =
            refused(|b| b["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_other"));
        assert_eq!(
            orphan,
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_other. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
        );
        let first = refused(|b| {
            b["messages"] = json!([{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "15"}]}]);
        });
        assert!(
            first.starts_with("messages.0.content.0: unexpected `tool_use_id`"),
            "{first}"
        );
        let unanswered = refused(|b| {
            b["messages"][2] = json!({"role": "user", "content": "never mind"});
        });
        assert_eq!(
            unanswered,
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A09q90qw90lq917835lq9. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
        );
        // Consecutive user messages are one turn: the result may sit in the second.
        let mut split = tool_conversation();
        let results = split["messages"][2].clone();
        split["messages"][2] = json!({"role": "user", "content": "Here it is:"});
        split["messages"].as_array_mut().unwrap().push(results);
        assert_eq!(check(&split, false), Ok(()));
    }

    #[test]
    fn tools_choice_and_sampling() {
        assert_eq!(
            refused(|b| b["tools"][0] = json!({"type": "function", "function": {"name": "get_weather"}})),
            "tools.0: Input tag 'function' found using 'type' does not match any of the expected tags: 'custom' or a versioned server tool such as 'web_search_20250305'"
        );
        assert_eq!(
            refused(|b| b["tools"][0]["parameters"] = json!({})),
            "tools.0.custom.parameters: Extra inputs are not permitted"
        );
        assert_eq!(
            refused(|b| b["tools"][0]["name"] = json!("get weather")),
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
        );
        assert_eq!(
            refused(|b| {
                let copy = b["tools"][0].clone();
                b["tools"].as_array_mut().unwrap().push(copy);
            }),
            "tools: Tool names must be unique."
        );
        let mut server = tool_conversation();
        let search = json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5});
        server["tools"].as_array_mut().unwrap().push(search);
        assert_eq!(check(&server, false), Ok(()));
        assert_eq!(
            refused(|b| b["tool_choice"] = json!("auto")),
            "tool_choice: Input should be a valid dictionary or object to extract fields from"
        );
        assert_eq!(
            refused(|b| b["tool_choice"] = json!({"type": "required"})),
            "tool_choice: Input tag 'required' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
        );
        assert_eq!(
            refused(|b| b["tool_choice"] = json!({"type": "tool"})),
            "tool_choice.tool.name: Field required"
        );
        assert_eq!(
            refused(|b| b["temperature"] = json!(1.5)),
            "temperature: Input should be less than or equal to 1"
        );
    }

    #[test]
    fn thinking_budget_and_cache_breakpoints() {
        let think = |budget: u64| {
            move |b: &mut Value| {
                b["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
                b["temperature"] = json!(1);
            }
        };
        assert_eq!(
            refused(think(512)),
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        );
        assert_eq!(
            refused(think(4096)),
            "`max_tokens` must be greater than `thinking.budget_tokens`"
        );
        let mut ok = tool_conversation();
        think(1024)(&mut ok);
        ok["max_tokens"] = json!(2048);
        assert_eq!(check(&ok, false), Ok(()));
        ok["temperature"] = json!(0.5);
        assert_eq!(
            check(&ok, false).unwrap_err(),
            "`temperature` may only be set to 1 when thinking is enabled"
        );
        let many = refused(|b| {
            let cache = json!({"type": "ephemeral"});
            b["tools"][0]["cache_control"] = cache.clone();
            b["messages"][0]["content"] =
                json!([{"type": "text", "text": "Weather?", "cache_control": cache}]);
            b["messages"][1]["content"][1]["cache_control"] = cache.clone();
            b["messages"][2]["content"][0]["content"][0]["cache_control"] = cache;
        });
        assert_eq!(
            many,
            "A maximum of 4 blocks with cache_control may be provided. Found 5."
        );
        assert_eq!(
            refused(|b| b["system"][0]["cache_control"] = json!({"type": "persistent"})),
            "system.0.text.cache_control: Input tag 'persistent' found using 'type' does not match any of the expected tags: 'ephemeral'"
        );
    }
}
