//! What routing looks at in a request: its endpoint, model name, metadata, headers and body
//! fields, and the routing state (pins, cursors, the verified JWT) it may consult.

use super::state::RoutingState;
use crate::core::config::{SessionIdentifier, StickySource, Tier};
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
    /// The value a session or caller identifier names: a header, a metadata value, or a
    /// claim of the verified JWT.
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
        }
    }

    /// A top-level field of the body as raw JSON.
    pub fn field(&self, name: &str) -> Option<&'a RawValue> {
        crate::core::request::raw_field(self.body, self.fields, name)
    }
}
