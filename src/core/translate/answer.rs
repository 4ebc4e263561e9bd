//! Whole answers and error bodies, translated back into the client's API: an Anthropic
//! `message` into an OpenAI `chat.completion` and the mirror, and each API's error object
//! into the other's. The mappings the streams share ([`finish_reason`], [`stop_reason`], the
//! usage and the ids) live here too.
//!
//! Pure functions over bytes: a body that is not the answer or error object it should be gives
//! `None`, never a panic.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

// ---------------------------------------------------------------------------------------------
// Shared mappings

/// Anthropic `stop_reason` → OpenAI `finish_reason` (Anthropic Messages API, "Handling stop
/// reasons"; OpenAI Chat Completions, `choices[].finish_reason`).
pub(super) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        // end_turn, stop_sequence, pause_turn (the turn may be resumed: a stop for the client)
        // and any reason added later.
        _ => "stop",
    }
}

/// OpenAI `finish_reason` → Anthropic `stop_reason`.
pub(super) fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        // `function_call` is the deprecated single-function form of `tool_calls`.
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// `msg_01X…` → `chatcmpl-01X…`: the client's id keeps the provider's for support cases.
pub(super) fn chat_id(message_id: &str) -> String {
    let suffix = message_id.strip_prefix("msg_").unwrap_or(message_id);
    format!("chatcmpl-{suffix}")
}

/// `chatcmpl-abc` → `msg_abc`.
pub(super) fn message_id(chat_id: &str) -> String {
    let suffix = chat_id.strip_prefix("chatcmpl-").unwrap_or(chat_id);
    format!("msg_{suffix}")
}

/// OpenAI's `usage` object (Chat Completions, "The chat completion object", `usage`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub(super) struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedTokens,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
struct CachedTokens {
    cached_tokens: u64,
}

/// Anthropic's usage as the Messages API reports it.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub(super) struct MessagesUsage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

impl MessagesUsage {
    /// Later counts replace earlier ones (a stream's `message_delta` repeats them cumulatively).
    pub(super) fn update(&mut self, later: &MessagesUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
    }

    /// Anthropic Messages API, `usage`: `input_tokens` excludes the cached prompt, and the
    /// whole prompt is input + cache writes + cache reads; OpenAI's `prompt_tokens` is the whole
    /// prompt, its `cached_tokens` the part read from cache.
    pub(super) fn to_chat(self) -> ChatUsage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let prompt = self
            .input_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
            .saturating_add(read);
        let completion = self.output_tokens.unwrap_or(0);
        ChatUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt.saturating_add(completion),
            prompt_tokens_details: CachedTokens {
                cached_tokens: read,
            },
        }
    }
}

/// OpenAI's usage as a Chat Completions answer or usage chunk reports it.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub(super) struct ChatUsageIn {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<CachedTokensIn>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
struct CachedTokensIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Anthropic's usage object for a translated answer.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub(super) struct MessagesUsageOut {
    pub input_tokens: u64,
    /// OpenAI reports no cache writes (its prompt caching is automatic and writes are not
    /// billed): 0, not null, so a client that adds the fields up keeps working.
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub output_tokens: u64,
}

