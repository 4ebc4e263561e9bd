//! Request translation between OpenAI Chat Completions and Anthropic Messages (Zuplo model load
//! balancing, "A list mixes vendors").
//!
//! Both APIs reject fields they do not know, so each client field is mapped, dropped or refused
//! (an [`Untranslatable`] naming it, a 400 in the client's shape), never passed through; a field
//! not in these tables is dropped.
//!
//! # Chat Completions → Messages ([`chat_to_messages`])
//!
//! | Chat Completions field | Messages | |
//! |---|---|---|
//! | `model` | `model` | the target's model id |
//! | `system` / `developer` messages | `system` | string, or text blocks when they carry `cache_control` |
//! | `user` messages: `text`, `image_url` parts | `text`, `image` blocks | `data:` URL → base64 source (jpeg, png, gif, webp); `https` URL → url source |
//! | `file` part with a PDF `file_data` | `document` block | base64 source |
//! | assistant `content`, `refusal` | `text` blocks | |
//! | assistant `tool_calls` | `tool_use` blocks | `arguments` parsed to `input` (an object; `""` is `{}`) |
//! | `tool` messages | `tool_result` blocks | first in one user turn, answering the assistant turn before it |
//! | consecutive same-role turns | one turn | |
//! | `tools` (function) | `tools` | `parameters` → `input_schema`; `strict` dropped |
//! | `tool_choice` | `tool_choice` | `auto`, `none`, `required` → `any`, a named function → `tool` |
//! | `parallel_tool_calls: false` | `tool_choice.disable_parallel_tool_use` | |
//! | `max_completion_tokens` / `max_tokens` | `max_tokens` | default the catalog's `max_output_tokens`, else 1024; capped by `max_output_tokens` |
//! | `stop` | `stop_sequences` | |
//! | `temperature` | `temperature` | OpenAI's 0–2 clamped to Anthropic's 0–1 |
//! | `top_p` | `top_p` | only without `temperature`: recent Claude models refuse both |
//! | `safety_identifier`, else `user` | `metadata.user_id` | |
//! | `stream` | `stream` | |
//! | `reasoning_effort` | `thinking` | minimal/low 1,024, medium 4,096, high 16,384, xhigh 32,768 budget tokens (`chat_fields::thinking_budget`) |
//! | (`anthropic_cache: "auto"`) | `cache_control` | on the last user turn, the system, the last tool; four in all |
//! | `cache_control` on a content part | kept | counts toward the four |
//!
//! Dropped: `stream_options` (the answer side reads `include_usage` with [`wants_usage`]),
//! `seed`, `frequency_penalty`, `presence_penalty`, `logit_bias`, `service_tier`, `store`,
//! `metadata`, `prediction`, `web_search_options`, `prompt_cache_key`,
//! `prompt_cache_retention`, `verbosity`, `n: 1`, `logprobs: false`, `top_logprobs: 0`,
//! `response_format: {type: text}`, `modalities: ["text"]`, a message's `name`, an image's
//! `detail`, a tool's `strict`.
//!
//! Refused: `n` > 1, `logprobs: true`, `top_logprobs` > 0, `audio`, `modalities` with audio,
//! `response_format` `json_object` / `json_schema`, `functions` / `function_call` and
//! `function` messages (deprecated), `input_audio` parts, a `file` part that is not PDF data,
//! `custom` tools and tool calls, `tool_choice` `allowed_tools` / `custom`, a stop sequence of
//! whitespace only, a `tool` message answering no tool call, a tool call left unanswered,
//! more than four `cache_control` blocks.
//!
//! # Messages → Chat Completions ([`messages_to_chat`])
//!
//! | Messages field | Chat Completions | |
//! |---|---|---|
//! | `model` | `model` | the target's model id |
//! | `system` | a `system` message | text blocks joined |
//! | `text`, `image` blocks | `text`, `image_url` parts | base64 → `data:` URL; url → its URL |
//! | `tool_use` blocks | assistant `tool_calls` | `input` serialized to `arguments` |
//! | `tool_result` blocks | `tool` messages | text joined; `is_error` → content starts `Error: ` |
//! | `tools` | `tools` (function) | `input_schema` → `parameters` |
//! | `tool_choice` | `tool_choice` | `auto`, `any` → `required`, `tool` → a named function, `none` |
//! | `disable_parallel_tool_use: true` | `parallel_tool_calls: false` | |
//! | `max_tokens` | `max_tokens` | OpenAI-compatible servers (vLLM) know only `max_tokens` |
//! | `stop_sequences` | `stop` | at most 4 |
//! | `temperature`, `top_p` | `temperature`, `top_p` | |
//! | `metadata.user_id` | `user` | |
//! | `stream` | `stream`, `stream_options.include_usage` | the answer side needs usage |
//! | `output_config.format` / `output_format` (json_schema) | `response_format` json_schema | |
//!
//! Dropped: `thinking` and `redacted_thinking` blocks, `thinking`, `cache_control`, `top_k`,
//! `service_tier`, `context_management`, `inference_geo`, `output_config.effort`, `citations`.
//!
//! Refused: `container`, `mcp_servers`, server tools (a tool with a `type` other than
//! `custom`), `document`, `search_result` and server-tool blocks, an image in a
//! `tool_result` or an assistant turn, an image `file` source, more than 4 stop sequences, a
//! `tool_result` answering no `tool_use`, a `tool_use` left unanswered.

