//! Rewriting a Responses API answer as it streams past: the provider's response ids become
//! Switchboard's, and the `encrypted_content` of reasoning items is marked.
//!
//! Only the response's own values are rewritten. The OpenAI API reference ("The response
//! object") gives the response its `id` and `previous_response_id`, and reasoning items in
//! `output` their `encrypted_content`; "Streaming events" repeats the whole response object
//! under `response` (`response.created`, `response.in_progress`, `response.completed`, …) and
//! one output item under `item` (`response.output_item.added` / `.done`). The same object also
//! echoes what the client sent (`metadata`, `user`, `prompt_cache_key`, `instructions`,
//! `tools`, …): minting an id found there would sign any raw id a client chose. So the rule,
//! with paths from the root of one JSON value (the whole answer, or one SSE event's data):
//!
//! - an id is a string value at `id`, `previous_response_id`, `response.id` or
//!   `response.previous_response_id` that reads `resp_` and then `[A-Za-z0-9_-]`;
//! - a mark goes on a string value at `output[*].encrypted_content`,
//!   `response.output[*].encrypted_content` or `item.encrypted_content`;
//! - nothing else is touched.
//!
//! The path is the provider's: a client's values reach the answer as JSON strings, whose
//! quotes, backslashes and newlines the provider escapes, so they cannot add structure. Keys
//! are compared as sent (the provider does not escape its own keys).
//!
//! The answer is never parsed into a tree. Its bytes are tokenized as they arrive: a `"`
//! outside a string opens one, `\` escapes the next byte, an unescaped `"` closes it, and a raw
//! newline, which no JSON string can hold, always ends one, so SSE framing lines cannot invert
//! the state. Outside strings, `{` `[` `}` `]` `,` keep a stack of the open containers: the
//! first levels with, for an object, the class of the key being read (one of the few keys
//! above, or another); deeper levels, which hold no candidate, only counted. A line that starts
//! with `data:` outside a string holds an SSE event's data (WHATWG HTML, "Server-sent events",
//! "Interpreting an event stream") and empties the stack, so a malformed or truncated event
//! does not derail the events after it; other newlines do not, as a JSON answer may be
//! pretty-printed over many lines. (Each `data:` line is read as the start of a value: the
//! providers send an event's JSON on one line, as OpenAI's streaming examples show.)
//!
//! Whether a string is a candidate is known at its opening quote. Bytes outside strings, keys,
//! and strings that are not, or can no longer be, candidates go out as they arrive; only a
//! string that may still need rewriting is held, so a chunk can end at any byte and the output
//! does not depend on where it does. Whole lines before the next key a value is rewritten
//! under are not tokenized at all ([`lookahead`]).

use crate::core::json_scan;
use lookahead::Lookahead;

mod lookahead;

/// What a rewritten value becomes; implemented by the caller (it holds the keys and names).
pub trait Minter {
    /// `provider_id` is the raw content of a JSON string value that starts with `resp_`
    /// (never `resp_sb1-`); append the replacement string content (no quotes) to `out`.
    fn response_id(&mut self, provider_id: &str, out: &mut Vec<u8>);
    /// `value` is the raw JSON string content (escapes as sent) of a reasoning item's
    /// `"encrypted_content"`; append the replacement raw content to `out`.
    fn encrypted_content(&mut self, value: &str, out: &mut Vec<u8>);
}

/// How every provider response id starts.
const PROVIDER: &[u8] = b"resp_";
/// How Switchboard's own ids start: an answer relayed twice keeps the first rewrite.
const OURS: &[u8] = b"resp_sb1-";
/// Provider ids are about 50 bytes; a longer string is not one.
const MAX_ID: usize = 256;
/// Reasoning blobs run to tens of KiB; past this a value is relayed unmarked rather than held.
const MAX_ENCRYPTED: usize = 1 << 20;
/// The SSE field that carries an event's JSON.
const DATA: &[u8] = b"data:";

/// The keys on a candidate path; every other key is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    PreviousResponseId,
    Response,
    Output,
    Item,
    EncryptedContent,
    Other,
}

const KEYS: [(&[u8], Key); 6] = [
    (b"id", Key::Id),
    (b"previous_response_id", Key::PreviousResponseId),
    (b"response", Key::Response),
    (b"output", Key::Output),
    (b"item", Key::Item),
    (b"encrypted_content", Key::EncryptedContent),
];
/// The longest of `KEYS`.
const MAX_KEY: usize = 20;

/// The bytes of the object key being read, while it may still be one of `KEYS`.
#[derive(Debug, Clone, Copy)]
struct KeyName {
    bytes: [u8; MAX_KEY],
    /// `None` once the key is too long or escaped: `Other`.
    len: Option<usize>,
}

impl KeyName {
    fn new() -> Self {
        KeyName {
            bytes: [0; MAX_KEY],
            len: Some(0),
        }
    }

    fn push(&mut self, run: &[u8]) {
        self.len = self.len.and_then(|len| {
            let end = len.checked_add(run.len())?;
            self.bytes.get_mut(len..end)?.copy_from_slice(run);
            Some(end)
        });
    }

    fn spoil(&mut self) {
        self.len = None;
    }

    fn key(&self) -> Key {
        self.len
            .and_then(|len| self.bytes.get(..len))
            .map_or(Key::Other, key_of)
    }
}

/// The key `name` (its bytes as sent) names.
fn key_of(name: &[u8]) -> Key {
    KEYS.iter()
        .find(|(k, _)| *k == name)
        .map_or(Key::Other, |&(_, key)| key)
}

/// An open container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Array,
    /// An object, with the key of the member being read; `None` until the key is read (after
    /// `{` or `,`), so the next string is a key.
    Object(Option<Key>),
}

/// Containers nested deeper than this hold no candidate: they are counted, not kept.
const TRACKED: usize = 4;

/// What the string that opens next is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opens {
    /// An object key at a tracked level: read to learn where the value goes.
    Key,
    Id,
    Mark,
    Plain,
}

/// Where in the JSON value the tokenizer is.
#[derive(Debug, Clone, Copy)]
struct Path {
    frames: [Frame; TRACKED],
    /// How many containers are open; only the first `TRACKED` are in `frames`.
    depth: usize,
}

impl Path {
    fn new() -> Self {
        Path {
            frames: [Frame::Array; TRACKED],
            depth: 0,
        }
    }

