//! The routing facts of one request as Envoy filter state, for the access log.
//!
//! The adapter writes each field with proxy-wasm `set_property([key], value)`; Envoy keeps it
//! under `wasm.<key>`, and an access log format prints it with
//! `%FILTER_STATE(wasm.switchboard.target:PLAIN)%` (PLAIN gives the text; TYPED would give a
//! base64 `BytesValue`). Checked with Envoy 1.40. The native build writes the same bytes under
//! the same `wasm.<key>` with the dynamic-modules ABI's `http_set_filter_state_bytes`, so one
//! access log format reads either build. A field with nothing to say is not written,
//! so the access log shows `null` (JSON) or `-` for it.
//!
//! The decision's fields are written when it is made, the outcome's when the answer goes to
//! the client, so a request the client gave up on still logs where it was sent. Values are
//! names from the config, fixed words and numbers: nothing the client sent.

use crate::core::config::{Config, ModelId, Routing, Tier};
use crate::core::metrics::{Reason, DIRECT};
use crate::core::routing::Plan;

/// The filter state keys, in the order the fields are documented.
pub const KEYS: [&str; 8] = [
    VIRTUAL_MODEL,
    TARGET,
    STRATEGY,
    ATTEMPTS,
    FALLBACK_REASON,
    TIER,
    STICKY,
    DECISION_US,
];

/// The virtual model called (`(direct)` for a catalog model called by name).
pub const VIRTUAL_MODEL: &str = "switchboard.virtual_model";
/// The target whose answer the client got.
pub const TARGET: &str = "switchboard.target";
/// The virtual model's `routing_config.type`.
pub const STRATEGY: &str = "switchboard.strategy";
/// Attempts the request took.
pub const ATTEMPTS: &str = "switchboard.attempts";
/// Why the request last fell back: `status`, `connect_failure` or `timeout`.
pub const FALLBACK_REASON: &str = "switchboard.fallback_reason";
/// The complexity tier served (complexity-based routing).
pub const TIER: &str = "switchboard.tier";
/// `hit` or `miss`: whether a sticky session's pin decided (sticky virtual models).
pub const STICKY: &str = "switchboard.sticky";
/// The routing decision's own time, microseconds.
pub const DECISION_US: &str = "switchboard.decision_us";

/// A field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Text from the config or a fixed word.
    Text(&'a str),
    /// A count or duration.
    Number(u64),
}

impl Value<'_> {
    /// The bytes to store, a number written into `buf` (no allocation).
    pub fn bytes<'b>(&'b self, buf: &'b mut [u8; 20]) -> &'b [u8] {
        match self {
            Value::Text(t) => t.as_bytes(),
            Value::Number(n) => decimal(*n, buf),
        }
    }
}

/// `n` in decimal, written at the end of `buf`.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        if let Some(slot) = buf.get_mut(at) {
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

/// What the decision's fields say, besides the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecisionFacts {
    /// Whether a sticky session's pin was looked up, and found (`None`: no lookup).
    pub sticky_hit: Option<bool>,
    /// The decision's time, microseconds.
    pub decision_us: u64,
}

/// The decision's fields: virtual model, strategy, tier, sticky, decision time.
pub fn decision<'c>(
    config: &'c Config,
    plan: &Plan,
    facts: DecisionFacts,
) -> impl Iterator<Item = (&'static str, Value<'c>)> {
    let vm = plan.virtual_model(config);
    let name = vm.map_or(DIRECT, |vm| vm.name.as_str());
    let strategy = vm.map(|vm| (STRATEGY, Value::Text(vm.routing.type_name())));
    let tier = vm
        .and_then(|vm| tier_served(&vm.routing, plan.primary()?))
        .map(|t| (TIER, Value::Text(t.name())));
    let sticky = facts
        .sticky_hit
        .map(|hit| (STICKY, Value::Text(if hit { "hit" } else { "miss" })));
    [
        Some((VIRTUAL_MODEL, Value::Text(name))),
        strategy,
        tier,
        sticky,
        Some((DECISION_US, Value::Number(facts.decision_us))),
    ]
    .into_iter()
    .flatten()
}