impl ChatUsageIn {
    /// The mirror of [`MessagesUsage::to_chat`]: Anthropic's `input_tokens` leaves the cache
    /// reads out.
    pub(super) fn to_messages(self) -> MessagesUsageOut {
        let cached = self
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        MessagesUsageOut {
            input_tokens: self.prompt_tokens.saturating_sub(cached),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            output_tokens: self.completion_tokens,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Messages → Chat Completions

/// An Anthropic `message` (Anthropic Messages API, "Create a Message", response).
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    model: Cow<'a, str>,
    #[serde(borrow, default)]
    content: Vec<Block<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: MessagesUsage,
}

/// One content block; only `text` and `tool_use` are read, the rest (thinking, server tools'
/// blocks) are dropped.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct ChatCompletion<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChatChoice<'a>; 1],
    usage: ChatUsage,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    message: ChatMessage<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: Option<String>,
    refusal: Option<()>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    /// OpenAI Chat Completions, `tool_calls[].function.arguments`: a JSON string.
    arguments: &'a str,
}

/// An Anthropic Messages response → an OpenAI `chat.completion`, `created` at `created_s`.
/// `None` when `body` is not a `message`.
pub fn messages_answer_to_chat(body: &[u8], created_s: u64) -> Option<Vec<u8>> {
    let message: Message<'_> = serde_json::from_slice(body).ok()?;
    if message.kind != "message" {
        return None;
    }
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for block in &message.content {
        match (block.kind.as_ref(), &block.text) {
            // Citations split one answer into many text blocks: joined as written.
            ("text", Some(t)) => text.get_or_insert_with(String::new).push_str(t),
            ("tool_use", _) => tool_calls.push(ToolCall {
                id: block.id.as_deref().unwrap_or_default(),
                kind: "function",
                function: Function {
                    name: block.name.as_deref().unwrap_or_default(),
                    arguments: block.input.map_or("{}", RawValue::get),
                },
            }),
            _ => {}
        }
    }
    let answer = ChatCompletion {
        id: chat_id(&message.id),
        object: "chat.completion",
        created: created_s,
        model: &message.model,
        choices: [ChatChoice {
            index: 0,
            message: ChatMessage {
                role: "assistant",
                content: text,
                refusal: None,
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_reason(message.stop_reason.as_deref().unwrap_or("end_turn")),
        }],
        usage: message.usage.to_chat(),
    };
    serde_json::to_vec(&answer).ok()
}

// ---------------------------------------------------------------------------------------------
// Chat Completions → Messages

/// An OpenAI `chat.completion` (Chat Completions, "The chat completion object").
#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    model: Cow<'a, str>,
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<ChatUsageIn>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    message: ChoiceMessage<'a>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChoiceMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallIn<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    function: FunctionIn<'a>,
}

#[derive(Deserialize)]
struct FunctionIn<'a> {
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Cow<'a, str>,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<BlockOut<'a>>,
    stop_reason: &'static str,
    stop_sequence: Option<()>,
    usage: MessagesUsageOut,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        #[serde(serialize_with = "input_or_empty")]
        input: Option<&'a RawValue>,
    },
}

/// An OpenAI `chat.completion` → an Anthropic `message`. `None` when `body` is not a chat
/// completion with a first choice.
pub fn chat_answer_to_messages(body: &[u8]) -> Option<Vec<u8>> {
    let completion: Completion<'_> = serde_json::from_slice(body).ok()?;
    // `n > 1` is refused at the request: the answer has the one choice, index 0.
    let choice = completion.choices.iter().find(|c| c.index == 0)?;
    let message = &choice.message;
    let mut content = Vec::new();
    for text in [&message.content, &message.refusal].into_iter().flatten() {
        if !text.is_empty() {
            content.push(BlockOut::Text {
                text: text.as_ref(),
            });
        }
    }
    for call in message.tool_calls.iter().flatten() {
        content.push(BlockOut::ToolUse {
            id: &call.id,
            name: &call.function.name,
            input: tool_input(&call.function.arguments),
        });
    }
    let answer = MessageOut {
        id: message_id(&completion.id),
        kind: "message",
        role: "assistant",
        model: &completion.model,
        content,
        stop_reason: stop_reason(choice.finish_reason.as_deref().unwrap_or("stop")),
        stop_sequence: None,
        usage: completion.usage.unwrap_or_default().to_messages(),
    };
    serde_json::to_vec(&answer).ok()
}

/// Anthropic Messages API, `tool_use.input`: an object. OpenAI documents that the model may
/// write arguments that are not valid JSON ("Function calling"); those, and an empty string,
/// become `{}` (`None` here) rather than failing the whole answer.
fn tool_input(arguments: &str) -> Option<&RawValue> {
    serde_json::from_str::<&RawValue>(arguments)
        .ok()
        .filter(|raw| raw.get().starts_with('{'))
}