mod cache;
mod chat_fields;
mod chat_parts;
mod chat_tools;
mod chat_turns;
mod messages_in;

use super::{Target, Untranslatable};
use serde_json::{Map, Value};

type Obj = Map<String, Value>;

/// An OpenAI Chat Completions request body → an Anthropic Messages request body for
/// `target.model` (compact JSON).
pub fn chat_to_messages(body: &[u8], target: &Target) -> Result<Vec<u8>, Untranslatable> {
    let req = parse_object(body)?;
    let out = chat_fields::translate(req, target)?;
    Ok(to_bytes(out))
}

/// An Anthropic Messages request body → an OpenAI Chat Completions request body for
/// `target.model` (compact JSON).
pub fn messages_to_chat(body: &[u8], target: &Target) -> Result<Vec<u8>, Untranslatable> {
    let req = parse_object(body)?;
    let out = messages_in::translate(req, target)?;
    Ok(to_bytes(out))
}

/// Whether a client's Chat Completions body asks for the usage chunk
/// (`stream_options.include_usage`), which the Messages body cannot carry.
pub fn wants_usage(chat_body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Body {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        include_usage: Option<bool>,
    }
    serde_json::from_slice::<Body>(chat_body)
        .ok()
        .and_then(|b| b.stream_options)
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

fn refuse(field: impl Into<String>, reason: impl Into<String>) -> Untranslatable {
    Untranslatable {
        field: field.into(),
        reason: reason.into(),
    }
}

fn parse_object(body: &[u8]) -> Result<Obj, Untranslatable> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(refuse("body", "expected a JSON object")),
        Err(e) => Err(refuse("body", format!("not valid JSON: {e}"))),
    }
}

/// A field's value unless absent or null: both APIs read an explicit null as unset.
fn present<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// Removes a field, null read as absent.
fn take(obj: &mut Obj, key: &str) -> Option<Value> {
    obj.remove(key).filter(|v| !v.is_null())
}

/// A block's or part's `type`.
fn kind(obj: &Obj) -> &str {
    obj.get("type").and_then(Value::as_str).unwrap_or("")
}

fn to_bytes(out: Obj) -> Vec<u8> {
    // Serializing a Value built from strings and numbers cannot fail.
    serde_json::to_vec(&Value::Object(out)).unwrap_or_default()
}

#[cfg(test)]
mod tests;
