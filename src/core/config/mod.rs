//! The plugin config, compiled: the catalog, the virtual models and lookup tables.
//!
//! The JSON contract is fixed by the foundation issue (`models[]`, `virtual_models[]` with
//! TrueFoundry's `routing_config` field names). [`Config::parse`] reads and validates it once;
//! the request path only looks names up in the compiled tables.

mod callers;
mod compile;
mod fields;
mod metadata;
mod responses;
mod routing_config;
mod upstream;
mod version;

pub use fields::ConfigError;
pub use upstream::Upstream;
pub use version::ConfigVersion;

use crate::core::endpoint::{Apis, ModelTypes};
use crate::core::health::policy::{FailureWindow, HealthPolicy};
use crate::core::health::sla::SlaCutoff;
use crate::core::status_set::StatusSet;
use hashbrown::HashMap;

/// Default limit for a buffered request body: 16 MiB holds long-context prompts with images.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 16 * 1024 * 1024;

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
    pub apis: crate::core::endpoint::Apis,
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

/// A target of a weighted virtual model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightedTarget {
    /// The catalog model.
    pub model: ModelId,
    /// Share of traffic, 0–100; all weights of a virtual model sum to 100.
    pub weight: u32,
}

/// A target of a priority virtual model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityTarget {
    /// The catalog model.
    pub model: ModelId,
    /// Lower is preferred; 0 is the highest priority.
    pub priority: u32,
}

/// A target of a conditional virtual model.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionalTarget {
    /// The catalog model.
    pub model: ModelId,
    /// Its `when` expression.
    pub when: crate::core::routing::condition::Condition,
}

/// Where a sticky session identifier is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StickySource {
    /// A request header (name lower-cased).
    Headers,
    /// A request metadata key.
    Metadata,
    /// A claim of the JWT Envoy's `jwt_authn` filter verified (its `payload_in_metadata`).
    Jwt,
}

/// Where a verified JWT's payload sits by default: the `payload_in_metadata` name of
/// Envoy's `jwt_authn` provider.
pub const DEFAULT_JWT_PAYLOAD: &str = "jwt_payload";

/// One `session_identifiers` entry, or a `caller_identifier`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionIdentifier {
    /// The header name, metadata key or JWT claim.
    pub key: String,
    /// Where it is read.
    pub source: StickySource,
    /// For a JWT claim: the `payload_in_metadata` name the payload is under; else empty.
    pub payload: String,
}

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
    /// Provider answer headers dropped (names lower-cased).
    pub response: Vec<String>,
}

impl Default for AccountHeaders {
    fn default() -> Self {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        AccountHeaders {
            request: owned(&[
                "openai-organization",
                "openai-project",
                "cookie",
                "proxy-authorization",
            ]),
            response: owned(&[
                "openai-organization",
                "openai-project",
                "anthropic-organization-id",
            ]),
        }
    }
}

/// `sticky_routing` of a weighted virtual model (TrueFoundry seed, "Sticky routing").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyRouting {
    /// `ttl_seconds`, in milliseconds.
    pub ttl_ms: u64,
    /// Joined into one session key, in order.
    pub session_identifiers: Vec<SessionIdentifier>,
    /// `missing_identifier`: `"shared"` (default, TrueFoundry virtual models, "Sticky
    /// routing": a missing identifier "contributes an empty string", so every request without
    /// one is one session) or `"none"` (`false`: a request missing every identifier is not
    /// sticky).
    pub shared_when_missing: bool,
}

/// A complexity tier (TrueFoundry seed, "Complexity-based routing"), cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// `simple`
    Simple,
    /// `medium`
    Medium,
    /// `complex`
    Complex,
}

impl Tier {
    /// Every tier, in escalation order.
    pub const ALL: [Tier; 3] = [Tier::Simple, Tier::Medium, Tier::Complex];

    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Simple => "simple",
            Tier::Medium => "medium",
            Tier::Complex => "complex",
        }
    }

    /// Parses a config name.
    pub fn from_name(name: &str) -> Option<Tier> {
        Self::ALL.iter().copied().find(|t| t.name() == name)
    }
}

/// A target of a complexity virtual model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComplexityTarget {
    /// The catalog model.
    pub model: ModelId,
    /// The tier it serves.
    pub tier: Tier,
}

/// Heuristic score thresholds: from `medium` up a request is medium, from `complex` complex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// First score classified medium.
    pub medium: u32,
    /// First score classified complex.
    pub complex: u32,
}

