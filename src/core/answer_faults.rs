//! Answers that came with a 2xx but answer nothing: a refusal, an empty answer, an error object.
//! `fallback_on` (per virtual model) moves them to the next candidate; this module only tells
//! them apart, in each API's own shape (Chat Completions and legacy Completions, Anthropic
//! Messages, the Responses API), for a whole JSON answer or a stream up to its first content.
//!
//! - Refusal (`content_filter`): Chat Completions `finish_reason: "content_filter"` on every
//!   choice (OpenAI and Azure OpenAI, "Chat Completions object"); Anthropic
//!   `stop_reason: "refusal"` (Anthropic Messages API, "Handling stop reasons"); a Responses API
//!   answer with `status: "incomplete"` and `incomplete_details.reason: "content_filter"`
//!   (OpenAI Responses API, "The response object").
//! - Empty (`empty`): no text, refusal text, tool call or other output item; a thinking or
//!   reasoning part alone is no answer. A Responses answer is judged only once `completed` (a
//!   background response is answered `queued`, with no output yet, on purpose).
//! - Error object (`error_body`): a top-level `error` object (OpenAI's error shape; a Responses
//!   object carries `"error": null` when it did not fail), or Anthropic's `"type": "error"`.
//!
//! A body that is not a JSON object of one of these shapes (embeddings, audio) is never judged.

use crate::core::config::AnswerFallbacks;
use crate::core::sse::{Dialect, Event, Watcher};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Why a 2xx answer is no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFault {
    /// The provider refused (content filter, `refusal`).
    ContentFilter,
    /// No content and no tool call.
    Empty,
    /// The body is an error object.
    ErrorBody,
}

impl AnswerFault {
    /// The `fallback_on` name, also the `fallbacks` metric's reason label.
    pub fn label(self) -> &'static str {
        match self {
            AnswerFault::ContentFilter => "content_filter",
            AnswerFault::Empty => "empty",
            AnswerFault::ErrorBody => "error_body",
        }
    }

    /// Whether it counts against the target's health. A refusal is about the prompt, not the
    /// target (another target may well answer it, but this one is not broken); an empty
    /// answer or an error in a 200 is the target misbehaving.
    pub fn counts_against_target(self) -> bool {
        !matches!(self, AnswerFault::ContentFilter)
    }
}

/// The faults `on` asks to judge, if any is on (`context_length` is a 400's, not a 2xx's).
pub fn judged(on: AnswerFallbacks) -> Option<AnswerFallbacks> {
    let on = AnswerFallbacks {
        context_length: false,
        ..on
    };
    on.any().then_some(on)
}

type Raw<'a> = Option<&'a RawValue>;

/// The keys of a whole answer that tell its shape and its fault, in any of the APIs.
#[derive(Deserialize)]
struct Whole<'a> {
    #[serde(borrow, default)]
    error: Raw<'a>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    object: Option<Cow<'a, str>>,
    // Chat Completions and Completions.
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    // Anthropic Messages.
    #[serde(borrow, default)]
    content: Raw<'a>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    // Responses API.
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    incomplete_details: Option<Incomplete<'a>>,
    #[serde(borrow, default)]
    output: Raw<'a>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    text: Raw<'a>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Raw<'a>,
    #[serde(borrow, default)]
    refusal: Raw<'a>,
    #[serde(borrow, default)]
    tool_calls: Raw<'a>,
    #[serde(borrow, default)]
    function_call: Raw<'a>,
    #[serde(borrow, default)]
    audio: Raw<'a>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
}

/// An Anthropic content block or a Responses output item or content part: its type and text.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Raw<'a>,
    #[serde(borrow, default)]
    refusal: Raw<'a>,
    #[serde(borrow, default)]
    content: Raw<'a>,
}

/// The fault of a whole JSON answer `on` asks to judge, if it has one.
pub fn judge_whole(body: &[u8], on: AnswerFallbacks) -> Option<AnswerFault> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body.get(start) != Some(&b'{') {
        return None;
    }
    let whole: Whole = serde_json::from_slice(body).ok()?;
    let error = is_object(whole.error) || whole.kind.as_deref() == Some("error");
    if error {
        return on.error_body.then_some(AnswerFault::ErrorBody);
    }
    let (refused, empty) = if let Some(choices) = &whole.choices {
        chat(choices)
    } else if whole.kind.as_deref() == Some("message") {
        messages(&whole)
    } else if whole.object.as_deref() == Some("response") {
        responses(&whole)
    } else {
        return None;
    };
    verdict(refused, empty, on)
}

fn verdict(refused: bool, empty: bool, on: AnswerFallbacks) -> Option<AnswerFault> {
    if refused && on.content_filter {
        Some(AnswerFault::ContentFilter)
    } else if empty && on.empty {
        Some(AnswerFault::Empty)
    } else {
        None
    }
}

