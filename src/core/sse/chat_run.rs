//! A run of plain chat events past the commit point, read from the line ends and stop bytes of
//! 64-byte blocks ([`simd::line_blocks`], x86_64 with AVX2) rather than one `memchr2` call per
//! event and a pair search for `"error"` over the chunk. Elsewhere no block is read and the
//! whole run is the per-event reading's (the watcher's, event by event with [`data_event`]).
//!
//! The events it passes are exactly those the per-event reading passes ([`data_event`]'s,
//! stopped before the first `"error"`): each one `data:` line whose value (after
//! one space) starts a JSON object, ended by `\n` and a blank `\n` line within `MAX_LINE`,
//! with no `"error"` in it. A `\r` anywhere in an event, or a `"error"` (its `rr` is the stop
//! pair), ends the run before that event; a line end not followed by the blank line ends it
//! too. The reading at the end of a chunk, where a block and the byte after it no longer fit,
//! is left to the per-event reading.

use super::after_commit::ERROR_KEY;
use super::MAX_LINE;
use crate::core::simd::{self, LineMasks};
use memchr::memchr2;

/// Where a run read block by block stands.
struct Blocks {
    /// The start of the event not yet passed (its `data:` line checked).
    at: usize,
    /// Events passed.
    passed: u32,
    /// An event that is not plain, or a `"error"`, ended the run at `at`.
    ended: bool,
}

/// The run of plain chat events from `pos` (an event's start) as far as the blocks read it:
/// where it stands (the start of the first event not passed), how many events it passed, and
/// whether the run ended there. When it did not, the rest of the chunk from there is for the
/// per-event reading.
pub(super) fn blocks(chunk: &[u8], pos: usize) -> (usize, u32, bool) {
    if !data_object_at(chunk, pos) {
        return (pos, 0, false);
    }
    let mut run = Blocks {
        at: pos,
        passed: 0,
        ended: false,
    };
    simd::line_blocks(chunk, pos, |block, masks| run.block(chunk, block, masks));
    (run.at, run.passed, run.ended)
}

impl Blocks {
    /// Reads one block's line ends and stops in order; `false` once the run ended. An empty
    /// mask's `trailing_zeros` is 64, past every place in the block: the other mask goes first.
    fn block(&mut self, chunk: &[u8], block: usize, (mut lines, mut stops): LineMasks) -> bool {
        // Only the blank line's `\n` of the event passed last in the block before can lie
        // before `at` here.
        if self.at > block {
            lines &= !1;
        }
        while lines | stops != 0 {
            let (l, s) = (lines.trailing_zeros(), stops.trailing_zeros());
            if s < l {
                if !passes(chunk, block + s as usize) {
                    self.ended = true;
                    return false;
                }
                stops &= stops - 1;
            } else {
                if !self.line_end(chunk, block + l as usize) {
                    self.ended = true;
                    return false;
                }
                // This line end and its blank line's (checked there), if it is in this block.
                lines &= !(3u64 << l);
            }
        }
        true
    }

    /// The line end at `l` of the event at `at`: passes it if the blank line follows within
    /// `MAX_LINE`; `false` if the run ends (there, or at the next event's start, which must be
    /// another `data:` line of a JSON object).
    fn line_end(&mut self, chunk: &[u8], l: usize) -> bool {
        if chunk.get(l + 1) != Some(&b'\n') || l - self.at > MAX_LINE {
            return false;
        }
        self.passed += 1;
        self.at = l + 2;
        data_object_at(chunk, self.at)
    }
}

/// Whether the stop byte at `s` lets the run go on: an `r` pair that is not the `rr` of a
/// `"error"`.
fn passes(chunk: &[u8], s: usize) -> bool {
    let error = s >= 2 && chunk.get(s - 2..s - 2 + ERROR_KEY.len()) == Some(ERROR_KEY);
    chunk.get(s) == Some(&b'r') && !error
}

/// The end (past its blank line) of the event at `pos` in `chunk` if it is one `data:` line
/// whose value (after one space) starts a JSON object, ended by `\n` and a blank `\n` line,
/// within `MAX_LINE`: a `SimpleEvent` without a name. It reads the `data:` line as
/// `simple_event` does but returns only the end: built on that reading (its data and end
/// returned), the `.wasm`'s chat stream ran 30k instructions more a request (callgrind,
/// 100 KiB: 903,034 -> 933,354).
pub(super) fn data_event(chunk: &[u8], pos: usize) -> Option<usize> {
    let value = data_object(chunk, pos)?;
    let end = memchr2(b'\n', b'\r', value)?;
    let line_end = pos + (chunk.len() - pos - value.len()) + end;
    let ended = chunk.get(line_end..line_end + 2) == Some(b"\n\n");
    (ended && line_end - pos <= MAX_LINE).then_some(line_end + 2)
}

/// The rest of `chunk` from the value of the `data:` line at `pos` (one space after the colon
/// dropped) when that value starts a JSON object.
fn data_object(chunk: &[u8], pos: usize) -> Option<&[u8]> {
    let line = chunk.get(pos..)?.strip_prefix(b"data:")?;
    let value = line.strip_prefix(b" ").unwrap_or(line);
    (value.first() == Some(&b'{')).then_some(value)
}

/// Whether a `data:` line whose value starts a JSON object starts at `pos`.
fn data_object_at(chunk: &[u8], pos: usize) -> bool {
    // The form every provider sends first, as two overlapping 4-byte compares natively. (In
    // `data_object`, the `.wasm`'s per-event reading, V8 made it 26k instructions more a
    // 100 KiB chat stream: 859,414 -> 885,093.)
    chunk.get(pos..pos + 7) == Some(b"data: {") || data_object(chunk, pos).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's masks are the byte-at-a-time ones, for every block of random bytes rich
    /// in the bytes it looks for, from every start.
    #[test]
    fn the_kernel_masks_are_the_bytewise_ones() {
        let mut rng = fastrand::Rng::with_seed(11);
        let alphabet = b"\n\r\r\"rrea{}x ";
        for _ in 0..2_000 {
            let len = rng.usize(0..300);
            let b: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let from = rng.usize(0..=len);
            let mut seen = Vec::new();
            let end = simd::line_blocks(&b, from, |at, masks| {
                seen.push((at, masks));
                true
            });
            if end == from && seen.is_empty() && len >= from + 65 {
                // No kernel on this platform: nothing to compare.
                continue;
            }
            let mut want = Vec::new();
            let mut at = from;
            while at + 65 <= len {
                let masks = simd::line_masks_scalar(&b, at);
                if masks != (0, 0) {
                    want.push((at, masks));
                }
                at += 64;
            }
            assert_eq!(seen, want, "{b:?} from {from}");
            assert_eq!(end, at);
        }
    }
}
