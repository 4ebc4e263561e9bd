//! SSE framing (HTML Living Standard, "Server-sent events", "Interpreting an event stream"):
//! the provider's chunks into lines, lines into events, whatever the chunks' ends.

use super::{Overflow, MAX_CARRY};
use memchr::{memchr, memchr2};

/// A carry buffer grown past this for a large event is given back after it.
const KEEP: usize = 64 << 10;
/// An event name longer than this is none the translators know.
pub(super) const MAX_NAME: usize = 64;
/// A UTF-8 byte order mark, skipped at the start of the stream (SSE: "a single U+FEFF … at
/// the start of the stream … must be ignored").
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Chunks into lines, lines into events: `on(name, data)` for each complete event.
#[derive(Debug, Default)]
pub(super) struct Framer {
    /// A line begun in an earlier chunk.
    pub(super) line: Vec<u8>,
    /// The last chunk ended in `\r`: a `\n` next ends no further line.
    after_cr: bool,
    /// A line has been read (a byte order mark may only start the first).
    started: bool,
    pub(super) name: Vec<u8>,
    pub(super) data: Vec<u8>,
    has_data: bool,
}

impl Framer {
    pub(super) fn push(
        &mut self,
        chunk: &[u8],
        on: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), Overflow> {
        if chunk.is_empty() {
            return Ok(());
        }
        let mut rest = chunk;
        if std::mem::take(&mut self.after_cr) {
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        // SSE: a line ends at CRLF, LF or CR.
        while let Some(i) = memchr2(b'\n', b'\r', rest) {
            let (text, tail) = rest.split_at(i);
            let mut next = tail.get(1..).unwrap_or_default();
            if tail.first() == Some(&b'\r') {
                match next.first() {
                    Some(b'\n') => next = next.get(1..).unwrap_or_default(),
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if self.line.is_empty() {
                self.line(text, on)?;
            } else {
                self.carry(text)?;
                let line = std::mem::take(&mut self.line);
                let read = self.line(&line, on);
                self.line = line;
                self.line.clear();
                shrink(&mut self.line);
                read?;
            }
            rest = next;
        }
        self.carry(rest)
    }

    /// The stream ended: a last line and event lacking their ends are read as if they had them.
    pub(super) fn finish(&mut self, on: &mut impl FnMut(&[u8], &[u8])) -> Result<(), Overflow> {
        self.after_cr = false;
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line(&line, on)?;
        }
        self.dispatch(on);
        Ok(())
    }

    fn carry(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        if self.line.len() + bytes.len() > MAX_CARRY {
            return Err(Overflow);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line(&mut self, text: &[u8], on: &mut impl FnMut(&[u8], &[u8])) -> Result<(), Overflow> {
        let text = match std::mem::replace(&mut self.started, true) {
            false => text.strip_prefix(BOM).unwrap_or(text),
            true => text,
        };
        if text.is_empty() {
            self.dispatch(on);
            return Ok(());
        }
        // SSE: `field: value` (one space after the colon dropped); a leading colon, a comment.
        let (field, value) = match memchr(b':', text) {
            Some(0) => return Ok(()),
            Some(i) => {
                let value = text.get(i + 1..).unwrap_or_default();
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (text.get(..i).unwrap_or_default(), value)
            }
            None => (text, &[][..]),
        };
        match field {
            b"event" => {
                self.name.clear();
                let known = value.len() <= MAX_NAME;
                self.name
                    .extend_from_slice(if known { value } else { b"?" });
            }
            b"data" => {
                if self.data.len() + 1 + value.len() > MAX_CARRY {
                    return Err(Overflow);
                }
                if std::mem::replace(&mut self.has_data, true) {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            _ => {}
        }
        Ok(())
    }

    /// A blank line: the event is complete (SSE: an event without data is not dispatched).
    fn dispatch(&mut self, on: &mut impl FnMut(&[u8], &[u8])) {
        if std::mem::take(&mut self.has_data) {
            on(&self.name, &self.data);
        }
        self.name.clear();
        self.data.clear();
        shrink(&mut self.data);
    }
}

fn shrink(buffer: &mut Vec<u8>) {
    if buffer.capacity() > KEEP {
        buffer.shrink_to(KEEP);
    }
}
