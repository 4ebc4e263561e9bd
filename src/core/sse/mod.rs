//! Watching a streamed (SSE) answer as its bytes pass: where its first content is (the commit
//! point before which a failure can still fall back), whether it ended with the API's own last
//! event, and what failure the provider reported in it. Also the honest end Switchboard appends
//! to a stream that failed after content ([`terminal_event`]).
//!
//! Framing follows WHATWG HTML, "Server-sent events", "Interpreting an event stream": lines end
//! in `\n`, `\r\n` or `\r`; a blank line ends an event; `data:` lines join with `\n`; one space
//! after the colon is dropped; a line starting with `:` is a comment. Each event's data is read
//! with serde into small borrowed structs ([`classify`]) until the stream is committed, then
//! only where it may be a failure ([`after_commit`]); nothing is kept between events but what
//! an event split across chunks needs ([`lines`]).
//!
//! The OpenAI API reference ("Streaming": chat completion chunks, Responses "Streaming events")
//! and Anthropic's "Streaming Messages" name the events classified here.

mod after_commit;
mod chat_run;
mod classify;
mod lines;
mod terminal;
#[cfg(test)]
mod tests;

pub use lines::{Watcher, MAX_DATA};
pub use terminal::terminal_event;

use crate::core::endpoint::Endpoint;

/// The longest line read: past it, a line's bytes are dropped and its event is oversized.
pub const MAX_LINE: usize = 1 << 20;

/// The streamed LLM API whose events are watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `/v1/chat/completions`: `data:` chunks, then `data: [DONE]`.
    ChatCompletions,
    /// `/v1/completions` (legacy): framed like chat, content in `choices[].text`.
    Completions,
    /// `/v1/responses`: named events whose JSON carries its `type`.
    Responses,
    /// `/v1/messages` (Anthropic): named events whose JSON carries its `type`.
    Messages,
}

impl Dialect {
    /// The dialect of an endpoint's streamed answer; `None` for an API that does not stream
    /// tokens (embeddings, images, audio files...) or that is not watched.
    pub fn of(endpoint: Endpoint) -> Option<Dialect> {
        match endpoint {
            Endpoint::ChatCompletions => Some(Dialect::ChatCompletions),
            Endpoint::Completions => Some(Dialect::Completions),
            Endpoint::Responses => Some(Dialect::Responses),
            Endpoint::Messages => Some(Dialect::Messages),
            _ => None,
        }
    }
}

/// What one complete event of the stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Not content: a role-only first chunk, `message_start`, `ping`, `response.created`,
    /// an empty text block's start, a comment (`: keep-alive`), an event of a type not known.
    Other,
    /// Output the client sees: a token of text, refusal or reasoning, a tool call's start or
    /// arguments. The first one is the commit point.
    Content,
    /// The API's own last event: chat's `data: [DONE]`, `message_stop`, `response.completed`
    /// (and `response.incomplete` once output was seen).
    Final,
    /// A failure the provider reported in the stream.
    Error(ProviderError),
    /// Not SSE of this API: data that is not a JSON object (but chat's `[DONE]`), a field other
    /// than `data`, `event`, `id` or `retry`, or an unnamed event over the size bounds.
    Malformed,
}

/// A failure as the provider reported it in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderError {
    /// Its message (empty if it had none).
    pub message: String,
    /// Its type (`server_error`, `overloaded_error`...), else the event's type (`error`,
    /// `response.failed`, `response.incomplete`).
    pub kind: String,
    /// Its code, if it had one (a number as its digits).
    pub code: Option<String>,
}
