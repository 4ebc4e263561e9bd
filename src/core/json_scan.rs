//! A strict scan of a JSON object's top-level members that skips string contents without
//! decoding them: one SIMD pass ([`simd::plain_run`]) finds the next quote, backslash, control
//! byte or non-ASCII byte, which is all a string skip needs. The scan also checks the body is
//! UTF-8: outside strings the grammar admits only ASCII, and inside them each run of non-ASCII
//! bytes is validated where the pass stops at it (a UTF-8 sequence never holds an ASCII byte),
//! so a body it accepts needs no separate UTF-8 pass.
//!
//! It accepts exactly what serde_json accepts when it reads the object as keys and borrowed
//! `RawValue`s (RFC 8259 grammar as serde_json implements it): the same string escapes (a `\u`
//! escape needs four hex digits; in a value a lone surrogate such as `"\ud800"` is accepted, as
//! serde_json's `ignore_str` does; a key is decoded by serde_json itself), the same number
//! shapes, no nesting limit inside a value (serde_json's raw-value skip `ignore_value` keeps its
//! own stack and does not count depth), whitespace as JSON's four bytes. Anything else is
//! `None`, and the caller falls back to serde_json, which then gives its own error: a `None`
//! costs time, never a different answer.

use crate::core::simd;
use std::borrow::Cow;
use std::ops::Range;

/// Every top-level member: the decoded key (borrowed unless it holds escapes) and the span of
/// its value, from its first byte to just after its last.
pub type Members<'a> = Vec<(Cow<'a, str>, Range<usize>)>;

/// The run of plain bytes that starts a JSON string's contents (see [`simd::plain_run`]): the
/// Responses id rewriter skips the strings of a line with it too.
pub use crate::core::simd::plain_run as plain_string_run;

/// The top-level members of `b`, a UTF-8 JSON object with nothing but whitespace around it, or
/// `None` when it is not one (or holds a key only serde_json can judge).
pub fn top_level_members(b: &[u8]) -> Option<Members<'_>> {
    let mut at = skip_ws(b, 0);
    if b.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(b, at + 1);
    let mut out = Vec::with_capacity(8);
    let mut stack = Vec::new();
    if b.get(at) == Some(&b'}') {
        return (skip_ws(b, at + 1) == b.len()).then_some(out);
    }
    loop {
        if b.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(b, at + 1)?;
        let key = decode_key(b, at..key_end)?;
        at = skip_ws(b, key_end);
        if b.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_ws(b, at + 1);
        let stop = skip_value(b, start, &mut stack)?;
        out.push((key, start..stop));
        at = skip_ws(b, stop);
        match b.get(at)? {
            b',' => at = skip_ws(b, at + 1),
            b'}' => return (skip_ws(b, at + 1) == b.len()).then_some(out),
            _ => return None,
        }
    }
}

/// The key at `span` (quotes included): the bytes between the quotes when there is no escape,
/// else what serde_json decodes (it refuses what it cannot make a `str` of).
fn decode_key(b: &[u8], span: Range<usize>) -> Option<Cow<'_, str>> {
    let inner = b.get(span.start + 1..span.end - 1)?;
    if memchr::memchr(b'\\', inner).is_none() {
        // Already validated by the scan; a key is a few bytes to check again.
        return crate::core::text::utf8(inner).map(Cow::Borrowed);
    }
    serde_json::from_slice::<String>(b.get(span)?)
        .ok()
        .map(Cow::Owned)
}

/// Past JSON's whitespace (space, tab, line feed, carriage return) from `at`.
fn skip_ws(b: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(at) {
        at += 1;
    }
    at
}

