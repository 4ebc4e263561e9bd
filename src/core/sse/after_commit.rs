//! What an event is once the stream is committed ([`super::Watcher::skip_content`]): then only
//! a failure and the API's last event matter, not content, so an event's JSON is read only
//! when its name or a byte search says it may be a failure; every other event is told by its
//! name without reading its data.
//!
//! - Messages and Responses: by the `event:` name, which these APIs send with every event
//!   and which names the JSON's `type` (the full reading trusts the `type`). `error`,
//!   `response.failed` and `response.incomplete` are read in full, as is an event without a
//!   name. A Responses output item event is still `Content` (by its name): a
//!   `response.incomplete` after output is the end, before any a failure.
//! - Chat and completions: `[DONE]` is the end; data that contains the bytes `"error"` (a key:
//!   inside a JSON string the quotes would be escaped) or comes in an `error` event is read in
//!   full; any other JSON object is `Other`, whole or not.
//! - Data that does not start as a JSON object is `Malformed`, as in the full reading.
//!
//! A Responses stream's `sequence_number` (which Switchboard's own end continues) is read from
//! each event's bytes; its response id, from the events that carry the response, read in full
//! until one gave it.

use super::classify::{self, Read, ResponsesSeen};
use super::{Dialect, Event};
use memchr::memmem;

/// What the event is, its content possibly `Other`.
pub(super) fn event(dialect: Dialect, read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    if read.data.is_some_and(|data| !object(data)) && !done(dialect, read) {
        return Event::Malformed;
    }
    match dialect {
        Dialect::ChatCompletions | Dialect::Completions => chat(read, seen),
        Dialect::Messages => messages(read, seen),
        Dialect::Responses => responses(read, seen),
    }
}

fn chat(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    let Some(data) = read.data.filter(|_| !read.oversized) else {
        // No data, or over the bounds: told without reading any.
        return classify::event(Dialect::ChatCompletions, read, seen);
    };
    let error = read.name == Some("error") || find_error(data).is_some();
    match (done(Dialect::ChatCompletions, read), error) {
        (true, _) => Event::Final,
        (false, true) => classify::event(Dialect::ChatCompletions, read, seen),
        (false, false) => Event::Other,
    }
}

fn messages(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    match read.name {
        None | Some("error") => classify::event(Dialect::Messages, read, seen),
        Some("message_stop") => Event::Final,
        Some("content_block_delta") => Event::Content,
        Some(_) => Event::Other,
    }
}

fn responses(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    let Some(name) = read.name else {
        return classify::event(Dialect::Responses, read, seen);
    };
    let lifecycle = matches!(
        name,
        "response.created" | "response.in_progress" | "response.queued"
    );
    // Failures are read in full, and so are the events that carry the response until one
    // gave its id.
    let carries_id = lifecycle || name == "response.completed";
    let full = matches!(name, "error" | "response.failed" | "response.incomplete")
        || (carries_id && seen.id.is_empty());
    if full {
        return classify::event(Dialect::Responses, read, seen);
    }
    if let Some(number) = read.data.and_then(sequence_number) {
        seen.sequence_number = Some(number);
    }
    match name {
        "response.completed" => Event::Final,
        _ if lifecycle => Event::Other,
        _ if name.starts_with("response.") => Event::Content,
        _ => Event::Other,
    }
}

/// [`event`] for an event whose data lies whole at `start` in `chunk`: a chat or completions
/// event without a name is `Other` at once when the chunk holds no `"error"` there. That
/// search runs once over the rest of the chunk for all its events ([`ErrorSearch`]): a search
/// per event cost more than the rest of its reading.
pub(super) fn event_in_chunk(
    dialect: Dialect,
    read: &Read<'_>,
    (chunk, start): (&[u8], usize),
    errors: &mut ErrorSearch,
    seen: &mut ResponsesSeen,
) -> Event {
    let chat = matches!(dialect, Dialect::ChatCompletions | Dialect::Completions);
    let len = read.data.map_or(0, <[u8]>::len);
    let plain = chat && read.name.is_none() && object(read.data.unwrap_or_default());
    if plain && !errors.within(chunk, start, start + len) {
        return Event::Other;
    }
    event(dialect, read, seen)
}

/// Where the next `"error"` is in the chunk being read, from an offset on: one search serves
/// every event after that offset until it passes the match.
#[derive(Debug, Clone, Default)]
pub(super) struct ErrorSearch {
    /// The chunk searched (its address and length), `None` once its reading ended.
    chunk: Option<(usize, usize)>,
    /// Where the search started.
    from: usize,
    /// The first match at or after `from`.
    at: Option<usize>,
}

impl ErrorSearch {
    /// Whether `chunk[start..end]` holds `"error"`.
    fn within(&mut self, chunk: &[u8], start: usize, end: usize) -> bool {
        self.first_from(chunk, start)
            .is_some_and(|at| at + ERROR_KEY.len() <= end)
    }

