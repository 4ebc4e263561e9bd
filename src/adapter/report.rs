//! What the filter tells the operator about a request it routed: metrics, the access log's
//! filter state, and its debug and warn lines. The facts come from the core (the plan, the
//! flight's effects); this file only writes them to the host.

use super::host;
use super::metrics;
use crate::core::access_log::{self, DecisionFacts, Value};
use crate::core::config::Config;
use crate::core::decision::request_metadata;
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::metrics::{PairMetric, VmMetric};
use crate::core::routing::state::RoutingState;
use crate::core::routing::{HealthInput, Plan};
use crate::core::trace::{self, Trace};
use std::cell::Cell;

/// The routing state of a decision, noting whether it looked a sticky session's pin up and
/// found one (the access log's `sticky`).
pub struct PinProbe<'a> {
    inner: &'a dyn RoutingState,
    hit: Cell<Option<bool>>,
}

impl<'a> PinProbe<'a> {
    /// Wraps the worker's routing state for one decision.
    pub fn new(inner: &'a dyn RoutingState) -> Self {
        PinProbe {
            inner,
            hit: Cell::new(None),
        }
    }

    /// `Some(found)` if the decision looked a pin up.
    pub fn sticky_hit(&self) -> Option<bool> {
        self.hit.get()
    }
}

impl RoutingState for PinProbe<'_> {
    fn pinned(&self, virtual_model: &str, session: u64, window: u64) -> Option<String> {
        let found = self.inner.pinned(virtual_model, session, window);
        self.hit.set(Some(found.is_some()));
        found
    }

    fn next_cursor(&self, virtual_model: usize, len: usize, rng: &mut fastrand::Rng) -> usize {
        self.inner.next_cursor(virtual_model, len, rng)
    }

    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str) {
        self.inner.pin(virtual_model, session, window, value);
    }

    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        self.inner.verified_claim(payload, claim)
    }
}

/// A request was routed: count it against its first target, time the decision, write the
/// decision's access-log fields, and say where it goes at debug level.
pub fn decided(config: &Config, plan: &Plan, facts: DecisionFacts) {
    let vm = plan.virtual_model;
    if let Some(first) = plan.primary() {
        metrics::count(config, vm, first, PairMetric::Requests, 1);
    }
    metrics::record_vm(config, vm, VmMetric::DecisionUs, facts.decision_us);
    if config.filter_state {
        write_fields(access_log::decision(config, plan, facts));
    }
    if log::log_enabled!(log::Level::Debug) {
        let name = |m| config.model(m).map_or("?", |m| m.name.as_str());
        let candidates: Vec<&str> = plan.candidates.iter().map(|m| name(*m)).collect();
        let vm = plan.virtual_model(config);
        log::debug!(
            "{} ({}): candidates {} decided in {} us",
            vm.map_or(crate::core::metrics::DIRECT, |vm| vm.name.as_str()),
            vm.map_or("catalog model", |vm| vm.routing.type_name()),
            candidates.join(", "),
            facts.decision_us
        );
    }
}

/// The start of the routing trace of a request that asked for one (`trace`): its candidates
/// and the targets left out, and why.
pub fn trace(
    config: &Config,
    endpoint: Endpoint,
    headers: &Headers,
    state: &dyn RoutingState,
    plan: &Plan,
    health: &HealthInput<'_>,
) -> Box<Trace> {
    let skipped = match plan.virtual_model(config) {
        Some(vm) => {
            let metadata = request_metadata(config, headers).unwrap_or_default();
            let request = trace::request_of(endpoint, &vm.name, &metadata, headers, state);
            trace::skipped(config, vm, &request, plan)
        }
        None => Vec::new(),
    };
    Box::new(Trace::of_plan(config, plan, health, skipped))
}

/// Writes access-log fields as filter state (no allocation: numbers go through a stack buffer).
pub fn write_fields<'a>(fields: impl Iterator<Item = (&'static str, Value<'a>)>) {
    let mut buf = [0u8; 20];
    for (key, value) in fields {
        host::set_filter_state(key, value.bytes(&mut buf));
    }
}
