//! Base64 (RFC 4648) with the standard or the URL-safe alphabet.

pub const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes `bytes`, padded with `=`.
pub fn encode(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let idx = ((n >> (18 - 6 * i)) & 63) as usize;
                out.push(char::from(alphabet[idx]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes `text` (padding optional); `None` for any character outside
/// `alphabet` or an impossible length.
pub fn decode(text: &str, alphabet: &[u8; 64]) -> Option<Vec<u8>> {
    let body = text.trim_end_matches('=');
    if text.len() - body.len() > 2 || body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in body.bytes() {
        let value = alphabet.iter().position(|&a| a == c)?;
        acc = (acc << 6) | value as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes(), STANDARD), coded);
            assert_eq!(decode(coded, STANDARD).unwrap(), plain.as_bytes());
            assert_eq!(
                decode(coded.trim_end_matches('='), STANDARD).unwrap(),
                plain.as_bytes()
            );
        }
    }

    #[test]
    fn url_safe_and_garbage() {
        let bytes = [0xfb, 0xff, 0xbf];
        assert_eq!(encode(&bytes, STANDARD), "+/+/");
        assert_eq!(encode(&bytes, URL_SAFE), "-_-_");
        assert_eq!(decode("-_-_", URL_SAFE).unwrap(), bytes);
        assert_eq!(decode("+/+/", URL_SAFE), None);
        assert_eq!(decode("abcde", URL_SAFE), None, "length 1 mod 4");
        assert_eq!(decode("ab===", URL_SAFE), None);
        assert_eq!(decode("a b=", URL_SAFE), None);
    }
}
