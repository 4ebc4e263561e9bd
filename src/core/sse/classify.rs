//! What one complete event is, per dialect, from its `event:` name and its data.
//!
//! The data is read with serde into borrowed structs: unknown keys are skipped, values whose
//! type varies among providers are kept as raw JSON and only looked at (a string, array or
//! object is content when it is not empty). Responses and Messages events carry their `type`
//! in the JSON, which is trusted over the `event:` name; an event without readable data
//! (name only, or over the size bounds) is read by its name.

use super::{Dialect, Event, ProviderError};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What the framing read of one event.
pub(super) struct Read<'a> {
    /// Its `event:` name.
    pub name: Option<&'a str>,
    /// Its data (`data:` lines joined), unless empty or dropped.
    pub data: Option<&'a [u8]>,
    /// Its data was over the bounds and dropped.
    pub oversized: bool,
    /// A content event came before it.
    pub saw_content: bool,
}

/// What a Responses stream told of itself, for an honest end that continues it.
#[derive(Debug, Clone, Default)]
pub(super) struct ResponsesSeen {
    /// The response's id, from its lifecycle events (empty until one; at most `MAX_ID` bytes).
    pub id: String,
    /// The last event's `sequence_number`.
    pub sequence_number: Option<u64>,
}

/// Response ids are about 50 bytes; a longer one is not kept.
const MAX_ID: usize = 256;

/// The message of an error event whose body could not be read.
const UNREAD: &str = "the provider reported an error without a readable body";

/// What the event is.
pub(super) fn event(dialect: Dialect, read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    match dialect {
        Dialect::ChatCompletions | Dialect::Completions => chat(read),
        Dialect::Messages => messages(read),
        Dialect::Responses => responses(read, seen),
    }
}

/// Raw JSON of a key whose value's type varies; `null` reads as absent.
type Raw<'a> = Option<&'a RawValue>;

/// A chat or completion chunk.
#[derive(Deserialize)]
struct ChatChunk<'a> {
    #[serde(borrow, default)]
    error: Raw<'a>,
    #[serde(default)]
    choices: AnyContent,
}

/// One of `choices`: a chat `delta` or a completion's `text`.
#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    text: Raw<'a>,
}

/// The keys of a chat delta that carry output.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Raw<'a>,
    #[serde(borrow, default)]
    refusal: Raw<'a>,
    #[serde(borrow, default)]
    tool_calls: Raw<'a>,
    #[serde(borrow, default)]
    function_call: Raw<'a>,
    #[serde(borrow, default)]
    reasoning_content: Raw<'a>,
    #[serde(borrow, default)]
    reasoning: Raw<'a>,
    #[serde(borrow, default)]
    audio: Raw<'a>,
}

impl Choice<'_> {
    fn has_content(&self) -> bool {
        let delta = self.delta.as_ref().is_some_and(|d| {
            [
                d.content,
                d.refusal,
                d.tool_calls,
                d.function_call,
                d.reasoning_content,
                d.reasoning,
                d.audio,
            ]
            .into_iter()
            .any(filled)
        });
        delta || filled(self.text)
    }
}

/// Whether any of `choices` carries output, read without collecting them.
#[derive(Default)]
struct AnyContent(bool);

impl<'de> Deserialize<'de> for AnyContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AnyContentVisitor)
    }
}

struct AnyContentVisitor;

impl<'de> Visitor<'de> for AnyContentVisitor {
    type Value = AnyContent;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of choices")
    }

    fn visit_unit<E>(self) -> Result<AnyContent, E> {
        Ok(AnyContent(false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyContent, A::Error> {
        let mut any = false;
        while let Some(choice) = seq.next_element::<Choice<'de>>()? {
            any |= choice.has_content();
        }
        Ok(AnyContent(any))
    }
}

fn chat(read: &Read<'_>) -> Event {
    if read.oversized {
        // Chat events carry no name to go by.
        return Event::Malformed;
    }
    let Some(data) = read.data else {
        return Event::Other;
    };
    if data.trim_ascii() == b"[DONE]" {
        return Event::Final;
    }
    let Some(chunk) = parse::<ChatChunk>(data) else {
        return Event::Malformed;
    };
    match (chunk.error, read.name) {
        (Some(error), _) => Event::Error(provider_error(error, "error")),
        (None, Some("error")) => Event::Error(top_level_error(data, "error")),
        (None, _) if chunk.choices.0 => Event::Content,
        (None, _) => Event::Other,
    }
}

/// An Anthropic Messages event.
#[derive(Deserialize)]
struct MessagesEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
    #[serde(borrow, default)]
    error: Raw<'a>,
}

/// A `content_block_start`'s block.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Raw<'a>,
    #[serde(borrow, default)]
    thinking: Raw<'a>,
}

fn messages(read: &Read<'_>) -> Event {
    let parsed = match read.data.map(parse::<MessagesEvent>) {
        Some(None) => return Event::Malformed,
        Some(Some(parsed)) => Some(parsed),
        None => None,
    };
    let kind = parsed
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .or(read.name);
    match kind {
        Some("content_block_delta") => Event::Content,
        Some("content_block_start") => match parsed.and_then(|p| p.content_block) {
            Some(block) if !empty_block(&block) => Event::Content,
            Some(_) => Event::Other,
            // A block start too large to read is no empty one.
            None if read.oversized => Event::Content,
            None => Event::Other,
        },
        Some("message_stop") => Event::Final,
        Some("error") => Event::Error(match parsed.and_then(|p| p.error) {
            Some(error) => provider_error(error, "error"),
            None => unread("error"),
        }),
        _ => Event::Other,
    }
}