    /// Where the first `"error"` at or after `start` in `chunk` is.
    pub(super) fn first_from(&mut self, chunk: &[u8], start: usize) -> Option<usize> {
        let key = Some((chunk.as_ptr() as usize, chunk.len()));
        let stale = self.chunk != key || self.from > start || self.at.is_some_and(|at| at < start);
        if stale {
            let rest = chunk.get(start..).unwrap_or_default();
            let at = find_error(rest).map(|i| start + i);
            *self = ErrorSearch {
                chunk: key,
                from: start,
                at,
            };
        }
        // The first match from `from` (<= start) on is at or after `start`: it is the first
        // from `start` on.
        self.at
    }

    /// The chunk's reading ended: its search says nothing of the next one.
    pub(super) fn forget(&mut self) {
        self.chunk = None;
    }
}

const ERROR_KEY: &[u8] = b"\"error\"";

/// The first `"error"` in `bytes`.
fn find_error(bytes: &[u8]) -> Option<usize> {
    find_anchored(bytes, ERROR_KEY, &anchors().0, 2)
}

/// The first `needle` in `bytes`, found by its `anchor` (the two bytes at `at` in it) and
/// checked whole there. A needle's first and last bytes make a poor search in JSON (quotes,
/// common letters): `memmem` verified a candidate at nearly every quote, about 0.5
/// instructions a byte on a chat stream (callgrind). The anchors chosen here, `rr` of
/// `"error"` and `_n` of `"sequence_number"`, are rare in JSON keys and in text, and every
/// occurrence of the needle holds its anchor, so the first whole match is the first match.
fn find_anchored(
    bytes: &[u8],
    needle: &[u8],
    anchor: &memmem::Finder<'static>,
    at: usize,
) -> Option<usize> {
    anchor
        .find_iter(bytes)
        .filter_map(|hit| hit.checked_sub(at))
        .find(|&start| bytes.get(start..).is_some_and(|b| b.starts_with(needle)))
}

/// The anchors of `"error"` and `"sequence_number"` ([`find_anchored`]), built once:
/// `memmem::find` builds its searcher on every call, which cost more than the search over a
/// ~250-byte event (callgrind, a 100 KiB chat stream: about 1k instructions per KB of answer).
fn anchors() -> &'static (memmem::Finder<'static>, memmem::Finder<'static>) {
    static ANCHORS: std::sync::OnceLock<(memmem::Finder<'static>, memmem::Finder<'static>)> =
        std::sync::OnceLock::new();
    ANCHORS.get_or_init(|| (memmem::Finder::new(b"rr"), memmem::Finder::new(b"_n")))
}

/// Chat's `data: [DONE]`.
fn done(dialect: Dialect, read: &Read<'_>) -> bool {
    let chat = matches!(dialect, Dialect::ChatCompletions | Dialect::Completions);
    chat && read.data.is_some_and(|d| d.trim_ascii() == b"[DONE]")
}

/// Whether `data` starts as a JSON object.
fn object(data: &[u8]) -> bool {
    data.trim_ascii_start().first() == Some(&b'{')
}

/// The number after the first `"sequence_number":` (a top-level key: the events' nested
/// objects carry none), if it is a whole number.
fn sequence_number(data: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"sequence_number\"";
    let at = find_anchored(data, KEY, &anchors().1, 9)?;
    let value = data.get(at + KEY.len()..)?.trim_ascii_start();
    let value = value.strip_prefix(b":")?.trim_ascii_start();
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, after) = value.split_at(digits);
    // `4.5` or `4e2` is no sequence number (nor, to serde, a u64).
    if matches!(after.first(), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    core::str::from_utf8(number).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The anchored search finds what a plain `memmem` search finds, on haystacks built from
    /// pieces of both needles, their anchors and the bytes around them.
    #[test]
    fn an_anchored_search_finds_the_first_match_as_memmem_does() {
        let pieces: [&[u8]; 12] = [
            b"\"error\"",
            b"\"sequence_number\"",
            b"rr",
            b"_n",
            b"\"err",
            b"or\"",
            b"\"sequence",
            b"_number\"",
            b"r",
            b"\"",
            b"e",
            b"{\"x\":1}",
        ];
        let mut rng = fastrand::Rng::with_seed(34);
        for _ in 0..30_000 {
            let n = rng.usize(0..12);
            let hay: Vec<u8> = (0..n)
                .flat_map(|_| pieces[rng.usize(..pieces.len())].iter().copied())
                .collect();
            for (needle, anchor, at) in [
                (ERROR_KEY, &anchors().0, 2),
                (&b"\"sequence_number\""[..], &anchors().1, 9),
            ] {
                let expected = memmem::find(&hay, needle);
                let found = find_anchored(&hay, needle, anchor, at);
                assert_eq!(found, expected, "{}", String::from_utf8_lossy(&hay));
            }
        }
    }
}
