//! Counting the tokens of an answer as it streams past, for the latency samples and the token
//! metrics.
//!
//! The count comes from `usage` when the provider reports it (`completion_tokens` in OpenAI JSON or
//! the final SSE chunk, `output_tokens` in Anthropic's and the Responses API's; the prompt's as
//! `prompt_tokens` or `input_tokens`), otherwise, for output and the latency samples only, from the
//! number of streamed content chunks (TrueFoundry virtual models, "Latency-based routing": TPOT
//! samples). Chunks are scanned as bytes, never parsed into a tree, and nothing of the body is
//! kept.

use super::pair_search::PairFinder;
use super::simd::{self, Pair};

/// Scans response body chunks for the output token count.
///
/// The places that matter are hits of two needles: `_tokens":`, the common end of the four
/// usage keys, and `t":"`, the common end of the two content markers; the bytes around each
/// hit tell which key it ends. One pass finds both: a SIMD pair search for an `e` with a `:`
/// four bytes on (`ANCHOR`; natively the `n` or `x` after the `e` instead, [`ANCHOR_PAIRS`]),
/// which every hit of either needle has, and which is rare in streamed JSON where each of
/// those bytes alone is everywhere (two memmem passes,
/// one per needle, cost 2.6 instructions a byte of a chat stream, verifying candidates at
/// nearly every `"` and `:`). A key, its number or a marker's first byte may be split across
/// chunks: the last bytes of the stream are carried to the next chunk, so the counts do not
/// depend on where the chunks end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageScanner {
    reported: Option<u64>,
    prompt: Option<u64>,
    content_chunks: u64,
    /// The stream's last bytes (at most `CARRY`), for hits that straddle two chunks.
    carry: [u8; CARRY],
    carry_len: usize,
    /// Per needle (usage keys, markers): hits in `carry` before this offset were handled;
    /// later ones are not yet.
    from: [usize; 2],
    /// The marker waiting at `from[1]` was counted as content already (as if the answer
    /// ended after it): taken back if its string turns out empty.
    counted: bool,
}

impl Default for UsageScanner {
    fn default() -> Self {
        UsageScanner {
            reported: None,
            prompt: None,
            content_chunks: 0,
            carry: [0; CARRY],
            carry_len: 0,
            from: [0; 2],
            counted: false,
        }
    }
}

/// The end of every usage key: `"completion_tokens":` and `"output_tokens":` (output),
/// `"prompt_tokens":` and `"input_tokens":` (prompt).
const TOKENS: &[u8] = b"_tokens\":";
/// The end of both content markers: a non-empty string value after `"content":"` or
/// `"text":"` is one streamed content chunk (chat delta, completion text, Anthropic text
/// delta).
const MARKER: &[u8] = b"t\":\"";
/// The longest key part before a hit (`"completion`).
const BEHIND: usize = 11;
/// How far past a usage key its number is looked for (whitespace, then digits): a value
/// that runs on further is read as far as this.
const AHEAD: usize = 40;
/// Bytes carried between chunks: the longest hit with what it reads before and after.
const CARRY: usize = 64;

/// The needle the pair search is built from ([`PairFinder`]): its `e` (0) and `:` (4) are the
/// pair.
/// Every usage key and content marker has an `e` four bytes before its `:`
/// (`_tok[e]ns":`, `"cont[e]nt":`, `"t[e]xt":`), and streamed JSON has few such pairs
/// (`"object":` is the one in every chat chunk), whereas each byte alone is everywhere.
const ANCHOR: &[u8] = b"ent\":";

/// The pair search for `ANCHOR`, built once.
fn anchor_finder() -> &'static PairFinder {
    static FINDER: std::sync::OnceLock<PairFinder> = std::sync::OnceLock::new();
    FINDER.get_or_init(|| PairFinder::new(ANCHOR, 0, 4))
}

/// The places `ANCHOR` may start for [`simd::first_of_pairs`]: the byte after its `e` is an
/// `n` (`_tok[e]ns":`, `"cont[e]nt":`) or an `x` (`"t[e]xt":`), its `:` four bytes on. Fewer
/// than `ANCHOR`'s own pair finds: not `"obj[e]ct":`, in every chat chunk.
const ANCHOR_PAIRS: [Pair; 2] = [[(1, b'n'), (4, b':')], [(1, b'x'), (4, b':')]];