/// The optional classifier model of complexity routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classifier {
    /// The catalog chat model asked for the tier.
    pub model: ModelId,
    /// How long to wait for its answer before the heuristic decides.
    pub timeout_ms: u64,
}

/// What `hash-based-routing` keys on (Zuplo seed, `stickyBy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The caller: the `authorization` header.
    User,
    /// The system prompt and the first user message with text.
    Conversation,
    /// A request header (name lower-cased).
    Header(String),
    /// A request metadata key.
    Metadata(String),
    /// A claim of the verified JWT (Zuplo seed, "Sticky by user": the authenticated subject).
    Jwt {
        /// The `payload_in_metadata` name of the `jwt_authn` provider.
        payload: String,
        /// The claim, `sub` by default.
        claim: String,
    },
}

/// How a virtual model picks among its targets.
#[derive(Debug, Clone, PartialEq)]
pub enum Routing {
    /// `weight-based-routing`.
    Weighted(Vec<WeightedTarget>),
    /// `priority-based-routing`.
    Priority(Vec<PriorityTarget>),
    /// `conditional-routing` (agentgateway seed).
    Conditional(Vec<ConditionalTarget>),
    /// `round-robin-routing` (Zuplo seed).
    RoundRobin(Vec<ModelId>),
    /// `hash-based-routing` (Zuplo seed's `sticky`).
    Hash {
        /// The targets.
        targets: Vec<ModelId>,
        /// What the hash keys on.
        by: HashKey,
    },
    /// `complexity-based-routing` (TrueFoundry seed).
    Complexity {
        /// The targets with their tiers.
        targets: Vec<ComplexityTarget>,
        /// Score thresholds.
        thresholds: Thresholds,
        /// The classifier model, if one is configured.
        classifier: Option<Classifier>,
    },
    /// `latency-based-routing` (TrueFoundry seed).
    Latency {
        /// The targets.
        targets: Vec<ModelId>,
        /// `caller_identifier`; the `authorization` header when unset.
        caller: Option<SessionIdentifier>,
    },
}

impl Routing {
    /// The `routing_config.type` it was configured with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Routing::Weighted(_) => "weight-based-routing",
            Routing::Priority(_) => "priority-based-routing",
            Routing::Conditional(_) => "conditional-routing",
            Routing::RoundRobin(_) => "round-robin-routing",
            Routing::Hash { .. } => "hash-based-routing",
            Routing::Complexity { .. } => "complexity-based-routing",
            Routing::Latency { .. } => "latency-based-routing",
        }
    }
}

/// What happens when one target fails (TrueFoundry seed, "Retries and fallbacks").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetPolicy {
    /// `retry_config.attempts`: retries on the same target (default 0).
    pub retry_attempts: u32,
    /// `retry_config.delay`: milliseconds before the first retry (default 100).
    pub retry_delay_ms: u64,
    /// `retry_config.backoff_multiplier`: retry n waits `delay × multiplier^(n-1)` (default 1,
    /// a fixed delay). Zuplo seed, "Failures and retries": 250 ms then 500 ms is `delay: 250`
    /// with multiplier 2.
    pub retry_backoff: u32,
    /// `retry_config.on_connection_failure`: whether a connection failure or upstream timeout
    /// is retried like an `on_status_codes` status (default true). Zuplo seed, "Failures and
    /// retries": a model that "can't be reached" moves to the retry model at once (false).
    pub retry_no_answer: bool,
    /// `retry_config.on_status_codes` (default 429, 500, 502, 503).
    pub retry_on: StatusSet,
    /// `fallback_status_codes`: codes that move the request to another target
    /// (default 401, 403, 404, 408, 429, 500, 502, 503).
    pub fallback_on: StatusSet,
    /// `fallback_candidate`: may receive other targets' fallback traffic (default true).
    pub fallback_candidate: bool,
    /// `sla_cutoff` (priority-based routing only).
    pub sla: Option<SlaCutoff>,
}

impl Default for TargetPolicy {
    fn default() -> Self {
        TargetPolicy {
            retry_attempts: 0,
            retry_delay_ms: 100,
            retry_backoff: 1,
            retry_no_answer: true,
            retry_on: StatusSet::of(&[429, 500, 502, 503]),
            fallback_on: StatusSet::of(&[401, 403, 404, 408, 429, 500, 502, 503]),
            fallback_candidate: true,
            sla: None,
        }
    }
}

