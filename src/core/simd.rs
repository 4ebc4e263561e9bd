//! The crate's hand-written SIMD, kept in this one file: each kernel here is a search `memchr`
//! cannot make, with the measurement that says so.
//!
//! [`plain_run`]: the run of plain bytes at the start of a JSON string's contents, one SIMD
//! pass that stops at the first byte a strict parser must look at, `"` (the end), `\` (an
//! escape), a control byte below 0x20 (an error, RFC 8259 §7) or a byte of 0x80 and above
//! (UTF-8 to validate). `memchr` finds one to three given bytes; this stop set has a range in
//! it. One pass over a 100 KB ASCII prompt replaces three: memchr for `"`/`\`, a word-at-a-time
//! control check, and a whole-body UTF-8 check (non-ASCII bytes are validated where the run
//! stops at them). A single signed compare `byte < 0x20` covers both the control bytes and
//! every byte of 0x80 and above (they are negative as `i8`).
//!
//! [`line_blocks`]: the line ends of a streamed answer and, in the same pass, the bytes that
//! stop a run of plain chat events (`crate::core::sse`): a `\r`, and two `r` in a row, the
//! rare pair `"error"` is found by. `memchr2` per line and a pair search per chunk read each
//! byte twice, each call with its own set-up for a ~250-byte event: about 0.85 instructions a
//! byte together natively (callgrind, 100 KiB chat stream). x86_64 with AVX2 only: as V8 runs
//! Wasm `simd128`, the per-event reading measured faster (below).
//!
//! [`first_of_pairs`]: where the first of a few needles may start, each by a pair of its bytes
//! (as [`crate::core::pair_search`] finds one), all in one pass: memchr's pair search takes one
//! pair a pass, and the Responses rewriter's three keys cost three passes over every chunk
//! (callgrind, 100 KiB Responses stream: about 1.1 instructions a byte together). The usage
//! scanner's anchors are two pairs, searched for again after each candidate, two a chat
//! event, where memchr sets its search up anew each time (100 KiB chat stream with
//! `usage_metrics`, natively: 821k instructions a request with memchr, 795k with this).
//! x86_64 with AVX2, and Wasm `simd128` for three pairs (written out for V8: the same loop
//! over the pairs as a generic one measured 1,823k instructions a request against memchr's
//! 1,584k).

/// How many bytes at the start of `b` are neither `"`, `\`, below 0x20 nor 0x80 and above.
pub fn plain_run(b: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present.
            return unsafe { x86::avx2(b) };
        }
        // SAFETY: SSE2 is part of x86_64.
        unsafe { x86::sse2(b) }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        wasm::simd128(b)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        words(b)
    }
}

