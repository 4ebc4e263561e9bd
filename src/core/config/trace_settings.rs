//! `trace`: when answers carry the routing trace header (the header itself is rendered by
//! `core::trace`). Only a digest of the token is kept.

use sha2::{Digest, Sha256};

/// When the trace header is added (the config's `trace`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSettings {
    /// `trace.always`: on every answer.
    pub always: bool,
    /// SHA-256 of `trace.token`: only the digest is kept, so the token itself is not in memory
    /// after the config loads.
    token: Option<[u8; 32]>,
}

impl TraceSettings {
    /// Settings with an optional token (already `${env:NAME}`-resolved).
    pub fn new(always: bool, token: Option<&str>) -> TraceSettings {
        TraceSettings {
            always,
            token: token.map(|t| digest(t.as_bytes())),
        }
    }

    /// Whether tracing can be asked for per request, so the token header matters.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether this request gets the trace: always on, or it presents the token.
    pub fn wanted(&self, presented: Option<&[u8]>) -> bool {
        if self.always {
            return true;
        }
        match (&self.token, presented) {
            (Some(expected), Some(given)) => same_digest(expected, &digest(given)),
            _ => false,
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Compares two digests in time independent of where they differ. Comparing digests rather
/// than the tokens also keeps the token's length from showing in the time taken.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_token_turns_the_trace_on() {
        let off = TraceSettings::default();
        assert!(!off.wanted(Some(b"anything")));
        let token = TraceSettings::new(false, Some("s3cret-trace-token-0001"));
        assert!(token.wanted(Some(b"s3cret-trace-token-0001")));
        assert!(!token.wanted(Some(b"s3cret-trace-token-0002")));
        assert!(!token.wanted(Some(b"s3cret-trace-token-000")));
        assert!(!token.wanted(Some(b"")));
        assert!(!token.wanted(None));
        let always = TraceSettings::new(true, None);
        assert!(always.wanted(None));
        assert!(!format!("{token:?}").contains("s3cret"), "only a digest");
    }

    #[test]
    fn digests_compare_equal_only_when_every_byte_is() {
        let a = digest(b"x");
        let mut b = a;
        assert!(same_digest(&a, &b));
        b[31] ^= 1;
        assert!(!same_digest(&a, &b));
    }
}
