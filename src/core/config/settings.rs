//! Root options about every request rather than one model: the header names, who the caller
//! is, the provider-account headers, and what `/v1/responses` does with a target that does
//! not serve it natively.

use super::catalog::Provider;
use super::strategy::{SessionIdentifier, StickySource};

/// `caller_identity` (root): who is calling, for the rules that tell callers apart (latency
/// routing's default caller, `response_id_binding: "caller"`). Whatever the source, only a
/// digest of its value is kept ([`crate::core::caller`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CallerIdentity {
    /// The client's credential: its `authorization` header, else its `x-api-key` (default).
    #[default]
    Credential,
    /// A request header, a metadata value or a claim of the verified JWT.
    Identifier(SessionIdentifier),
}

impl CallerIdentity {
    /// Whether it reads a claim of the verified JWT.
    pub fn reads_jwt(&self) -> bool {
        matches!(self, CallerIdentity::Identifier(id) if id.source == StickySource::Jwt)
    }
}

/// `account_headers` (root): headers that pick or reveal a provider account. When a target
/// brings the gateway's own credential, the client's `request` ones do not go with it (they
/// would select an organisation or project on the gateway's key), and the provider's
/// `response` ones do not come back (they name the gateway's account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountHeaders {
    /// Client headers dropped (names lower-cased).
    pub request: Vec<String>,
    /// Provider answer headers dropped, per provider ([`AccountHeaders::response`]).
    response: [Vec<String>; 4],
}

impl AccountHeaders {
    /// `account_headers.response` given: the same list for every provider.
    pub fn with_response(mut self, names: Vec<String>) -> Self {
        self.response = [names.clone(), names.clone(), names.clone(), names];
        self
    }

    /// The answer headers hidden from the client for a target of `provider` (names
    /// lower-cased). By default each provider's own: OpenAI's `openai-organization` and
    /// `openai-project` (OpenAI API reference, "Debugging requests"; kept for Azure and
    /// OpenAI-compatible servers, which may relay them), Anthropic's
    /// `anthropic-organization-id` (Anthropic API, "Response headers"). Each is a header
    /// removal on every answer, whether it is there or not: one per header the provider
    /// cannot send is work for nothing (callgrind: about 2k instructions on the `.wasm`).
    pub fn response(&self, provider: Provider) -> &[String] {
        let slot = match provider {
            Provider::OpenAi => 0,
            Provider::Azure => 1,
            Provider::Anthropic => 2,
            Provider::OpenAiCompatible => 3,
        };
        self.response.get(slot).map_or(&[], Vec::as_slice)
    }
}

impl Default for AccountHeaders {
    fn default() -> Self {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let openai = owned(&["openai-organization", "openai-project"]);
        AccountHeaders {
            request: owned(&[
                "openai-organization",
                "openai-project",
                "cookie",
                "proxy-authorization",
            ]),
            response: [
                openai.clone(),
                openai.clone(),
                owned(&["anthropic-organization-id"]),
                openai,
            ],
        }
    }
}

/// Header names the filter reads and writes (configurable, default prefix `x-switchboard-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// Internal: set by the filter, read by the Envoy route's `cluster_header`.
    pub cluster: String,
    /// Response: the catalog model that answered.
    pub resolved_model: String,
    /// Response: how many attempts the request took, when more than one or when all failed.
    pub attempts: String,
    /// Request: metadata as a JSON object of strings.
    pub metadata: String,
    /// Response: the routing trace, when asked for (`trace`).
    pub trace: String,
    /// Request: the `trace.token` that asks for the trace; never sent upstream.
    pub trace_token: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            cluster: "x-switchboard-cluster".to_string(),
            resolved_model: "x-switchboard-resolved-model".to_string(),
            attempts: "x-switchboard-attempts".to_string(),
            metadata: "x-switchboard-metadata".to_string(),
            trace: "x-switchboard-trace".to_string(),
            trace_token: "x-switchboard-trace-token".to_string(),
        }
    }
}

/// `non_native_responses`: a virtual model's `/v1/responses` targets that do not serve the
/// Responses API natively.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NonNativeResponses {
    /// `"reject"` (default): such a target stays in the list, and a request routing picks it
    /// for gets a 400 (TrueFoundry virtual models, "Responses API conversations": terminal,
    /// no fallback).
    #[default]
    Reject,
    /// `"skip"`: such targets are left out, as on every other endpoint (Zuplo model load
    /// balancing, "How it works": models that can't serve the endpoint are dropped).
    Skip,
}
