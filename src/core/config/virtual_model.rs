//! A virtual model: its strategy, each target's settings (retries, fallback, SLA, header and
//! body overrides) and the rules that bound one request's attempts.

use super::catalog::ModelId;
use super::strategy::{Routing, StickyRouting};
use crate::core::endpoint::{Apis, ModelTypes};
use crate::core::health::sla::SlaCutoff;
use crate::core::status_set::StatusSet;

/// What happens when one target fails (TrueFoundry virtual models, "Retries and fallbacks").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetPolicy {
    /// `retry_config.attempts`: retries on the same target (default 0).
    pub retry_attempts: u32,
    /// `retry_config.delay`: milliseconds before the first retry (default 100).
    pub retry_delay_ms: u64,
    /// `retry_config.backoff_multiplier`: retry n waits `delay × multiplier^(n-1)` (default 1, a
    /// fixed delay). Zuplo model load balancing, "Failures and retries": 250 ms then 500 ms is
    /// `delay: 250` with multiplier 2.
    pub retry_backoff: u32,
    /// `retry_config.on_connection_failure`: whether a connection failure or upstream timeout is
    /// retried like an `on_status_codes` status (default true). Zuplo model load balancing,
    /// "Failures and retries": a model that "can't be reached" moves to the retry model at once
    /// (false).
    pub retry_no_answer: bool,
    /// `retry_config.on_status_codes` (default 429, 500, 502, 503, 529).
    pub retry_on: StatusSet,
    /// `fallback_status_codes`: codes that move the request to another target
    /// (default 401, 403, 404, 408, 429, 500, 502, 503, 529).
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
            // 529 is Anthropic's `overloaded_error` (Anthropic API errors): an overloaded Claude
            // is retried and falls back like a 503.
            retry_on: StatusSet::of(&[429, 500, 502, 503, 529]),
            fallback_on: StatusSet::of(&[401, 403, 404, 408, 429, 500, 502, 503, 529]),
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

/// `headers_override` of a target (TrueFoundry virtual models, "Header overrides"): applied last.
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
    /// `fallback_timeout_ms` (Zuplo model load balancing, "Policy Options":
    /// `fallbackTimeoutSeconds`): abandon an attempt, any of them, that has not started answering,
    /// for the next candidate.
    pub fallback_timeout_ms: Option<u64>,
    /// `max_targets_per_request`: how many targets one request may try, the first included (Zuplo
    /// model load balancing, "Failures and retries": "each request tries at most two models").
    pub max_targets: Option<usize>,
    /// How `fallback_timeout_ms` grows from target to target (and, with the options below,
    /// what it covers and how it ends).
    pub timeout_rules: TimeoutRules,
    /// `fail_fast_endpoints`: the APIs on which a 5xx, 408, 425 or a target that cannot be
    /// reached fails the request instead of moving on, and no fallback timeout applies (Zuplo
    /// model load balancing, "Failures and retries": Responses and Messages). Default: none.
    pub fail_fast: Apis,
    /// `request_deadline_ms` and `fallback_if_failed_within_ms`: the request's own budget
    /// across its attempts.
    pub budget: super::Budget,
    /// `stream_commit` and `stream_idle_timeout_ms`: how streamed answers are held and watched.
    pub streams: super::StreamRules,
    /// `translate` and `anthropic_cache`.
    pub translation: super::Translation,
    /// `fallback_on`: answers that fall back although their status would not.
    pub answer_fallbacks: super::AnswerFallbacks,
    /// `max_evicted_share` (0.0 to 1.0): at most this share of its targets is treated as
    /// evicted at once; past it, the least recently failed evicted targets count as unhealthy
    /// (see [`crate::core::routing::HealthInput::standing`]). Off by default.
    pub max_evicted_share: Option<f32>,
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
