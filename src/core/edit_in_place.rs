//! A body's [`Edits`] written over the host's own buffer, for a host that lends its body's
//! slices for writing: Envoy's dynamic modules hand out the request body as slices whose
//! memory "is mutable and can be modified in place" (Envoy's Rust SDK, `EnvoyMutBuffer`),
//! while the ABI's only other edit drains from the front and appends, which re-sends every
//! byte. Written in place, only the bytes that must move are copied: none when the edit keeps
//! the body's length (a shorter model name is padded with JSON whitespace, `request::rewrite`),
//! else the bytes after an edit that lengthens the body, or before one that shortens it.
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
/// they do not or an edit lies outside the body. (A false later, which sorted edits that fit
/// cannot give, would leave the slices part written: the caller then replaces the body whole.)
pub fn apply(edits: &Edits, len: usize, parts: &mut [&mut [u8]]) -> bool {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let new_len = edits.len_after(len);
    let fits = edits.as_slice().last().is_none_or(|e| e.span.end <= len);
    if !fits || total != len.max(new_len) {
        return false;
    }
    let start = total - new_len;
    let mut body = Parts { parts };
    // A run moving right can only land on runs after it, and one moving left on runs before
    // it: the first kind back to front, then the second front to back, reads every run
    // before anything lands on it.
    let right = kept_back_to_front(edits, len, total).filter(|m| m.to > m.from.start);
    let left = kept(edits, len, start).filter(|m| m.to < m.from.start);
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

/// One run of the client's bytes the edit keeps: where it is, and where it goes.
struct Move {
    from: Range<usize>,
    to: usize,
}

/// The kept runs of a `len`-byte body in order, with where each lands when the edited body
/// starts at `start`.
fn kept(edits: &Edits, len: usize, start: usize) -> impl Iterator<Item = Move> + '_ {
    let mut edits = edits.as_slice().iter();
    let (mut read, mut to, mut done) = (0, start, false);
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let next = edits.next();
        let end = next.map_or(len, |e| e.span.start);
        let run = Move {
            from: read..end,
            to,
        };
        match next {
            Some(e) => {
                to += end - read + e.with.len();
                read = e.span.end;
            }
            None => done = true,
        }
        Some(run)
    })
}

/// [`kept`] back to front, for an edited body ending at `end`.
fn kept_back_to_front(edits: &Edits, len: usize, end: usize) -> impl Iterator<Item = Move> + '_ {
    let mut edits = edits.as_slice().iter().rev();
    let (mut unread, mut to_end, mut done) = (len, end, false);
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let prev = edits.next();
        let start = prev.map_or(0, |e| e.span.end);
        let run = Move {
            from: start..unread,
            to: to_end - (unread - start),
        };
        match prev {
            Some(e) => {
                to_end = run.to - e.with.len();
                unread = e.span.start;
            }
            None => done = true,
        }
        Some(run)
    })
}

/// Slices read as one run of bytes.
struct Parts<'a, 'b> {
    parts: &'a mut [&'b mut [u8]],
}

impl Parts<'_, '_> {
    /// The part holding byte `at`, and the byte's offset in it. Walked from the front: a body
    /// is a few slices (a 1 MB one about 64), and each step of a move copies up to a slice.
    fn find(&self, mut at: usize) -> Option<(usize, usize)> {
        for (i, part) in self.parts.iter().enumerate() {
            if at < part.len() {
                return Some((i, at));
            }
            at -= part.len();
        }
        None
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
