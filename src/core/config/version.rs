//! The version of a plugin config: a short hash of its text, so an operator can tell which
//! config each Envoy runs (logged when a config loads or is refused; exported as a gauge).
//!
//! The hash covers the configuration exactly as Envoy hands it over, before `${env:NAME}`
//! references are resolved: the same file gives the same version on every Envoy, and a secret
//! read from the environment never feeds it.

use sha2::{Digest, Sha256};
use std::fmt;

/// Bits kept of the SHA-256: 48, so the value is exact as a gauge (Prometheus samples are
/// 64-bit floats, exact up to 2^53) and prints as 12 hex digits, like a short commit id.
const BITS: u32 = 48;

/// A config's version. `Display` gives the 12 lower-case hex digits logged and documented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConfigVersion(pub u64);

impl ConfigVersion {
    /// The version of the configuration bytes `config`.
    pub fn of(config: &[u8]) -> ConfigVersion {
        let digest = Sha256::digest(config);
        let mut head = [0u8; 8];
        for (to, from) in head.iter_mut().zip(digest.iter()) {
            *to = *from;
        }
        ConfigVersion(u64::from_be_bytes(head) >> (64 - BITS))
    }
}

impl fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:012x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_head_of_sha256_as_twelve_hex_digits() {
        // sha256("") = e3b0c44298fc1c14...; sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(ConfigVersion::of(b"").to_string(), "e3b0c44298fc");
        assert_eq!(ConfigVersion::of(b"abc").to_string(), "ba7816bf8f01");
        assert_eq!(ConfigVersion::of(b"abc").0, 0xba78_16bf_8f01);
    }

    #[test]
    fn fits_a_gauge_exactly_and_pads_to_twelve_digits() {
        for text in [&b"{}"[..], b"{\"models\": []}", b"x"] {
            let v = ConfigVersion::of(text);
            assert!(v.0 < 1 << BITS);
            // Exact as an f64, so a Prometheus sample shows the same number.
            assert_eq!(v.0 as f64 as u64, v.0);
        }
        assert_eq!(ConfigVersion(0xab).to_string(), "0000000000ab");
    }

    #[test]
    fn changes_with_any_byte_of_the_text_and_only_with_it() {
        let a = br#"{"models": [], "virtual_models": []}"#;
        let b = br#"{"models": [], "virtual_models": [] }"#;
        assert_eq!(ConfigVersion::of(a), ConfigVersion::of(a));
        assert_ne!(ConfigVersion::of(a), ConfigVersion::of(b));
    }
}
