//! Reasoning `encrypted_content` that only the mock process which minted it
//! accepts back, as OpenAI accepts only its own.
//!
//! A token is URL-safe base64 (padded) of a Fernet-like layout:
//! `0x80 | issued-at (u64 BE seconds) | 16-byte random nonce | mock name |
//! HMAC-SHA256 over everything before it`. The HMAC key is 32 random bytes
//! drawn when the process starts and never leaves it, so another mock (or a
//! restart of this one) cannot produce a token this one verifies. The version
//! byte and a current timestamp make every token start `gAAAAA`, like OpenAI's.

use crate::b64;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

const VERSION: u8 = 0x80;
const NONCE_LEN: usize = 16;
const HEADER_LEN: usize = 1 + 8 + NONCE_LEN;
const TAG_LEN: usize = 32;

/// The per-process key that seals and verifies reasoning content.
pub struct Sealer {
    key: hmac::Key,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer { key: <per-process secret> }")
    }
}

impl Default for Sealer {
    fn default() -> Self {
        Self::new()
    }
}

impl Sealer {
    /// A sealer with a fresh random key.
    ///
    /// # Panics
    /// If the OS random source fails, which leaves no way to keep the promise.
    pub fn new() -> Self {
        let rng = SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .expect("the OS random source is available");
        Self { key, rng }
    }

    /// A new token naming `name` (the mock's name, for whoever decodes it).
    pub fn seal(&self, name: &str, issued_at: u64) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        if self.rng.fill(&mut nonce).is_err() {
            nonce.iter_mut().for_each(|b| *b = fastrand::u8(..));
        }
        let mut bytes = Vec::with_capacity(HEADER_LEN + name.len() + TAG_LEN);
        bytes.push(VERSION);
        bytes.extend_from_slice(&issued_at.to_be_bytes());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(name.as_bytes());
        let tag = hmac::sign(&self.key, &bytes);
        bytes.extend_from_slice(tag.as_ref());
        b64::encode(&bytes, b64::URL_SAFE)
    }

    /// Whether `token` was sealed by this very process (and is unaltered).
    pub fn verify(&self, token: &str) -> bool {
        let Some(bytes) = b64::decode(token, b64::URL_SAFE) else {
            return false;
        };
        if bytes.len() < HEADER_LEN + TAG_LEN || bytes[0] != VERSION {
            return false;
        }
        let (signed, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        hmac::verify(&self.key, signed, tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_tokens_verify_and_look_like_openai() {
        let sealer = Sealer::new();
        let token = sealer.seal("alpha", 1_760_000_000);
        assert!(token.starts_with("gAAAAA"), "{token}");
        assert!(sealer.verify(&token));
        assert_ne!(token, sealer.seal("alpha", 1_760_000_000), "random nonce");
        let bytes = b64::decode(&token, b64::URL_SAFE).unwrap();
        assert_eq!(&bytes[HEADER_LEN..bytes.len() - TAG_LEN], b"alpha");
    }

    #[test]
    fn another_process_or_a_change_is_refused() {
        let a = Sealer::new();
        let b = Sealer::new();
        let token = a.seal("alpha", 1);
        assert!(!b.verify(&token), "another mock's key");
        assert!(!b.verify(&b.seal("alpha", 1).replace('A', "B")));

        // Claiming to be another mock breaks the tag.
        let mut bytes = b64::decode(&token, b64::URL_SAFE).unwrap();
        bytes[HEADER_LEN] = b'b';
        assert!(!a.verify(&b64::encode(&bytes, b64::URL_SAFE)));

        assert!(!a.verify(""));
        assert!(!a.verify("gAAAAA"));
        assert!(!a.verify("not base64 at all!"));
        assert!(!a.verify(&token[..token.len() - 8]));
    }
}