/// Eight bytes a step in a `u64` (aarch64 and the rest): each test flags a byte's top bit,
/// exactly for the first byte that stops the run (a borrow can only flag bytes after it).
#[cfg_attr(
    any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    ),
    allow(dead_code)
)]
pub(crate) fn words(b: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut at = 0;
    while let Some(word) = b.get(at..at + 8) {
        let x = u64::from_le_bytes(<[u8; 8]>::try_from(word).unwrap_or_default());
        let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let stop = zero_byte(x ^ (ONES * u64::from(b'"')))
            | zero_byte(x ^ (ONES * u64::from(b'\\')))
            | below_space
            | (x & HIGH);
        if stop != 0 {
            return at + stop.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + scalar(b.get(at..).unwrap_or_default())
}

/// Whether `c` ends a run of plain string bytes.
fn stops(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c)
}

/// The byte-at-a-time run: the tails shorter than a vector or a word.
pub(crate) fn scalar(b: &[u8]) -> usize {
    b.iter().position(|&c| stops(c)).unwrap_or(b.len())
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::scalar;
    use std::arch::x86_64::*;

    /// 64 bytes a step with a mask each for the first 256, then 128 a step in four 32-byte
    /// vectors tested together, then 64 again (which finds the place in the step that
    /// stopped), then 32, then bytes. Natively under callgrind, 64 a step throughout cost 4.7k
    /// instructions more on a 100 KB prompt (0.32 a byte against 0.28), and 128 from the first
    /// byte on 250 more on the 1.5 KB chat, whose strings mostly end in their first blocks.
    #[target_feature(enable = "avx2")]
    pub unsafe fn avx2(b: &[u8]) -> usize {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let slash = _mm256_set1_epi8(b'\\' as i8);
        let space = _mm256_set1_epi8(0x20);
        let stops = |at: usize| {
            // SAFETY: the callers keep `at + 32 <= b.len()`.
            let v = unsafe { _mm256_loadu_si256(b.as_ptr().add(at).cast()) };
            _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, slash)),
                _mm256_cmpgt_epi8(space, v),
            )
        };
        let mask = |at: usize| {
            u64::from(_mm256_movemask_epi8(stops(at)) as u32)
                | u64::from(_mm256_movemask_epi8(stops(at + 32)) as u32) << 32
        };
        let mut at = 0;
        // Keys and short values end in their first blocks: a mask each finds the place.
        while at + 64 <= b.len() && at < 256 {
            let mask = mask(at);
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 64;
        }
        while at + 128 <= b.len() {
            let any = _mm256_or_si256(
                _mm256_or_si256(stops(at), stops(at + 32)),
                _mm256_or_si256(stops(at + 64), stops(at + 96)),
            );
            if _mm256_testz_si256(any, any) == 0 {
                break;
            }
            at += 128;
        }
        while at + 64 <= b.len() {
            let mask = mask(at);
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 64;
        }
        if at + 32 <= b.len() {
            let mask = _mm256_movemask_epi8(stops(at)) as u32;
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 32;
        }
        at + scalar(b.get(at..).unwrap_or_default())
    }

    /// 64 bytes a step in four 16-byte vectors, then 16, then bytes.
    #[target_feature(enable = "sse2")]
    pub unsafe fn sse2(b: &[u8]) -> usize {
        let quote = _mm_set1_epi8(b'"' as i8);
        let slash = _mm_set1_epi8(b'\\' as i8);
        let space = _mm_set1_epi8(0x20);
        let stops = |at: usize| {
            // SAFETY: the callers keep `at + 16 <= b.len()`.
            let v = unsafe { _mm_loadu_si128(b.as_ptr().add(at).cast()) };
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                _mm_cmplt_epi8(v, space),
            );
            _mm_movemask_epi8(hit) as u32 as u64
        };
        let mut at = 0;
        while at + 64 <= b.len() {
            let mask =
                stops(at) | stops(at + 16) << 16 | stops(at + 32) << 32 | stops(at + 48) << 48;
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 64;
        }
        while at + 16 <= b.len() {
            let mask = stops(at);
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 16;
        }
        at + scalar(b.get(at..).unwrap_or_default())
    }

    /// [`super::line_blocks`] with AVX2: a block in two 32-byte halves, each loaded again one
    /// byte on for the second `r` of a pair.
    #[target_feature(enable = "avx2")]
    pub unsafe fn line_blocks_avx2(
        b: &[u8],
        from: usize,
        mut each: impl FnMut(usize, super::LineMasks) -> bool,
    ) -> usize {
        let line = _mm256_set1_epi8(b'\n' as i8);
        let cr = _mm256_set1_epi8(b'\r' as i8);
        let r = _mm256_set1_epi8(b'r' as i8);
        let half = |at: usize| {
            // SAFETY: the loop keeps `at + 33 <= b.len()`.
            let (v, next) = unsafe {
                (
                    _mm256_loadu_si256(b.as_ptr().add(at).cast()),
                    _mm256_loadu_si256(b.as_ptr().add(at + 1).cast()),
                )
            };
            let pair = _mm256_and_si256(_mm256_cmpeq_epi8(v, r), _mm256_cmpeq_epi8(next, r));
            let stops = _mm256_or_si256(_mm256_cmpeq_epi8(v, cr), pair);
            (
                _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, line)) as u32,
                _mm256_movemask_epi8(stops) as u32,
            )
        };
        let mut at = from;
        while at + 65 <= b.len() {
            let ((l0, s0), (l1, s1)) = (half(at), half(at + 32));
            let lines = u64::from(l0) | u64::from(l1) << 32;
            let stops = u64::from(s0) | u64::from(s1) << 32;
            if lines | stops != 0 && !each(at, (lines, stops)) {
                return at;
            }
            at += 64;
        }
        at
    }

    /// [`super::first_of_pairs`] with AVX2, 64 places a step, then 32; the places too near the
    /// end for a step are left to the caller: `Err(at)` is where they start.
    #[target_feature(enable = "avx2")]
    pub unsafe fn first_of_pairs_avx2<const N: usize>(
        b: &[u8],
        from: usize,
        pairs: &[super::Pair; N],
    ) -> Result<usize, usize> {
        let reach = pairs.iter().flatten().map(|&(at, _)| at).max().unwrap_or(0);
        let bytes =
            pairs.map(|[(_, x), (_, y)]| (_mm256_set1_epi8(x as i8), _mm256_set1_epi8(y as i8)));
        let hit = |at: usize| {
            let mut hit = _mm256_setzero_si256();
            for (&[(i, _), (j, _)], &(x, y)) in pairs.iter().zip(bytes.iter()) {
                // SAFETY: the callers keep `at + i + 32` and `at + j + 32` within `b`.
                let (u, v) = unsafe {
                    (
                        _mm256_loadu_si256(b.as_ptr().add(at + i).cast()),
                        _mm256_loadu_si256(b.as_ptr().add(at + j).cast()),
                    )
                };
                let both = _mm256_and_si256(_mm256_cmpeq_epi8(u, x), _mm256_cmpeq_epi8(v, y));
                hit = _mm256_or_si256(hit, both);
            }
            hit
        };
        let mut at = from;
        while at + 64 + reach <= b.len() {
            let (h0, h1) = (hit(at), hit(at + 32));
            if _mm256_testz_si256(_mm256_or_si256(h0, h1), _mm256_or_si256(h0, h1)) == 0 {
                let mask = u64::from(_mm256_movemask_epi8(h0) as u32)
                    | u64::from(_mm256_movemask_epi8(h1) as u32) << 32;
                return Ok(at + mask.trailing_zeros() as usize);
            }
            at += 64;
        }
        while at + 32 + reach <= b.len() {
            let mask = _mm256_movemask_epi8(hit(at)) as u32;
            if mask != 0 {
                return Ok(at + mask.trailing_zeros() as usize);
            }
            at += 32;
        }
        Err(at)
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::scalar;
    use core::arch::wasm32::*;

    /// 64 bytes a step in four 16-byte vectors for the first 256, then 256 a step with one
    /// test, then 64 again (which finds the place in the step that stopped), then 16, then
    /// bytes. Under callgrind 256 a step took 13.6k instructions off a 100 KB prompt (128 a
    /// step 10.3k); from the first byte on, it cost the 1.5 KB chat 1.3k more.
    pub fn simd128(b: &[u8]) -> usize {
        let quote = u8x16_splat(b'"');
        let slash = u8x16_splat(b'\\');
        let space = i8x16_splat(0x20);
        let stops = |at: usize| {
            // SAFETY: the callers keep `at + 16 <= b.len()`; unaligned loads are allowed.
            let v = unsafe { v128_load(b.as_ptr().add(at).cast()) };
            v128_or(
                v128_or(i8x16_eq(v, quote), i8x16_eq(v, slash)),
                i8x16_lt(v, space),
            )
        };
        let quarter = |at: usize| {
            let (w, x, y, z) = (stops(at), stops(at + 16), stops(at + 32), stops(at + 48));
            // One test for the usual case, the exact place only when a byte stops the run.
            v128_any_true(v128_or(v128_or(w, x), v128_or(y, z))).then(|| {
                let mask = u64::from(u8x16_bitmask(w))
                    | u64::from(u8x16_bitmask(x)) << 16
                    | u64::from(u8x16_bitmask(y)) << 32
                    | u64::from(u8x16_bitmask(z)) << 48;
                at + mask.trailing_zeros() as usize
            })
        };
        let mut at = 0;
        // Keys and short values end in their first blocks.
        while at + 64 <= b.len() && at < 256 {
            if let Some(stop) = quarter(at) {
                return stop;
            }
            at += 64;
        }
        while at + 256 <= b.len() {
            let any = |at: usize| {
                v128_or(
                    v128_or(stops(at), stops(at + 16)),
                    v128_or(stops(at + 32), stops(at + 48)),
                )
            };
            let all = v128_or(
                v128_or(any(at), any(at + 64)),
                v128_or(any(at + 128), any(at + 192)),
            );
            if v128_any_true(all) {
                break;
            }
            at += 256;
        }
        while at + 64 <= b.len() {
            if let Some(stop) = quarter(at) {
                return stop;
            }
            at += 64;
        }
        while at + 16 <= b.len() {
            let mask = u8x16_bitmask(stops(at));
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 16;
        }
        at + scalar(b.get(at..).unwrap_or_default())
    }

    /// [`super::first_of_pairs`] for three pairs with `simd128`, 64 places a step, then 16;
    /// `Err(at)` as with AVX2. (One pass of 16 places a step measured 1,566k instructions a
    /// request on the 100 KiB Responses stream, of 32 1,534k, of 64 1,508k; memchr's search a
    /// key at a time 1,584k.)
    pub fn first_of_three(b: &[u8], from: usize, pairs: &[super::Pair; 3]) -> Result<usize, usize> {
        let [[(a0, a1), (a2, a3)], [(b0, b1), (b2, b3)], [(c0, c1), (c2, c3)]] = *pairs;
        let reach = a0.max(a2).max(b0).max(b2).max(c0).max(c2);
        let (sa1, sa3, sb1, sb3) = (
            u8x16_splat(a1),
            u8x16_splat(a3),
            u8x16_splat(b1),
            u8x16_splat(b3),
        );
        let (sc1, sc3) = (u8x16_splat(c1), u8x16_splat(c3));
        let p = b.as_ptr();
        // SAFETY: the callers keep the 16 bytes of every load at `at` within `b`.
        let hit = |at: usize| unsafe {
            let x = v128_and(
                i8x16_eq(v128_load(p.add(at + a0).cast()), sa1),
                i8x16_eq(v128_load(p.add(at + a2).cast()), sa3),
            );
            let y = v128_and(
                i8x16_eq(v128_load(p.add(at + b0).cast()), sb1),
                i8x16_eq(v128_load(p.add(at + b2).cast()), sb3),
            );
            let z = v128_and(
                i8x16_eq(v128_load(p.add(at + c0).cast()), sc1),
                i8x16_eq(v128_load(p.add(at + c2).cast()), sc3),
            );
            v128_or(v128_or(x, y), z)
        };
        let mut at = from;
        while at + 64 + reach <= b.len() {
            let (h0, h1, h2, h3) = (hit(at), hit(at + 16), hit(at + 32), hit(at + 48));
            if v128_any_true(v128_or(v128_or(h0, h1), v128_or(h2, h3))) {
                let mask = u64::from(u8x16_bitmask(h0))
                    | u64::from(u8x16_bitmask(h1)) << 16
                    | u64::from(u8x16_bitmask(h2)) << 32
                    | u64::from(u8x16_bitmask(h3)) << 48;
                return Ok(at + mask.trailing_zeros() as usize);
            }
            at += 64;
        }
        while at + 16 + reach <= b.len() {
            let mask = u8x16_bitmask(hit(at));
            if mask != 0 {
                return Ok(at + mask.trailing_zeros() as usize);
            }
            at += 16;
        }
        Err(at)
    }
}

