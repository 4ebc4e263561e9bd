//! Searching for a needle by two of its bytes chosen for being rare together where it is
//! searched: memchr's packed pair search (SIMD on x86_64, aarch64 and wasm32 `simd128`) with
//! the pair given, not guessed from memchr's table of byte frequencies.
//!
//! In streamed JSON the needles' own bytes are everywhere (quotes, colons, common letters),
//! and `memmem` picked pairs that matched at nearly every `"`: about 0.5 instructions a byte
//! for `"id"` over a 100 KiB Responses stream, against 0.28 with its two quotes as the pair
//! (callgrind). Each needle's pair is chosen where it is declared, with the reason.

/// memchr's pair search for the platform's SIMD (x86_64: AVX2 when present, else SSE2).
#[derive(Debug, Clone, Copy)]
enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx2(memchr::arch::x86_64::avx2::packedpair::Finder),
    #[cfg(target_arch = "x86_64")]
    Sse2(memchr::arch::x86_64::sse2::packedpair::Finder),
    #[cfg(target_arch = "aarch64")]
    Neon(memchr::arch::aarch64::neon::packedpair::Finder),
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    Simd128(memchr::arch::wasm32::simd128::packedpair::Finder),
}

/// A needle and the pair of its bytes it is found by.
#[derive(Debug, Clone, Copy)]
pub struct PairFinder {
    needle: &'static [u8],
    /// The pair's indices in the needle.
    pair: (u8, u8),
    simd: Option<Simd>,
}

impl PairFinder {
    /// A search for `needle` by its bytes at `first` and `second` (distinct indices in it).
    pub fn new(needle: &'static [u8], first: u8, second: u8) -> PairFinder {
        PairFinder {
            needle,
            pair: (first, second),
            simd: simd(needle, first, second),
        }
    }

    /// Where the first place in `haystack` with the pair at the needle's offsets starts: the
    /// needle may or may not be there (the caller reads the bytes around it).
    #[inline(always)]
    pub fn candidate(&self, haystack: &[u8]) -> Option<usize> {
        match &self.simd {
            Some(simd) if haystack.len() >= simd.min_len() => simd.candidate(haystack),
            _ => self.candidate_bytewise(haystack),
        }
    }

    /// [`Self::candidate`] a window at a time: haystacks too short for the SIMD search (a few
    /// dozen bytes) and platforms without one.
    #[inline(never)]
    fn candidate_bytewise(&self, haystack: &[u8]) -> Option<usize> {
        let (first, second) = (usize::from(self.pair.0), usize::from(self.pair.1));
        let (a, b) = (self.needle.get(first)?, self.needle.get(second)?);
        haystack
            .windows(self.needle.len())
            .position(|w| w.get(first) == Some(a) && w.get(second) == Some(b))
    }

    /// Where the needle is first found in `haystack`. Candidates are checked here rather than
    /// by memchr's `Finder::find` for the pair, which cost more (callgrind, 100 KiB Responses
    /// stream: native 1,167k against 1,205k instructions a request, `.wasm` 1,586k against
    /// 1,653k).
    pub fn find(&self, haystack: &[u8]) -> Option<usize> {
        let mut from = 0;
        loop {
            let at = from + self.candidate(haystack.get(from..)?)?;
            if haystack.get(at..)?.starts_with(self.needle) {
                return Some(at);
            }
            from = at + 1;
        }
    }
}

#[allow(unreachable_code, unused_variables)]
fn simd(needle: &[u8], first: u8, second: u8) -> Option<Simd> {
    let pair = memchr::arch::all::packedpair::Pair::with_indices(needle, first, second)?;
    #[cfg(target_arch = "x86_64")]
    {
        use memchr::arch::x86_64::{avx2, sse2};
        return avx2::packedpair::Finder::with_pair(needle, pair)
            .map(Simd::Avx2)
            .or_else(|| sse2::packedpair::Finder::with_pair(needle, pair).map(Simd::Sse2));
    }
    #[cfg(target_arch = "aarch64")]
    {
        use memchr::arch::aarch64::neon::packedpair::Finder;
        return Finder::with_pair(needle, pair).map(Simd::Neon);
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        use memchr::arch::wasm32::simd128::packedpair::Finder;
        return Finder::with_pair(needle, pair).map(Simd::Simd128);
    }
    None
}

impl Simd {
    /// The shortest haystack `candidate` takes (a shorter one would panic).
    #[inline(always)]
    fn min_len(&self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2(f) => f.min_haystack_len(),
            #[cfg(target_arch = "x86_64")]
            Simd::Sse2(f) => f.min_haystack_len(),
            #[cfg(target_arch = "aarch64")]
            Simd::Neon(f) => f.min_haystack_len(),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Simd::Simd128(f) => f.min_haystack_len(),
        }
    }

    #[inline(always)]
    fn candidate(&self, haystack: &[u8]) -> Option<usize> {
        match self {
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2(f) => f.find_prefilter(haystack),
            #[cfg(target_arch = "x86_64")]
            Simd::Sse2(f) => f.find_prefilter(haystack),
            #[cfg(target_arch = "aarch64")]
            Simd::Neon(f) => f.find_prefilter(haystack),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Simd::Simd128(f) => f.find_prefilter(haystack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pair search finds what `memmem` finds, over haystacks of every length around the
    /// SIMD search's shortest, with the needle anywhere or cut at either end.
    #[test]
    fn it_finds_what_memmem_finds() {
        let finder = PairFinder::new(b"\"id\"", 0, 3);
        let mut rng = fastrand::Rng::with_seed(3);
        let alphabet = b"\"id:,x\\";
        for _ in 0..20_000 {
            let len = rng.usize(0..200);
            let haystack: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let expected = memchr::memmem::find(&haystack, b"\"id\"");
            assert_eq!(finder.find(&haystack), expected, "{haystack:?}");
        }
    }

    #[test]
    fn a_candidate_has_the_pair_but_need_not_be_the_needle() {
        let finder = PairFinder::new(b"\"id\"", 0, 3);
        let haystack = format!("{}\"ab\"{}\"id\"", " ".repeat(70), " ".repeat(70));
        assert_eq!(finder.candidate(haystack.as_bytes()), Some(70));
        assert_eq!(finder.find(haystack.as_bytes()), Some(144));
    }
}