/// The outcome's fields: the target that answered (none when Switchboard answered itself),
/// the attempts, and the last fallback's reason if there was one.
pub fn outcome(
    config: &Config,
    answered_by: Option<ModelId>,
    attempts: u32,
    fallback: Option<Reason>,
) -> impl Iterator<Item = (&'static str, Value<'_>)> {
    let target = answered_by
        .and_then(|t| config.model(t))
        .map(|m| (TARGET, Value::Text(m.name.as_str())));
    [
        target,
        Some((ATTEMPTS, Value::Number(u64::from(attempts)))),
        fallback.map(|r| (FALLBACK_REASON, Value::Text(r.name()))),
    ]
    .into_iter()
    .flatten()
}

/// The tier a complexity virtual model's request is served at: its first candidate's.
pub fn tier_served(routing: &Routing, first: ModelId) -> Option<Tier> {
    match routing {
        Routing::Complexity { targets, .. } => {
            targets.iter().find(|t| t.model == first).map(|t| t.tier)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(fields: impl Iterator<Item = (&'static str, Value<'static>)>) -> Vec<String> {
        let mut buf = [0u8; 20];
        fields
            .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v.bytes(&mut buf))))
            .collect()
    }

    fn config() -> &'static Config {
        let c = Config::parse(
            br#"{"models": [
                {"name": "small", "cluster": "c", "model": "m"},
                {"name": "big", "cluster": "c", "model": "m", "visibility": "public"}],
              "virtual_models": [{"name": "auto", "model_types": ["chat"], "routing_config": {
                "type": "complexity-based-routing", "load_balance_targets": [
                  {"target": "small", "tier": "simple"}, {"target": "big", "tier": "complex"}]}}]}"#,
        )
        .unwrap();
        Box::leak(Box::new(c))
    }

    #[test]
    fn numbers_are_written_in_decimal_without_allocating() {
        let mut buf = [0u8; 20];
        assert_eq!(Value::Number(0).bytes(&mut buf), b"0");
        assert_eq!(Value::Number(1234).bytes(&mut buf), b"1234");
        assert_eq!(
            Value::Number(u64::MAX).bytes(&mut buf),
            b"18446744073709551615"
        );
    }

    #[test]
    fn a_decision_names_its_virtual_model_strategy_tier_and_stickiness() {
        let c = config();
        let plan = Plan {
            candidates: vec![ModelId(1), ModelId(0)],
            virtual_model: Some(0),
            sticky: None,
            pinned: false,
        };
        let facts = DecisionFacts {
            sticky_hit: Some(true),
            decision_us: 42,
        };
        assert_eq!(
            text(decision(c, &plan, facts)),
            [
                "switchboard.virtual_model=auto",
                "switchboard.strategy=complexity-based-routing",
                "switchboard.tier=complex",
                "switchboard.sticky=hit",
                "switchboard.decision_us=42"
            ]
        );
        let direct = Plan {
            candidates: vec![ModelId(1)],
            virtual_model: None,
            sticky: None,
            pinned: false,
        };
        assert_eq!(
            text(decision(c, &direct, DecisionFacts::default())),
            [
                "switchboard.virtual_model=(direct)",
                "switchboard.decision_us=0"
            ]
        );
    }

    #[test]
    fn an_outcome_names_the_target_that_answered_and_why_it_fell_back() {
        let c = config();
        assert_eq!(
            text(outcome(
                c,
                Some(ModelId(0)),
                3,
                Some(Reason::ConnectFailure)
            )),
            [
                "switchboard.target=small",
                "switchboard.attempts=3",
                "switchboard.fallback_reason=connect_failure"
            ]
        );
        assert_eq!(text(outcome(c, None, 1, None)), ["switchboard.attempts=1"]);
        assert!(KEYS.iter().all(|k| k.starts_with("switchboard.")));
    }
}
