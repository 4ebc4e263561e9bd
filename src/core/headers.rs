//! Header lists in the encoding proxy-wasm hosts hand them over in, read where they lie.
//!
//! The encoding is one buffer: a little-endian `u32` count, a `u32` (name length, value length)
//! pair per header, then every name and every value, each followed by a NUL. Kept as it is
//! rather than split into a `String` and a `Vec` per header: a request's headers then cost one
//! allocation to take and one to free, not two per header (measured as a seventh of the
//! filter's own Wasm time per request before).

/// A list of headers, names lower-case as the host gives them, values as bytes. The empty
/// list is an empty buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    bytes: Vec<u8>,
    count: usize,
    /// Bit `n` is set when some name is `n` bytes long (63 for any longer): most lookups are
    /// of headers a request does not have (credentials a target replaces, Switchboard's own
    /// headers), and this answers most of them without walking the list.
    lengths: u64,
}

/// No headers, for requests that have none to look at.
pub static NO_HEADERS: Headers = Headers {
    bytes: Vec::new(),
    count: 0,
    lengths: 0,
};

/// The bit of [`Headers::lengths`] for a name `len` bytes long. (A hash of a few of the
/// name's bytes as well let fewer absent names through, but cost more than the walks it
/// saved: measured with callgrind on `make bench`'s chat.)
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// The little-endian `u32` at `at`, as a length.
fn word(bytes: &[u8], at: usize) -> Option<usize> {
    let four: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(four)).ok()
}

/// The (name length, value length) of one 8-byte entry of the length table.
fn pair_lengths(entry: &[u8]) -> Option<(usize, usize)> {
    Some((word(entry, 0)?, word(entry, 4)?))
}

impl Headers {
    /// Headers from the host's encoding; `None` if it is malformed (an empty buffer is an
    /// empty list).
    pub fn decode(bytes: Vec<u8>) -> Option<Headers> {
        if bytes.is_empty() {
            return Some(Headers::default());
        }
        let count = word(&bytes, 0)?;
        let table_end = count.checked_mul(8)?.checked_add(4)?;
        let mut at = table_end;
        let mut lengths = 0;
        for entry in bytes.get(4..table_end)?.chunks_exact(8) {
            let (name_len, value_len) = pair_lengths(entry)?;
            lengths |= length_bit(name_len);
            for len in [name_len, value_len] {
                at = at.checked_add(len)?;
                if bytes.get(at) != Some(&0) {
                    return None;
                }
                at += 1;
            }
        }
        (at == bytes.len()).then_some(Headers {
            bytes,
            count,
            lengths,
        })
    }

    /// Headers from name and value pairs, in order, built in one allocation of the exact size
    /// (the pairs are walked three times rather than collected or grown into).
    pub fn from_pairs<N, V, I>(pairs: I) -> Headers
    where
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
        I: IntoIterator<Item = (N, V)>,
        I::IntoIter: Clone,
    {
        let pairs = pairs.into_iter();
        let le = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
        let (count, text, lengths) = pairs.clone().fold((0, 0, 0), |(c, t, m), (k, v)| {
            let (k, v) = (k.as_ref().len(), v.as_ref().len());
            (c + 1, t + k + v + 2, m | length_bit(k))
        });
        let mut bytes = Vec::with_capacity(4 + 8 * count + text);
        bytes.extend_from_slice(&le(count));
        for (name, value) in pairs.clone() {
            bytes.extend_from_slice(&le(name.as_ref().len()));
            bytes.extend_from_slice(&le(value.as_ref().len()));
        }
        for (name, value) in pairs {
            for part in [name.as_ref(), value.as_ref()] {
                bytes.extend_from_slice(part);
                bytes.push(0);
            }
        }
        Headers {
            bytes,
            count,
            lengths,
        }
    }

    /// The headers in the host's encoding, as [`Headers::decode`] reads them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Every (name, value) pair, in the host's order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            index: 0,
            count: self.count,
            at: 4 + 8 * self.count,
        }
    }

    /// The first value of header `name` (lower-case). A name of a length no header has is
    /// answered at once; otherwise the length table is walked and only names of the right
    /// length are compared. Walking it for every lookup cost about 4k instructions per
    /// request natively (callgrind, `make bench`'s chat), most of them for absent headers.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        let name = name.as_bytes();
        if self.lengths & length_bit(name.len()) == 0 {
            return None;
        }
        // Every length fits the buffer (`decode` checked them; `from_pairs` wrote them from
        // the pairs), so the sums cannot overflow.
        let mut at = 4 + 8 * self.count;
        for entry in self.bytes.get(4..at)?.chunks_exact(8) {
            let (name_len, value_len) = pair_lengths(entry)?;
            if name_len == name.len() && self.bytes.get(at..at + name_len) == Some(name) {
                let value_start = at + name_len + 1;
                return self.bytes.get(value_start..value_start + value_len);
            }
            at += name_len + value_len + 2;
        }
        None
    }

    /// [`Headers::get`] as text, if it is UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(crate::core::text::utf8)
    }

    /// The pairs whose name and value are both UTF-8, as text (for calls that take text).
    pub fn text_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter()
            .filter_map(|(k, v)| Some((std::str::from_utf8(k).ok()?, std::str::from_utf8(v).ok()?)))
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No headers at all.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The pairs of a [`Headers`], in order.
pub struct Iter<'h> {
    bytes: &'h [u8],
    index: usize,
    count: usize,
    /// Where the next name starts.
    at: usize,
}

