//! Passing a run of whole lines at once when no value in them can be rewritten.
//!
//! A value is rewritten only under a key `id`, `previous_response_id` or `encrypted_content`
//! (the rule in the parent module), and the provider sends its keys unescaped, so a value can
//! be rewritten only after the bytes `"id"`, `"previous_response_id"` or `"encrypted_content"`
//! were read, unless such a key is already pending on the path. A Responses stream names them
//! in a few lifecycle events; its text deltas, nearly all of a long answer, hold none. The
//! keys are searched for in one pass over a chunk ([`first_key`]), and the lines before the
//! `data:` line that holds the next one go out as they came: a raw newline ends any string,
//! and a `data:` line starts a new value, so reading them one by one could change neither them
//! nor where the rewriter stands after them. Callgrind, a 100 KiB Responses stream: reading
//! each text delta line cost about 1,100 instructions (bit masks of its quotes and brackets
//! with SIMD cost as much, `memchr2_iter` over its quotes more).

use crate::core::pair_search::PairFinder;
use crate::core::simd;
use memchr::memmem;
use std::sync::LazyLock;

/// The keys after which a value may be rewritten, as sent, each with the pair of its bytes
/// (their offsets) it is found by, chosen as ones a Responses stream's text deltas rarely hold
/// at that distance: the two quotes around `id`; `v` and the second `_` of
/// `previous_response_id` (its two `_` are as far apart as those of `"item_id":"msg_`, in
/// every delta event); `y` and the `_` of `encrypted_content`.
const KEYS: [(&[u8], u8, u8); 3] = [
    (b"\"id\"", 0, 3),
    (b"\"previous_response_id\"", 4, 18),
    (b"\"encrypted_content\"", 5, 10),
];

/// The keys' pair searches, one a key: where the platform has no search for all three at once.
static FINDERS: LazyLock<[PairFinder; 3]> =
    LazyLock::new(|| KEYS.map(|(key, i, j)| PairFinder::new(key, i, j)));

/// The same pairs with their bytes, for the search for all three keys at once.
static PAIRS: LazyLock<[simd::Pair; 3]> = LazyLock::new(|| {
    KEYS.map(|(key, i, j)| {
        let byte = |at: u8| key.get(usize::from(at)).copied().unwrap_or_default();
        [(usize::from(i), byte(i)), (usize::from(j), byte(j))]
    })
});

/// What starts an SSE `data:` line after the line before it.
const DATA_LINE: &[u8] = b"\ndata:";

/// The next place of a key in one chunk, found once.
#[derive(Debug)]
pub(super) struct Lookahead {
    /// Where the first key at or after where keys were last looked for starts; `usize::MAX`
    /// when none is in the rest of the chunk.
    next: usize,
    /// For the first key found (its place), the last `data:` line before it, if any.
    landing: Option<(usize, Option<usize>)>,
}

impl Lookahead {
    /// The first key's place in `chunk`.
    pub fn new(chunk: &[u8]) -> Self {
        Lookahead {
            next: first_key(chunk, 0),
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
        if self.next < at {
            self.next = first_key(chunk, at);
        }
        self.next.min(chunk.len())
    }
}

/// Where the first key at or after `from` in `chunk` starts (`usize::MAX` if none): the three
/// searched for at once where the platform can ([`simd::first_of_pairs`]; callgrind, 100 KiB
/// Responses stream, instructions a request: native 1,165,272 one key at a time, 1,105,034 at
/// once; `.wasm` 1,583,695 and 1,508,432).
fn first_key(chunk: &[u8], from: usize) -> usize {
    let is_key = |at: usize| {
        let rest = chunk.get(at..).unwrap_or_default();
        KEYS.iter().any(|(key, _, _)| rest.starts_with(key))
    };
    let mut at = from;
    loop {
        match simd::first_of_pairs(chunk, at, &PAIRS) {
            None => break,
            Some(None) => return usize::MAX,
            Some(Some(candidate)) if is_key(candidate) => return candidate,
            Some(Some(candidate)) => at = candidate + 1,
        }
    }
    let rest = chunk.get(from..).unwrap_or_default();
    FINDERS
        .iter()
        .filter_map(|key| key.find(rest))
        .min()
        .map_or(usize::MAX, |i| from + i)
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

    /// The first key found at once is the first of the three found by `memmem`, from every
    /// start, over random chunks of the keys, their pieces and the bytes their pairs are made
    /// of, every length around the kernels' steps.
    #[test]
    fn the_first_key_is_the_first_of_the_three() {
        let mut rng = fastrand::Rng::with_seed(17);
        let pieces: [&[u8]; 10] = [
            b"\"id\"",
            b"\"previous_response_id\"",
            b"\"encrypted_content\"",
            b"\"item_id\":\"msg_1\"",
            b"\"i\"",
            b"v",
            b"_",
            b"y",
            b"\"",
            b"data: {}\n",
        ];
        for _ in 0..20_000 {
            let mut chunk = Vec::new();
            let len = rng.usize(0..400);
            while chunk.len() < len {
                match rng.u8(..4) {
                    0 => chunk.extend_from_slice(pieces[rng.usize(..pieces.len())]),
                    _ => chunk.push(b"ab \"_vy:"[rng.usize(..8)]),
                }
            }
            let from = rng.usize(0..=chunk.len());
            let expected = KEYS
                .iter()
                .filter_map(|(key, _, _)| memmem::find(&chunk[from..], key))
                .min()
                .map_or(usize::MAX, |i| from + i);
            assert_eq!(
                first_key(&chunk, from),
                expected,
                "{:?} from {from}",
                String::from_utf8_lossy(&chunk)
            );
        }
    }
}
