//! Passing a run of whole lines at once when no value in them can be rewritten.
//!
//! A value is rewritten only under a key `id`, `previous_response_id` or `encrypted_content`
//! (the rule in the parent module), and the provider sends its keys unescaped, so a value can
//! be rewritten only after the bytes `"id"`, `"previous_response_id"` or `"encrypted_content"`
//! were read, unless such a key is already pending on the path. A Responses stream names them
//! in a few lifecycle events; its text deltas, nearly all of a long answer, hold none. Each
//! key is searched for once over a chunk ([`PairFinder`]), and the lines before the `data:` line
//! that holds the next one go out as they came: a raw newline ends any string, and a `data:`
//! line starts a new value, so reading them one by one could change neither them nor where
//! the rewriter stands after them. Callgrind, a 100 KiB Responses stream: reading each text
//! delta line cost about 1,100 instructions (bit masks of its quotes and brackets with SIMD
//! cost as much, `memchr2_iter` over its quotes more).

use crate::core::pair_search::PairFinder;
use memchr::memmem;
use std::sync::LazyLock;

/// The keys after which a value may be rewritten, as sent, each found by a pair of its bytes
/// that a Responses stream's text deltas rarely hold at that distance: the two quotes around
/// `id`; `v` and the second `_` of `previous_response_id` (its two `_` are as far apart as
/// those of `"item_id":"msg_`, in every delta event); `y` and the `_` of `encrypted_content`.
static KEYS: LazyLock<[PairFinder; 3]> = LazyLock::new(|| {
    [
        PairFinder::new(b"\"id\"", 0, 3),
        PairFinder::new(b"\"previous_response_id\"", 4, 18),
        PairFinder::new(b"\"encrypted_content\"", 5, 10),
    ]
});

/// What starts an SSE `data:` line after the line before it.
const DATA_LINE: &[u8] = b"\ndata:";

/// The next place of each key in one chunk, found once.
#[derive(Debug)]
pub(super) struct Lookahead {
    /// Where each key is next found at or after where it was last looked for; `usize::MAX`
    /// when it is not in the rest of the chunk.
    next: [usize; 3],
    /// For the first key found (its place), the last `data:` line before it, if any.
    landing: Option<(usize, Option<usize>)>,
}

impl Lookahead {
    /// The keys' first places in `chunk`.
    pub fn new(chunk: &[u8]) -> Self {
        let next = KEYS
            .each_ref()
            .map(|key| key.find(chunk).unwrap_or(usize::MAX));
        Lookahead {
            next,
            landing: None,
        }
    }

    /// From `at`, a line start where no key is pending on the rewriter's path, the start of
    /// the last `data:` line before the next key (the end of the chunk if none follows):
    /// every byte before it can go out as it came. `None` when there is no such line after
    /// `at`.
    pub fn landing(&mut self, chunk: &[u8], at: usize) -> Option<usize> {
        let key = self.next_key(chunk, at);
        let landing = match self.landing {
            Some((for_key, landing)) if for_key == key => landing,
            _ => {
                let before = chunk.get(at..key).unwrap_or_default();
                let landing = memmem::rfind(before, DATA_LINE).map(|i| at + i + 1);
                self.landing = Some((key, landing));
                landing
            }
        };
        // Once passed, the landing is the last before that key: none is left after `at`.
        landing.filter(|&landing| landing > at)
    }

    /// Where the first key at or after `at` starts (the chunk's length if none).
    fn next_key(&mut self, chunk: &[u8], at: usize) -> usize {
        for (next, key) in self.next.iter_mut().zip(KEYS.iter()) {
            if *next < at {
                let rest = chunk.get(at..).unwrap_or_default();
                *next = key.find(rest).map_or(usize::MAX, |i| at + i);
            }
        }
        self.next
            .into_iter()
            .min()
            .unwrap_or(usize::MAX)
            .min(chunk.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_before_the_data_line_of_the_next_key_are_passed() {
        let chunk =
            b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: {\"id\":\"resp_x\"}\n\ndata: {}\n";
        let find = |what: &[u8]| chunk.windows(what.len()).position(|w| w == what).unwrap();
        let (id_line, last) = (find(b"data: {\"id"), find(b"data: {}"));
        let mut ahead = Lookahead::new(chunk);
        assert_eq!(ahead.landing(chunk, 0), Some(id_line));
        // At the key's line itself, nothing is left to pass before it.
        assert_eq!(ahead.landing(chunk, id_line), None);
        // Past the key: the last `data:` line of the chunk.
        let after_key = find(b"}\n\ndata: {}") + 2;
        assert_eq!(ahead.landing(chunk, after_key), Some(last));
        assert_eq!(ahead.landing(chunk, last), None);
    }

    #[test]
    fn a_chunk_with_no_data_line_after_the_start_passes_nothing() {
        let chunk = b"{\n  \"output\": [\n  ]\n}\n";
        let mut ahead = Lookahead::new(chunk);
        assert_eq!(ahead.landing(chunk, 0), None);
        assert_eq!(ahead.landing(chunk, 2), None);
    }

    #[test]
    fn each_key_stops_the_run_before_its_line() {
        for key in [
            "\"id\"",
            "\"previous_response_id\"",
            "\"encrypted_content\"",
        ] {
            let chunk = format!("data: {{}}\ndata: {{{key}:\"v\"}}\ndata: {{}}\n");
            let chunk = chunk.as_bytes();
            let mut ahead = Lookahead::new(chunk);
            assert_eq!(ahead.landing(chunk, 0), Some(9), "{key}");
        }
    }
}