    fn open(&mut self, frame: Frame) {
        if let Some(slot) = self.frames.get_mut(self.depth) {
            *slot = frame;
        }
        self.depth = self.depth.saturating_add(1);
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// The innermost container, when it is tracked.
    fn top(&mut self) -> Option<&mut Frame> {
        self.frames.get_mut(self.depth.checked_sub(1)?)
    }

    /// A `,`: in an object, the next string is a key.
    fn next_member(&mut self) {
        if let Some(Frame::Object(key)) = self.top() {
            *key = None;
        }
    }

    /// Whether an open container's member is under a key whose value may be rewritten (or
    /// holds the one that is): only then can a value be rewritten before such a key is read.
    fn key_pending(&self) -> bool {
        use Key::{EncryptedContent, Id, PreviousResponseId};
        let open = self.frames.get(..self.depth).unwrap_or(&self.frames);
        open.iter().any(|frame| {
            matches!(
                frame,
                Frame::Object(Some(Id | PreviousResponseId | EncryptedContent))
            )
        })
    }

    /// A key was read: the next value is that member's.
    fn named(&mut self, name: Key) {
        if let Some(Frame::Object(key)) = self.top() {
            *key = Some(name);
        }
    }

    /// The rule of the module doc, on the open containers.
    fn opens(&self) -> Opens {
        use Frame::{Array as A, Object as O};
        use Key::{EncryptedContent as Enc, Id, Item, Output, PreviousResponseId as Prev};
        const R: Frame = O(Some(Key::Response));
        match self.frames.get(..self.depth) {
            Some([.., O(None)]) => Opens::Key,
            Some([O(Some(Id | Prev))] | [R, O(Some(Id | Prev))]) => Opens::Id,
            Some(
                [O(Some(Output)), A, O(Some(Enc))]
                | [R, O(Some(Output)), A, O(Some(Enc))]
                | [O(Some(Item)), O(Some(Enc))],
            ) => Opens::Mark,
            _ => Opens::Plain,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Outside,
    /// In a string relayed as it arrives; `key` while it is a tracked object key, whose bytes
    /// go to `key_name` too.
    Passing {
        escaped: bool,
        key: bool,
    },
    /// In an id's string, its content so far held while it may still be a provider id.
    Candidate,
    /// In a reasoning item's `encrypted_content`; its content so far is held.
    Encrypted {
        escaped: bool,
    },
}

/// Rewrites one answer, chunk by chunk.
#[derive(Debug, Clone)]
pub struct AnswerRewriter {
    state: State,
    path: Path,
    key_name: KeyName,
    /// How many bytes of `data:` the current line starts with, outside strings; `None` once it
    /// does not.
    line: Option<usize>,
    /// Bytes of the current string held back: at most an id, or an `encrypted_content` value
    /// of `MAX_ENCRYPTED` bytes.
    held: Vec<u8>,
    rewrote: bool,
    /// The last provider ids minted (at most [`MINTS_KEPT`]) and what each became: an answer
    /// names its response and the one before it in several events (`response.created`,
    /// `.in_progress`, `.completed`), and a mint is deterministic for one answer's turn, so
    /// each id is sealed once.
    mints: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The response's id and its `previous_response_id`.
const MINTS_KEPT: usize = 2;

/// How much longer than the answer its rewrite may grow without the output buffer growing (a
/// minted id is about 100 bytes longer than the provider's, and so is a mark): room for about
/// ten. Callgrind, a 100 KiB Responses stream: growing it copied the whole chunk once more.
pub const ROOM: usize = 1024;

impl Default for AnswerRewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl AnswerRewriter {
    /// A rewriter for a new answer.
    pub fn new() -> Self {
        AnswerRewriter {
            state: State::Outside,
            path: Path::new(),
            key_name: KeyName::new(),
            line: Some(0),
            held: Vec::new(),
            rewrote: false,
            mints: Vec::new(),
        }
    }

    /// Rewrites the next chunk of the answer into `out` (appends); bytes that might belong to a
    /// value still being read are held back. Returns whether what it appended may differ from
    /// `chunk`: `false` means it is `chunk` itself, so the caller need not compare them.
    pub fn feed(&mut self, chunk: &[u8], minter: &mut impl Minter, out: &mut Vec<u8>) -> bool {
        out.reserve(chunk.len());
        let start = out.len();
        let held_before = !self.held.is_empty();
        let rewrote_before = self.rewrote;
        let mut ahead = Lookahead::new(chunk);
        let mut rest = chunk;
        while let Some((&b, tail)) = rest.split_first() {
            // At a line start, whole lines may go out at once; elsewhere the checks are not
            // made (callgrind: about 50 instructions a byte read one by one).
            let line_start = self.state == State::Outside && self.line == Some(0);
            if let Some(n) = line_start.then(|| self.whole_lines(chunk, rest, &mut ahead)) {
                if let Some((lines, after)) = n.and_then(|n| rest.split_at_checked(n)) {
                    out.extend_from_slice(lines);
                    rest = after;
                    continue;
                }
            }
            // Plain string bytes (text deltas, reasoning blobs) are copied as whole runs.
            // Measured on the SSE fixture repeated to 40 MB (release build): 40 MB/s byte by
            // byte, 110-145 MB/s with runs; text deltas alone went from 46 to 200-400 MB/s.
            // Tracking the path cost nothing measurable (callgrind, 4 MB in 16 KiB chunks,
            // instructions against the tokenizer without it: SSE fixture 242M vs 243M, JSON
            // fixture 245M vs 256M, text deltas 200M vs 195M). Bytes outside strings go as runs
            // too once the line is known not to start with `data:`: an SSE `event:` line and
            // the numbers between strings (callgrind, a 100 KiB Responses stream: most of what
            // was left per byte).
            let run = match self.state {
                State::Passing { escaped: false, .. } => plain_run(rest, rest.len()),
                State::Encrypted { escaped: false } => {
                    plain_run(rest, MAX_ENCRYPTED.saturating_sub(self.held.len()))
                }
                State::Outside if self.line.is_none() => outside_run(rest),
                _ => 0,
            };
            if let Some((plain, after)) = rest.split_at_checked(run).filter(|_| run > 0) {
                match self.state {
                    State::Passing { key, .. } => {
                        if key {
                            self.key_name.push(plain);
                        }
                        out.extend_from_slice(plain);
                    }
                    State::Outside => out.extend_from_slice(plain),
                    _ => self.held.extend_from_slice(plain),
                }
                rest = after;
            } else if self.step(b, minter, out) {
                rest = tail;
            }
        }
        // Nothing held across either end and nothing replaced: every byte went out as it came.
        held_before
            || !self.held.is_empty()
            || self.rewrote != rewrote_before
            || out.len() - start != chunk.len()
    }

    /// How many bytes of whole lines at the start of `rest` (the end of `chunk`), a line start
    /// outside any string, go out as they came: a run of lines no value to rewrite can be in,
    /// or a text delta and most other events, and their `event:` lines, one line at a time.
    fn whole_lines(&mut self, chunk: &[u8], rest: &[u8], ahead: &mut Lookahead) -> Option<usize> {
        if !self.held.is_empty() {
            return None;
        }
        self.pass_lines(chunk, rest, ahead)
            .or_else(|| self.plain_data_line(rest))
            .or_else(|| self.plain_other_line(rest))
    }

    /// The length of the whole lines at the start of `rest` (the end of `chunk`) that no value
    /// to rewrite can be in ([`lookahead`]): with no key on the path that a value is rewritten
    /// under, up to the `data:` line where such a key is next read. Reading them byte by byte
    /// would leave the rewriter at that line's start, where its `data:` empties the path.
    fn pass_lines(&mut self, chunk: &[u8], rest: &[u8], ahead: &mut Lookahead) -> Option<usize> {
        if self.path.key_pending() {
            return None;
        }
        let at = chunk.len() - rest.len();
        let landing = ahead.landing(chunk, at)?;
        self.path = Path::new();
        Some(landing - at)
    }

    /// The length of the `data:` line at the start of `rest` (its newline included) when it
    /// is whole in `rest` and reading it byte by byte would change nothing and end where this
    /// leaves the rewriter: at a line start, nothing held, no container open. That holds when
    /// no string on the line reads like one of `KEYS` (a key on a candidate path is compared as
    /// sent, so none can be there), every container it opens is closed, and no raw `\r`
    /// starts a line inside it. Callgrind, a 100 KiB Responses stream of text deltas: the
    /// byte-by-byte reading was about 33 instructions a byte.
    fn plain_data_line(&mut self, rest: &[u8]) -> Option<usize> {
        let body = rest.strip_prefix(DATA)?;
        let end = memchr::memchr(b'\n', body)?;
        let line = body.get(..end)?;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A raw `\r` anywhere else starts a line of its own: read byte by byte.
        if memchr::memchr(b'\r', line).is_some() || !closes_without_keys(line) {
            return None;
        }
        // What the `data:` would have done; the newline leaves the next line's start.
        self.path = Path::new();
        Some(DATA.len() + end + 1)
    }

    /// The length of a line at the start of `rest` (its newline included) that is not a
    /// `data:` line and holds none of the bytes the tokenizer acts on outside strings (`{`
    /// `}` `[` `]` `,` `"` and a raw `\r`), such as an SSE `event:` line: read byte by byte it
    /// would go out as it came and leave the rewriter at the next line's start, its path as
    /// it was.
    fn plain_other_line(&self, rest: &[u8]) -> Option<usize> {
        if rest.starts_with(DATA) {
            return None;
        }
        let end = memchr::memchr(b'\n', rest)?;
        let line = rest.get(..end)?;
        // A table: a chain of seven compares per byte cost more than the line's search.
        let acts = |b: &u8| ACTS_OUTSIDE.get(usize::from(*b)) != Some(&false);
        (!line.iter().any(acts)).then_some(end + 1)
    }

    /// The answer ended: appends whatever is still held (unchanged if incomplete).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.release(out);
    }

    /// Whether anything was rewritten so far (the adapter uses it to decide on content-length).
    pub fn rewrote(&self) -> bool {
        self.rewrote
    }

    /// Takes one byte; `false` when the byte is left for the new state to take.
    fn step(&mut self, b: u8, minter: &mut impl Minter, out: &mut Vec<u8>) -> bool {
        match self.state {
            State::Outside => self.outside(b, out),
            State::Passing { escaped, key } => return self.passing(b, escaped, key, out),
            State::Candidate => return self.candidate(b, minter, out),
            State::Encrypted { escaped } => return self.encrypted(b, escaped, minter, out),
        }
        true
    }

    fn outside(&mut self, b: u8, out: &mut Vec<u8>) {
        out.push(b);
        self.line = match (b, self.line) {
            (b'\n' | b'\r', _) => Some(0),
            (_, Some(n)) if DATA.get(n) == Some(&b) => Some(n + 1),
            _ => None,
        };
        if self.line == Some(DATA.len()) {
            self.line = None;
            self.path = Path::new();
            return;
        }
        match b {
            b'{' => self.path.open(Frame::Object(None)),
            b'[' => self.path.open(Frame::Array),
            b'}' | b']' => self.path.close(),
            b',' => self.path.next_member(),
            b'"' => {
                self.state = match self.path.opens() {
                    Opens::Key => {
                        self.key_name = KeyName::new();
                        State::Passing {
                            escaped: false,
                            key: true,
                        }
                    }
                    Opens::Id => State::Candidate,
                    Opens::Mark => State::Encrypted { escaped: false },
                    Opens::Plain => State::Passing {
                        escaped: false,
                        key: false,
                    },
                }
            }
            _ => {}
        }
    }

    fn passing(&mut self, b: u8, escaped: bool, key: bool, out: &mut Vec<u8>) -> bool {
        let escapes = match b {
            // The string is broken; the newline is taken outside, where it starts a line.
            b'\n' | b'\r' => {
                self.state = State::Outside;
                return false;
            }
            _ if escaped => false,
            b'\\' => {
                self.key_name.spoil();
                true
            }
            b'"' => {
                out.push(b);
                if key {
                    self.path.named(self.key_name.key());
                }
                self.state = State::Outside;
                return true;
            }
            _ => {
                if key {
                    self.key_name.push(&[b]);
                }
                false
            }
        };
        out.push(b);
        self.state = State::Passing {
            escaped: escapes,
            key,
        };
        true
    }

    fn candidate(&mut self, b: u8, minter: &mut impl Minter, out: &mut Vec<u8>) -> bool {
        match b {
            b'"' if self.held.len() >= PROVIDER.len() => {
                self.mint_id(minter, out);
                out.push(b);
                self.state = State::Outside;
            }
            _ if extends_id(&self.held, b) => {
                self.held.push(b);
                if self.held == OURS {
                    self.pass_on(out, false);
                }
            }
            _ => {
                // No id after all.
                self.pass_on(out, false);
                return false;
            }
        }
        true
    }

    fn encrypted(
        &mut self,
        b: u8,
        escaped: bool,
        minter: &mut impl Minter,
        out: &mut Vec<u8>,
    ) -> bool {
        match b {
            b'\n' | b'\r' => {
                self.release(out);
                return false;
            }
            b'"' if !escaped => {
                match std::str::from_utf8(&self.held) {
                    Ok(value) => {
                        minter.encrypted_content(value, out);
                        self.rewrote = true;
                    }
                    Err(_) => out.extend_from_slice(&self.held),
                }
                self.held.clear();
                out.push(b);
                self.state = State::Outside;
            }
            _ if self.held.len() >= MAX_ENCRYPTED => {
                self.pass_on(out, escaped);
                return false;
            }
            _ => {
                self.held.push(b);
                self.state = State::Encrypted {
                    escaped: !escaped && b == b'\\',
                };
            }
        }
        true
    }

    /// Emits the held bytes (an id) as the minter's replacement.
    fn mint_id(&mut self, minter: &mut impl Minter, out: &mut Vec<u8>) {
        if let Some((_, minted)) = self.mints.iter().find(|(raw, _)| *raw == self.held) {
            out.extend_from_slice(minted);
            self.rewrote = true;
        } else if let Ok(id) = std::str::from_utf8(&self.held) {
            let at = out.len();
            minter.response_id(id, out);
            if self.mints.len() == MINTS_KEPT {
                self.mints.remove(0);
            }
            let minted = out.get(at..).unwrap_or_default().to_vec();
            self.mints.push((self.held.clone(), minted));
            self.rewrote = true;
        } else {
            out.extend_from_slice(&self.held);
        }
        self.held.clear();
    }

    /// Emits the held bytes unchanged and continues the current string as relayed.
    fn pass_on(&mut self, out: &mut Vec<u8>, escaped: bool) {
        out.extend_from_slice(&self.held);
        self.held.clear();
        self.state = State::Passing {
            escaped,
            key: false,
        };
    }

    /// Emits the held bytes unchanged and leaves whatever string was being read.
    fn release(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.held);
        self.held.clear();
        self.state = State::Outside;
    }
}

/// The bytes the tokenizer acts on outside strings ([`AnswerRewriter::plain_other_line`]).
// Indexed at compile time only: an index out of bounds fails the build, not a request.
#[allow(clippy::indexing_slicing)]
static ACTS_OUTSIDE: [bool; 256] = {
    let mut table = [false; 256];
    let acts = *b"{}[],\"\r";
    let mut i = 0;
    while i < acts.len() {
        table[acts[i] as usize] = true;
        i += 1;
    }
    table
};

/// Whether `b` continues an id whose content so far is `id`: `resp_`, then at most
/// `MAX_ID` bytes in all of `[A-Za-z0-9_-]`.
fn extends_id(id: &[u8], b: u8) -> bool {
    match PROVIDER.get(id.len()) {
        Some(&c) => b == c,
        None => id.len() < MAX_ID && (b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
    }
}

/// How many bytes (at most `limit`) from the start of `bytes` cannot end or escape a string.
fn plain_run(bytes: &[u8], limit: usize) -> usize {
    let bytes = bytes.get(..limit).unwrap_or(bytes);
    // A raw `\r` in a string is rare: found apart, in what the first search leaves.
    let end = memchr::memchr3(b'"', b'\\', b'\n', bytes).unwrap_or(bytes.len());
    let head = bytes.get(..end).unwrap_or(bytes);
    memchr::memchr(b'\r', head).unwrap_or(end)
}

/// Whether the JSON bytes of one line (with no `\r` in them) hold no string whose bytes as
/// sent are one of `KEYS`, and close every `{`/`[` they open (a close with none open is
/// dropped, as [`Path::close`] does). A string left open at the line's end is ended by it.
fn closes_without_keys(line: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut at = 0;
    while let Some(&b) = line.get(at) {
        at += 1;
        match b {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let Some(end) = string_end(line, at) else {
                    // A string open at the line's end.
                    return depth == 0;
                };
                if key_of(line.get(at..end).unwrap_or_default()) != Key::Other {
                    return false;
                }
                at = end + 1;
            }
            _ => {}
        }
    }
    depth == 0
}

/// Where the string whose content starts at `at` closes on `line`: its next unescaped `"`;
/// `None` when the line ends first. Its plain runs are skipped in one SIMD pass each
/// (callgrind, a 100 KiB Responses stream: a `memchr` per string cost more in setting up than
/// in searching the short strings of an event).
fn string_end(line: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += json_scan::plain_string_run(line.get(at..)?);
        match line.get(at)? {
            b'"' => return Some(at),
            b'\\' => at += 2,
            // A control or non-ASCII byte: nothing to the string's end.
            _ => at += 1,
        }
    }
}

/// How many bytes from the start of `bytes`, outside strings on a line that is not a `data:`
/// line's start, change nothing but go out.
fn outside_run(bytes: &[u8]) -> usize {
    bytes
        .iter()
        // The bytes that mean something outside a string: containers, members, strings, lines.
        .position(|b| matches!(b, b'{' | b'}' | b'[' | b']' | b',' | b'"' | b'\n' | b'\r'))
        .unwrap_or(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replaces ids with `resp_sb1-T-<id>` and marks encrypted content `sb1.<value>`, recording
    /// what it was given.
    #[derive(Default)]
    struct Marks {
        ids: Vec<String>,
        encrypted: Vec<String>,
    }

    impl Minter for Marks {
        fn response_id(&mut self, provider_id: &str, out: &mut Vec<u8>) {
            self.ids.push(provider_id.to_string());
            out.extend_from_slice(b"resp_sb1-T-");
            out.extend_from_slice(provider_id.as_bytes());
        }
        fn encrypted_content(&mut self, value: &str, out: &mut Vec<u8>) {
            self.encrypted.push(value.to_string());
            out.extend_from_slice(b"sb1.");
            out.extend_from_slice(value.as_bytes());
        }
    }

    #[test]
    fn the_same_id_in_several_events_is_minted_once_and_written_the_same_each_time() {
        let stream = concat!(
            "event: response.created\ndata: {\"response\":{\"id\":\"resp_a\",\"previous_response_id\":\"resp_p\"}}\n\n",
            "event: response.in_progress\ndata: {\"response\":{\"id\":\"resp_a\"}}\n\n",
            "event: response.completed\ndata: {\"response\":{\"id\":\"resp_a\",\"previous_response_id\":\"resp_p\"}}\n\n",
            "event: response.created\ndata: {\"response\":{\"id\":\"resp_b\",\"previous_response_id\":\"resp_a\"}}\n\n",
            "event: response.created\ndata: {\"response\":{\"id\":\"resp_p\"}}\n\n",
        )
        .as_bytes();
        let expected = String::from_utf8(stream.to_vec())
            .unwrap()
            .replace("resp_", "resp_sb1-T-resp_");
        for cut in 0..=stream.len() {
            let mut marks = Marks::default();
            let (out, _) = rewrite_chunks(&[&stream[..cut], &stream[cut..]], &mut marks);
            assert_eq!(String::from_utf8(out).unwrap(), expected, "cut at {cut}");
            // The last two ids minted are remembered: once `resp_b` came, `resp_a` and then
            // `resp_p` are minted anew.
            let minted = ["resp_a", "resp_p", "resp_b", "resp_a", "resp_p"];
            assert_eq!(marks.ids, minted, "cut at {cut}");
        }
    }

    /// Gives every value back as it came.
    struct Same;

    impl Minter for Same {
        fn response_id(&mut self, provider_id: &str, out: &mut Vec<u8>) {
            out.extend_from_slice(provider_id.as_bytes());
        }
        fn encrypted_content(&mut self, value: &str, out: &mut Vec<u8>) {
            out.extend_from_slice(value.as_bytes());
        }
    }

    fn rewrite_chunks(chunks: &[&[u8]], minter: &mut impl Minter) -> (Vec<u8>, bool) {
        let mut rewriter = AnswerRewriter::new();
        let mut out = Vec::new();
        for chunk in chunks {
            let start = out.len();
            if !rewriter.feed(chunk, minter, &mut out) {
                // Told unchanged: it must be.
                assert_eq!(&out[start..], *chunk, "a chunk told unchanged was changed");
            }
        }
        rewriter.finish(&mut out);
        (out, rewriter.rewrote())
    }

    #[test]
    fn a_text_delta_event_passes_as_it_came_and_says_so() {
        let mut rewriter = AnswerRewriter::new();
        let mut out = Vec::new();
        let first = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_abc\"}}\n\n";
        assert!(rewriter.feed(first.as_bytes(), &mut Marks::default(), &mut out));
        for delta in [
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"delta\":\"lorem, [ipsum] {dolor}\"}\n\n",
            "data: {\"delta\":\"a\\\"b\\\\\",\"n\":[1, 2.5e3, true, null]}\r\n\r\n",
            "id: 7\r: comment { [ \"resp_x\"\r\n",
        ] {
            let mut out = Vec::new();
            let changed = rewriter.feed(delta.as_bytes(), &mut Marks::default(), &mut out);
            assert!(!changed, "{delta}");
            assert_eq!(out, delta.as_bytes());
        }
        // A raw carriage return in a string ends it: the next `"` opens a key again.
        let (out, marks) = rewrite("data: {\"a\":\"x\ry\",\"id\":\"resp_q\"}\n");
        assert_eq!(out, "data: {\"a\":\"x\ry\",\"id\":\"resp_q\"}\n");
        assert!(
            marks.ids.is_empty(),
            "the broken line's id is no longer at its path"
        );
        let (out, marks) = rewrite("data: {\"a\":\"x\\ry\",\"id\":\"resp_q\"}\n");
        assert_eq!(
            out,
            "data: {\"a\":\"x\\ry\",\"id\":\"resp_sb1-T-resp_q\"}\n"
        );
        assert_eq!(marks.ids, ["resp_q"]);
    }

    fn rewrite(input: &str) -> (String, Marks) {
        let mut marks = Marks::default();
        let (out, _) = rewrite_chunks(&[input.as_bytes()], &mut marks);
        (String::from_utf8(out).unwrap(), marks)
    }

    /// What a chunk alone lets out, with nothing after it.
    fn emitted_by(chunk: &str) -> String {
        let mut out = Vec::new();
        AnswerRewriter::new().feed(chunk.as_bytes(), &mut Marks::default(), &mut out);
        String::from_utf8(out).unwrap()
    }

    const JSON: &str = r#"{
  "id": "resp_abc123",
  "object": "response",
  "created_at": 1741476542,
  "status": "completed",
  "model": "o4-mini-2025-04-16",
  "output": [
    {"id": "rs_68af", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAABoX1fV3e4x\/Qk+Zq=="},
    {"id": "msg_68af", "type": "message", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "see resp_abc, or \"resp_abc\"", "annotations": []}]}
  ],
  "previous_response_id": "resp_prev9",
  "metadata": {"resp_x": "resp_sb1-t0-keep", "related": ["resp_a1", "resp_b2"]},
  "usage": {"input_tokens": 36, "output_tokens": 87, "total_tokens": 123}
}"#;

