//! Who is calling (`caller_identity`): a digest of the value that tells one caller from
//! another, by default the client's credential (its `authorization` header, else its
//! `x-api-key`). Only the digest is kept, so the credential itself goes nowhere: not into a
//! minted id, a log line or a hash table.

use crate::core::config::CallerIdentity;
use crate::core::routing::Request;
use sha2::{Digest, Sha256};

/// A caller: the first 16 bytes of SHA-256 of its identifying value (an absent value is the
/// empty one, so callers without one are one caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller(pub [u8; 16]);

impl Caller {
    /// The caller a value identifies.
    pub fn of(value: &[u8]) -> Caller {
        let digest = Sha256::digest(value);
        let mut out = [0; 16];
        for (o, d) in out.iter_mut().zip(digest) {
            *o = d;
        }
        Caller(out)
    }
}

/// The caller of `request`, by `rule`.
pub fn identify(rule: &CallerIdentity, request: &Request<'_>) -> Caller {
    match rule {
        CallerIdentity::Credential => {
            let headers = request.headers;
            let credential = headers
                .get("authorization")
                .or_else(|| headers.get("x-api-key"));
            Caller::of(credential.unwrap_or_default())
        }
        CallerIdentity::Identifier(id) => {
            Caller::of(request.identifier(id).as_deref().unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{SessionIdentifier, StickySource};
    use crate::core::endpoint::Endpoint;
    use crate::core::headers::Headers;
    use crate::core::metadata::Metadata;
    use crate::core::routing::state::LocalState;

    fn caller(rule: &CallerIdentity, headers: &[(&str, &str)]) -> Caller {
        let headers = Headers::from_pairs(headers.iter().copied());
        let metadata = Metadata::default();
        let state = LocalState::default();
        let request = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "m",
            metadata: &metadata,
            headers: &headers,
            state: &state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        identify(rule, &request)
    }

    #[test]
    fn by_default_the_caller_is_a_digest_of_its_credential() {
        let rule = CallerIdentity::Credential;
        let alice = caller(&rule, &[("authorization", "Bearer sk-alice")]);
        assert_eq!(alice, Caller::of(b"Bearer sk-alice"));
        assert_ne!(alice, caller(&rule, &[("authorization", "Bearer sk-bob")]));
        // Anthropic clients send `x-api-key`; `authorization` wins when both are sent.
        assert_eq!(
            caller(&rule, &[("x-api-key", "sk-ant")]),
            Caller::of(b"sk-ant")
        );
        assert_eq!(
            caller(
                &rule,
                &[("x-api-key", "sk-ant"), ("authorization", "Bearer a")]
            ),
            Caller::of(b"Bearer a")
        );
        assert_eq!(caller(&rule, &[]), Caller::of(b""));
        // The digest does not hold the credential.
        assert!(!alice.0.windows(4).any(|w| w == b"sk-a"));
    }

    #[test]
    fn a_configured_identity_reads_its_source() {
        let rule = CallerIdentity::Identifier(SessionIdentifier {
            key: "x-tenant".to_string(),
            source: StickySource::Headers,
            payload: String::new(),
        });
        let acme = caller(&rule, &[("x-tenant", "acme"), ("authorization", "k1")]);
        assert_eq!(
            acme,
            caller(&rule, &[("x-tenant", "acme"), ("authorization", "k2")])
        );
        assert_ne!(acme, caller(&rule, &[("x-tenant", "globex")]));
    }
}
