//! The `x-switchboard-trace` answer header: how one request was routed, for the operator who
//! asked for it.
//!
//! It names internal targets, so it is off unless the config turns it on for every request
//! (`trace.always`) or the request presents the configured `trace.token` in the trace-token
//! header (compared in constant time; the header never goes upstream). The value is compact:
//!
//! ```text
//! vm=my-group/chat; strategy=priority-based-routing; candidates=a,b unhealthy;
//! skipped=c metadata_match; attempts=a 503,b 200
//! ```
//!
//! (one line). It holds catalog and virtual model names, reasons and statuses only: no header
//! value, no credential, no sticky or hash key.

use crate::core::config::{Config, ModelId};
use crate::core::fallback::AttemptOutcome;
use crate::core::health::record::Standing;
use crate::core::routing::{HealthInput, Plan, Skip};

/// The trace of one request, built as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    virtual_model: Option<usize>,
    candidates: Vec<(ModelId, Standing)>,
    skipped: Vec<(ModelId, Skip)>,
    attempts: Vec<(ModelId, AttemptOutcome)>,
}

impl Trace {
    /// The trace of a decision: the plan's candidates with their standing at decision time,
    /// and the targets left out.
    pub fn of_plan(
        config: &Config,
        plan: &Plan,
        health: &HealthInput<'_>,
        skipped: Vec<(ModelId, Skip)>,
    ) -> Trace {
        let vm = plan.virtual_model(config);
        let candidates = plan
            .candidates
            .iter()
            .map(|m| {
                let standing = vm.map_or(Standing::Healthy, |vm| health.standing(vm, *m));
                (*m, standing)
            })
            .collect();
        Trace {
            virtual_model: plan.virtual_model,
            candidates,
            skipped,
            attempts: Vec::new(),
        }
    }

    /// Adds an attempt that ended with `outcome`.
    pub fn attempt(&mut self, target: ModelId, outcome: AttemptOutcome) {
        self.attempts.push((target, outcome));
    }

    /// The header value.
    pub fn render(&self, config: &Config) -> String {
        let name = |m: ModelId| config.model(m).map_or("?", |m| m.name.as_str());
        let mut out = String::with_capacity(160);
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        out.push_str("vm=");
        escape(
            vm.map_or(crate::core::metrics::DIRECT, |vm| &vm.name),
            &mut out,
        );
        if let Some(vm) = vm {
            out.push_str("; strategy=");
            out.push_str(vm.routing.type_name());
        }
        out.push_str("; candidates=");
        for (i, (m, standing)) in self.candidates.iter().enumerate() {
            comma(i, &mut out);
            escape(name(*m), &mut out);
            match standing {
                Standing::Healthy => {}
                Standing::Unhealthy => out.push_str(" unhealthy"),
                Standing::Evicted => out.push_str(" evicted"),
            }
        }
        if !self.skipped.is_empty() {
            out.push_str("; skipped=");
            for (i, (m, why)) in self.skipped.iter().enumerate() {
                comma(i, &mut out);
                escape(name(*m), &mut out);
                out.push(' ');
                out.push_str(why.name());
            }
        }
        out.push_str("; attempts=");
        for (i, (m, outcome)) in self.attempts.iter().enumerate() {
            comma(i, &mut out);
            escape(name(*m), &mut out);
            out.push(' ');
            match outcome {
                AttemptOutcome::Status(s) => {
                    let mut buf = [0u8; 20];
                    let digits = crate::core::access_log::decimal(u64::from(*s), &mut buf);
                    out.extend(digits.iter().map(|d| char::from(*d)));
                }
                AttemptOutcome::ConnectFailure => out.push_str("connect_failure"),
                AttemptOutcome::Timeout | AttemptOutcome::FallbackTimeout => {
                    out.push_str("timeout")
                }
                AttemptOutcome::StreamFailed(fault) => {
                    out.push_str("stream_");
                    out.push_str(fault.label());
                }
                AttemptOutcome::Answer(fault) => out.push_str(fault.label()),
            }
        }
        out
    }
}

fn comma(i: usize, out: &mut String) {
    if i > 0 {
        out.push(',');
    }
}