/// The policy of a catalog model called directly: no retries, nowhere to fall back to.
pub static DIRECT_POLICY: TargetPolicy = TargetPolicy {
    retry_attempts: 0,
    retry_delay_ms: 0,
    retry_backoff: 1,
    retry_no_answer: true,
    retry_on: StatusSet::EMPTY,
    fallback_on: StatusSet::EMPTY,
    fallback_candidate: false,
    sla: None,
};

/// `headers_override` of a target (TrueFoundry seed, "Header overrides"): applied last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadersOverride {
    /// Headers added or overwritten (names lower-cased).
    pub set: Vec<(String, String)>,
    /// Headers stripped (names lower-cased).
    pub remove: Vec<String>,
}

/// One target of a virtual model with everything configured on it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetConfig {
    /// The catalog model.
    pub model: ModelId,
    /// Retries, fallback and SLA.
    pub policy: TargetPolicy,
    /// `metadata_match`: every pair must equal the request's metadata (AND).
    pub metadata_match: Vec<(String, String)>,
    /// `headers_override`.
    pub headers_override: HeadersOverride,
    /// `override_params`: top-level body fields, each value as raw JSON text.
    pub override_params: Vec<(String, String)>,
}

/// A client-facing model name backed by a routing strategy over catalog models.
#[derive(Debug, Clone)]
pub struct VirtualModel {
    /// The name clients call, e.g. `my-group/production-chat`.
    pub name: String,
    /// Which endpoints it serves.
    pub model_types: ModelTypes,
    /// The strategy and its targets.
    pub routing: Routing,
    /// Each target's settings, in config order.
    pub targets: Vec<TargetConfig>,
    /// `fallback_timeout_ms` (Zuplo seed): abandon an attempt, any of them, that has not
    /// started answering, for the next candidate.
    pub fallback_timeout_ms: Option<u64>,
    /// `max_targets_per_request`: how many targets one request may try, the first included
    /// (Zuplo seed, "Failures and retries": "each request tries at most two models").
    pub max_targets: Option<usize>,
    /// How `fallback_timeout_ms` grows from target to target (and, with the options below,
    /// what it covers and how it ends).
    pub timeout_rules: TimeoutRules,
    /// `fail_fast_endpoints`: the APIs on which a 5xx, 408, 425 or a target that cannot be
    /// reached fails the request instead of moving on, and no fallback timeout applies (Zuplo
    /// model load balancing, "Failures and retries": Responses and Messages). Default: none.
    pub fail_fast: Apis,
    /// Whether any target has an SLA cutoff (so routing needs latency samples).
    pub has_sla: bool,
    /// Whether any target has a `metadata_match` (so targets are filtered first).
    pub has_metadata_match: bool,
    /// `sticky_routing` (weight-based routing only).
    pub sticky: Option<StickyRouting>,
}

impl VirtualModel {
    /// Whether routing needs latency samples of its targets (SLA cutoff or latency routing).
    pub fn needs_latency(&self) -> bool {
        self.has_sla || matches!(self.routing, Routing::Latency { .. } | Routing::Priority(_))
    }

    /// The policy of one of its targets.
    pub fn policy(&self, model: ModelId) -> &TargetPolicy {
        self.target(model).map_or(&DIRECT_POLICY, |t| &t.policy)
    }

    /// The settings of one of its targets.
    pub fn target(&self, model: ModelId) -> Option<&TargetConfig> {
        self.targets.iter().find(|t| t.model == model)
    }
}

/// How `fallback_timeout_ms` applies beyond the first target (Zuplo model load balancing,
/// "Failures and retries").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutRules {
    /// `fallback_timeout_growth`: each next target's fallback timeout is the previous one's
    /// times this (default 1; Zuplo's retry model "starts over with twice the time": 2).
    pub growth: u32,
    /// `fallback_timeout_at_last`: what the time running out does at the last target a
    /// request may try.
    pub at_last: AtLast,
    /// `fallback_timeout_scope`: what the time bounds of a request that does not stream.
    pub scope: TimeoutScope,
}

impl Default for TimeoutRules {
    fn default() -> Self {
        TimeoutRules {
            growth: 1,
            at_last: AtLast::Wait,
            scope: TimeoutScope::WholeAnswer,
        }
    }
}

