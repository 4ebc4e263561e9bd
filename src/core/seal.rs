//! Sealing the plaintext of a response id or reasoning mark (`responses::id`): the tag is
//! HMAC-SHA256 of the plaintext, truncated to 16 bytes, and also the nonce of an HMAC-SHA256
//! keystream that hides it (a deterministic authenticated encryption in the SIV style), the
//! whole as unpadded base64url. The keys come from the config's `response_id_keys`; the first
//! signs and every one verifies, so keys can be rotated.
//!
//! A leaf: the config holds the [`Keys`] and imports nothing of `responses`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Used when the config names no `response_id_keys`: it catches corrupted and hand-edited
/// ids, not forgeries (anyone with this source can mint an id).
const BUILT_IN_KEY: &[u8] = b"switchboard built-in response id key, version 1";

const TAG_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// Keys derived from one secret: one for the keystream, one for the tag, each also as an HMAC
/// already keyed, so a seal or an open does not hash the key's pads again for every HMAC it
/// computes (about half of each short HMAC's compressions).
#[derive(Clone)]
struct KeyPair {
    enc: [u8; 32],
    mac: [u8; 32],
    keyed_enc: HmacSha256,
    keyed_mac: HmacSha256,
}

impl PartialEq for KeyPair {
    fn eq(&self, other: &Self) -> bool {
        // The keyed HMACs follow from the keys.
        (self.enc, self.mac) == (other.enc, other.mac)
    }
}

impl Eq for KeyPair {}

// Key material never shows in a debug print.
impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPair(..)")
    }
}

/// An HMAC-SHA256 keyed with `key` (HMAC accepts a key of any length, so this never fails).
fn keyed(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => <HmacSha256 as Mac>::new(&Default::default()),
    }
}

fn prf(keyed: &HmacSha256, parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = keyed.clone();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

impl KeyPair {
    fn derive(secret: &[u8]) -> KeyPair {
        let secret = keyed(secret);
        let enc = prf(&secret, &[b"switchboard response id: keystream"]);
        let mac = prf(&secret, &[b"switchboard response id: tag"]);
        KeyPair {
            enc,
            mac,
            keyed_enc: keyed(&enc),
            keyed_mac: keyed(&mac),
        }
    }

    fn tag(&self, plaintext: &[u8]) -> [u8; TAG_LEN] {
        let full = prf(&self.keyed_mac, &[plaintext]);
        let mut tag = [0; TAG_LEN];
        tag.copy_from_slice(full.get(..TAG_LEN).unwrap_or(&[0; TAG_LEN]));
        tag
    }

    /// XORs `data` with the keystream of `tag`.
    fn xor(&self, tag: &[u8], data: &mut [u8]) {
        for (block, chunk) in data.chunks_mut(32).enumerate() {
            let counter = u32::try_from(block).unwrap_or(u32::MAX).to_be_bytes();
            let stream = prf(&self.keyed_enc, &[tag, &counter]);
            for (b, k) in chunk.iter_mut().zip(stream) {
                *b ^= k;
            }
        }
    }
}

/// The keys ids are minted and verified with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The first signs; all verify. Never empty.
    pairs: Vec<KeyPair>,
    /// Whether these are the built-in key only.
    pub built_in: bool,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            pairs: vec![KeyPair::derive(BUILT_IN_KEY)],
            built_in: true,
        }
    }
}

impl Keys {
    /// Keys from configured secrets (the first signs); the built-in key when there are none.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> Keys {
        if secrets.is_empty() {
            return Keys::default();
        }
        Keys {
            pairs: secrets
                .iter()
                .map(|s| KeyPair::derive(s.as_ref()))
                .collect(),
            built_in: false,
        }
    }

    fn signer(&self) -> KeyPair {
        self.pairs
            .first()
            .cloned()
            .unwrap_or_else(|| KeyPair::derive(BUILT_IN_KEY))
    }

    /// Seals `plaintext` into base64url(tag ‖ ciphertext).
    pub fn seal(&self, plaintext: &[u8]) -> String {
        let key = self.signer();
        let tag = key.tag(plaintext);
        let mut sealed = Vec::with_capacity(TAG_LEN + plaintext.len());
        sealed.extend_from_slice(&tag);
        sealed.extend_from_slice(plaintext);
        if let Some(body) = sealed.get_mut(TAG_LEN..) {
            key.xor(&tag, body);
        }
        base64url_encode(&sealed)
    }

    /// Opens what [`Keys::seal`] made with any of the keys.
    pub fn open(&self, text: &str) -> Option<Vec<u8>> {
        let sealed = base64url_decode(text)?;
        let (tag, body) = (sealed.get(..TAG_LEN)?, sealed.get(TAG_LEN..)?);
        self.pairs.iter().find_map(|key| {
            let mut plain = body.to_vec();
            key.xor(tag, &mut plain);
            // Compared in constant time by the MAC crate.
            let mut mac = key.keyed_mac.clone();
            mac.update(&plain);
            mac.verify_truncated_left(tag).ok()?;
            Some(plain)
        })
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// RFC 4648's standard alphabet, the one Envoy's base64 decoders read.
const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Unpadded base64url: ids stay one token, safe in a URL path and a JSON string.
pub fn base64url_encode(data: &[u8]) -> String {
    encode(data, ALPHABET, false)
}

/// Padded standard base64: what Envoy decodes from a header (`header_to_metadata`'s BASE64).
pub fn base64_encode(data: &[u8]) -> String {
    encode(data, STANDARD, true)
}

fn encode(data: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            let sextet = (n >> (18 - 6 * i)) & 63;
            out.push(char::from(
                alphabet.get(sextet as usize).copied().unwrap_or(b'A'),
            ));
        }
        if pad {
            for _ in chunk.len()..3 {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)?;
        acc = (acc << 6) | u32::try_from(v).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    // A length of 1 mod 4 cannot come from encoding, and unused bits must be zero: one id has
    // one spelling.
    (bits < 6 && acc & ((1 << bits) - 1) == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_is_the_documented_construction_so_ids_minted_before_stay_readable() {
        // Computed apart with Python's hmac and hashlib: tag = HMAC(mac, plaintext)[..16],
        // keystream block i = HMAC(enc, tag ‖ i as u32 big-endian), the keys HMACs of the secret.
        let keys = Keys::new(&["a-key-of-thirty-two-bytes-000001"]);
        let plain = b"the plaintext of a response id, long enough for two keystream blocks";
        let sealed = keys.seal(plain);
        assert_eq!(
            sealed,
            "wSWWxDFBJaDo4HJf5PkjVYsgr7fSGEC0QWLQkQBu9OEvdiW6gpI-mGVx0fMBkrZ8C6OjoY445aS58ytejfbh2BHHqQQ3InZFAKQx-JtEbc2tulI0"
        );
        assert_eq!(keys.open(&sealed).as_deref(), Some(&plain[..]));
    }

    #[test]
    fn standard_base64_is_rfc_4648s() {
        // RFC 4648, section 10's test vectors.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), coded);
        }
        assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn base64url_round_trips_every_length() {
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = base64url_encode(&data);
            assert!(text.bytes().all(|b| ALPHABET.contains(&b)));
            assert_eq!(base64url_decode(&text).unwrap(), data, "len {len}");
        }
        assert_eq!(base64url_decode("A"), None);
    }
}
