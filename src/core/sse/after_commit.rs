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
//! until one gave it. The framing passes a run of events told by their names (or, on chat, of
//! data without `"error"`) in one step ([`super::lines`]).

use super::classify::{self, Read, ResponsesSeen};
use super::{Dialect, Event};
use crate::core::pair_search::PairFinder;

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

/// What an event told by its name alone is: an [`Event`] without a failure, plain data that
/// costs nothing to make, match or drop (a run of events is told one by one, ~400 in 100 KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    Other,
    Content,
    Final,
}

impl From<Told> for Event {
    fn from(told: Told) -> Event {
        match told {
            Told::Other => Event::Other,
            Told::Content => Event::Content,
            Told::Final => Event::Final,
        }
    }
}

fn messages(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    match messages_by_name(read.name.map(str::as_bytes)) {
        Some(told) => told.into(),
        None => classify::event(Dialect::Messages, read, seen),
    }
}

/// A Messages event told by its name alone; `None` when its data must be read.
pub(super) fn messages_by_name(name: Option<&[u8]>) -> Option<Told> {
    match name? {
        b"error" => None,
        b"message_stop" => Some(Told::Final),
        b"content_block_delta" => Some(Told::Content),
        _ => Some(Told::Other),
    }
}

fn responses(read: &Read<'_>, seen: &mut ResponsesSeen) -> Event {
    let name = read.name.map(str::as_bytes);
    let Some(told) = responses_by_name(name, seen) else {
        return classify::event(Dialect::Responses, read, seen);
    };
    if let Some(number) = read.data.and_then(|data| sequence_number(name, data)) {
        seen.sequence_number = Some(number);
    }
    told.into()
}

/// A Responses event told by its name alone (its data read only for its sequence number);
/// `None` when its data must be read: failures, and the events that carry the response until
/// one gave its id. Names are compared as bytes: a stream's event names are ASCII, and a
/// `from_utf8` of each cost about 115 instructions an event (callgrind, 100 KiB stream).
pub(super) fn responses_by_name(name: Option<&[u8]>, seen: &ResponsesSeen) -> Option<Told> {
    let name = name?;
    let lifecycle = matches!(
        name,
        b"response.created" | b"response.in_progress" | b"response.queued"
    );
    let carries_id = lifecycle || name == b"response.completed";
    let full = matches!(name, b"error" | b"response.failed" | b"response.incomplete")
        || (carries_id && seen.id.is_empty());
    if full {
        return None;
    }
    Some(match name {
        b"response.completed" => Told::Final,
        _ if lifecycle => Told::Other,
        _ if name.starts_with(b"response.") => Told::Content,
        _ => Told::Other,
    })
}

/// Where the next `"error"` is in the chunk being read, from an offset on: one search serves
/// every chat event after that offset until it passes the match (a search per event cost more
/// than the rest of its reading).
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

pub(super) const ERROR_KEY: &[u8] = b"\"error\"";
const SEQUENCE_KEY: &[u8] = b"\"sequence_number\"";

/// The first `"error"` in `bytes`.
fn find_error(bytes: &[u8]) -> Option<usize> {
    searches().0.find(bytes)
}

/// The searches for `"error"` and `"sequence_number"`, each by a pair of its bytes
/// ([`PairFinder`]), built once. A needle's first and last bytes make a poor search in JSON
/// (quotes, common letters): `memmem` verified a candidate at nearly every quote, about 0.5
/// instructions a byte on a chat stream (callgrind). The pairs chosen here, `rr` of `"error"`
/// and `_n` of `"sequence_number"`, are rare in JSON keys and in text. A search built on every
/// call cost more than the search over a ~250-byte event (callgrind, a 100 KiB chat stream:
/// about 1k instructions per KB of answer).
fn searches() -> &'static (PairFinder, PairFinder) {
    static SEARCHES: std::sync::OnceLock<(PairFinder, PairFinder)> = std::sync::OnceLock::new();
    SEARCHES.get_or_init(|| {
        (
            PairFinder::new(ERROR_KEY, 2, 3),
            PairFinder::new(SEQUENCE_KEY, 9, 10),
        )
    })
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