    const SSE: &str = concat!(
        "event: response.created\n",
        r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_abc123","object":"response","created_at":1741290958,"status":"in_progress","model":"o4-mini","output":[],"previous_response_id":"resp_prev9","reasoning":{"effort":"medium","summary":null},"usage":null,"metadata":{}}}"#,
        "\n\n",
        "event: response.in_progress\n",
        r#"data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_abc123","object":"response","status":"in_progress","output":[],"previous_response_id":"resp_prev9"}}"#,
        "\n\n",
        "event: response.output_item.added\n",
        r#"data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_68af","type":"reasoning","summary":[]}}"#,
        "\n\n",
        "event: response.output_item.done\n",
        r#"data: {"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"id":"rs_68af","type":"reasoning","summary":[],"encrypted_content":"gAAAAABoX1fV3e4x\/Qk+Zq=="}}"#,
        "\n\n",
        "event: response.output_item.added\n",
        r#"data: {"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"id":"msg_68af","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#,
        "\n\n",
        "event: response.output_text.delta\n",
        r#"data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_68af","output_index":1,"content_index":0,"delta":"see resp_abc, or \"resp_abc\""}"#,
        "\n\n",
        "event: response.output_text.done\n",
        r#"data: {"type":"response.output_text.done","sequence_number":6,"item_id":"msg_68af","output_index":1,"content_index":0,"text":"see resp_abc, or \"resp_abc\""}"#,
        "\n\n",
        "event: response.completed\n",
        r#"data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_abc123","object":"response","status":"completed","output":[{"id":"rs_68af","type":"reasoning","summary":[],"encrypted_content":"gAAAAABoX1fV3e4x\/Qk+Zq=="},{"id":"msg_68af","type":"message","content":[{"type":"output_text","text":"see resp_abc, or \"resp_abc\""}]}],"previous_response_id":"resp_prev9","metadata":{"resp_x":"resp_sb1-t0-keep"},"usage":{"input_tokens":36,"output_tokens":87}}}"#,
        "\n\n",
    );

