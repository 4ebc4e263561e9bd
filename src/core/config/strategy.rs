//! How a virtual model picks among its targets: the `routing_config` strategies, their
//! targets, and the identifiers that sticky sessions and hash keys are read from.

use super::catalog::ModelId;
use crate::core::when::Condition;

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
    pub when: Condition,
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
    /// A string member of the JSON body: top-level, or `parent.child` (the key holds the
    /// dotted path; at most two levels).
    Body,
    /// The session the coding agent sent ([`crate::core::routing::agent_session`]).
    AgentSession,
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

/// `sticky_routing` of a weighted virtual model (TrueFoundry virtual models, "Sticky routing").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyRouting {
    /// `ttl_seconds`, in milliseconds.
    pub ttl_ms: u64,
    /// `idle_ttl_seconds`, in milliseconds: a session's pin unused that long is forgotten.
    pub idle_ms: Option<u64>,
    /// Joined into one session key, in order.
    pub session_identifiers: Vec<SessionIdentifier>,
    /// `missing_identifier`: `"shared"` (default, TrueFoundry virtual models, "Sticky
    /// routing": a missing identifier "contributes an empty string", so every request without
    /// one is one session) or `"none"` (`false`: a request missing every identifier is not
    /// sticky).
    pub shared_when_missing: bool,
}

/// A complexity tier (TrueFoundry virtual models, "Complexity-based routing"), cheapest first.
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

/// What `hash-based-routing` keys on (Zuplo model load balancing, `stickyBy`).
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
    /// A body member or the coding agent's session (`{"source": "body" | "agent_session"}`).
    Identifier(SessionIdentifier),
    /// A claim of the verified JWT (Zuplo model load balancing, "Sticky by user": the authenticated
    /// subject).
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
    /// `conditional-routing` (agentgateway virtual models, "Conditional routing").
    Conditional(Vec<ConditionalTarget>),
    /// `round-robin-routing` (Zuplo model load balancing, "Round robin").
    RoundRobin(Vec<ModelId>),
    /// `hash-based-routing` (Zuplo model load balancing's `sticky`, "Sticky routing").
    Hash {
        /// The targets.
        targets: Vec<ModelId>,
        /// What the hash keys on.
        by: HashKey,
    },
    /// `complexity-based-routing` (TrueFoundry virtual models, "Complexity-based routing").
    Complexity {
        /// The targets with their tiers.
        targets: Vec<ComplexityTarget>,
        /// Score thresholds.
        thresholds: Thresholds,
        /// The classifier model, if one is configured.
        classifier: Option<Classifier>,
    },
    /// `latency-based-routing` (TrueFoundry virtual models, "Latency-based routing").
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