/// `fallback_timeout_scope`: what `fallback_timeout_ms` bounds of a request that does not
/// stream. A streamed answer is bounded until it starts, whatever the scope, so it is never
/// cut off once streaming; a call-out's answer (every attempt after the first) arrives whole,
/// so its whole answer is bounded, whatever the scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutScope {
    /// `whole_answer` (default): the router's answer is held until its end, and abandoned if
    /// the time runs out first, as a call-out's is (Zuplo model load balancing, "Failures and
    /// retries": "A request that doesn't stream gets its response only when the model
    /// finishes, so ... fallbackTimeoutSeconds limits the whole response").
    WholeAnswer,
    /// `answer_start`: the router's answer is let through as soon as its headers come, and
    /// the time stops there (a call-out's whole answer is still bounded).
    AnswerStart,
}

/// `fallback_timeout_at_last`: when the fallback timeout of a target the request moved to
/// runs out and no other target is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtLast {
    /// `wait` (default): keep waiting for its answer.
    Wait,
    /// `fail`: the request fails with a 504 (Zuplo model load balancing, "Failures and
    /// retries": the retry model's time runs out, "and the request fails if that runs out
    /// too").
    Fail,
}

impl TimeoutRules {
    /// The fallback timeout of an attempt after `fallbacks` moves to another target.
    pub fn timeout_ms(&self, base_ms: u64, fallbacks: u32) -> u64 {
        base_ms.saturating_mul(u64::from(self.growth).saturating_pow(fallbacks))
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

/// What a model name in a request refers to.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    /// A catalog model.
    Catalog(ModelId, &'a Model),
    /// A virtual model, with its index in [`Config::virtual_models`].
    Virtual(usize, &'a VirtualModel),
}

#[derive(Debug, Clone, Copy)]
enum NameEntry {
    Catalog(ModelId),
    Virtual(usize),
}

/// The compiled plugin config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The catalog, indexed by [`ModelId`].
    pub models: Vec<Model>,
    /// The virtual models.
    pub virtual_models: Vec<VirtualModel>,
    /// Largest request body buffered for inspection; larger ones get a 413.
    pub max_request_body_bytes: usize,
    /// Header names.
    pub header_names: HeaderNames,
    /// The rolling failure window that marks targets unhealthy.
    pub failure_window: FailureWindow,
    /// How long a worker may use its cached view of shared health before re-reading it.
    pub health_view_ms: u64,
    /// Longest time a fallback or retry attempt made by the filter may take.
    pub attempt_timeout_ms: u64,
    /// The answer to `GET /v1/models`: public catalog models and virtual models, OpenAI's list
    /// shape, serialised once at load.
    pub models_list_json: String,
    /// Whether any virtual model asks a classifier model (so requests may need a second look).
    pub has_classifier: bool,
    /// `default_metadata`: merged into every request's metadata, winning on shared keys.
    pub default_metadata: Vec<(String, String)>,
    /// `response_id_keys`: what Switchboard's response ids are minted and verified with.
    pub response_keys: crate::core::responses::id::Keys,
    /// `response_id_binding: "caller"`: minted ids and marks carry the caller's identity
    /// digest, and only that caller may use them (default: any caller holding the id).
    pub bind_ids_to_caller: bool,
    /// `caller_identity`: who is calling.
    pub caller_identity: CallerIdentity,
    /// `account_headers`: what a target with the gateway's credential drops either way.
    pub account_headers: AccountHeaders,
    /// What the operator should know about this config, each logged once when it loads and
    /// printed by `switchboard check`: it loads, but does something unsafe or surprising (an
    /// adapter adds its own, e.g. [`Config::env_warning`]).
    pub warnings: Vec<String>,
    /// `stored_responses_virtual_model`: the virtual model that routes a retrieve or delete
    /// naming a raw provider id (which names no model).
    pub stored_responses_virtual_model: Option<usize>,
    /// `non_native_responses`: what a `/v1/responses` request does with a target that does not
    /// serve the Responses API natively.
    pub non_native_responses: NonNativeResponses,
    /// `gateway_region` and `gateway_zone`: the config's `gateway_location`, under the host's
    /// locality where the adapter reads one; metadata over the header and `default_metadata`.
    pub gateway_metadata: Vec<(String, String)>,
    /// `model_name_case: "insensitive"`: model names are looked up without regard to ASCII case.
    pub fold_case: bool,
    /// Where each Prometheus metric of this config sits, and its host id once defined.
    pub metrics: crate::core::metrics::MetricTable,
    /// `trace`: when answers carry the routing trace header.
    pub trace: crate::core::trace::TraceSettings,
    /// `filter_state` (default false): each routed request writes its routing facts as Envoy
    /// filter state (`wasm.switchboard.*`) for the access log: five host calls a request, so
    /// only when an access log prints them.
    pub filter_state: bool,
    /// `usage_metrics` (default false): every successful answer's body is read as it passes
    /// for the token, time-to-first-token and time-per-token metrics (answers of virtual
    /// models whose routing uses latency are read anyway).
    pub usage_metrics: bool,
    /// `request_histograms` (default false): each routed request records its attempts and its
    /// decision's own time in two histograms. Envoy spends ~3k instructions (about 1 µs) on
    /// each histogram value it takes, and timing the decision reads the clock once more, which
    /// is more than the plain request's budget has room for; the counters stay on.
    pub request_histograms: bool,
    /// The variables `${env:NAME}` read while the config lists no `env_keys` (sorted, once each).
    pub env_unlisted: Vec<String>,
    names: HashMap<String, NameEntry>,
}

/// The key a model name is stored and looked up under: the name itself, or under
/// `model_name_case: "insensitive"` its ASCII lower case (Zuplo seed, "Limitations": the
/// policy compares entries without regard to case).
pub(crate) fn name_key(name: &str, fold_case: bool) -> std::borrow::Cow<'_, str> {
    if fold_case && name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

impl Config {
    /// Whether a routed request's decision is timed: only the `decision_us` histogram and the
    /// access log's decision time show it, and timing it costs the `.wasm` a clock read.
    pub fn times_decisions(&self) -> bool {
        self.request_histograms || self.filter_state
    }

    /// Parses, validates and compiles the plugin config JSON, with no environment: a
    /// `${env:NAME}` reference is an error.
    pub fn parse(json: &[u8]) -> Result<Config, ConfigError> {
        compile::compile(json, &|_| None)
    }

    /// [`Config::parse`], resolving `${env:NAME}` in header values with `env` (the Wasm VM's
    /// environment in the filter, the process's in the command line).
    pub fn parse_with_env(
        json: &[u8],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        compile::compile(json, env)
    }

    /// Sets the gateway's location metadata from the host (TrueFoundry virtual models,
    /// "Metadata-based target filtering": location metadata added by the gateway):
    /// `gateway_region` and `gateway_zone`, each where the host names it, over the config's
    /// `gateway_location`.
    pub fn with_gateway_location(mut self, region: Option<String>, zone: Option<String>) -> Self {
        for (key, value) in [("gateway_region", region), ("gateway_zone", zone)] {
            let Some(value) = value.filter(|v| !v.is_empty()) else {
                continue;
            };
            match self.gateway_metadata.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1 = value,
                None => self.gateway_metadata.push((key.to_string(), value)),
            }
        }
        self
    }

    /// The config with the host's id of each of its metrics, in
    /// [`crate::core::metrics::definitions`] order (set by the adapter once it has defined them).
    pub fn with_metric_ids(mut self, ids: Vec<u32>) -> Self {
        self.metrics = std::mem::take(&mut self.metrics).with_ids(ids);
        self
    }

    /// The native module's warning when `${env:NAME}` read variables with no `env_keys` to
    /// limit them: the module reads Envoy's own environment, so a config may name any of
    /// Envoy's variables (the Wasm VM sees only those `host_env_keys` hands it).
    pub fn env_warning(&self) -> Option<String> {
        (!self.env_unlisted.is_empty()).then(|| {
            format!(
                "`${{env:NAME}}` reads {} with no `env_keys` list: in the native module it may \
                 read any of Envoy's environment variables; list the ones the config may read \
                 in `env_keys`",
                self.env_unlisted.join(", ")
            )
        })
    }

    /// Looks a model name up in the catalog and the virtual models.
    pub fn lookup(&self, name: &str) -> Option<Named<'_>> {
        match *self.names.get(name_key(name, self.fold_case).as_ref())? {
            NameEntry::Catalog(id) => self.models.get(id.0).map(|m| Named::Catalog(id, m)),
            NameEntry::Virtual(i) => self.virtual_models.get(i).map(|vm| Named::Virtual(i, vm)),
        }
    }

    /// The catalog model with this id.
    pub fn model(&self, id: ModelId) -> Option<&Model> {
        self.models.get(id.0)
    }
}