/// The anchors in `buf` at offsets `start..end` (each with its `:` before `end`), or places
/// that only may be: the caller reads the bytes around each. Natively the crate's own pair
/// pass ([`ANCHOR_PAIRS`]): memchr's search sets up again after every candidate. Elsewhere
/// memchr's, for `ANCHOR`'s pair.
fn anchors(buf: &[u8], start: usize, end: usize) -> impl Iterator<Item = usize> + '_ {
    let window = buf.get(start..end).unwrap_or_default();
    let finder = anchor_finder();
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = match simd::first_of_pairs(window, from, &ANCHOR_PAIRS) {
            Some(found) => found?,
            None => from + finder.candidate(window.get(from..)?)?,
        };
        from = at + 1;
        Some(start + at)
    })
}

/// What the bytes after a usage key hold, as far as they go.
enum Number {
    /// The value (`None`: no whole number there).
    Read(Option<u64>),
    /// The bytes ran out inside the value: these digits so far.
    Cut(Option<u64>),
}

impl UsageScanner {
    /// Feeds one chunk of the response body.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.feed_with(chunk, Self::scan);
    }

    /// `feed` with the search given (the tests give the former one, to compare).
    fn feed_with(
        &mut self,
        chunk: &[u8],
        mut scan: impl FnMut(&mut Self, &[u8], Window) -> Waiting,
    ) {
        // The carried bytes and the chunk's first bytes: hits that start in the carry, or
        // close enough to it to read behind into it.
        let head = chunk.get(..CARRY).unwrap_or(chunk);
        let carried = self.carry_len;
        let mut joint = [0u8; 2 * CARRY];
        if let (Some(dst), Some(src)) = (joint.get_mut(..carried), self.carry.get(..carried)) {
            dst.copy_from_slice(src);
        }
        let joint_len = carried + head.len();
        if let Some(dst) = joint.get_mut(carried..joint_len) {
            dst.copy_from_slice(head);
        }
        let joint = joint.get(..joint_len).unwrap_or_default();
        let whole = head.len() == chunk.len();
        // In the joint: hits from `from` up to BEHIND bytes into the chunk (all of them when
        // the chunk is in it whole); in the chunk: the rest. Offsets in joint coordinates.
        let waiting = if whole {
            scan(self, joint, Window::new(self.from, [joint.len(); 2], true))
        } else {
            // No hit there runs past the joint's end: none waits.
            scan(
                self,
                joint,
                Window::new(self.from, [carried + BEHIND; 2], false),
            );
            let [t, m] = scan(
                self,
                chunk,
                Window::new([BEHIND; 2], [chunk.len(); 2], true),
            );
            [t.map(|at| at + carried), m.map(|at| at + carried)]
        };
        // The new carry: the stream's last CARRY bytes, and where in them each needle's hits
        // are not yet handled (left waiting, or not yet found whole).
        let (tail, tail_start) = match whole {
            true => (joint, 0),
            false => (chunk, carried),
        };
        let keep = tail.len().min(CARRY);
        let dropped = tail_start + tail.len() - keep;
        let stream_end = tail_start + tail.len();
        for (i, needle) in [TOKENS, MARKER].iter().enumerate() {
            let unseen = stream_end.saturating_sub(needle.len() - 1);
            let next = waiting
                .get(i)
                .copied()
                .flatten()
                .map_or(unseen, |w| w.min(unseen));
            if let Some(from) = self.from.get_mut(i) {
                *from = next.saturating_sub(dropped);
            }
        }
        if let Some(src) = tail.get(tail.len() - keep..) {
            self.carry_len = src.len();
            if let Some(dst) = self.carry.get_mut(..src.len()) {
                dst.copy_from_slice(src);
            }
        }
    }

    /// Handles the hits in `buf` that start in `w` (per needle: usage keys, markers).
    /// Returns, per needle, the first hit left waiting.
    fn scan(&mut self, buf: &[u8], w: Window) -> Waiting {
        let Window { lo, hi, at_end } = w;
        let counted = std::mem::take(&mut self.counted);
        let mut waiting = [None, None];
        // A key's anchor is 4 bytes into it, its `:` 8; a marker's anchor 2 bytes before
        // it, its `:` 2 bytes into it. Markers that would start before byte 2 cannot have
        // their key (`"tex`, `"conten`) before them.
        let start = (lo[0] + 4).min(lo[1].saturating_sub(2));
        let end = (hi[0].saturating_add(TOKENS.len() - 1))
            .max(hi[1].saturating_add(2))
            .min(buf.len());
        for e in anchors(buf, start, end) {
            // After the anchor: `nt":` or `xt":` in a marker (`"conte|nt":"`, `"te|xt":"`),
            // `ns":` in a key (`_toke|ns":`); anything else (`"obje|ct":`) is none.
            let Some(&[_, next, last, b'"', _]) = buf.get(e..e + ANCHOR.len()) else {
                continue;
            };
            match (next, last) {
                (b'n' | b'x', b't') => {
                    let at = e + 2;
                    if (lo[1]..hi[1]).contains(&at) && buf.get(at + 3) == Some(&b'"') {
                        let seen = counted && at == lo[1];
                        self.marker(buf, at, seen, at_end, &mut waiting[1]);
                    }
                }
                (b'n', b's') => {
                    let Some(at) = e.checked_sub(4) else { continue };
                    if (lo[0]..hi[0]).contains(&at)
                        && buf.get(at..at + TOKENS.len()) == Some(TOKENS)
                    {
                        self.key(buf, at, at_end, &mut waiting[0]);
                    }
                }
                _ => {}
            }
        }
        waiting
    }

    /// A usage key's end (`_tokens":`) at `at`: the number after it, if the key is one.
    fn key(&mut self, buf: &[u8], at: usize, at_end: bool, waiting: &mut Option<usize>) {
        let slot = if ends_at(buf, at, b"\"completion") || ends_at(buf, at, b"\"output") {
            &mut self.reported
        } else if ends_at(buf, at, b"\"prompt") || ends_at(buf, at, b"\"input") {
            &mut self.prompt
        } else {
            return;
        };
        let after = buf.get(at + TOKENS.len()..).unwrap_or_default();
        let (n, cut) = match number(after) {
            Number::Read(n) => (n, false),
            Number::Cut(n) => (n, true),
        };
        // The last report wins: Anthropic streams a running total. A value cut by the
        // chunk's end is read as far as it goes (as if the answer ended there), then
        // again whole.
        if let Some(n) = n {
            *slot = Some(n);
        }
        if cut && at_end {
            *waiting = waiting.or(Some(at));
        }
    }

    /// A marker's end (`t":"`) at `at`: one content chunk if the key is one and its string
    /// is not empty. `seen`: it was counted already, as the last chunk's last bytes.
    fn marker(
        &mut self,
        buf: &[u8],
        at: usize,
        seen: bool,
        at_end: bool,
        waiting: &mut Option<usize>,
    ) {
        if !(ends_at(buf, at, b"\"conten") || ends_at(buf, at, b"\"tex")) {
            return;
        }
        match buf.get(at + MARKER.len()) {
            // An empty string (`"content":""`) carries no token.
            Some(b'"') if seen => self.content_chunks = self.content_chunks.saturating_sub(1),
            Some(b'"') => {}
            Some(_) if seen => {}
            Some(_) => self.content_chunks += 1,
            // The answer so far ends here: counted as it stands, read again with the
            // next chunk.
            None => {
                if !seen {
                    self.content_chunks += 1;
                }
                if at_end {
                    *waiting = waiting.or(Some(at));
                    self.counted = true;
                }
            }
        }
    }

    /// Whether a content chunk has been seen: the first token has arrived.
    pub fn has_content(&self) -> bool {
        self.content_chunks > 0
    }

    /// Output tokens: the reported usage, else the content chunks seen (0 if neither).
    pub fn output_tokens(&self) -> u64 {
        self.reported.unwrap_or(self.content_chunks)
    }

    /// `usage` as the provider reported it: (prompt tokens, completion tokens).
    pub fn reported(&self) -> (Option<u64>, Option<u64>) {
        (self.prompt, self.reported)
    }
}