/// The number after the first `"sequence_number":` in the data of the event `name` (a
/// top-level key: the events' nested objects carry none), if it is a whole number.
pub(super) fn sequence_number(name: Option<&[u8]>, data: &[u8]) -> Option<u64> {
    let value = match after_type(name, data) {
        Some(value) => value,
        None => {
            let at = searches().1.find(data)?;
            let value = data.get(at + SEQUENCE_KEY.len()..)?.trim_ascii_start();
            value.strip_prefix(b":")?.trim_ascii_start()
        }
    };
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, after) = value.split_at(digits);
    // `4.5` or `4e2` is no sequence number (nor, to serde, a u64).
    if matches!(after.first(), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    whole_number(number)
}

/// The value of ASCII `digits` as `str::parse::<u64>` reads them: `None` when there are none
/// or the value overflows. By hand: `from_utf8` and `parse` cost about 90 instructions an
/// event of a Responses stream (callgrind).
fn whole_number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?
            .checked_add(u64::from(d.wrapping_sub(b'0')))
    })
}

/// What follows `"sequence_number":` when the data starts the way OpenAI writes an event,
/// `{"type":"NAME","sequence_number":`, with the event's own name (one without a quote, so
/// that this is the first `"sequence_number"` in the data): read without a search.
fn after_type<'a>(name: Option<&[u8]>, data: &'a [u8]) -> Option<&'a [u8]> {
    let name = name?;
    let rest = data.strip_prefix(b"{\"type\":\"")?.strip_prefix(name)?;
    let value = rest.strip_prefix(b"\",\"sequence_number\":")?;
    // A name of `sequence_number` would itself read as the key, not followed by a colon.
    let first = memchr::memchr(b'"', name).is_none() && name != b"sequence_number";
    first.then_some(value.trim_ascii_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_number_is_read_as_parse_reads_it() {
        let max = u64::MAX.to_string();
        let over = "18446744073709551616";
        for digits in [
            "",
            "0",
            "007",
            "42",
            "9999999999",
            &max,
            over,
            "99999999999999999999999",
        ] {
            let parsed = digits.parse::<u64>().ok();
            assert_eq!(whole_number(digits.as_bytes()), parsed, "{digits}");
        }
    }

    /// Read after the event's own `type` or found by a search, a sequence number is the same:
    /// the first `"sequence_number"` in the data, followed by a colon and a whole number.
    #[test]
    fn a_sequence_number_read_after_the_type_is_the_one_a_search_finds() {
        let names = [
            "response.output_text.delta",
            "sequence_number",
            "a\"b",
            "x",
            "",
        ];
        let values = [
            " 5",
            "5",
            "\t12,",
            "5.5",
            "-1",
            "\"5\"",
            "1e3",
            "",
            "99999999999999999999999",
        ];
        for name in names {
            for value in values {
                for other in ["", "\"sequence_number\":7,"] {
                    let data = format!(
                        "{{\"type\":\"{name}\",\"sequence_number\":{value}{other}\"item_id\":\"m\"}}"
                    );
                    let searched = sequence_number(None, data.as_bytes());
                    let read = sequence_number(Some(name.as_bytes()), data.as_bytes());
                    assert_eq!(read, searched, "{data}");
                    // The reading without a search is taken wherever it may be.
                    let fast = after_type(Some(name.as_bytes()), data.as_bytes()).is_some();
                    let expected = !name.contains('"') && name != "sequence_number";
                    assert_eq!(fast, expected, "{data}");
                }
            }
        }
    }

    /// The pair searches find what a plain `memmem` search finds, on haystacks built from
    /// pieces of both needles, their anchors and the bytes around them.
    #[test]
    fn a_pair_search_finds_the_first_match_as_memmem_does() {
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
            for (needle, search) in [(ERROR_KEY, &searches().0), (SEQUENCE_KEY, &searches().1)] {
                let expected = memchr::memmem::find(&hay, needle);
                let found = search.find(&hay);
                assert_eq!(found, expected, "{}", String::from_utf8_lossy(&hay));
            }
        }
    }
}