/// A text or thinking block that starts empty: its deltas are the content.
fn empty_block(block: &Block<'_>) -> bool {
    match block.kind.as_deref() {
        Some("text") => !filled(block.text),
        Some("thinking") => !filled(block.thinking),
        _ => false,
    }
}

/// A Responses API streaming event.
#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    sequence_number: Raw<'a>,
    #[serde(borrow, default)]
    error: Raw<'a>,
    #[serde(borrow, default)]
    response: Option<ResponseState<'a>>,
}

/// What a lifecycle event's `response` says of a failure.
#[derive(Deserialize)]
struct ResponseState<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    error: Raw<'a>,
    #[serde(borrow, default)]
    incomplete_details: Option<Incomplete<'a>>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Raw<'a>,
}

fn responses(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    let parsed = match read.data.map(parse::<ResponsesEvent>) {
        Some(None) => return Event::Malformed,
        Some(Some(parsed)) => Some(parsed),
        None => None,
    };
    if let Some(parsed) = &parsed {
        note(parsed, seen);
    }
    let kind = parsed
        .as_ref()
        .and_then(|p| p.kind.as_deref())
        .or(read.name);
    let Some(kind) = kind else {
        return Event::Other;
    };
    let response = parsed.as_ref().and_then(|p| p.response.as_ref());
    match kind {
        "response.created" | "response.in_progress" | "response.queued" => Event::Other,
        "response.completed" => Event::Final,
        "response.incomplete" if read.saw_content => Event::Final,
        "response.incomplete" => Event::Error(incomplete(response)),
        "response.failed" => Event::Error(match response.and_then(|r| r.error) {
            Some(error) => provider_error(error, kind),
            None => unread(kind),
        }),
        "error" => Event::Error(match (parsed.as_ref().and_then(|p| p.error), read.data) {
            (Some(error), _) => provider_error(error, kind),
            (None, Some(data)) => top_level_error(data, kind),
            (None, None) => unread(kind),
        }),
        // Every other event is about an output item: its start, parts, deltas and ends.
        _ if kind.starts_with("response.") => Event::Content,
        _ => Event::Other,
    }
}

/// Keeps the event's sequence number and the response's id (set once, by its first lifecycle
/// event: later events repeat it).
fn note(event: &ResponsesEvent<'_>, seen: &mut ResponsesSeen) {
    if let Some(number) = event.sequence_number.and_then(|n| n.get().parse().ok()) {
        seen.sequence_number = Some(number);
    }
    let id = event.response.as_ref().and_then(|r| r.id.as_deref());
    if let Some(id) = id.filter(|id| seen.id.is_empty() && id.len() <= MAX_ID) {
        seen.id.push_str(id);
    }
}

/// `response.incomplete` before any output: nothing was answered.
fn incomplete(response: Option<&ResponseState<'_>>) -> ProviderError {
    let reason = response
        .and_then(|r| r.incomplete_details.as_ref())
        .and_then(|d| text(d.reason));
    let message = match &reason {
        Some(reason) => format!("the response ended incomplete ({reason}) before any output"),
        None => "the response ended incomplete before any output".to_string(),
    };
    ProviderError {
        message,
        kind: "response.incomplete".to_string(),
        code: reason,
    }
}

/// The fields of an error object.
#[derive(Deserialize)]
struct ErrorFields<'a> {
    #[serde(borrow, default)]
    message: Raw<'a>,
    #[serde(borrow, default, rename = "type")]
    kind: Raw<'a>,
    #[serde(borrow, default)]
    code: Raw<'a>,
}

/// An error value: an object with `message`, `type` and `code`, or a bare string.
fn provider_error(raw: &RawValue, default_kind: &str) -> ProviderError {
    match serde_json::from_str::<ErrorFields>(raw.get()) {
        Ok(fields) if raw.get().starts_with('{') => from_fields(&fields, default_kind),
        _ => ProviderError {
            message: text(Some(raw)).unwrap_or_default(),
            kind: default_kind.to_string(),
            code: None,
        },
    }
}

/// An error whose `message`, `type` and `code` are the event's own keys.
fn top_level_error(data: &[u8], default_kind: &str) -> ProviderError {
    match parse::<ErrorFields>(data) {
        Some(fields) => from_fields(&fields, default_kind),
        None => unread(default_kind),
    }
}

fn from_fields(fields: &ErrorFields<'_>, default_kind: &str) -> ProviderError {
    ProviderError {
        message: text(fields.message).unwrap_or_default(),
        kind: text(fields.kind).unwrap_or_else(|| default_kind.to_string()),
        code: text(fields.code),
    }
}

fn unread(kind: &str) -> ProviderError {
    ProviderError {
        message: UNREAD.to_string(),
        kind: kind.to_string(),
        code: None,
    }
}

/// A JSON object's fields, or `None` if `data` is not one.
fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Option<T> {
    // A derived struct also reads an array; an event's data must be an object.
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data.get(start) != Some(&b'{') {
        return None;
    }
    serde_json::from_slice(data).ok()
}

/// A value as text: a string decoded, anything else (a number) as written.
fn text(raw: Raw<'_>) -> Option<String> {
    let raw = raw?.get();
    match raw.starts_with('"') {
        true => serde_json::from_str::<String>(raw).ok(),
        false => Some(raw.to_string()),
    }
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