/// (refused, empty) of Chat Completions choices.
fn chat(choices: &[Choice<'_>]) -> (bool, bool) {
    let refused = !choices.is_empty()
        && choices
            .iter()
            .all(|c| c.finish_reason.as_deref() == Some("content_filter"));
    let answered = choices.iter().any(|c| {
        let message = c.message.as_ref().is_some_and(|m| {
            [m.content, m.refusal, m.tool_calls, m.function_call, m.audio]
                .into_iter()
                .any(filled)
        });
        message || filled(c.text)
    });
    (refused, !answered)
}

/// (refused, empty) of an Anthropic message.
fn messages(whole: &Whole<'_>) -> (bool, bool) {
    let refused = whole.stop_reason.as_deref() == Some("refusal");
    let answered = parts(whole.content)
        .iter()
        .any(|b| match b.kind.as_deref() {
            Some("text") => filled(b.text),
            Some("thinking" | "redacted_thinking") => false,
            _ => true,
        });
    (refused, !answered)
}

/// (refused, empty) of a Responses API response object.
fn responses(whole: &Whole<'_>) -> (bool, bool) {
    let status = whole.status.as_deref();
    let reason = whole
        .incomplete_details
        .as_ref()
        .and_then(|d| d.reason.as_deref());
    let refused = status == Some("incomplete") && reason == Some("content_filter");
    let answered = parts(whole.output)
        .iter()
        .any(|item| match item.kind.as_deref() {
            Some("message") => parts(item.content)
                .iter()
                .any(|p| filled(p.text) || filled(p.refusal)),
            Some("reasoning") => false,
            _ => true,
        });
    (refused, status == Some("completed") && !answered)
}

/// The elements of a JSON array of objects (none if it is not one).
fn parts<'a>(raw: Raw<'a>) -> Vec<Part<'a>> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default()
}

/// The fault of a streamed answer `on` asks to judge, from its held bytes `held`, read in
/// `dialect` (the provider's) up to its first content event: none once content came. An error
/// event is not judged here: before the commit point it already is a failed attempt.
pub fn judge_stream(dialect: Dialect, held: &[u8], on: AnswerFallbacks) -> Option<AnswerFault> {
    let mut watcher = Watcher::new(dialect);
    let mut at = 0;
    while let Some((event, next)) = watcher.next(held, at) {
        match event {
            Event::Content | Event::Error(_) | Event::Malformed => return None,
            Event::Final => {
                let events = held.get(..next).unwrap_or(held);
                return verdict(stream_refused(dialect, events), true, on);
            }
            Event::Other => at = next,
        }
    }
    None
}

/// A streamed chunk's keys that say it was refused.
#[derive(Deserialize)]
struct StreamChunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(borrow, default)]
    delta: Option<StopDelta<'a>>,
}

#[derive(Deserialize)]
struct StopDelta<'a> {
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

/// Whether a stream's events (with no content among them) end in a refusal: a chat chunk with
/// `finish_reason: "content_filter"`, an Anthropic `message_delta` with
/// `stop_reason: "refusal"`. (A Responses stream ending `response.incomplete` before any output
/// is an error event already.)
fn stream_refused(dialect: Dialect, events: &[u8]) -> bool {
    if dialect == Dialect::Responses {
        return false;
    }
    events
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .filter_map(|data| serde_json::from_slice::<StreamChunk>(data.trim_ascii()).ok())
        .any(|chunk| {
            let chat = chunk.choices.is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.finish_reason.as_deref() == Some("content_filter"))
            });
            let anthropic = chunk
                .delta
                .is_some_and(|d| d.stop_reason.as_deref() == Some("refusal"));
            chat || anthropic
        })
}

/// Whether a value is a non-empty JSON object.
fn is_object(raw: Raw<'_>) -> bool {
    raw.is_some_and(|r| r.get().starts_with('{') && filled(Some(r)))
}

/// Whether a value carries something: not `null`, `""`, `[]`, `{}` or `false`.
fn filled(raw: Raw<'_>) -> bool {
    let Some(raw) = raw else {
        return false;
    };
    let raw = raw.get().as_bytes();
    match (raw.first(), raw.last()) {
        (Some(b'"'), _) => raw.len() > 2,
        (Some(b'['), Some(b']')) | (Some(b'{'), Some(b'}')) => raw
            .get(1..raw.len() - 1)
            .is_some_and(|inner| !inner.iter().all(u8::is_ascii_whitespace)),
        _ => !matches!(raw, b"null" | b"false"),
    }
}

#[cfg(test)]
mod tests;
