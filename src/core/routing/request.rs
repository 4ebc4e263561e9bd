//! What routing looks at in a request: its endpoint, model name, metadata, headers and body
//! fields, and the routing state (pins, cursors, the verified JWT) it may consult.

use super::shared_state::RoutingState;
use crate::core::caller::Caller;
use crate::core::config::{CallerIdentity, SessionIdentifier, StickySource, Tier};
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::metadata::Metadata;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// What routing looks at in a request besides its body.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// The requested model name.
    pub model: &'a str,
    /// Resolved metadata.
    pub metadata: &'a Metadata<'a>,
    /// The client's headers (names lower-case).
    pub headers: &'a Headers,
    /// Sticky pins and round-robin cursors.
    pub state: &'a dyn RoutingState,
    /// The body, and its top-level fields with their spans (for keys read from the body).
    pub body: &'a [u8],
    /// Top-level fields of the body.
    pub fields: &'a [(Cow<'a, str>, Range<usize>)],
    /// The classifier model's tier for a complexity virtual model, when it answered.
    pub tier_hint: Option<Tier>,
}

impl<'a> Request<'a> {
    /// The value a session or caller identifier names: a header, a metadata value, a claim
    /// of the verified JWT, a string member of the body or the coding agent's session.
    pub fn identifier(&self, id: &SessionIdentifier) -> Option<Cow<'a, [u8]>> {
        match id.source {
            StickySource::Headers => self.headers.get(&id.key).map(Cow::Borrowed),
            StickySource::Metadata => self
                .metadata
                .get(&id.key)
                .map(|v| Cow::Borrowed(v.as_bytes())),
            StickySource::Jwt => self
                .state
                .verified_claim(&id.payload, &id.key)
                .map(Cow::Owned),
            StickySource::Body => super::body_member::bytes_at(self.body, self.fields, &id.key),
            StickySource::AgentSession => {
                super::agent_session::session(self.headers, self.body, self.fields)
            }
        }
    }

    /// The caller of this request, by `rule` (`caller_identity`).
    pub fn caller(&self, rule: &CallerIdentity) -> Caller {
        match rule {
            CallerIdentity::Credential => {
                let headers = self.headers;
                let credential = headers
                    .get("authorization")
                    .or_else(|| headers.get("x-api-key"));
                Caller::of(credential.unwrap_or_default())
            }
            CallerIdentity::Identifier(id) => {
                Caller::of(self.identifier(id).as_deref().unwrap_or_default())
            }
        }
    }

    /// This request's caller's next round-robin position among `len` targets of virtual model
    /// `virtual_model` (`round_robin.rs`: a cursor per caller).
    pub fn next_turn(
        &self,
        rule: &CallerIdentity,
        virtual_model: usize,
        len: usize,
        rng: &mut fastrand::Rng,
    ) -> usize {
        let caller = self.caller(rule);
        self.state.next_cursor((virtual_model, caller), len, rng)
    }

    /// A request over headers and metadata only, with no body: what the skip reasons look at
    /// ([`super::Plan::skipped`]) when the trace is written after the body has gone on.
    pub fn without_body(
        endpoint: Endpoint,
        model: &'a str,
        metadata: &'a Metadata,
        headers: &'a Headers,
        state: &'a dyn RoutingState,
    ) -> Request<'a> {
        Request {
            endpoint,
            model,
            metadata,
            headers,
            state,
            body: b"",
            fields: &[],
            tier_hint: None,
        }
    }

    /// A top-level field of the body as raw JSON.
    pub fn field(&self, name: &str) -> Option<&'a RawValue> {
        crate::core::request::raw_field(self.body, self.fields, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::routing::LocalState;

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
        request.caller(rule)
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