/// Appends a name, percent-encoding what would break the header value or its separators.
fn escape(name: &str, out: &mut String) {
    for b in name.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'%' | b',' | b';' | b'=') {
            out.push(char::from(b));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            for nibble in [b >> 4, b & 0xf] {
                out.push(char::from(
                    HEX.get(usize::from(nibble)).copied().unwrap_or(b'0'),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::endpoint::Endpoint;
    use crate::core::health::policy::FailureWindow;
    use crate::core::health::record::HealthRecord;
    use crate::core::metadata::Metadata;
    use crate::core::routing::{plan, LocalState, Request};

    const CONFIG: &str = r#"{
      "models": [
        {"name": "a", "cluster": "c", "model": "m"},
        {"name": "b", "cluster": "c", "model": "m"},
        {"name": "eu;x", "cluster": "c", "model": "m"},
        {"name": "claude", "cluster": "c", "model": "m", "provider": "anthropic"}
      ],
      "virtual_models": [
        {"name": "team/chat", "model_types": ["chat", "embedding"], "routing_config": {
          "type": "priority-based-routing", "load_balance_targets": [
            {"target": "a", "priority": 0}, {"target": "b", "priority": 1},
            {"target": "eu;x", "priority": 0, "metadata_match": {"region": "eu"}},
            {"target": "claude", "priority": 2}]}}
      ]
    }"#;

    #[test]
    fn renders_candidates_skips_and_attempts_in_order() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let state = LocalState::default();
        let metadata = Metadata::default();
        let request = Request::without_body(
            Endpoint::Embeddings,
            "team/chat",
            &metadata,
            &crate::core::headers::NO_HEADERS,
            &state,
        );
        let records = vec![
            HealthRecord::default(),
            HealthRecord {
                failures: vec![900, 950],
                ..HealthRecord::default()
            },
        ];
        let health = HealthInput {
            records: &records,
            now_ms: 1000,
            window: FailureWindow::default(),
        };
        let p = plan(&config, &request, &health, &mut fastrand::Rng::with_seed(1)).unwrap();
        assert_eq!(p.candidates, [ModelId(0), ModelId(1)]);
        let mut trace = Trace::of_plan(&config, &p, &health, p.skipped(&config, &request));
        trace.attempt(ModelId(0), AttemptOutcome::Status(503));
        trace.attempt(ModelId(0), AttemptOutcome::ConnectFailure);
        trace.attempt(ModelId(1), AttemptOutcome::Status(200));
        assert_eq!(
            trace.render(&config),
            "vm=team/chat; strategy=priority-based-routing; candidates=a,b unhealthy; \
             skipped=eu%3Bx metadata_match,claude apis; \
             attempts=a 503,a connect_failure,b 200"
        );
    }

    #[test]
    fn a_responses_chain_cut_at_a_target_that_is_not_native_says_so() {
        let config = Config::parse(
            br#"{"models": [
                {"name": "a", "cluster": "c", "model": "m"},
                {"name": "claude", "cluster": "c", "model": "m", "provider": "anthropic"},
                {"name": "b", "cluster": "c", "model": "m"}],
              "virtual_models": [{"name": "r", "model_types": ["responses"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                  {"target": "a", "priority": 0}, {"target": "claude", "priority": 1},
                  {"target": "b", "priority": 2}]}}]}"#,
        )
        .unwrap();
        let (state, metadata) = (LocalState::default(), Metadata::default());
        let headers = &crate::core::headers::NO_HEADERS;
        let request = Request::without_body(Endpoint::Responses, "r", &metadata, headers, &state);
        let health = HealthInput::NONE;
        let p = plan(&config, &request, &health, &mut fastrand::Rng::with_seed(1)).unwrap();
        let trace = Trace::of_plan(&config, &p, &health, p.skipped(&config, &request));
        assert_eq!(
            trace.render(&config),
            "vm=r; strategy=priority-based-routing; candidates=a; \
             skipped=claude apis,b behind_not_native; attempts="
        );
    }

    #[test]
    fn a_direct_call_has_no_strategy_and_names_escape() {
        let config = Config::parse(
            br#"{"models": [{"name": "pub lic=1", "cluster": "c", "model": "m", "visibility": "public"}]}"#,
        )
        .unwrap();
        let mut trace = Trace {
            virtual_model: None,
            candidates: vec![(ModelId(0), Standing::Healthy)],
            skipped: Vec::new(),
            attempts: Vec::new(),
        };
        trace.attempt(ModelId(0), AttemptOutcome::FallbackTimeout);
        assert_eq!(
            trace.render(&config),
            "vm=(direct); candidates=pub%20lic%3D1; attempts=pub%20lic%3D1 timeout"
        );
    }
}