/// Just past the value starting at `at`; `stack` holds the closers of the open arrays and
/// objects (one allocation reused across the members).
fn skip_value(b: &[u8], mut at: usize, stack: &mut Vec<u8>) -> Option<usize> {
    stack.clear();
    loop {
        match *b.get(at)? {
            b'"' => at = skip_string(b, at + 1)?,
            b'{' => {
                at = skip_ws(b, at + 1);
                if b.get(at) != Some(&b'}') {
                    stack.push(b'}');
                    at = skip_member_key(b, at)?;
                    continue;
                }
                at += 1;
            }
            b'[' => {
                at = skip_ws(b, at + 1);
                if b.get(at) != Some(&b']') {
                    stack.push(b']');
                    continue;
                }
                at += 1;
            }
            b't' => at = skip_literal(b, at, b"true")?,
            b'f' => at = skip_literal(b, at, b"false")?,
            b'n' => at = skip_literal(b, at, b"null")?,
            b'-' | b'0'..=b'9' => at = skip_number(b, at)?,
            _ => return None,
        }
        at = close_frames(b, at, stack)?;
        if stack.is_empty() {
            return Some(at);
        }
    }
}

/// After a complete value at `at`: past every `]`/`}` it completes, then past a `,` (and the
/// next member's key) to the next value; `stack` empty means the outer value is done.
fn close_frames(b: &[u8], mut at: usize, stack: &mut Vec<u8>) -> Option<usize> {
    while let Some(&close) = stack.last() {
        at = skip_ws(b, at);
        match *b.get(at)? {
            b',' => {
                at = skip_ws(b, at + 1);
                return if close == b'}' {
                    skip_member_key(b, at)
                } else {
                    Some(at)
                };
            }
            c if c == close => {
                stack.pop();
                at += 1;
            }
            _ => return None,
        }
    }
    Some(at)
}

/// A nested member's `"key" :` from `at`, to the first byte of its value.
fn skip_member_key(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let at = skip_ws(b, skip_string(b, at + 1)?);
    (b.get(at) == Some(&b':')).then(|| skip_ws(b, at + 1))
}

/// Just past the closing quote of the string whose contents start at `at`. A control byte
/// (below 0x20) inside a string is an error in JSON (RFC 8259 §7), and so is text that is not
/// UTF-8 (§8.1).
fn skip_string(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += simd::plain_run(b.get(at..)?);
        match *b.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => at = skip_escape(b, at + 1)?,
            0x80.. => at = skip_utf8(b, at)?,
            _ => return None,
        }
    }
}

/// Past the run of non-ASCII bytes at `at`, when it is whole UTF-8.
fn skip_utf8(b: &[u8], at: usize) -> Option<usize> {
    let rest = b.get(at..)?;
    let n = rest.iter().position(u8::is_ascii).unwrap_or(rest.len());
    simdutf8::basic::from_utf8(rest.get(..n)?).ok()?;
    Some(at + n)
}

/// Just past the escape whose letter is at `at`: `\" \\ \/ \b \f \n \r \t`, or `\u` and four
/// hex digits (any code unit, as serde_json's skip of a value does).
fn skip_escape(b: &[u8], at: usize) -> Option<usize> {
    match *b.get(at)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
        b'u' => {
            let hex = b.get(at + 1..at + 5)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(at + 5)
        }
        _ => None,
    }
}

fn skip_literal(b: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    (b.get(at..at + word.len())? == word).then_some(at + word.len())
}

/// Just past the number at `at`: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?.
/// A digit right after a leading `0` is left for the caller, which refuses it.
fn skip_number(b: &[u8], mut at: usize) -> Option<usize> {
    if b.get(at) == Some(&b'-') {
        at += 1;
    }
    match b.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at = skip_digits(b, at + 1),
        _ => return None,
    }
    if b.get(at) == Some(&b'.') {
        at = skip_some_digits(b, at + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = b.get(at) {
            at += 1;
        }
        at = skip_some_digits(b, at)?;
    }
    Some(at)
}

fn skip_digits(b: &[u8], mut at: usize) -> usize {
    while let Some(b'0'..=b'9') = b.get(at) {
        at += 1;
    }
    at
}

/// Past one or more digits, or `None` when there is none.
fn skip_some_digits(b: &[u8], at: usize) -> Option<usize> {
    let end = skip_digits(b, at);
    (end > at).then_some(end)
}

#[cfg(test)]
mod tests;
