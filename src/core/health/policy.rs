//! What makes a target unhealthy, and when it is evicted: the knobs of TrueFoundry's and
//! agentgateway's virtual models.
//!
//! TrueFoundry virtual models, "Unhealthy target detection": 5xx, 429, 401, 403 and connection
//! failures count; 2 or more in a rolling 2-minute window make a target unhealthy. agentgateway
//! virtual models, "Health vs eviction": per model `health {unhealthy_status_codes, eviction
//! {duration, consecutive_failures, health_threshold, restore_health}}`.

use crate::core::status_set::StatusSet;

/// Default eviction when nothing else gives a duration (agentgateway virtual models, "Health
/// vs eviction": 3s).
pub const DEFAULT_EVICTION_MS: u64 = 3_000;

/// The rolling failure window shared by every target (TrueFoundry virtual models, "Unhealthy
/// target detection").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureWindow {
    /// Failures needed in the window to mark a target unhealthy.
    pub failures: u32,
    /// Length of the window.
    pub window_ms: u64,
}

impl Default for FailureWindow {
    fn default() -> Self {
        FailureWindow {
            failures: 2,
            window_ms: 120_000,
        }
    }
}

/// Eviction settings of one catalog model (agentgateway virtual models, "Health vs eviction":
/// `health.eviction`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eviction {
    /// Base eviction time; when unset, a 429's Retry-After, then 3 s.
    pub duration_ms: Option<u64>,
    /// Consecutive failures that evict.
    pub consecutive_failures: Option<u32>,
    /// Evict when the health score falls below this (0.0–1.0).
    pub health_threshold: Option<f32>,
    /// Score given back when the eviction ends (0.0–1.0).
    pub restore_health: Option<f32>,
}

/// A spent quota keeps the target out this long by default (`health.eviction.quota_duration`).
pub const DEFAULT_QUOTA_EVICTION_MS: u64 = 3_600_000;
/// A refused gateway key keeps the target out this long by default
/// (`health.eviction.credential_duration`).
pub const DEFAULT_CREDENTIAL_EVICTION_MS: u64 = 300_000;
/// A 429 without a "come back in" header is evicted for 1 s, doubled for each eviction in a row
/// up to this (reset by a success).
pub const MAX_RATE_LIMIT_EVICTION_MS: u64 = 60_000;

/// Health settings of one catalog model.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthPolicy {
    /// Statuses that count as failures (connection failures always do).
    pub unhealthy_status_codes: StatusSet,
    /// Eviction, if configured.
    pub eviction: Option<Eviction>,
    /// How long a quota failure evicts (0: not at all). Applies without `eviction` too.
    pub quota_ms: u64,
    /// How long a credential failure evicts (0: not at all). Applies without `eviction` too.
    pub credential_ms: u64,
    /// `quota_patterns`: more quota markers in error bodies, lower-cased.
    pub quota_patterns: Vec<String>,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            unhealthy_status_codes: StatusSet::all_5xx().union(StatusSet::of(&[429, 401, 403])),
            eviction: None,
            quota_ms: DEFAULT_QUOTA_EVICTION_MS,
            credential_ms: DEFAULT_CREDENTIAL_EVICTION_MS,
            quota_patterns: Vec::new(),
        }
    }
}

impl HealthPolicy {
    /// Whether a response status counts against the target.
    pub fn is_failure(&self, status: u16) -> bool {
        self.unhealthy_status_codes.contains(status)
    }
}