    /// A response object that echoes what the client sent ("The response object": `metadata`,
    /// `user`, `prompt_cache_key`, `instructions`, `tools`) next to its own ids and reasoning.
    const ECHOED: &str = concat!(
        r#"{"id":"resp_own1","object":"response","#,
        r#""output":[{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAown"}],"#,
        r#""previous_response_id":"resp_prev1","instructions":"resp_abc123","#,
        r#""metadata":{"id":"resp_abc123","previous_response_id":"resp_abc123","#,
        r#""encrypted_content":"resp_abc123","response":{"id":"resp_abc123"},"#,
        r#""item":{"encrypted_content":"gAAAclient"},"list":["resp_abc123"]},"#,
        r#""user":"resp_abc123","prompt_cache_key":"resp_abc123","tools":[{"type":"function","#,
        r#""name":"f","parameters":{"properties":{"id":{"enum":["resp_abc123"]}}}}]}"#,
    );

    #[test]
    fn client_values_echoed_in_a_response_are_neither_minted_nor_marked() {
        let (out, marks) = rewrite(ECHOED);
        assert_eq!(marks.ids, ["resp_own1", "resp_prev1"]);
        assert_eq!(marks.encrypted, ["gAAAown"]);
        assert_eq!(
            out,
            ECHOED
                .replace(r#""resp_own1""#, r#""resp_sb1-T-resp_own1""#)
                .replace(r#""resp_prev1""#, r#""resp_sb1-T-resp_prev1""#)
                .replace(r#""gAAAown""#, r#""sb1.gAAAown""#)
        );
    }

    #[test]
    fn client_values_echoed_in_stream_events_are_neither_minted_nor_marked() {
        let events = [
            format!(r#"{{"type":"response.created","sequence_number":0,"response":{ECHOED}}}"#),
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAown"},"metadata":{"encrypted_content":"gAAAclient","id":"resp_abc123"}}"#.to_string(),
            format!(r#"{{"type":"response.completed","sequence_number":2,"response":{ECHOED}}}"#),
        ];
        let sse: String = events
            .iter()
            .map(|e| format!("event: x\ndata: {e}\n\n"))
            .collect();
        let (out, marks) = rewrite(&sse);
        // Each id is minted once and written in both events.
        assert_eq!(marks.ids, ["resp_own1", "resp_prev1"]);
        assert_eq!(out.matches("resp_sb1-T-resp_own1").count(), 2);
        assert_eq!(marks.encrypted, ["gAAAown"; 3]);
        assert_eq!(out.matches(r#""resp_abc123""#).count(), 2 * 9 + 1);
        assert_eq!(out.matches(r#""gAAAclient""#).count(), 3);
    }

    #[test]
    fn a_json_answer_has_its_id_values_replaced_and_its_reasoning_marked() {
        let (out, marks) = rewrite(JSON);
        let expected = JSON
            .replace(r#""resp_abc123""#, r#""resp_sb1-T-resp_abc123""#)
            .replace(r#""resp_prev9""#, r#""resp_sb1-T-resp_prev9""#)
            .replace(r#": "gAAAAAB"#, r#": "sb1.gAAAAAB"#);
        assert_eq!(out, expected);
        assert_eq!(marks.ids, ["resp_abc123", "resp_prev9"]);
        assert_eq!(marks.encrypted, [r"gAAAAABoX1fV3e4x\/Qk+Zq=="]);
        assert!(out.contains(r#""resp_x": "resp_sb1-t0-keep""#));
        assert!(out.contains(r#""related": ["resp_a1", "resp_b2"]"#));
        assert!(out.contains(r#""text": "see resp_abc, or \"resp_abc\"""#));
    }

    #[test]
    fn an_sse_stream_has_every_id_value_replaced_and_its_reasoning_marked() {
        let (out, marks) = rewrite(SSE);
        let expected = SSE
            .replace(r#""resp_abc123""#, r#""resp_sb1-T-resp_abc123""#)
            .replace(r#""resp_prev9""#, r#""resp_sb1-T-resp_prev9""#)
            .replace(r#":"gAAAAAB"#, r#":"sb1.gAAAAAB"#);
        assert_eq!(out, expected);
        // The id and the previous id of three events: six replaced (above), each minted once.
        assert_eq!(out.matches("resp_sb1-T-").count(), 6);
        assert_eq!(marks.ids, ["resp_abc123", "resp_prev9"]);
        assert_eq!(marks.encrypted.len(), 2);
        assert!(out.contains(r#"{"resp_x":"resp_sb1-t0-keep"}"#));
        assert_eq!(out.matches(r#"see resp_abc, or \"resp_abc\""#).count(), 3);
        assert!(out.contains("event: response.output_text.delta\ndata: {"));
    }

    #[test]
    fn only_values_at_the_response_id_paths_are_minted() {
        for (body, ids) in [
            (r#"{"id":"resp_a"}"#, &["resp_a"][..]),
            (r#"{"previous_response_id":"resp_a"}"#, &["resp_a"]),
            (r#"{"type":"x","response":{"id":"resp_a"}}"#, &["resp_a"]),
            (
                r#"{"response":{"previous_response_id":"resp_a"}}"#,
                &["resp_a"],
            ),
            // Keys shaped like ids, array elements, members of other objects, deeper levels.
            (
                r#"{"resp_x":1,"resp_y" :{"resp_z"
  :"resp_v"}}"#,
                &[],
            ),
            (
                r#"{"ids":["resp_a", "resp_b" ],"id2":"resp_c","xid":"resp_d"}"#,
                &[],
            ),
            (r#"{"id":["resp_a"],"id":{"id":"resp_b"}}"#, &[]),
            (
                r#"{"conversation":{"id":"resp_a"},"prompt":{"id":"resp_b"}}"#,
                &[],
            ),
            (
                r#"{"response":{"output":[{"id":"resp_a"}],"item":{"id":"resp_b"}}}"#,
                &[],
            ),
            (
                r#"{"item":{"id":"resp_a"},"response":{"response":{"id":"resp_b"}}}"#,
                &[],
            ),
            (r#"["resp_a",{"id":"resp_b"}]"#, &[]),
            (r#""resp_a""#, &[]),
            // Keys are compared as sent.
            (r#"{"i\u0064":"resp_a","ID":"resp_b","id ":"resp_c"}"#, &[]),
            // Levels past the tracked ones are counted: the id after them is found.
            (
                r#"{"response":{"m":{"a":{"b":[[{"c":[]}]]}},"tools":[[[[]]]],"id":"resp_a"}}"#,
                &["resp_a"],
            ),
            (r#"{"a":{"b":{"c":{"d":{}}}},"id":"resp_a"}"#, &["resp_a"]),
        ] {
            let (out, marks) = rewrite(body);
            assert_eq!(marks.ids, ids, "{body}");
            assert_eq!(out.matches("resp_sb1-T-").count(), ids.len(), "{body}");
        }
    }

    #[test]
    fn only_reasoning_items_of_the_response_are_marked() {
        for (body, marked) in [
            (
                r#"{"output":[{"type":"reasoning","encrypted_content":"a"}]}"#,
                true,
            ),
            (r#"{"output":[{},{"encrypted_content":"a"}]}"#, true),
            (
                r#"{"response":{"output":[{"encrypted_content":"a"}]}}"#,
                true,
            ),
            (
                r#"{"type":"response.output_item.done","item":{"encrypted_content":"a"}}"#,
                true,
            ),
            // Client values the response echoes, and everything else.
            (r#"{"encrypted_content":"a"}"#, false),
            (r#"{"metadata":{"encrypted_content":"a"}}"#, false),
            (
                r#"{"response":{"encrypted_content":"a","item":{"encrypted_content":"b"}}}"#,
                false,
            ),
            (
                r#"{"response":{"metadata":{"encrypted_content":"a"}}}"#,
                false,
            ),
            (
                r#"{"output":{"encrypted_content":"a"},"item":[{"encrypted_content":"b"}]}"#,
                false,
            ),
            (
                r#"{"output":[{"content":[{"encrypted_content":"a"}]}]}"#,
                false,
            ),
            (r#"{"output":[[{"encrypted_content":"a"}]]}"#, false),
            (r#"{"x":{"output":[{"encrypted_content":"a"}]}}"#, false),
            (
                r#"{"item":{"encrypted_contents":"a","encrypted\u005fcontent":"b"}}"#,
                false,
            ),
        ] {
            let (_, marks) = rewrite(body);
            assert_eq!(marks.encrypted.len(), usize::from(marked), "{body}");
        }
    }

    const BROKEN_EVENTS: &str = concat!(
        // Truncated: containers left open.
        "data: {\"response\":{\"metadata\":{\"a\":[\n\n",
        "data: {\"response\":{\"id\":\"resp_b\"}}\n\n",
        // Closes more than it opened: the depth stays at zero.
        "data: {\"x\":1}}]]}\n\n",
        "event: response.output_item.done\r\n",
        "data:{\"item\":{\"encrypted_content\":\"gA\"}}\r\n\r\n",
        // `data:` inside a line, or after a space, starts nothing (two levels stay open).
        "data: {\"response\":{\"metadata\":{\"k\": data: {\"id\":\"resp_c\"}}\n",
        " data: {\"id\":\"resp_d\"}\n",
    );

    #[test]
    fn a_broken_event_does_not_derail_the_next_data_line() {
        let (_, marks) = rewrite(BROKEN_EVENTS);
        assert_eq!(marks.ids, ["resp_b"]);
        assert_eq!(marks.encrypted, ["gA"]);
    }

    #[test]
    fn newlines_without_data_do_not_reset_a_pretty_printed_answer() {
        let body = "{\n  \"metadata\": {\n    \"id\": \"resp_a\"\n  },\n  \"id\": \"resp_b\"\n}";
        assert_eq!(rewrite(body).1.ids, ["resp_b"]);
    }

    #[test]
    fn ids_inside_text_escaped_ids_and_our_own_ids_are_left_alone() {
        for body in [
            r#"{"text":"see resp_abc"}"#,
            r#"{"text":"\"resp_abc\""}"#,
            r#"{"text":"x\\","id":"resp_sb1-abc"}"#,
            r#"{"id":"resp\u005fabc","k":"resp_a\u0062"}"#,
            r#"{"id":"resp_a.b","id2":"resp_a b","id3":"Resp_a","id4":"resp"}"#,
            r#"{"item":{"encrypted\u005fcontent":"x","encrypted_contents":"y","xencrypted_content":"z"}}"#,
        ] {
            let (out, marks) = rewrite(body);
            assert_eq!(out, body);
            assert!(marks.ids.is_empty() && marks.encrypted.is_empty(), "{body}");
        }
        // After the escaped backslash the string is closed: the next value is an id again.
        assert_eq!(
            rewrite(r#"{"a":"b\\","id":"resp_q"}"#).0,
            r#"{"a":"b\\","id":"resp_sb1-T-resp_q"}"#
        );
    }

    #[test]
    fn rewritten_ids_are_not_rewritten_again() {
        let (once, _) = rewrite(SSE);
        let mut marks = Marks::default();
        rewrite_chunks(&[once.as_bytes()], &mut marks);
        assert!(marks.ids.is_empty());
    }

    #[test]
    fn encrypted_content_is_marked_with_its_escapes_and_whitespace_allowed() {
        let (out, marks) = rewrite(
            "{\"item\" : {\"encrypted_content\" :\n  \"a\\\"b\\\\\",\"x\":\"encrypted_content\"}}",
        );
        assert_eq!(
            out,
            "{\"item\" : {\"encrypted_content\" :\n  \"sb1.a\\\"b\\\\\",\"x\":\"encrypted_content\"}}"
        );
        assert_eq!(marks.encrypted, ["a\\\"b\\\\"]);
        // A value that is not a string is no encrypted content; the next string is not either.
        let body = r#"{"item":{"encrypted_content":null,"s":"t"}}"#;
        assert_eq!(rewrite(body).0, body);
    }

    #[test]
    fn every_single_split_gives_the_one_chunk_output() {
        for fixture in [JSON, SSE, ECHOED, BROKEN_EVENTS] {
            let bytes = fixture.as_bytes();
            let (whole, _) = rewrite_chunks(&[bytes], &mut Marks::default());
            for at in 0..=bytes.len() {
                let (head, tail) = bytes.split_at(at);
                let (split, _) = rewrite_chunks(&[head, tail], &mut Marks::default());
                assert_eq!(split, whole, "split at {at}");
            }
        }
    }

    #[test]
    fn random_multi_splits_give_the_one_chunk_output() {
        let mut rng = fastrand::Rng::with_seed(7);
        for fixture in [JSON, SSE, ECHOED, BROKEN_EVENTS] {
            let bytes = fixture.as_bytes();
            let (whole, _) = rewrite_chunks(&[bytes], &mut Marks::default());
            for _ in 0..2_000 {
                let (out, _) =
                    rewrite_chunks(&random_split(&mut rng, bytes), &mut Marks::default());
                assert_eq!(out, whole);
            }
        }
    }

    fn random_split<'a>(rng: &mut fastrand::Rng, bytes: &'a [u8]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = (0..rng.usize(1..24))
            .map(|_| rng.usize(0..=bytes.len()))
            .collect();
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let mut at = 0;
        cuts.into_iter()
            .map(|cut| {
                let piece = &bytes[at..cut];
                at = cut;
                piece
            })
            .collect()
    }

    #[test]
    fn a_long_text_delta_is_emitted_before_its_closing_quote() {
        let head = format!(
            r#"data: {{"type":"response.output_text.delta","delta":"{}"#,
            "Hello, world. ".repeat(200)
        );
        assert_eq!(emitted_by(&head), head);
        // The same for strings that start like an id but stop being one.
        for head in [
            r#"{"type":"response.output_text.delta"#,
            r#"{"id":"resp_sb1-abc"#,
            r#"{"id":"resp_a b c"#,
            r#"{"id":"resp_a\"b"#,
            r#"{"encrypted_content":1,"e":"encrypted_contentx"#,
        ] {
            assert_eq!(emitted_by(head), head);
        }
    }

    #[test]
    fn only_what_may_still_be_an_id_is_held_back() {
        assert_eq!(
            emitted_by(r#"data: {"response":{"id":"resp_ab"#),
            r#"data: {"response":{"id":""#
        );
        assert_eq!(emitted_by(r#"{"id":"res"#), r#"{"id":""#);
        assert_eq!(
            emitted_by(r#"{"id":"resp_a""#),
            r#"{"id":"resp_sb1-T-resp_a""#,
            "an id is minted at its closing quote"
        );
        assert_eq!(
            emitted_by(r#"{"id":"resp_a","#),
            r#"{"id":"resp_sb1-T-resp_a","#
        );
        // Keys, and values at no candidate path, go out at once.
        for head in [
            r#"{"resp_a"  "#,
            r#"{"metadata":{"id":"resp_ab"#,
            r#"{"user":"resp_ab"#,
            r#"{"item":{"encrypted_cont"#,
            r#"{"encrypted_content":"gAAA"#,
        ] {
            assert_eq!(emitted_by(head), head);
        }
        assert_eq!(
            emitted_by(r#"{"item":{"encrypted_content":"gAAA"#),
            r#"{"item":{"encrypted_content":""#
        );
    }

    #[test]
    fn an_unfinished_value_is_emitted_unchanged_by_finish() {
        for body in [
            r#"{"id":"resp_abc"#,
            r#"["resp_abc"  "#,
            r#"{"item":{"encrypted_content":"gAAA\"x"#,
            r#"{"text":"unterminated"#,
        ] {
            let mut marks = Marks::default();
            let (out, rewrote) = rewrite_chunks(&[body.as_bytes()], &mut marks);
            assert_eq!(out, body.as_bytes());
            assert!(!rewrote && marks.ids.is_empty() && marks.encrypted.is_empty());
        }
    }

    #[test]
    fn a_raw_newline_ends_any_string() {
        // Each broken event leaves the next one read correctly.
        let body = concat!(
            "data: {\"id\":\"resp_a\nevent: x\ndata: {\"id\":\"resp_b\"}\n\n",
            "data: {\"encrypted_content\":\"gA\r\ndata: {\"id\":\"resp_c\"}\n\n",
            "data: {\"text\":\"odd\ndata: {\"id\":\"resp_d\"}\n\n",
            "data: {\"text\":\"odd\\\ndata: {\"id\":\"resp_e\"}\n\n",
        );
        let (out, marks) = rewrite(body);
        assert_eq!(marks.ids, ["resp_b", "resp_c", "resp_d", "resp_e"]);
        assert!(marks.encrypted.is_empty());
        assert!(out.starts_with("data: {\"id\":\"resp_a\nevent: x\n"));
    }

    #[test]
    fn ids_over_256_bytes_are_left_unchanged() {
        let id = |len: usize| format!("resp_{}", "x".repeat(len - 5));
        let (out, marks) = rewrite(&format!(r#"{{"id":"{}"}}"#, id(256)));
        assert_eq!(out, format!(r#"{{"id":"resp_sb1-T-{}"}}"#, id(256)));
        assert_eq!(marks.ids.len(), 1);
        for len in [257, 300] {
            let body = format!(r#"{{"id":"{}","x":["{}"]}}"#, id(len), id(len));
            assert_eq!(rewrite(&body).0, body);
        }
    }

    #[test]
    fn encrypted_content_over_1_mib_is_left_unchanged() {
        let body = |len: usize| {
            format!(
                r#"{{"item":{{"encrypted_content":"{}"}},"id":"resp_a"}}"#,
                "A".repeat(len)
            )
        };
        let (out, marks) = rewrite(&body(MAX_ENCRYPTED));
        assert_eq!(marks.encrypted.len(), 1);
        assert!(out.starts_with(r#"{"item":{"encrypted_content":"sb1.AAA"#));
        let (out, marks) = rewrite(&body(MAX_ENCRYPTED + 1));
        assert!(marks.encrypted.is_empty());
        assert_eq!(
            out,
            body(MAX_ENCRYPTED + 1).replace("resp_a", "resp_sb1-T-resp_a")
        );
    }

    #[test]
    fn invalid_utf8_is_left_unchanged() {
        for body in [
            &b"{\"id\":\"resp_a\xff\",\"t\":\"\xc3\"}"[..],
            b"{\"item\":{\"encrypted_content\":\"gA\xffAA\"}}",
            b"\xfe\xff{\"id\":\"resp_\xe9\"}",
        ] {
            let mut marks = Marks::default();
            let (out, rewrote) = rewrite_chunks(&[body], &mut marks);
            assert_eq!(out, body);
            assert!(!rewrote);
        }
    }

    #[test]
    fn rewrote_tells_whether_any_value_was_replaced() {
        let mut marks = Marks::default();
        assert!(!rewrite_chunks(&[br#"{"id":"msg_1","t":"resp_a b"}"#], &mut marks).1);
        assert!(rewrite_chunks(&[br#"{"id":"resp_1"}"#], &mut marks).1);
        assert!(rewrite_chunks(&[br#"{"item":{"encrypted_content":""}}"#], &mut marks).1);
    }

    /// Whole `data:` lines go out in one copy when nothing on them can be rewritten: random
    /// lines of JSON pieces (keys on and off the candidate paths, escapes, raw `\r`, unclosed
    /// containers and strings) give byte for byte what reading one byte per chunk gives, which
    /// never sees a whole line.
    #[test]
    fn whole_plain_lines_give_what_byte_by_byte_reading_gives() {
        const PIECES: [&[u8]; 24] = [
            b"{\"type\":\"response.output_text.delta\",",
            b"\"item_id\":\"msg_1\",",
            b"\"delta\":\"lorem [ipsum] {dolor} \\\"id\\\": x\",",
            b"\"id\":\"resp_abc\"",
            b"{\"response\":{\"id\":\"resp_q\"}}",
            b"\"output\":[{\"encrypted_content\":\"e\"}]",
            b"\"ids\":\"resp_no\"",
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            b" ",
            b"\"",
            b"\\",
            b"\r",
            b"\"sequence_number\":7}",
            b"\"x\":\"resp_",
            b"{\"id\":",
            b"\"previous_response_id\":\"resp_p\"",
            b"{\"item\":{\"encrypted_content\":\"z\"}}",
            b"0",
            b"\"",
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        let (mut plain, mut lines) = (0, 0);
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..rng.usize(1..5) {
                if rng.bool() {
                    input.extend_from_slice(b"event: response.output_text.delta\n");
                }
                input.extend_from_slice(b"data: ");
                let mut line = Vec::new();
                for _ in 0..rng.usize(0..8) {
                    line.extend_from_slice(PIECES[rng.usize(..PIECES.len())]);
                }
                lines += 1;
                plain += usize::from(closes_without_keys(&line));
                input.extend_from_slice(&line);
                input.extend_from_slice(if rng.u8(..4) == 0 { b"\r\n" } else { b"\n" });
                // A line that is not `data:` reads on from where the last one left the path.
                if rng.u8(..3) == 0 {
                    input.extend_from_slice(PIECES[rng.usize(..PIECES.len())]);
                    input.extend_from_slice(PIECES[rng.usize(..PIECES.len())]);
                    input.push(b'\n');
                }
                input.push(b'\n');
            }
            let bytes: Vec<&[u8]> = input.chunks(1).collect();
            let mut one = Marks::default();
            let (whole, rewrote) = rewrite_chunks(&[&input], &mut one);
            let mut each = Marks::default();
            let (by_byte, rewrote_by_byte) = rewrite_chunks(&bytes, &mut each);
            let text = String::from_utf8_lossy(&input);
            assert_eq!(
                String::from_utf8_lossy(&whole),
                String::from_utf8_lossy(&by_byte),
                "{text}"
            );
            assert_eq!(
                (rewrote, one.ids, one.encrypted),
                (rewrote_by_byte, each.ids, each.encrypted),
                "{text}"
            );
        }
        // Both paths are taken often.
        assert!(
            plain > lines / 10 && plain < lines * 9 / 10,
            "{plain} of {lines}"
        );
    }

    #[test]
    fn random_bytes_never_panic_and_an_identity_minter_changes_nothing() {
        const PIECES: [&[u8]; 22] = [
            b"\"",
            b"\"resp_",
            b"\":\"",
            b"{\"id\":\"resp_",
            b"{\"response\":",
            b"\"output\":[",
            b"{\"item\":",
            b"{\"encrypted_content\":\"",
            b"\\",
            b":",
            b" ",
            b"\n",
            b"\r",
            b"data:",
            b"{",
            b"}",
            b",",
            b"[",
            b"]",
            b"resp_sb1-",
            b"x",
            b"\xff",
        ];
        let mut rng = fastrand::Rng::with_seed(42);
        let (mut ids, mut marked) = (0, 0);
        for _ in 0..100_000 {
            let mut input = Vec::new();
            for _ in 0..rng.usize(0..24) {
                // Mostly pieces of JSON and SSE, so that every state is reached.
                if rng.u8(..4) == 0 {
                    input.push(rng.u8(..));
                } else {
                    input.extend_from_slice(PIECES[rng.usize(..PIECES.len())]);
                }
            }
            let chunks = random_split(&mut rng, &input);
            assert_eq!(rewrite_chunks(&chunks, &mut Same).0, input);
            let mut marks = Marks::default();
            let (whole, _) = rewrite_chunks(&[&input], &mut marks);
            assert_eq!(rewrite_chunks(&chunks, &mut Marks::default()).0, whole);
            ids += usize::from(!marks.ids.is_empty());
            marked += usize::from(!marks.encrypted.is_empty());
        }
        assert!(
            ids > 1_000 && marked > 300,
            "reached: {ids} ids, {marked} marks"
        );
    }

    /// A long stream in one chunk: the text deltas are passed by the lookahead, the values of
    /// the events after them are still rewritten, and the output is what byte-by-byte
    /// reading gives.
    #[test]
    fn the_ids_after_a_long_run_of_text_deltas_are_rewritten() {
        let mut stream = String::from(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_a\"}}\n\n",
        );
        for n in 0..500 {
            stream.push_str(&format!(
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{n},\"item_id\":\"msg_1\",\"delta\":\"[{{ \\\"x\\\" }}] id resp_n\"}}\n\n"
            ));
        }
        stream.push_str(concat!(
            "event: response.output_item.done\ndata: {\"item\":{\"type\":\"reasoning\",\"encrypted_content\":\"blob\"}}\n\n",
            "event: response.completed\ndata: {\"response\":{\"id\":\"resp_a\",\"previous_response_id\":\"resp_p\",\"output\":[{\"encrypted_content\":\"e2\"}]}}\n\n",
        ));
        let mut marks = Marks::default();
        let (whole, _) = rewrite_chunks(&[stream.as_bytes()], &mut marks);
        let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        let (by_byte, _) = rewrite_chunks(&bytes, &mut Marks::default());
        assert_eq!(whole, by_byte);
        let expected = stream
            .replace("\"resp_a\"", "\"resp_sb1-T-resp_a\"")
            .replace("\"resp_p\"", "\"resp_sb1-T-resp_p\"")
            .replace("\"blob\"", "\"sb1.blob\"")
            .replace("\"e2\"", "\"sb1.e2\"");
        assert_eq!(String::from_utf8(whole).unwrap(), expected);
        assert_eq!(marks.ids, ["resp_a", "resp_p"]);
        assert_eq!(marks.encrypted, ["blob", "e2"]);
    }

    /// A key read before a line end is pending on the path: its value, on the next line, is
    /// rewritten although no key is read between them (in one chunk or two).
    #[test]
    fn a_value_whose_key_ended_the_line_before_is_rewritten() {
        let cases = [
            (
                "data: {\"id\":\n",
                "\"resp_x\"}\n\ndata: {\"a\":1}\n\n",
                "resp_x",
                "resp_sb1-T-resp_x",
            ),
            (
                "data: {\"previous_response_id\":\n",
                "\"resp_x\"}\n\ndata: {}\n\n",
                "resp_x",
                "resp_sb1-T-resp_x",
            ),
            (
                "data: {\"item\":{\"encrypted_content\":\n",
                "\"z\"}}\n\ndata: {}\n\n",
                "\"z\"",
                "\"sb1.z\"",
            ),
        ];
        for (first, second, raw, rewritten) in cases {
            let expected = format!("{first}{}", second.replace(raw, rewritten));
            let whole = format!("{first}{second}");
            for chunks in [
                vec![whole.as_bytes()],
                vec![first.as_bytes(), second.as_bytes()],
            ] {
                let (out, _) = rewrite_chunks(&chunks, &mut Marks::default());
                assert_eq!(String::from_utf8(out).unwrap(), expected, "{first}");
            }
        }
    }
}