/// The masks of one 64-byte block at `at`: bit `i` of the first is set where byte `at + i` is
/// `\n`; of the second where it is `\r`, or an `r` followed by another.
pub type LineMasks = (u64, u64);

/// Hands `each` the [`LineMasks`] of every 64-byte block of `b` from `from` on that has a bit
/// set in either, in order, while the block and the byte after it lie in `b` and `each`
/// returns `true`. Returns where the blocks stopped: the first block not read (or the one
/// `each` stopped at). Without a kernel for the platform no block is read (`from`), and the
/// caller reads the bytes its own way.
#[inline]
pub fn line_blocks(b: &[u8], from: usize, each: impl FnMut(usize, LineMasks) -> bool) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present.
            return unsafe { x86::line_blocks_avx2(b, from, each) };
        }
        from
    }
    // Wasm `simd128` as V8 runs it measured slower than the per-event reading: a 100 KiB chat
    // stream 859,530 -> 878,794 instructions a request with two loads and four compares a
    // quarter block, 1,006,260 with one load and the `rr` pair from the bit masks (callgrind).
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (b, each);
        from
    }
}

/// [`LineMasks`] a byte at a time: what the kernels are tested against.
#[cfg(test)]
pub(crate) fn line_masks_scalar(b: &[u8], at: usize) -> LineMasks {
    let (mut lines, mut stops) = (0u64, 0u64);
    for i in 0..64 {
        let (c, next) = (b[at + i], b[at + i + 1]);
        lines |= u64::from(c == b'\n') << i;
        stops |= u64::from(c == b'\r' || (c == b'r' && next == b'r')) << i;
    }
    (lines, stops)
}