/// Writes the tool input, `{}` when there is none.
fn input_or_empty<S: serde::Serializer>(
    input: &Option<&RawValue>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match input {
        Some(raw) => raw.serialize(s),
        None => s.serialize_map(Some(0))?.end(),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

#[derive(Deserialize)]
struct AnthropicErrorIn<'a> {
    #[serde(borrow)]
    error: ErrorBody<'a>,
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    /// OpenAI's `code`: a string, or vLLM's status number.
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// OpenAI's error object: `{"error": {…}}`, or vLLM's flat `{"object": "error", "message"…}`.
#[derive(Deserialize)]
struct OpenAiErrorIn<'a> {
    #[serde(borrow, default)]
    error: Option<ErrorBody<'a>>,
    #[serde(borrow, default)]
    object: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct OpenAiErrorOut<'a> {
    error: OpenAiErrorBody<'a>,
}

#[derive(Serialize)]
struct OpenAiErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<()>,
    code: Option<()>,
}

#[derive(Serialize)]
struct AnthropicErrorOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicErrorBody<'a>,
}

#[derive(Serialize)]
struct AnthropicErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

/// The message when the provider's error gave none.
const NO_MESSAGE: &str = "The provider reported an error without a message.";

/// OpenAI's error shape, `{"error": {"message", "type", "param": null, "code": null}}`.
pub(super) fn openai_error(message: &str, kind: &str) -> Vec<u8> {
    let body = OpenAiErrorOut {
        error: OpenAiErrorBody {
            message,
            kind,
            param: None,
            code: None,
        },
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`.
pub(super) fn anthropic_error(kind: &str, message: &str) -> Vec<u8> {
    let body = AnthropicErrorOut {
        kind: "error",
        error: AnthropicErrorBody { kind, message },
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Anthropic's `{"type": "error", "error": {"type", "message"}}` → OpenAI's
/// `{"error": {"message", "type", "param": null, "code": null}}`, the type kept (the status,
/// which OpenAI's SDKs raise by, is the provider's). `None` when `body` is no such error.
pub fn error_to_openai(body: &[u8]) -> Option<Vec<u8>> {
    let parsed: AnthropicErrorIn<'_> = serde_json::from_slice(body).ok()?;
    let message = parsed.error.message.as_deref().unwrap_or(NO_MESSAGE);
    let kind = parsed.error.kind.as_deref().unwrap_or("api_error");
    Some(openai_error(message, kind))
}

/// OpenAI's error object (or vLLM's flat one) answered with `status` → Anthropic's shape, its
/// type chosen by [`anthropic_error_type`]. `None` when `body` is no such error.
pub fn error_to_anthropic(body: &[u8], status: u16) -> Option<Vec<u8>> {
    let parsed: OpenAiErrorIn<'_> = serde_json::from_slice(body).ok()?;
    let error = match (parsed.error, parsed.object.as_deref()) {
        (Some(error), _) => error,
        (None, Some("error")) => ErrorBody {
            kind: parsed.kind,
            message: parsed.message,
            code: parsed.code,
        },
        (None, _) => return None,
    };
    let code = error.code.as_ref().and_then(serde_json::Value::as_str);
    let kind = anthropic_error_type(status, error.kind.as_deref(), code);
    let message = error.message.as_deref().unwrap_or(NO_MESSAGE);
    Some(anthropic_error(kind, message))
}

/// Anthropic's error type for an OpenAI error. Anthropic Messages API, "Errors": each status it
/// documents has one type, and Anthropic's SDKs raise by status, so a documented status decides
/// (OpenAI answers a bad key with 401 and type `invalid_request_error`: `authentication_error`
/// here). Other statuses, and a stream's error after its 200, go by OpenAI's type or code, else
/// by the status class ("invalid_request_error … may also be used for other 4XX").
pub(super) fn anthropic_error_type(
    status: u16,
    kind: Option<&str>,
    code: Option<&str>,
) -> &'static str {
    match status {
        400 => return "invalid_request_error",
        401 => return "authentication_error",
        402 => return "billing_error",
        403 => return "permission_error",
        404 => return "not_found_error",
        413 => return "request_too_large",
        429 => return "rate_limit_error",
        500 => return "api_error",
        // OpenAI answers 503 when its engine is overloaded: Anthropic's 529.
        503 | 529 => return "overloaded_error",
        504 => return "timeout_error",
        _ => {}
    }
    for name in [code, kind].into_iter().flatten() {
        if let Some(mapped) = openai_error_name(name) {
            return mapped;
        }
    }
    match status {
        405..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// An OpenAI error type or code that names a kind of failure (Anthropic's own names pass).
fn openai_error_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "invalid_request_error" => "invalid_request_error",
        "authentication_error" | "invalid_api_key" => "authentication_error",
        "permission_error" | "permission_denied" => "permission_error",
        "not_found_error" | "model_not_found" => "not_found_error",
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "insufficient_quota"
        | "tokens"
        | "requests" => "rate_limit_error",
        "billing_error" => "billing_error",
        "request_too_large" => "request_too_large",
        "timeout_error" | "timeout" => "timeout_error",
        "overloaded_error" | "engine_overloaded" => "overloaded_error",
        "api_error" | "server_error" | "internal_error" => "api_error",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(bytes: Option<Vec<u8>>) -> Value {
        let bytes = bytes.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    /// Anthropic Messages API, "Tool use" overview: the answer that asks for a tool.
    const CLAUDE_TOOL_USE: &str = r#"{
      "id": "msg_01Aq9w938a90dw8q",
      "type": "message",
      "model": "claude-opus-4-6",
      "stop_reason": "tool_use",
      "stop_sequence": null,
      "role": "assistant",
      "content": [
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
         "input": {"location": "San Francisco, CA", "unit": "celsius"}}
      ],
      "usage": {"input_tokens": 472, "output_tokens": 89}
    }"#;

    /// Anthropic Messages API, "Create a Message", response example with prompt caching.
    const CLAUDE_CACHED: &str = r#"{
      "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
      "type": "message",
      "role": "assistant",
      "model": "claude-sonnet-4-5-20250929",
      "content": [{"type": "text", "text": "Hi! My name is Claude."}],
      "stop_reason": "end_turn",
      "stop_sequence": null,
      "usage": {"input_tokens": 2095, "output_tokens": 503,
                "cache_creation_input_tokens": 2051, "cache_read_input_tokens": 4102,
                "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0},
                "service_tier": "standard"}
    }"#;

    /// Anthropic, "Extended thinking": a thinking block before the answer's text.
    const CLAUDE_THINKING: &str = r#"{
      "id": "msg_01Thk", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
      "content": [
        {"type": "thinking", "thinking": "Let me analyze this step by step...",
         "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
        {"type": "text", "text": "Based on my analysis, "},
        {"type": "text", "text": "the answer is 42."}
      ],
      "stop_reason": "max_tokens", "stop_sequence": null,
      "usage": {"input_tokens": 10, "output_tokens": 1024}
    }"#;

    /// OpenAI Chat Completions, "Create chat completion", default example response.
    const GPT_TEXT: &str = r#"{
      "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
      "object": "chat.completion",
      "created": 1741569952,
      "model": "gpt-4.1-2025-04-14",
      "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": "Hello! How can I assist you today?",
                    "refusal": null, "annotations": []},
        "logprobs": null,
        "finish_reason": "stop"
      }],
      "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                  "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
      "service_tier": "default"
    }"#;

    /// OpenAI Chat Completions, "Create chat completion", functions example response.
    const GPT_TOOLS: &str = r#"{
      "id": "chatcmpl-abc123",
      "object": "chat.completion",
      "created": 1699896916,
      "model": "gpt-4o-mini",
      "choices": [{
        "index": 0,
        "message": {
          "role": "assistant",
          "content": null,
          "tool_calls": [{"id": "call_abc123", "type": "function",
            "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}}]
        },
        "logprobs": null,
        "finish_reason": "tool_calls"
      }],
      "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
                "prompt_tokens_details": {"cached_tokens": 64}}
    }"#;

    #[test]
    fn a_tool_use_answer_becomes_a_chat_completion_with_tool_calls() {
        let chat = parse(messages_answer_to_chat(
            CLAUDE_TOOL_USE.as_bytes(),
            1_700_000_000,
        ));
        assert_eq!(chat["id"], "chatcmpl-01Aq9w938a90dw8q");
        assert_eq!(chat["object"], "chat.completion");
        assert_eq!(chat["created"], 1_700_000_000);
        assert_eq!(chat["model"], "claude-opus-4-6");
        let choice = &chat["choices"][0];
        assert_eq!(chat["choices"].as_array().map(Vec::len), Some(1));
        assert_eq!(choice["finish_reason"], "tool_calls");
        let message = &choice["message"];
        assert_eq!(message["role"], "assistant");
        assert_eq!(
            message["content"],
            "I'll check the current weather in San Francisco for you."
        );
        let call = &message["tool_calls"][0];
        assert_eq!(call["id"], "toolu_01A09q90qw90lq917835lq9");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        // The arguments are a JSON string holding the input object.
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or(""))
                .unwrap_or_default();
        assert_eq!(
            arguments,
            json!({"location": "San Francisco, CA", "unit": "celsius"})
        );
        assert_eq!(
            chat["usage"],
            json!({"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561,
                   "prompt_tokens_details": {"cached_tokens": 0}})
        );
    }

    #[test]
    fn the_prompt_counts_cache_writes_and_reads_and_the_reads_are_cached_tokens() {
        let chat = parse(messages_answer_to_chat(CLAUDE_CACHED.as_bytes(), 1));
        assert_eq!(
            chat["choices"][0]["message"]["content"],
            "Hi! My name is Claude."
        );
        assert_eq!(chat["choices"][0]["finish_reason"], "stop");
        assert!(chat["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(chat["usage"]["prompt_tokens"], 2095 + 2051 + 4102);
        assert_eq!(chat["usage"]["completion_tokens"], 503);
        assert_eq!(chat["usage"]["total_tokens"], 2095 + 2051 + 4102 + 503);
        assert_eq!(
            chat["usage"]["prompt_tokens_details"]["cached_tokens"],
            4102
        );
    }

    #[test]
    fn thinking_is_dropped_and_text_blocks_are_joined() {
        let chat = parse(messages_answer_to_chat(CLAUDE_THINKING.as_bytes(), 1));
        let message = &chat["choices"][0]["message"];
        assert_eq!(
            message["content"],
            "Based on my analysis, the answer is 42."
        );
        assert!(!chat.to_string().contains("analyze this step"));
        assert_eq!(chat["choices"][0]["finish_reason"], "length");
    }

    #[test]
    fn an_answer_without_text_has_null_content() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
            "content":[{"type":"tool_use","id":"toolu_1","name":"now","input":{}}],
            "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}"#;
        let chat = parse(messages_answer_to_chat(body, 1));
        assert_eq!(chat["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
    }

    #[test]
    fn every_stop_reason_has_its_finish_reason() {
        for (stop, finish) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("pause_turn", "stop"),
            ("model_context_window_exceeded", "length"),
        ] {
            let body = format!(
                r#"{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],
                "stop_reason":"{stop}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
            );
            let chat = parse(messages_answer_to_chat(body.as_bytes(), 1));
            assert_eq!(chat["choices"][0]["finish_reason"], finish, "{stop}");
        }
    }

    #[test]
    fn a_body_that_is_no_message_gives_none() {
        for body in [
            &b"not json"[..],
            br#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
            br#"[1,2]"#,
            br#"{"type":"message","content":"a string"}"#,
            b"",
        ] {
            assert_eq!(messages_answer_to_chat(body, 1), None);
        }
    }

    #[test]
    fn a_chat_completion_becomes_a_message() {
        let message = parse(chat_answer_to_messages(GPT_TEXT.as_bytes()));
        assert_eq!(
            message,
            json!({
                "id": "msg_B9MBs8CjcvOU2jLn4n570S5qMJKcT",
                "type": "message",
                "role": "assistant",
                "model": "gpt-4.1-2025-04-14",
                "content": [{"type": "text", "text": "Hello! How can I assist you today?"}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": 19, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 10}
            })
        );
    }

    #[test]
    fn tool_calls_become_tool_use_blocks_with_parsed_input() {
        let message = parse(chat_answer_to_messages(GPT_TOOLS.as_bytes()));
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["content"],
            json!([{"type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
                    "input": {"location": "Boston, MA"}}])
        );
        // Anthropic's input_tokens leaves out the cache reads, which are counted apart.
        assert_eq!(message["usage"]["input_tokens"], 82 - 64);
        assert_eq!(message["usage"]["cache_read_input_tokens"], 64);
        assert_eq!(message["usage"]["output_tokens"], 17);
    }

    #[test]
    fn arguments_that_are_no_json_object_become_an_empty_input() {
        for arguments in ["", "{\\\"city\\\": \\\"Par", "[1]", "null"] {
            let body = format!(
                r#"{{"id":"chatcmpl-1","model":"m","choices":[{{"index":0,"finish_reason":"tool_calls",
                "message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1",
                "type":"function","function":{{"name":"f","arguments":"{arguments}"}}}}]}}}}]}}"#
            );
            let message = parse(chat_answer_to_messages(body.as_bytes()));
            assert_eq!(message["content"][0]["input"], json!({}), "{arguments}");
            // No usage reported: zeros rather than a failed answer.
            assert_eq!(message["usage"]["output_tokens"], 0);
        }
    }

    #[test]
    fn a_refusal_is_kept_as_text_and_content_filter_is_a_refusal() {
        let body = br#"{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"finish_reason":"content_filter",
            "message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}]}"#;
        let message = parse(chat_answer_to_messages(body));
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "I can't help with that."}])
        );
        assert_eq!(message["stop_reason"], "refusal");
    }

    #[test]
    fn every_finish_reason_has_its_stop_reason() {
        for (finish, stop) in [
            ("stop", "end_turn"),
            ("length", "max_tokens"),
            ("tool_calls", "tool_use"),
            ("function_call", "tool_use"),
            ("content_filter", "refusal"),
        ] {
            assert_eq!(stop_reason(finish), stop);
        }
    }

    #[test]
    fn a_body_that_is_no_chat_completion_gives_none() {
        for body in [
            &b"{}"[..],
            br#"{"choices":[]}"#,
            br#"{"choices":[{"index":1,"message":{"content":"x"}}]}"#,
            br#"{"error":{"message":"x"}}"#,
            b"\xff",
        ] {
            assert_eq!(chat_answer_to_messages(body), None);
        }
    }

    #[test]
    fn an_anthropic_error_becomes_openais_shape() {
        // Anthropic Messages API, "Errors", error shapes.
        let body = br#"{"type":"error","error":{"type":"not_found_error",
            "message":"The requested resource could not be found."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
        assert_eq!(
            parse(error_to_openai(body)),
            json!({"error": {"message": "The requested resource could not be found.",
                             "type": "not_found_error", "param": null, "code": null}})
        );
        assert_eq!(error_to_openai(br#"{"error":"x"}"#), None);
        assert_eq!(error_to_openai(b"<html>"), None);
    }

    #[test]
    fn an_openai_error_becomes_anthropics_shape_typed_by_status() {
        // OpenAI answers a bad key with 401 and type invalid_request_error.
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-abc.","type":"invalid_request_error",
            "param":null,"code":"invalid_api_key"}}"#;
        assert_eq!(
            parse(error_to_anthropic(body, 401)),
            json!({"type": "error", "error": {"type": "authentication_error",
                   "message": "Incorrect API key provided: sk-abc."}})
        );
        for (status, kind) in [
            (400, "invalid_request_error"),
            (402, "billing_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (503, "overloaded_error"),
            (504, "timeout_error"),
            (529, "overloaded_error"),
        ] {
            let error = parse(error_to_anthropic(
                br#"{"error":{"message":"m","type":"x"}}"#,
                status,
            ));
            assert_eq!(error["error"]["type"], kind, "{status}");
        }
    }

    #[test]
    fn other_statuses_go_by_openai_type_or_code_then_by_class() {
        let typed =
            |body: &[u8], status| parse(error_to_anthropic(body, status))["error"]["type"].clone();
        assert_eq!(
            typed(br#"{"error":{"message":"m","type":"server_error"}}"#, 502),
            "api_error"
        );
        assert_eq!(
            typed(
                br#"{"error":{"message":"m","type":"requests","code":"rate_limit_exceeded"}}"#,
                200
            ),
            "rate_limit_error"
        );
        assert_eq!(
            typed(br#"{"error":{"message":"m","type":"odd"}}"#, 422),
            "invalid_request_error"
        );
        assert_eq!(typed(br#"{"error":{"message":"m"}}"#, 502), "api_error");
        // vLLM's flat error object, its code the status number.
        let vllm = br#"{"object":"error","message":"maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}"#;
        let error = parse(error_to_anthropic(vllm, 400));
        assert_eq!(
            error["error"]["message"],
            "maximum context length is 4096 tokens"
        );
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error_to_anthropic(br#"{"message":"no error"}"#, 500), None);
    }
}
