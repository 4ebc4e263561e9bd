//! A body's [`Edits`] written over the host's own buffer, for a host that lends its body's
//! slices for writing: Envoy's dynamic modules hand out the request body as slices whose
//! memory "is mutable and can be modified in place" (Envoy's Rust SDK, `EnvoyMutBuffer`),
//! while the ABI's only other edit drains from the front and appends, which re-sends every
//! byte. Written in place, only the bytes that must move are copied: none when the edit keeps
//! the body's length (a shorter model name is padded with JSON whitespace, `request::rewrite`),
//! else those on one side of the first edit that changes it.
//!
//! The body's `len` bytes sit at the start of the slices. A body that grows needs the host to
//! append `grow` bytes first; one that shrinks is written to end where the body ends, and the
//! host then drains `shrink` bytes from the front (cheaper than moving what follows the edit).

use super::request::Edits;
use std::ops::Range;

/// How the host's buffer changes length around an in-place edit of a `len`-byte body: append
/// `grow` bytes before [`apply`], drain `shrink` from the front after it. One is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    pub grow: usize,
    pub shrink: usize,
}

/// What the host must do to its buffer's length for `edits` on a `len`-byte body.
pub fn resize(edits: &Edits, len: usize) -> Resize {
    let new_len = edits.len_after(len);
    Resize {
        grow: new_len.saturating_sub(len),
        shrink: len.saturating_sub(new_len),
    }
}

/// Writes `edits`, applied to the `len`-byte body at the start of `parts`, over `parts`: the
/// edited body then ends where `parts` end (a body that shrank starts [`Resize::shrink`] bytes
/// in). `parts` must hold `len` plus [`Resize::grow`] bytes; false, with nothing written, if
/// they do not or an edit lies outside the body.
pub fn apply(edits: &Edits, len: usize, parts: &mut [&mut [u8]]) -> bool {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let new_len = edits.len_after(len);
    let fits = edits.as_slice().last().is_none_or(|e| e.span.end <= len);
    if !fits || total != len.max(new_len) {
        return false;
    }
    let start = total - new_len;
    let mut body = Parts::new(parts);
    let moves = moves(edits, len, start);
    // A piece moving right can only land on pieces after it, and one moving left on pieces
    // before it: the first kind back to front, then the second front to back, reads every
    // piece before anything lands on it.
    let right = moves.iter().rev().filter(|m| m.to > m.from.start);
    let left = moves.iter().filter(|m| m.to < m.from.start);
    for m in right.chain(left) {
        if body.move_bytes(m.from.clone(), m.to).is_none() {
            return false;
        }
    }
    let (mut at, mut read) = (start, 0);
    for e in edits.as_slice() {
        at += e.span.start - read;
        if body.write(at, &e.with).is_none() {
            return false;
        }
        at += e.with.len();
        read = e.span.end;
    }
    true
}

/// One run of the client's bytes kept by the edit: where it is, and where it goes.
struct Move {
    from: Range<usize>,
    to: usize,
}

/// The kept runs of a `len`-byte body, with where each lands when the edited body starts at
/// `start`.
fn moves(edits: &Edits, len: usize, start: usize) -> Vec<Move> {
    let mut moves = Vec::with_capacity(edits.as_slice().len() + 1);
    let (mut read, mut to) = (0, start);
    for e in edits.as_slice() {
        moves.push(Move {
            from: read..e.span.start,
            to,
        });
        to += e.span.start - read + e.with.len();
        read = e.span.end;
    }
    moves.push(Move {
        from: read..len,
        to,
    });
    moves.retain(|m| !m.from.is_empty());
    moves
}

/// Slices read as one run of bytes.
struct Parts<'a, 'b> {
    parts: &'a mut [&'b mut [u8]],
    /// Where each part starts in the run.
    starts: Vec<usize>,
}

impl<'a, 'b> Parts<'a, 'b> {
    fn new(parts: &'a mut [&'b mut [u8]]) -> Self {
        let mut at = 0;
        let starts = parts
            .iter()
            .map(|p| {
                let start = at;
                at += p.len();
                start
            })
            .collect();
        Parts { parts, starts }
    }

    /// The part holding byte `at`, and the byte's offset in it. The last part starting at or
    /// before `at` holds it (an empty part starts where the next one does), if `at` is in.
    fn find(&self, at: usize) -> Option<(usize, usize)> {
        let i = self.starts.partition_point(|s| *s <= at).checked_sub(1)?;
        let off = at - self.starts.get(i)?;
        (off < self.parts.get(i)?.len()).then_some((i, off))
    }

    /// Copies `from` to start at `to`, as `memmove` would over one run.
    fn move_bytes(&mut self, from: Range<usize>, to: usize) -> Option<()> {
        let mut left = from.len();
        while left > 0 {
            let step = if to > from.start {
                // Back to front: the last `left` bytes' end, one run at a time.
                let (si, so) = self.find(from.start + left - 1)?;
                let (di, d_o) = self.find(to + left - 1)?;
                let run = left.min(so + 1).min(d_o + 1);
                self.copy_run((si, so + 1 - run), (di, d_o + 1 - run), run)?;
                run
            } else {
                let done = from.len() - left;
                let (si, so) = self.find(from.start + done)?;
                let (di, d_o) = self.find(to + done)?;
                let run = left
                    .min(self.parts.get(si)?.len() - so)
                    .min(self.parts.get(di)?.len() - d_o);
                self.copy_run((si, so), (di, d_o), run)?;
                run
            };
            left -= step;
        }
        Some(())
    }

    /// Copies `run` bytes within one part or from one part to another.
    fn copy_run(
        &mut self,
        (si, so): (usize, usize),
        (di, d_o): (usize, usize),
        run: usize,
    ) -> Option<()> {
        if si == di {
            let part = self.parts.get_mut(si)?;
            part.get(so..so + run)?;
            part.get(d_o..d_o + run)?;
            part.copy_within(so..so + run, d_o);
            return Some(());
        }
        let (low, high) = self.parts.split_at_mut(si.max(di));
        let (a, b) = (low.get_mut(si.min(di))?, high.first_mut()?);
        let (src, dst) = if si < di { (&**a, b) } else { (&**b, a) };
        dst.get_mut(d_o..d_o + run)?
            .copy_from_slice(src.get(so..so + run)?);
        Some(())
    }

    /// Writes `bytes` starting at `at`.
    fn write(&mut self, mut at: usize, mut bytes: &[u8]) -> Option<()> {
        while !bytes.is_empty() {
            let (i, off) = self.find(at)?;
            let part = self.parts.get_mut(i)?;
            let run = bytes.len().min(part.len() - off);
            let (now, rest) = bytes.split_at(run);
            part.get_mut(off..off + run)?.copy_from_slice(now);
            bytes = rest;
            at += run;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests;
