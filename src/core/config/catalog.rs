//! The catalog: the real models virtual models route to, where each one lives and which
//! APIs it speaks.

use super::upstream::Upstream;
use crate::core::endpoint::{Api, Apis};
use crate::core::health::policy::HealthPolicy;

/// Index of a catalog model in `Config::models`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelId(pub usize);

/// Who may call a catalog model by name (agentgateway virtual models, "Public and internal
/// models").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Clients may call it directly; it may also be a target.
    Public,
    /// Only usable as a virtual model's target.
    Internal,
}

/// The API family a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI.
    OpenAi,
    /// Azure OpenAI.
    Azure,
    /// Anthropic.
    Anthropic,
    /// A self-hosted server with an OpenAI-compatible API (vLLM, TGI, Ollama, ...).
    OpenAiCompatible,
}

impl Provider {
    /// Every provider with its config name.
    pub const ALL: [(Provider, &'static str); 4] = [
        (Provider::OpenAi, "openai"),
        (Provider::Azure, "azure"),
        (Provider::Anthropic, "anthropic"),
        (Provider::OpenAiCompatible, "openai-compatible"),
    ];

    /// What a provider's models serve unless `apis` says otherwise: OpenAI and Azure OpenAI
    /// every OpenAI-shaped API, the Responses API included; Anthropic its Messages API and
    /// chat completions; an OpenAI-compatible server (vLLM, TGI, Ollama...) chat completions,
    /// completions, embeddings and rerank, never the Responses or the Messages API.
    pub fn default_apis(self) -> Apis {
        match self {
            Provider::OpenAi | Provider::Azure => Apis::of(&[
                Api::ChatCompletions,
                Api::Completions,
                Api::Embeddings,
                Api::Responses,
                Api::Rerank,
                Api::Moderations,
                Api::Images,
                Api::Audio,
            ]),
            // Messages only: Anthropic's OpenAI-compatible endpoint is not meant for production
            // (Anthropic's docs: no prompt caching, fields ignored). A virtual model translates
            // Chat Completions for it (`translate`); `apis` that list `chat_completions` send
            // Chat Completions to that endpoint untranslated.
            Provider::Anthropic => Apis::of(&[Api::Messages]),
            Provider::OpenAiCompatible => Apis::of(&[
                Api::ChatCompletions,
                Api::Completions,
                Api::Embeddings,
                Api::Rerank,
            ]),
        }
    }
}

/// Headers that carry a provider credential. When a model's catalog entry sets one, the
/// client's own never go to it: a key meant for the gateway (or another provider) must not
/// reach this one, and Azure refuses a foreign `authorization` beside its `api-key`.
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "api-key", "x-api-key"];

/// Whether a (lower-case) header name carries a credential.
pub fn is_credential(name: &str) -> bool {
    CREDENTIAL_HEADERS.contains(&name)
}

/// A real model in the catalog: where it lives and what it is called there.
#[derive(Debug, Clone)]
pub struct Model {
    /// The name clients and targets use, e.g. `openai-main/gpt-4o`.
    pub name: String,
    /// The Envoy cluster that serves it.
    pub cluster: String,
    /// The model id sent upstream in the body, e.g. `gpt-4o`.
    pub upstream_model: String,
    /// `upstream_model` as a JSON string literal, ready to splice into a body.
    pub upstream_model_json: String,
    /// The API family of the provider.
    pub provider: Provider,
    /// `apis`: the native APIs it serves (default: its provider's).
    pub apis: Apis,
    /// `max_output_tokens`: the output limit a translated request's `max_tokens` defaults to
    /// (Anthropic requires one).
    pub max_output_tokens: Option<u32>,
    /// Whether clients may call it directly.
    pub visibility: Visibility,
    /// Headers set on every request to it (names lower-cased, `${env:NAME}` resolved).
    pub headers: Vec<(String, String)>,
    /// Whether `headers` sets a credential header, so the client's own must not go with it.
    pub sets_credential: bool,
    /// Its host, path prefix and query parameters.
    pub upstream: Upstream,
    /// `stores_responses`: its provider keeps Responses API state (default: OpenAI and
    /// Azure do, others not).
    pub stores_responses: bool,
    /// What counts as a failure and when it is evicted.
    pub health: HealthPolicy,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::endpoint::Endpoint;

    #[test]
    fn provider_defaults_give_each_endpoint_to_the_models_that_serve_it_natively() {
        let by = |p: Provider| p.default_apis();
        assert!(Endpoint::Messages.served_by(by(Provider::Anthropic)));
        assert!(!Endpoint::Messages.served_by(by(Provider::OpenAi)));
        assert!(!Endpoint::Responses.served_by(by(Provider::Anthropic)));
        assert!(Endpoint::Responses.served_by(by(Provider::Azure)));
        // Anthropic's OpenAI-compatible endpoint is not assumed: a virtual model translates.
        assert!(!Endpoint::ChatCompletions.served_by(by(Provider::Anthropic)));
        assert!(!Endpoint::Embeddings.served_by(by(Provider::Anthropic)));
        // An OpenAI-compatible server is not assumed to serve the Responses or Messages API.
        let compatible = by(Provider::OpenAiCompatible);
        assert!(!Endpoint::Responses.served_by(compatible));
        assert!(!Endpoint::Messages.served_by(compatible));
        for e in [
            Endpoint::ChatCompletions,
            Endpoint::Completions,
            Endpoint::Embeddings,
        ] {
            assert!(e.served_by(compatible), "{e:?}");
        }
        assert!(Endpoint::Rerank.served_by(compatible));
    }
}
