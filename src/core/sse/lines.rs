//! The SSE framing: chunks into lines, lines into fields, fields into events.
//!
//! An event that lies whole in one chunk is read where it lies: its one `data:` line is kept as
//! a range of the chunk. Only what crosses a chunk's end is copied: the partial line (`line`)
//! and the data read so far (`data`), each bounded, so a stream without line ends or blank
//! lines cannot grow them without limit. Past a bound the bytes are dropped and the event is
//! read by its `event:` name alone (see [`super::classify`]). Every bound is on the stream's
//! bytes, never on where chunks end, so the events do not depend on the chunking.

use super::after_commit::{self, ErrorSearch, Told};
use super::chat_run::{self, data_event};
use super::classify::{self, ResponsesSeen};
use super::{Dialect, Event, MAX_LINE};
use crate::core::text;
use memchr::memchr2;

/// The most data one event keeps (its `data:` lines joined).
pub const MAX_DATA: usize = 1 << 20;
/// An event name longer than this is no name this module knows.
const MAX_NAME: usize = 64;
/// A carry buffer that grew past this for a large event is given back after it.
const KEEP: usize = 64 << 10;
/// A UTF-8 byte order mark, skipped at the start of the stream.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where the current event's data is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Data {
    /// No `data:` line yet.
    #[default]
    None,
    /// One `data:` line, at this range of the current chunk.
    InChunk(usize, usize),
    /// In `Watcher::data` (joined lines, or copied at a chunk's end).
    Owned,
}

/// The event being read.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// A line other than the blank one was seen (a stray blank line is no event).
    any: bool,
    /// Already reported malformed: its lines up to the blank one are skipped.
    skipping: bool,
    /// A line or the joined data passed its bound: the data was dropped.
    oversized: bool,
    data: Data,
    name: [u8; MAX_NAME],
    /// The name's length; `MAX_NAME + 1` for a name too long to keep.
    name_len: usize,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending {
            any: false,
            skipping: false,
            oversized: false,
            data: Data::None,
            name: [0; MAX_NAME],
            name_len: 0,
        }
    }
}

impl Pending {
    fn name(&self) -> Option<&str> {
        let name = self.name.get(..self.name_len)?;
        text::utf8(name).filter(|n| !n.is_empty())
    }

    fn set_name(&mut self, value: &[u8]) {
        match self.name.get_mut(..value.len()) {
            Some(slot) => {
                slot.copy_from_slice(value);
                self.name_len = value.len();
            }
            None => self.name_len = MAX_NAME + 1,
        }
    }
}

/// Watches one streamed answer.
#[derive(Debug, Clone)]
pub struct Watcher {
    dialect: Dialect,
    /// A line begun in an earlier chunk, at most `MAX_LINE` bytes of it.
    line: Vec<u8>,
    /// The carried line passed `MAX_LINE`.
    line_over: bool,
    /// The last line ended in `\r` at a chunk's end: a `\n` next is part of that line end.
    after_cr: bool,
    /// No line has been read yet (a byte order mark may start the first).
    first_line: bool,
    pending: Pending,
    /// The event's data when it is `Data::Owned`.
    data: Vec<u8>,
    events: u32,
    bytes: u64,
    saw_content: bool,
    saw_final: bool,
    /// Past the commit point: content is not read ([`Watcher::skip_content`]).
    skip_content: bool,
    /// Past the commit point: where the chunk's next `"error"` is.
    errors: ErrorSearch,
    responses: ResponsesSeen,
}

