//! A run of plain chat events past the commit point, read from the line ends and stop bytes of
//! 64-byte blocks ([`simd::line_blocks`], x86_64 with AVX2) rather than one `memchr2` call per
//! event and a pair search for `"error"` over the chunk. Elsewhere no block is read and the
//! whole run is the per-event reading's.
//!
//! The events it passes are exactly those the per-event reading passes ([`super::lines`]'s
//! `data_event`, stopped before the first `"error"`): each one `data:` line whose value (after
//! one space) starts a JSON object, ended by `\n` and a blank `\n` line within `MAX_LINE`,
//! with no `"error"` in it. A `\r` anywhere in an event, or a `"error"` (its `rr` is the stop
//! pair), ends the run before that event; a line end not followed by the blank line ends it
//! too. The reading at the end of a chunk, where a block and the byte after it no longer fit,
//! is left to the per-event reading.

use super::after_commit::ERROR_KEY;
use super::lines::data_object_at;
use super::MAX_LINE;
use crate::core::simd::{self, LineMasks};

/// Where a run read block by block stands.
struct Blocks {
    /// The start of the event not yet passed (its `data:` line checked).
    at: usize,
    /// Events passed.
    passed: u32,
    /// Line ends before this were read (a blank line's `\n` in the next block).
    next: usize,
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
        next: pos,
        ended: false,
    };
    simd::line_blocks(chunk, pos, |block, masks| run.block(chunk, block, masks));
    (run.at, run.passed, run.ended)
}

impl Blocks {
    /// Reads one block's line ends and stops in order; `false` once the run ended.
    fn block(&mut self, chunk: &[u8], block: usize, (mut lines, mut stops): LineMasks) -> bool {
        // Only a blank line's `\n` read with the block before can lie before `next` here.
        if self.next > block {
            lines &= !1;
        }
        loop {
            let line = (lines != 0).then(|| block + lines.trailing_zeros() as usize);
            let stop = (stops != 0).then(|| block + stops.trailing_zeros() as usize);
            match (line, stop) {
                (_, Some(s)) if line.is_none_or(|l| s < l) => {
                    if !passes(chunk, s) {
                        self.ended = true;
                        return false;
                    }
                    stops &= stops - 1;
                }
                (Some(l), _) => {
                    if !self.line_end(chunk, l) {
                        self.ended = true;
                        return false;
                    }
                    // This line end and its blank line's, if it is in this block.
                    lines &= lines - 1;
                    lines &= !(1u64.checked_shl((l + 1 - block) as u32).unwrap_or(0));
                }
                (None, _) => return true,
            }
        }
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
        self.next = l + 2;
        data_object_at(chunk, self.at)
    }
}

/// Whether the stop byte at `s` lets the run go on: an `r` pair that is not the `rr` of a
/// `"error"`.
fn passes(chunk: &[u8], s: usize) -> bool {
    let error = s >= 2 && chunk.get(s - 2..s - 2 + ERROR_KEY.len()) == Some(ERROR_KEY);
    chunk.get(s) == Some(&b'r') && !error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sse::{Dialect, Watcher};

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

    /// One random chat event: mostly plain, sometimes each thing that ends a run.
    fn event(rng: &mut fastrand::Rng, out: &mut Vec<u8>) {
        let text_len = rng.usize(0..200);
        let words: [&[u8]; 9] = [
            b"lorem ",
            b"sorry ",
            b"an error ",
            b"rr",
            b"\\\"x\\\" ",
            b"r",
            b"\\n",
            b"",
            b"ok ",
        ];
        let mut text = Vec::new();
        while text.len() < text_len {
            text.extend_from_slice(words[rng.usize(..words.len())]);
        }
        let value = [
            b"{\"choices\":[{\"delta\":{\"content\":\"".as_slice(),
            &text,
            b"\"}}]}",
        ]
        .concat();
        match rng.u8(..40) {
            0 => out.extend_from_slice(b"data: [DONE]\n\n"),
            1 => out.extend_from_slice(b"event: x\n"),
            2 => out.extend_from_slice(b": keep-alive\n\n"),
            3 => out.extend_from_slice(b"data: {\"error\":{\"message\":\"m\"}}\n\n"),
            4 => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\r\n\r\n");
            }
            5 => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\ndata: {}\n\n");
            }
            6 => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\n");
            }
            7 => {
                out.extend_from_slice(b"data: {\"e\":\"\r\"}\n\n");
            }
            n => {
                out.extend_from_slice(if n % 2 == 0 { b"data: " } else { b"data:" });
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\n\n");
            }
        }
    }

    /// The run read by blocks passes the events the per-event reading passes and ends where it
    /// ends, from every event start of random chat streams and cut at random ends.
    #[test]
    fn a_run_read_by_blocks_is_the_run_read_by_events() {
        let mut rng = fastrand::Rng::with_seed(5);
        let mut compared = 0;
        for _ in 0..3_000 {
            let mut stream = Vec::new();
            let mut starts = Vec::new();
            for _ in 0..rng.usize(1..30) {
                starts.push(stream.len());
                event(&mut rng, &mut stream);
            }
            stream.truncate(rng.usize(stream.len() / 2..=stream.len()));
            for &pos in starts.iter().filter(|&&p| p <= stream.len()) {
                let by_blocks = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, pos);
                let by_events = Watcher::new(Dialect::ChatCompletions).chat_events(&stream, pos);
                assert_eq!(
                    (by_blocks.0, by_blocks.1),
                    by_events,
                    "from {pos}: {}",
                    String::from_utf8_lossy(&stream)
                );
                compared += 1;
            }
        }
        assert!(compared > 10_000, "{compared}");
    }

    /// A long run of plain events is read by the blocks (where the platform has the kernel),
    /// and stopped before an `"error"` or a `\r` far into it.
    #[test]
    fn a_long_run_stops_before_an_error_or_a_carriage_return() {
        let plain = b"data: {\"choices\":[{\"delta\":{\"content\":\"sorry, no error here\"}}]}\n\n";
        for stop in [
            &b"data: {\"error\":{\"message\":\"m\"}}\n\n"[..],
            b"data: {\"a\":\"\r\"}\n\n",
        ] {
            let mut stream = plain.repeat(40);
            let before = stream.len();
            stream.extend_from_slice(stop);
            stream.extend_from_slice(&plain.repeat(10));
            let (at, passed, _) = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, 0);
            assert_eq!((at, passed), (before, 40));
            let (at, passed, ended) = blocks(&stream, 0);
            if at != 0 {
                assert!(
                    ended && passed == 40 && at == before,
                    "{at} {passed} {ended}"
                );
            }
        }
    }

    /// An event whose `data:` line is longer than `MAX_LINE` ends the run, as the per-event
    /// reading ends it (the framing drops such a line's bytes).
    #[test]
    fn a_line_over_the_bound_ends_the_run() {
        let plain = b"data: {\"choices\":[]}\n\n";
        let mut stream = plain.repeat(3);
        let long_at = stream.len();
        stream.extend_from_slice(b"data: {\"c\":\"");
        stream.resize(long_at + MAX_LINE + 1, b'a');
        stream.extend_from_slice(b"\"}\n\n");
        stream.extend_from_slice(&plain.repeat(3));
        let run = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, 0);
        assert_eq!((run.0, run.1), (long_at, 3));
    }
}
