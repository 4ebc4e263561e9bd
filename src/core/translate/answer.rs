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
mod tests;