/// One line's field.
enum Field<'a> {
    Blank,
    Comment,
    Data(&'a [u8]),
    Event(&'a [u8]),
    Ignored,
    Unknown,
}

impl Watcher {
    /// A watcher of a stream in `dialect`.
    pub fn new(dialect: Dialect) -> Watcher {
        Watcher {
            dialect,
            line: Vec::new(),
            line_over: false,
            after_cr: false,
            first_line: true,
            pending: Pending::default(),
            data: Vec::new(),
            events: 0,
            bytes: 0,
            saw_content: false,
            saw_final: false,
            skip_content: false,
            errors: ErrorSearch::default(),
            responses: ResponsesSeen::default(),
        }
    }

    /// The next complete event in `chunk[from..]`, with the offset in `chunk` just past the
    /// blank line that ends it (a malformed line is reported at once: the offset is past that
    /// line, and the rest of its event is skipped; a `\r\n` cut between chunks ends its line at
    /// the `\r`, and the `\n` is skipped). `None` once the rest of `chunk` holds no
    /// complete event: what there is of one is kept, and the next chunk's call continues it.
    /// Call with `from` = the previous end until `None`, then feed the next chunk from 0.
    pub fn next(&mut self, chunk: &[u8], from: usize) -> Option<(Event, usize)> {
        let start = from.min(chunk.len());
        let mut pos = start;
        let event = self.scan(chunk, &mut pos);
        self.bytes += (pos - start) as u64;
        match event {
            Some(event) => Some((self.record(event), pos)),
            None => {
                // The chunk is done with an event still open: its data must outlive the chunk.
                self.errors.forget();
                self.own(chunk);
                None
            }
        }
    }

    /// The stream ended. What is left is read as if a line end and a blank line followed it:
    /// a last event that lacks only its blank line is that event, a cut one is `Malformed`
    /// (its JSON is incomplete); `None` if nothing is left.
    pub fn finish(&mut self) -> Option<Event> {
        self.after_cr = false;
        // The last event is read in full even past the commit point: a cut one is malformed
        // only by its incomplete JSON, which the reading past the commit point does not check.
        let skip_content = std::mem::replace(&mut self.skip_content, false);
        let event = match self.line.is_empty() {
            true => None,
            false => self.carried_line(&[]),
        };
        let event = event.or_else(|| self.dispatch(&[]));
        self.skip_content = skip_content;
        event.map(|e| self.record(e))
    }

    /// The stream is committed: from now on only a failure and the API's last event matter.
    /// [`Watcher::next`] reads an event's JSON only where its name or bytes say it may be a
    /// failure ([`super::after_commit`]): content may come as `Other`, a run of events told
    /// without reading their data comes as one event, and a JSON object cut or broken inside
    /// is no longer `Malformed` (but at [`Watcher::finish`]). Errors, the last event, the
    /// framing and a Responses stream's id and sequence number are read as before.
    pub fn skip_content(&mut self) {
        self.skip_content = true;
    }

    /// Complete events seen so far.
    pub fn events(&self) -> u32 {
        self.events
    }

    /// Bytes fed so far (consumed by [`Watcher::next`]).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether a `Content` event was seen.
    pub fn saw_content(&self) -> bool {
        self.saw_content
    }

    /// Whether a `Final` event was seen.
    pub fn saw_final(&self) -> bool {
        self.saw_final
    }

    /// The stream's dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// A Responses stream's response id, as its lifecycle events gave it (as the client saw it
    /// if the watcher is fed the bytes the client gets).
    pub fn response_id(&self) -> Option<&str> {
        Some(self.responses.id.as_str()).filter(|id| !id.is_empty())
    }

    /// A Responses stream's last `sequence_number`.
    pub fn sequence_number(&self) -> Option<u64> {
        self.responses.sequence_number
    }

    /// Bytes held for events split across chunks (for tests of the no-copy rule).
    #[cfg(test)]
    pub(super) fn carried_capacity(&self) -> usize {
        self.line.capacity() + self.data.capacity()
    }

    fn record(&mut self, event: Event) -> Event {
        self.events = self.events.saturating_add(1);
        match event {
            Event::Content => self.saw_content = true,
            Event::Final => self.saw_final = true,
            _ => {}
        }
        event
    }

    /// Reads lines from `*pos` until one completes an event or the chunk ends.
    fn scan(&mut self, chunk: &[u8], pos: &mut usize) -> Option<Event> {
        loop {
            let rest = chunk.get(*pos..).unwrap_or_default();
            if rest.is_empty() {
                return None;
            }
            if std::mem::take(&mut self.after_cr) && rest.first() == Some(&b'\n') {
                *pos += 1;
                continue;
            }
            if let Some((event, end)) = self.pass_run(chunk, *pos) {
                *pos = end;
                return Some(event);
            }
            let Some(i) = memchr2(b'\n', b'\r', rest) else {
                self.carry(rest);
                *pos = chunk.len();
                return None;
            };
            let at = *pos;
            let (text, after) = rest.split_at(i);
            *pos += i + 1;
            if after.first() == Some(&b'\r') {
                match after.get(1) {
                    Some(b'\n') => *pos += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let event = match self.line.is_empty() {
                true => self.chunk_line(chunk, at, text),
                false => self.carried_line_ending(text, chunk),
            };
            if event.is_some() {
                return event;
            }
        }
    }

    /// Past the commit point, the run of events from `pos` on that are told without reading
    /// their data, read at once as one event (`Content` if one of them is, else `Other`, which
    /// the caller only steps over). Each lies whole in the chunk in the shape providers send
    /// ([`simple_event`]) and is an unnamed chat event with no `"error"` in its data
    /// ([`Self::chat_run`]), or a Messages or Responses event told by its name
    /// ([`Self::named_run`]). Returned one by one, such events cost about 200 instructions
    /// each on a chat stream of ~250-byte events and 1,100 on a Responses one (callgrind,
    /// 100 KiB answers). The run's events are counted but the one `next` records. `None` when
    /// `pos` starts no such event; only between events: nothing of one pending or carried,
    /// and the first line (which may start with a byte order mark) read.
    fn pass_run(&mut self, chunk: &[u8], pos: usize) -> Option<(Event, usize)> {
        let between = !self.pending.any && self.line.is_empty() && !self.first_line;
        if !(self.skip_content && between) {
            return None;
        }
        let (end, passed, told) = match self.dialect {
            Dialect::ChatCompletions | Dialect::Completions => self.chat_run(chunk, pos),
            Dialect::Messages | Dialect::Responses => self.named_run(chunk, pos),
        };
        self.events = self.events.saturating_add(passed.saturating_sub(1));
        (passed > 0).then_some((told.into(), end))
    }

    /// A run of chat events of one `data:` line each with no `"error"` in it (a key can't hold
    /// a line end): its end and length. Read by 64-byte blocks where the platform has the
    /// kernel ([`super::chat_run`]), the rest of the chunk event by event. Apart from
    /// [`Self::named_run`]: the `.wasm` ran the general reading at about 90 instructions more
    /// an event (callgrind, 100 KiB stream).
    pub(super) fn chat_run(&mut self, chunk: &[u8], pos: usize) -> (usize, u32, Told) {
        let (at, passed, ended) = chat_run::blocks(chunk, pos);
        let (at, more) = match ended {
            true => (at, 0),
            false => self.chat_events(chunk, at),
        };
        (at, passed + more, Told::Other)
    }

    /// [`Self::chat_run`] one event at a time: its end and length.
    pub(super) fn chat_events(&mut self, chunk: &[u8], pos: usize) -> (usize, u32) {
        let error = self.errors.first_from(chunk, pos);
        let (mut at, mut passed) = (pos, 0u32);
        while let Some(end) = data_event(chunk, at) {
            if error.is_some_and(|e| e < end) {
                break;
            }
            at = end;
            passed += 1;
        }
        (at, passed)
    }

    /// A run of Messages or Responses events told by their names, whole in the chunk in the
    /// shape providers send ([`simple_event`]), a Responses sequence number still read: its
    /// end, length and whether content was in it.
    fn named_run(&mut self, chunk: &[u8], pos: usize) -> (usize, u32, Told) {
        let (mut at, mut passed, mut told, mut last) = (pos, 0u32, Told::Other, None);
        while let Some(event) = simple_event(chunk, at) {
            let by_name = match self.dialect {
                Dialect::Responses => after_commit::responses_by_name(event.name, &self.responses),
                _ => after_commit::messages_by_name(event.name),
            };
            match by_name {
                Some(Told::Content) => told = Told::Content,
                Some(Told::Other) => {}
                _ => break,
            }
            at = event.end;
            passed += 1;
            last = Some(event);
        }
        if let Some(last) = last.filter(|_| self.dialect == Dialect::Responses) {
            self.read_sequence_number(chunk, pos, last);
        }
        (at, passed, told)
    }

    /// The sequence number of a run of Responses events (from `pos`, `last` the last): only
    /// the last one given is kept, so the run is read backwards from its last event, whose
    /// number the provider always sends, and again from its start only if that has none.
    /// One reading an event cost about 240 instructions (callgrind, 100 KiB stream).
    fn read_sequence_number(&mut self, chunk: &[u8], pos: usize, last: SimpleEvent<'_>) {
        if let Some(n) = after_commit::sequence_number(last.name, last.data) {
            self.responses.sequence_number = Some(n);
            return;
        }
        let mut at = pos;
        while let Some(event) = simple_event(chunk, at).filter(|_| at < last.end) {
            if let Some(n) = after_commit::sequence_number(event.name, event.data) {
                self.responses.sequence_number = Some(n);
            }
            at = event.end;
        }
    }

    /// Keeps a line's beginning for the next chunk (at most `MAX_LINE` bytes of it).
    fn carry(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.line.len());
        let kept = bytes.get(..room).unwrap_or(bytes);
        self.line.extend_from_slice(kept);
        self.line_over |= kept.len() < bytes.len();
    }

    /// A line that lies whole in `chunk`, starting at `at`.
    fn chunk_line(&mut self, chunk: &[u8], at: usize, text: &[u8]) -> Option<Event> {
        let over = text.len() > MAX_LINE;
        let text = text.get(..MAX_LINE).unwrap_or(text);
        self.line(chunk, Some(at), text, over)
    }

    /// The end of a line begun in an earlier chunk.
    fn carried_line_ending(&mut self, text: &[u8], chunk: &[u8]) -> Option<Event> {
        self.carry(text);
        self.carried_line(chunk)
    }

    /// The carried line, now complete.
    fn carried_line(&mut self, chunk: &[u8]) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        let over = std::mem::take(&mut self.line_over);
        let event = self.line(chunk, None, &line, over);
        self.line = release(line);
        self.line.clear();
        event
    }

    /// One line: `at` is its offset in `chunk` when it lies there, `None` when it was carried.
    fn line(&mut self, chunk: &[u8], at: Option<usize>, text: &[u8], over: bool) -> Option<Event> {
        let (text, at) = match std::mem::take(&mut self.first_line) {
            true => match text.strip_prefix(BOM) {
                Some(rest) => (rest, at.map(|a| a + BOM.len())),
                None => (text, at),
            },
            false => (text, at),
        };
        let field = field(text);
        if matches!(field, Field::Blank) {
            return self.dispatch(chunk);
        }
        let pending = &mut self.pending;
        pending.any = true;
        if pending.skipping {
            return None;
        }
        match field {
            Field::Blank | Field::Comment | Field::Ignored => None,
            Field::Event(name) => {
                pending.set_name(name);
                None
            }
            Field::Data(_) if over => {
                self.drop_data();
                None
            }
            Field::Data(value) => {
                // The value's offset: it ends where the line does.
                let at = at.map(|a| a + text.len() - value.len());
                self.add_data(chunk, at, value);
                None
            }
            Field::Unknown => {
                self.pending = Pending {
                    any: true,
                    skipping: true,
                    ..Pending::default()
                };
                self.data.clear();
                Some(Event::Malformed)
            }
        }
    }

    /// A `data:` line's value, at `at` in `chunk` when it lies there.
    fn add_data(&mut self, chunk: &[u8], at: Option<usize>, value: &[u8]) {
        if self.pending.oversized {
            return;
        }
        match (self.pending.data, at) {
            (Data::None, Some(at)) => self.pending.data = Data::InChunk(at, at + value.len()),
            (Data::None, None) => {
                self.data.extend_from_slice(value);
                self.pending.data = Data::Owned;
            }
            (Data::InChunk(..) | Data::Owned, _) => {
                self.own(chunk);
                if self.data.len() + 1 + value.len() > MAX_DATA {
                    return self.drop_data();
                }
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
    }

    /// The event's data is over its bound: dropped, and the event read by name.
    fn drop_data(&mut self) {
        self.pending.oversized = true;
        self.pending.data = Data::None;
        self.data.clear();
    }

    /// Copies data that lies in `chunk` into `data`.
    fn own(&mut self, chunk: &[u8]) {
        if let Data::InChunk(start, end) = self.pending.data {
            self.data.clear();
            self.data
                .extend_from_slice(chunk.get(start..end).unwrap_or_default());
            self.pending.data = Data::Owned;
        }
    }

    /// A blank line: the event is complete.
    fn dispatch(&mut self, chunk: &[u8]) -> Option<Event> {
        let pending = std::mem::take(&mut self.pending);
        if pending.skipping || !pending.any {
            return None;
        }
        let data = match pending.data {
            Data::None => None,
            Data::InChunk(start, end) => chunk.get(start..end),
            Data::Owned => Some(self.data.as_slice()),
        };
        let read = classify::Read {
            name: pending.name(),
            data: data.filter(|d| !d.iter().all(u8::is_ascii_whitespace)),
            oversized: pending.oversized,
            saw_content: self.saw_content,
        };
        let event = match self.skip_content {
            true => after_commit::event(self.dialect, &read, &mut self.responses),
            false => classify::event(self.dialect, &read, &mut self.responses),
        };
        self.data = release(std::mem::take(&mut self.data));
        self.data.clear();
        Some(event)
    }
}

/// A buffer that grew large for one event is given back rather than held for the stream.
fn release(buffer: Vec<u8>) -> Vec<u8> {
    match buffer.capacity() > KEEP {
        true => Vec::new(),
        false => buffer,
    }
}

/// The value of a line after its field's `field` bytes (one space after the colon dropped) and
/// the offset of its `\n` in `line`, when it ends in `\n` alone within `MAX_LINE`.
fn simple_line(line: &[u8], field: usize) -> Option<(&[u8], usize)> {
    let end = memchr2(b'\n', b'\r', line)?;
    if line.get(end) != Some(&b'\n') || field + end > MAX_LINE {
        return None;
    }
    let value = line.get(..end)?;
    Some((value.strip_prefix(b" ").unwrap_or(value), end))
}

/// An event whole in a chunk in the shape providers send: an optional `event:` line, one
/// `data:` line holding a JSON object, a blank line, each line ended by `\n` alone.
struct SimpleEvent<'a> {
    /// Its name, when it has one of at most `MAX_NAME` UTF-8 bytes (else it is no simple one).
    name: Option<&'a [u8]>,
    /// Its data (one space after the colon dropped).
    data: &'a [u8],
    /// The offset in the chunk just past its blank line.
    end: usize,
}

/// The event at `pos` in `chunk` if it is a [`SimpleEvent`]: read as the line-by-line framing
/// would read it, without its bookkeeping.
fn simple_event(chunk: &[u8], pos: usize) -> Option<SimpleEvent<'_>> {
    let (name, at) = match chunk.get(pos..)?.strip_prefix(b"event:") {
        Some(line) => {
            let (name, end) = simple_line(line, b"event:".len())?;
            // A name too long to keep, empty or not UTF-8 reads as none: left to the framing.
            let utf8 = text::utf8(name).is_some();
            if name.is_empty() || name.len() > MAX_NAME || !utf8 {
                return None;
            }
            (Some(name), pos + b"event:".len() + end + 1)
        }
        None => (None, pos),
    };
    let line = chunk.get(at..)?.strip_prefix(b"data:")?;
    let (data, end) = simple_line(line, b"data:".len())?;
    // The blank line that ends the event.
    let after = at + b"data:".len() + end + 1;
    if chunk.get(after) != Some(&b'\n') || !data.starts_with(b"{") {
        return None;
    }
    let end = after + 1;
    Some(SimpleEvent { name, data, end })
}

/// A line's field and value (one space after the colon dropped).
fn field(line: &[u8]) -> Field<'_> {
    if line.is_empty() {
        return Field::Blank;
    }
    if line.first() == Some(&b':') {
        return Field::Comment;
    }
    let (name, value) = match memchr::memchr(b':', line) {
        Some(i) => {
            let (name, rest) = line.split_at(i);
            let value = rest.get(1..).unwrap_or_default();
            (name, value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &b""[..]),
    };
    match name {
        b"data" => Field::Data(value),
        b"event" => Field::Event(value),
        b"id" | b"retry" => Field::Ignored,
        _ => Field::Unknown,
    }
}
