//! The honest end of a stream that failed after content: an error event in the client's API
//! shape, which the SDKs raise on, appended to what the client already got.
//!
//! - Chat and completions: a `data:` whose JSON has an `error` key (the openai Python SDK raises
//!   `APIError` on it); no `[DONE]` follows.
//! - Messages: `event: error` (the anthropic SDK raises on that event name), the body Anthropic
//!   streams ("Streaming Messages", "Error events").
//! - Responses: `response.failed` with a response object the openai SDK's `Response` model
//!   accepts (its required keys: `id`, `created_at`, `model`, `object`, `output`,
//!   `parallel_tool_calls`, `tool_choice`, `tools`); `error.code` must be one of the SDK's
//!   codes, so Switchboard's code is not in it.

use super::{Dialect, Watcher};
use serde::Serialize;

/// The id of a failed response when the stream's own is not known.
const FAILED_ID: &str = "resp_switchboard_failed";

/// The bytes that end a stream failed after content. `message` is Switchboard's text, `code`
/// its error code (`stream_reset`, `stream_idle`, `stream_malformed`, `stream_error`).
pub fn terminal_event(dialect: Dialect, message: &str, code: &str) -> Vec<u8> {
    terminal(dialect, message, code, &Continues::default())
}

impl Watcher {
    /// [`terminal_event`] for this stream: a Responses stream's `response.failed` carries the
    /// response id its lifecycle events gave and the next sequence number, so the openai SDK's
    /// `responses.stream()` helper yields it (with another id it raises "Lifecycle response
    /// identity changed" instead, without the message).
    pub fn terminal_event(&self, message: &str, code: &str) -> Vec<u8> {
        let continues = Continues {
            id: self.response_id(),
            sequence_number: self.sequence_number().map_or(0, |n| n.saturating_add(1)),
        };
        terminal(self.dialect(), message, code, &continues)
    }
}

/// What a Responses terminal event continues.
#[derive(Default)]
struct Continues<'a> {
    id: Option<&'a str>,
    sequence_number: u64,
}

fn terminal(dialect: Dialect, message: &str, code: &str, continues: &Continues<'_>) -> Vec<u8> {
    match dialect {
        Dialect::ChatCompletions | Dialect::Completions => frame(
            None,
            &ChatError {
                error: ChatErrorBody {
                    message,
                    kind: "server_error",
                    param: None,
                    code,
                },
            },
        ),
        Dialect::Messages => frame(
            Some("error"),
            &MessagesError {
                kind: "error",
                error: MessagesErrorBody {
                    kind: "api_error",
                    message,
                },
            },
        ),
        Dialect::Responses => frame(Some("response.failed"), &failed(message, continues)),
    }
}

/// `{"error": {...}}`, as OpenAI streams a failure in a chat stream.
#[derive(Serialize)]
struct ChatError<'a> {
    error: ChatErrorBody<'a>,
}

#[derive(Serialize)]
struct ChatErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
}

/// Anthropic's error event.
#[derive(Serialize)]
struct MessagesError<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    error: MessagesErrorBody<'a>,
}

#[derive(Serialize)]
struct MessagesErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

/// A `response.failed` event.
#[derive(Serialize)]
struct Failed<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    sequence_number: u64,
    response: FailedResponse<'a>,
}

/// The failed response object, with the keys the SDK's `Response` model requires.
#[derive(Serialize)]
struct FailedResponse<'a> {
    id: &'a str,
    object: &'a str,
    created_at: u64,
    status: &'a str,
    error: ResponseError<'a>,
    incomplete_details: Option<&'a str>,
    output: [u8; 0],
    model: &'a str,
    parallel_tool_calls: bool,
    tool_choice: &'a str,
    tools: [u8; 0],
    metadata: Empty,
}

#[derive(Serialize)]
struct ResponseError<'a> {
    code: &'a str,
    message: &'a str,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

fn failed<'a>(message: &'a str, continues: &Continues<'a>) -> Failed<'a> {
    Failed {
        kind: "response.failed",
        sequence_number: continues.sequence_number,
        response: FailedResponse {
            id: continues.id.unwrap_or(FAILED_ID),
            object: "response",
            created_at: 0,
            status: "failed",
            error: ResponseError {
                code: "server_error",
                message,
            },
            incomplete_details: None,
            output: [],
            model: "",
            parallel_tool_calls: true,
            tool_choice: "auto",
            tools: [],
            metadata: Empty {},
        },
    }
}

/// One SSE event: an optional name, the JSON on one `data:` line, a blank line.
fn frame<T: Serialize>(event: Option<&str>, data: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    if let Some(name) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Writing these structs of strings to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, data);
    out.extend_from_slice(b"\n\n");
    out
}