/// Two bytes of a needle, each at its offset in it: where the needle starts, both are there.
pub type Pair = [(usize, u8); 2];

/// The first place at or after `from` in `b` where one of `pairs` holds (both its bytes at
/// their offsets from there, within `b`): a needle may start there. `None` when there is no
/// kernel for the platform: the caller searches its own way.
#[inline]
pub fn first_of_pairs<const N: usize>(
    b: &[u8],
    from: usize,
    pairs: &[Pair; N],
) -> Option<Option<usize>> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present.
            let tail = match unsafe { x86::first_of_pairs_avx2(b, from, pairs) } {
                Ok(at) => return Some(Some(at)),
                Err(tail) => tail,
            };
            return Some(first_of_pairs_bytewise(b, tail, pairs));
        }
        None
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        let three: Option<&[Pair; 3]> = (pairs as &[Pair]).try_into().ok();
        let tail = match three.map(|three| wasm::first_of_three(b, from, three)) {
            Some(Ok(at)) => return Some(Some(at)),
            Some(Err(tail)) => tail,
            None => return None,
        };
        Some(first_of_pairs_bytewise(b, tail, pairs))
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        let _ = (b, from, pairs);
        None
    }
}

/// [`first_of_pairs`] a place at a time: the end of a chunk, and the reference in tests.
pub(crate) fn first_of_pairs_bytewise<const N: usize>(
    b: &[u8],
    from: usize,
    pairs: &[Pair; N],
) -> Option<usize> {
    let holds = |at: usize| {
        pairs
            .iter()
            .any(|pair| pair.iter().all(|&(i, x)| b.get(at + i) == Some(&x)))
    };
    (from..b.len()).find(|&at| holds(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel finds the place the byte-at-a-time search finds, for random bytes rich in
    /// the pairs' bytes, every start and every length around its steps.
    #[test]
    fn first_of_pairs_is_the_bytewise_search() {
        let pairs: [Pair; 3] = [
            [(0, b'"'), (3, b'"')],
            [(4, b'v'), (18, b'_')],
            [(5, b'y'), (10, b'_')],
        ];
        let mut rng = fastrand::Rng::with_seed(23);
        for _ in 0..20_000 {
            let len = rng.usize(0..300);
            let b: Vec<u8> = (0..len).map(|_| b"\"vy_ab"[rng.usize(..6)]).collect();
            let from = rng.usize(0..=len);
            let Some(found) = first_of_pairs(&b, from, &pairs) else {
                return;
            };
            assert_eq!(
                found,
                first_of_pairs_bytewise(&b, from, &pairs),
                "{b:?} from {from}"
            );
        }
    }
}
