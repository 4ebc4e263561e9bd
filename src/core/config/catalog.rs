//! The catalog: the real models virtual models route to, where each one lives and which
//! APIs it speaks.

use super::upstream::Upstream;
use crate::core::endpoint::Apis;
use crate::core::health::policy::HealthPolicy;

/// Index of a catalog model in [`Config::models`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelId(pub usize);

/// Who may call a catalog model by name (agentgateway seed, "Public and internal models").
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