/// Per needle (usage keys, markers): the first hit left waiting for more bytes.
type Waiting = [Option<usize>; 2];

/// Where hits are handled: per needle (usage keys, markers), those starting at `lo..hi`;
/// `at_end`: the buffer ends where the stream so far does, so a hit whose value runs to its
/// end waits for more.
#[derive(Clone, Copy)]
struct Window {
    lo: [usize; 2],
    hi: [usize; 2],
    at_end: bool,
}

impl Window {
    fn new(lo: [usize; 2], hi: [usize; 2], at_end: bool) -> Window {
        Window { lo, hi, at_end }
    }
}

/// Whether `key` ends at `at` in `buf`. Its length known, the compare is a few word loads
/// where a slice's `ends_with` calls memcmp.
fn ends_at<const N: usize>(buf: &[u8], at: usize, key: &[u8; N]) -> bool {
    at.checked_sub(N)
        .and_then(|start| buf.get(start..at))
        .and_then(|bytes| <&[u8; N]>::try_from(bytes).ok())
        == Some(key)
}

/// The whole number at the start of `bytes` (after whitespace), at most `AHEAD` bytes in.
fn number(bytes: &[u8]) -> Number {
    let bounded = bytes.get(..AHEAD).unwrap_or(bytes);
    let Some(start) = bounded.iter().position(|b| !b.is_ascii_whitespace()) else {
        return match bounded.len() < AHEAD {
            true => Number::Cut(None),
            false => Number::Read(None),
        };
    };
    let rest = bounded.get(start..).unwrap_or_default();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let value = std::str::from_utf8(rest.get(..digits).unwrap_or_default())
        .ok()
        .and_then(|d| d.parse().ok());
    match digits == rest.len() && bounded.len() < AHEAD {
        true => Number::Cut(value),
        false => Number::Read(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_completion_tokens_from_openai_json() {
        let mut s = UsageScanner::default();
        s.feed(br#"{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":5,"completion_tokens": 42,"total_tokens":47,"prompt_tokens_details":{"cached_tokens":3}}}"#);
        assert_eq!(s.output_tokens(), 42);
        assert_eq!(s.reported(), (Some(5), Some(42)));
    }

    #[test]
    fn reads_the_final_sse_usage_chunk() {
        let mut s = UsageScanner::default();
        s.feed(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
        s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n");
        assert_eq!(
            s.output_tokens(),
            2,
            "counted chunks until usage arrives; the empty role chunk is not a token"
        );
        s.feed(b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":31}}\n\ndata: [DONE]\n\n");
        assert_eq!(s.output_tokens(), 31);
    }

    #[test]
    fn anthropic_streams_count_text_deltas_and_take_the_last_usage() {
        let mut s = UsageScanner::default();
        s.feed(b"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n");
        s.feed(b"event: content_block_delta\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n");
        let mut chunks_only = UsageScanner::default();
        chunks_only.feed(b"data: {\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n");
        assert_eq!(chunks_only.output_tokens(), 1);
        s.feed(b"event: message_delta\ndata: {\"usage\":{\"output_tokens\":57}}\n\n");
        assert_eq!(s.output_tokens(), 57);
        assert_eq!(s.reported(), (Some(3), Some(57)));
    }

    #[test]
    fn garbage_counts_nothing() {
        let mut s = UsageScanner::default();
        s.feed(b"\"completion_tokens\":");
        s.feed(&[0xff; 64]);
        assert_eq!(s.output_tokens(), 0);
        assert_eq!(s.reported(), (None, None));
        let mut chunks = UsageScanner::default();
        chunks.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        assert_eq!(
            chunks.reported(),
            (None, None),
            "a chunk count is not usage"
        );
    }

    /// The scanner before it searched with memmem: every window compared with every key.
    /// Fed one whole answer, the new one must agree with it.
    fn reference(body: &[u8]) -> (Option<u64>, Option<u64>, u64) {
        fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
            haystack.windows(needle.len()).position(|w| w == needle)
        }
        fn last(body: &[u8], key: &[u8], slot: &mut Option<u64>) {
            let mut rest = body;
            while let Some(at) = find(rest, key) {
                let tail = rest.get(at + key.len()..).unwrap_or_default();
                let trimmed = tail.trim_ascii_start();
                let digits = trimmed.iter().take_while(|b| b.is_ascii_digit()).count();
                if let Some(n) = std::str::from_utf8(&trimmed[..digits])
                    .ok()
                    .and_then(|d| d.parse().ok())
                {
                    *slot = Some(n);
                }
                rest = tail;
            }
        }
        let (mut reported, mut prompt, mut chunks) = (None, None, 0);
        for key in [&b"\"completion_tokens\":"[..], b"\"output_tokens\":"] {
            last(body, key, &mut reported);
        }
        for key in [&b"\"prompt_tokens\":"[..], b"\"input_tokens\":"] {
            last(body, key, &mut prompt);
        }
        for marker in [&b"\"content\":\""[..], b"\"text\":\""] {
            let mut rest = body;
            while let Some(at) = find(rest, marker) {
                let tail = rest.get(at + marker.len()..).unwrap_or_default();
                if tail.first() != Some(&b'"') {
                    chunks += 1;
                }
                rest = tail;
            }
        }
        (prompt, reported, chunks)
    }

    fn finders() -> &'static (
        memchr::memmem::Finder<'static>,
        memchr::memmem::Finder<'static>,
    ) {
        static FINDERS: std::sync::OnceLock<(
            memchr::memmem::Finder<'static>,
            memchr::memmem::Finder<'static>,
        )> = std::sync::OnceLock::new();
        FINDERS.get_or_init(|| {
            (
                memchr::memmem::Finder::new(TOKENS),
                memchr::memmem::Finder::new(MARKER),
            )
        })
    }

    /// Where `finder`'s needle starts in `buf`, at offsets `lo..hi`.
    fn hits<'a>(
        finder: &'a memchr::memmem::Finder<'static>,
        buf: &'a [u8],
        lo: usize,
        hi: usize,
    ) -> impl Iterator<Item = usize> + 'a {
        let end = hi.saturating_add(finder.needle().len() - 1).min(buf.len());
        let window = buf.get(lo..end).unwrap_or_default();
        finder.find_iter(window).map(move |at| at + lo)
    }

    impl UsageScanner {
        /// The search `scan` replaced: two memmem passes (`_tokens":`, `t":"`), each hit
        /// handled as `scan` handles it (the bytes around it telling which key it ends).
        fn scan_memmem(&mut self, buf: &[u8], w: Window) -> Waiting {
            let Window { lo, hi, at_end } = w;
            let (tokens, marker) = finders();
            let mut waiting = [None, None];
            for at in hits(tokens, buf, lo[0], hi[0]) {
                self.key(buf, at, at_end, &mut waiting[0]);
            }
            let counted = std::mem::take(&mut self.counted);
            for at in hits(marker, buf, lo[1], hi[1]) {
                let seen = counted && at == lo[1];
                self.marker(buf, at, seen, at_end, &mut waiting[1]);
            }
            waiting
        }
    }

    fn scanned(chunks: &[&[u8]]) -> (Option<u64>, Option<u64>, u64) {
        let mut s = UsageScanner::default();
        for c in chunks {
            s.feed(c);
        }
        let (prompt, reported) = s.reported();
        (prompt, reported, s.content_chunks)
    }

    /// Answers with keys, numbers and markers in many places: chat and Anthropic streams,
    /// whole JSON, keys near each other, empty strings, whitespace before numbers.
    const FIXTURES: &[&[u8]] = &[
        b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"object\":\"chat\",\"choices\":[{\"delta\":{\"content\":\"bc\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":31,\"total_tokens\":43}}\n\ndata: [DONE]\n\n",
        b"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\nevent: message_delta\ndata: {\"usage\":{\"output_tokens\":   57}}\n\n",
        br#"{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":5,"completion_tokens": 42,"total_tokens":47,"prompt_tokens_details":{"cached_tokens":3}}}"#,
        br#""content":"t":"text":"x""completion_tokens":1"output_tokens":22"input_tokens":"prompt_tokens":4"#,
        br#"{"usage":{"completion_tokens":18446744073709551616,"output_tokens":7}}"#,
        b"\"completion_tokens\":123456",
        b"\"content\":\"",
    ];

    /// Pieces the random answers are made of: keys, markers and their parts, near misses
    /// (`"object":`, other `e??":`), numbers, empty strings.
    const PIECES: &[&[u8]] = &[
        b"\"content\":\"",
        b"\"text\":\"",
        b"\"completion_tokens\":",
        b"\"output_tokens\":",
        b"\"prompt_tokens\":",
        b"\"input_tokens\":",
        b"\"total_tokens\":",
        b"_tokens\":",
        b"t\":\"",
        b"\"object\":\"",
        b"ent\":",
        b"\"conten",
        b"\"tex",
        b"xt\":",
        b"ns\":",
        b" 12",
        b"7",
        b"18446744073709551616",
        b"\"\"",
        b"   ",
        b"\n\ndata: ",
    ];

    /// A random answer: fixtures, pieces and random bytes (most from the bytes that matter).
    fn random_body(rng: &mut fastrand::Rng) -> Vec<u8> {
        const BYTES: &[u8] = b"etnxs\":_ 0123456789ckopu{},";
        let mut body = Vec::new();
        for _ in 0..rng.usize(1..12) {
            match rng.u8(0..8) {
                0 => body.extend_from_slice(FIXTURES[rng.usize(..FIXTURES.len())]),
                1 => body.extend((0..rng.usize(0..40)).map(|_| rng.u8(..))),
                2 | 3 => {
                    body.extend((0..rng.usize(0..20)).map(|_| BYTES[rng.usize(..BYTES.len())]))
                }
                _ => body.extend_from_slice(PIECES[rng.usize(..PIECES.len())]),
            }
        }
        body
    }

    #[test]
    fn the_anchor_search_agrees_with_the_memmem_one_on_random_answers_and_chunkings() {
        let mut rng = fastrand::Rng::with_seed(20_261_201);
        for case in 0..20_000 {
            let body = random_body(&mut rng);
            let (mut anchors, mut memmem) = (UsageScanner::default(), UsageScanner::default());
            let mut rest = body.as_slice();
            while !rest.is_empty() {
                // Chunks of a byte to past the carry's length, and now and then all of it.
                let n = match rng.u8(0..10) {
                    0 => rest.len(),
                    _ => rng.usize(0..=rest.len().min(2 * CARRY + 8)),
                };
                let (chunk, tail) = rest.split_at(n);
                anchors.feed(chunk);
                memmem.feed_with(chunk, UsageScanner::scan_memmem);
                assert_eq!(
                    anchors,
                    memmem,
                    "case {case}: {}, chunk ending {}",
                    String::from_utf8_lossy(&body),
                    body.len() - tail.len()
                );
                rest = tail;
            }
        }
    }

    #[test]
    fn one_chunk_agrees_with_the_window_by_window_scan() {
        for body in FIXTURES {
            assert_eq!(
                scanned(&[body]),
                reference(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn every_single_split_gives_the_one_chunk_counts() {
        for body in FIXTURES {
            let whole = scanned(&[body]);
            for at in 0..=body.len() {
                let (a, b) = body.split_at(at);
                assert_eq!(
                    scanned(&[a, b]),
                    whole,
                    "split at {at}: {}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn byte_by_byte_and_random_splits_give_the_one_chunk_counts() {
        // Long answers too: splits far from the start, carried more than once.
        let mut long = Vec::new();
        for i in 0..40 {
            long.extend_from_slice(FIXTURES[i % 3]);
            long.extend_from_slice(&b"lorem ipsum dolor sit amet "[..i % 27]);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for body in FIXTURES.iter().copied().chain([long.as_slice()]) {
            let whole = scanned(&[body]);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(scanned(&bytes), whole);
            for _ in 0..200 {
                let mut parts = Vec::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let n = rng.usize(0..=rest.len().min(150));
                    let (a, b) = rest.split_at(n);
                    parts.push(a);
                    rest = b;
                }
                assert_eq!(scanned(&parts), whole, "{parts:?}");
            }
        }
        // Where one answer mixes the APIs' keys the last in the answer wins (the window by
        // window scan let every `output_tokens` win over every `completion_tokens`); the last
        // usage in `long` is FIXTURES[0]'s.
        assert_eq!(scanned(&[&long]), (Some(12), Some(31), reference(&long).2));
    }
}