impl<'h> Iterator for Iter<'h> {
    type Item = (&'h [u8], &'h [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.index >= self.count {
            return None;
        }
        let entry = 4 + 8 * self.index;
        let (name_len, value_len) = pair_lengths(self.bytes.get(entry..entry + 8)?)?;
        let name_end = self.at.checked_add(name_len)?;
        let name = self.bytes.get(self.at..name_end)?;
        let value_start = name_end.checked_add(1)?;
        let value_end = value_start.checked_add(value_len)?;
        let value = self.bytes.get(value_start..value_end)?;
        self.at = value_end.checked_add(1)?;
        self.index += 1;
        Some((name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding as a host writes it, built by hand.
    fn encoded(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = (pairs.len() as u32).to_le_bytes().to_vec();
        for (k, v) in pairs {
            out.extend((k.len() as u32).to_le_bytes());
            out.extend((v.len() as u32).to_le_bytes());
        }
        for (k, v) in pairs {
            out.extend(k.bytes().chain([0]).chain(v.bytes()).chain([0]));
        }
        out
    }

    #[test]
    fn reads_the_hosts_encoding_in_order() {
        let pairs = [
            (":path", "/v1/chat/completions"),
            ("x-empty", ""),
            ("a", "1"),
        ];
        let h = Headers::decode(encoded(&pairs)).unwrap();
        assert_eq!(h.len(), 3);
        let got: Vec<(&str, &str)> = h.text_pairs().collect();
        assert_eq!(got, pairs);
        assert_eq!(h.get(":path"), Some(&b"/v1/chat/completions"[..]));
        assert_eq!(h.get_str("x-empty"), Some(""));
        assert_eq!(h.get("missing"), None);
        assert_eq!(Headers::from_pairs(pairs), h, "both ways give one encoding");
    }

    /// A name longer than the length bits count (67 bytes: all from 63 on share the last bit).
    const LONG: &str = "x-a-name-of-67-bytes-which-is-longer-than-any-header-a-client-sends";

    /// A request's usual headers, and names looked up that it may not have.
    const SENT: [&str; 12] = [
        ":authority",
        ":path",
        ":method",
        ":scheme",
        "user-agent",
        "accept",
        "content-type",
        "content-length",
        "x-forwarded-proto",
        "x-request-id",
        "x-envoy-expected-rq-timeout-ms",
        "authorization",
    ];
    const LOOKED_UP: [&str; 9] = [
        "api-key",
        "x-api-key",
        "x-switchboard-metadata",
        "x-switchboard-trace-token",
        "x-switchboard-cluster",
        "accept-encoding",
        "content-encoding",
        "anthropic-version",
        "x-switchboard-trace",
    ];

    #[test]
    fn lookup_agrees_with_walking_every_pair() {
        // Names of equal length, prefixes of each other, empty values, a repeated name, the
        // empty name, and a request's usual headers.
        let odd = [
            (":path", "/v1/x"),
            ("ab", ""),
            ("ba", "2"),
            ("abc", "3"),
            ("a", "4"),
            ("ab", "5"),
            ("", "6"),
            (LONG, "7"),
        ];
        let usual = SENT.iter().map(|n| (*n, "v"));
        let h = Headers::from_pairs(odd.into_iter().chain(usual));
        let extra = ["b", "abcd", ":pat", &LONG[..64], &LONG[..63], LONG];
        for name in SENT
            .iter()
            .chain(&LOOKED_UP)
            .chain(&extra)
            .chain(&["ab", "ba", "abc", "a", ""])
        {
            let walked = h
                .iter()
                .find(|(k, _)| *k == name.as_bytes())
                .map(|(_, v)| v);
            assert_eq!(h.get(name), walked, "{name:?}");
        }
        assert_eq!(NO_HEADERS.get("a"), None);
    }

    #[test]
    fn the_first_of_repeated_names_wins() {
        let h = Headers::from_pairs([("x", "1"), ("x", "2")]);
        assert_eq!(h.get_str("x"), Some("1"));
        assert_eq!(h.iter().count(), 2);
    }

    #[test]
    fn values_need_not_be_text() {
        let h = Headers::from_pairs([("bin", &b"\xff\x00z"[..]), ("ok", b"yes")]);
        assert_eq!(h.get("bin"), Some(&b"\xff\x00z"[..]));
        assert_eq!(h.get_str("bin"), None);
        let text: Vec<_> = h.text_pairs().collect();
        assert_eq!(text, [("ok", "yes")], "only text pairs are offered as text");
    }

    #[test]
    fn malformed_encodings_are_refused() {
        let good = encoded(&[("a", "1"), ("bb", "22")]);
        assert!(Headers::decode(good.clone()).is_some());
        assert!(Headers::decode(Vec::new()).is_some_and(|h| h.is_empty()));
        // Cut short anywhere, or one byte too long: refused.
        for cut in 1..good.len() {
            assert!(
                Headers::decode(good[..cut].to_vec()).is_none(),
                "cut at {cut}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert!(Headers::decode(long).is_none());
        // A missing NUL after a name.
        let mut no_nul = good.clone();
        let first_nul = 4 + 16 + 1;
        no_nul[first_nul] = b'x';
        assert!(Headers::decode(no_nul).is_none());
        // A count far beyond the buffer.
        let mut huge = good;
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Headers::decode(huge).is_none());
    }
}
