//! The top-level fields of a JSON object body, found in one validating pass.
//!
//! This is the fast path of request inspection: a small scanner that checks the whole document
//! against the JSON grammar (RFC 8259) and UTF-8, and notes where each top-level value sits,
//! without serde's visitor machinery and without copying. Strings are skipped eight bytes at a
//! time. It answers `None` for anything it does not accept, and the caller then asks serde_json,
//! which gives the client its exact error. So the scanner may refuse more than serde_json (it
//! does: nesting deeper than [`MAX_DEPTH`], and top-level keys serde cannot read), but must
//! never accept what serde_json refuses; the differential tests below hold it to that.

use std::borrow::Cow;
use std::ops::Range;

/// Deeper documents are left to serde_json: the nesting stack is one bit per level of a `u64`.
pub const MAX_DEPTH: u32 = 64;

/// Top-level fields in body order: each key (unescaped) and the span of its value.
pub type Fields<'a> = Vec<(Cow<'a, str>, Range<usize>)>;

/// Every top-level field of a JSON object; `None` if the body is not a valid JSON object (or
/// one this scanner leaves to serde_json).
pub fn top_level(body: &[u8]) -> Option<Fields<'_>> {
    let mut s = Scanner { b: body, i: 0 };
    s.ws();
    s.eat(b'{')?;
    let mut fields = Vec::with_capacity(8);
    s.ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
    } else {
        loop {
            s.ws();
            let key = s.key()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            let start = s.i;
            s.value()?;
            fields.push((key, start..s.i));
            s.ws();
            match s.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.ws();
    (s.i == body.len()).then_some(fields)
}

/// Bytes of `0x01` in every lane.
const ONES: u64 = u64::MAX / 255;
/// The high bit of every lane.
const HIGH: u64 = ONES << 7;

/// Lanes of `chunk` holding `"`, `\` or a control character, as their high bits.
fn special_lanes(chunk: u64) -> u64 {
    // Mycroft's zero-byte test on chunk ^ c, and a borrow test for bytes below 0x20; a lane
    // with its high bit set (UTF-8) never counts as a control character.
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x;
    let quote = zero_in(chunk ^ (ONES * u64::from(b'"')));
    let backslash = zero_in(chunk ^ (ONES * u64::from(b'\\')));
    let control = chunk.wrapping_sub(ONES * 0x20) & !chunk;
    (quote | backslash | control) & HIGH
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// JSON whitespace: space, tab, line feed, carriage return.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string, from its opening quote to past its closing one; whether it held an escape.
    fn string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let start = self.i;
        let (mut escaped, mut high) = (false, 0u64);
        loop {
            high |= self.skip_plain();
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 4;
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                c => high |= u64::from(c & 0x80),
            }
        }
        // Escapes are ASCII, so the raw content is UTF-8 exactly when the string is.
        let content = self.b.get(start..self.i - 1)?;
        if high != 0 && std::str::from_utf8(content).is_err() {
            return None;
        }
        Some(escaped)
    }

    /// Skips string content up to the first quote, backslash or control character, eight
    /// bytes at a time; the high bits of what it skipped (and maybe a little more), for UTF-8.
    fn skip_plain(&mut self) -> u64 {
        let rest = self.b.get(self.i..).unwrap_or_default();
        let word = |b: &[u8]| <[u8; 8]>::try_from(b).map_or(0, u64::from_le_bytes);
        let mut high = 0;
        // Sixteen bytes a round: two independent words keep the CPU busier than one.
        let mut pairs = rest.chunks_exact(16);
        let mut done = 0;
        for pair in &mut pairs {
            let Some((a, b)) = pair.split_at_checked(8) else {
                break;
            };
            let (a, b) = (word(a), word(b));
            high |= a | b;
            let (sa, sb) = (special_lanes(a), special_lanes(b));
            if sa | sb != 0 {
                let lane = if sa != 0 {
                    sa.trailing_zeros() / 8
                } else {
                    8 + sb.trailing_zeros() / 8
                };
                self.i += done + lane as usize;
                return high & HIGH;
            }
            done += 16;
        }
        for chunk in pairs.remainder().chunks_exact(8) {
            let w = word(chunk);
            high |= w;
            let special = special_lanes(w);
            if special != 0 {
                self.i += done + special.trailing_zeros() as usize / 8;
                return high & HIGH;
            }
            done += 8;
        }
        self.i += done;
        high & HIGH
    }

    /// A top-level key, unescaped (borrowed unless it holds escapes).
    fn key(&mut self) -> Option<Cow<'a, str>> {
        let start = self.i;
        let escaped = self.string()?;
        let raw = self.b.get(start..self.i)?;
        if escaped {
            // Rare: let serde_json unescape it (it refuses lone surrogates, as it would here).
            return serde_json::from_slice::<String>(raw).ok().map(Cow::Owned);
        }
        let inner = raw.get(1..raw.len() - 1)?;
        std::str::from_utf8(inner).ok().map(Cow::Borrowed)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.some_digits()?;
        }
        // What follows must end the value ("01" fails there, at the "1").
        Some(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// One value, nested ones included, without recursion: `open` has a bit per enclosing
    /// container, set for an object.
    fn value(&mut self) -> Option<()> {
        let (mut open, mut depth) = (0u64, 0u32);
        loop {
            // A value is expected here.
            self.ws();
            match self.peek()? {
                b'{' | b'[' => {
                    let object = self.next()? == b'{';
                    self.ws();
                    let empty = self.peek() == Some(if object { b'}' } else { b']' });
                    if empty {
                        self.i += 1;
                    } else {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            return None;
                        }
                        open = open << 1 | u64::from(object);
                        if object {
                            self.member_key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: a comma for the next one, or the end of containers.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let object = open & 1 == 1;
                self.ws();
                match self.next()? {
                    b',' => {
                        if object {
                            self.ws();
                            self.member_key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                depth -= 1;
                open >>= 1;
            }
        }
    }

    /// A member's key and colon, inside a nested object.
    fn member_key(&mut self) -> Option<()> {
        self.string()?;
        self.ws();
        self.eat(b':')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json makes of the same body: its top-level fields and their spans.
    fn by_serde(body: &[u8]) -> Option<Vec<(String, Range<usize>)>> {
        let fields = crate::core::request::serde_fields(body).ok()?;
        Some(
            fields
                .into_iter()
                .map(|(k, r)| (k.into_owned(), r))
                .collect(),
        )
    }

    /// The scanner's answer must be serde_json's whenever the scanner gives one.
    fn agrees(body: &[u8]) -> bool {
        let Some(fields) = top_level(body) else {
            return true;
        };
        let ours: Vec<(String, Range<usize>)> = fields
            .into_iter()
            .map(|(k, r)| (k.into_owned(), r))
            .collect();
        by_serde(body).as_ref() == Some(&ours)
    }

    const VALID: &[&str] = &[
        r#"{}"#,
        r#" { } "#,
        r#"{"model":"a/b","stream":true}"#,
        "{\n\t\"model\" : \"x\" ,\r\n \"n\":null }\n",
        r#"{"messages":[{"role":"user","content":"héllo \"wörld\" \\ \/ \b\f\n\r\t \u00e9 \uD83D\uDE00 𝄞"}],"model":"m"}"#,
        r#"{"a":[],"b":{},"c":[[],[{}]],"d":{"e":{"f":[1,2,{"g":[]}]}}}"#,
        r#"{"n":[0,-0,1,-1,12.5,-0.25,1e5,1E+5,2e-3,0.0e0,123456789012345678901234567890]}"#,
        r#"{"t":true,"f":false,"z":null,"s":"","u":"\u0000"}"#,
        r#"{"k\u00e9y":1,"model":"\u0067pt"}"#,
        r#"{"long":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        r#"{"x":"1234567\"89","y":"12345678","z":"é1234567"}"#,
    ];

    #[test]
    fn reads_what_serde_json_reads_with_the_same_spans() {
        for body in VALID {
            let fields = top_level(body.as_bytes());
            assert!(fields.is_some(), "refused valid {body}");
            assert!(agrees(body.as_bytes()), "disagrees on {body}");
        }
        let f = top_level(br#"{"model" : "m", "stream":true}"#).unwrap();
        assert_eq!(f[0], (Cow::Borrowed("model"), 11..14));
        assert_eq!(f[1], (Cow::Borrowed("stream"), 25..29));
        let escaped = top_level(br#"{"mo\u0064el":1}"#).unwrap();
        assert_eq!(escaped[0].0, "model");
    }

    #[test]
    fn refuses_what_json_does_not_allow() {
        let bad: &[&[u8]] = &[
            b"",
            b"[]",
            b"\"s\"",
            b"{",
            b"{\"a\"}",
            b"{\"a\":}",
            b"{\"a\":1,}",
            b"{,}",
            b"{\"a\":1 \"b\":2}",
            b"{\"a\":[1,]}",
            b"{\"a\":[1 2]}",
            b"{\"a\":{\"b\"}}",
            b"{\"a\":{\"b\":1,}}",
            b"{\"a\":[}",
            b"{\"a\":{]}",
            b"{\"a\":01}",
            b"{\"a\":-}",
            b"{\"a\":1.}",
            b"{\"a\":.5}",
            b"{\"a\":1e}",
            b"{\"a\":+1}",
            b"{\"a\":tru}",
            b"{\"a\":nul}",
            b"{\"a\":True}",
            b"{\"a\":\"x\ny\"}",
            b"{\"a\":\"tab\there\"}",
            b"{\"a\":\"\\x\"}",
            b"{\"a\":\"\\u12G4\"}",
            b"{\"a\":\"\\u12\"}",
            b"{\"a\":\"unterminated}",
            b"{\"a\":\"\xff\"}",
            b"{\"a\":\"\xc3\"}",
            b"{\"a\":\"\xed\xa0\x80\"}",
            b"{\"a\":\"12345678\xc3\"}",
            b"{\"\xff\":1}",
            b"{\"a\":1}x",
            b"{\"a\":1}{}",
            b"\xef\xbb\xbf{}",
            b"{\"a\":1}\x0c",
            b"{\"k\\ud800\":1}",
        ];
        for body in bad {
            assert!(
                top_level(body).is_none(),
                "accepted {}",
                String::from_utf8_lossy(body)
            );
            assert!(
                by_serde(body).is_none(),
                "serde accepts {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn deep_nesting_is_left_to_serde_json() {
        let depth = MAX_DEPTH as usize;
        let ok = format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        assert!(top_level(ok.as_bytes()).is_some());
        let deep = format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(depth + 1),
            "]".repeat(depth + 1)
        );
        assert!(top_level(deep.as_bytes()).is_none());
        assert!(
            by_serde(deep.as_bytes()).is_some(),
            "serde reads it instead"
        );
    }

    #[test]
    fn never_accepts_what_serde_json_refuses_under_mutation() {
        // Seeded mutations of valid bodies: every byte changed, dropped or doubled in turn,
        // and random bytes written at random places. Whatever the scanner accepts, serde_json
        // must accept with the same fields.
        let mut rng = fastrand::Rng::with_seed(5);
        let alphabet =
            b"{}[]:,\"\\ \t\n0123456789.-+eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff\xe2\x82\xacu";
        let mut checked = 0;
        for body in VALID {
            let b = body.as_bytes();
            for i in 0..b.len() {
                let dropped = [&b[..i], &b[i + 1..]].concat();
                let doubled = [&b[..=i], &b[i..]].concat();
                for m in [dropped, doubled] {
                    assert!(agrees(&m), "{}", String::from_utf8_lossy(&m));
                    checked += 1;
                }
                for &c in alphabet {
                    let mut m = b.to_vec();
                    m[i] = c;
                    assert!(agrees(&m), "{}", String::from_utf8_lossy(&m));
                    checked += 1;
                }
            }
            for _ in 0..2000 {
                let mut m = b.to_vec();
                for _ in 0..rng.usize(1..4) {
                    let at = rng.usize(..m.len());
                    m[at] = alphabet[rng.usize(..alphabet.len())];
                }
                assert!(agrees(&m), "{}", String::from_utf8_lossy(&m));
                checked += 1;
            }
        }
        assert!(checked > 30_000);
    }
}
