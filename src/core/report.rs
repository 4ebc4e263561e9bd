//! Which metric each step of a routed request moves, and the routing trace it adds to: one
//! answer for both adapters (proxy-wasm and the Envoy dynamic module), which only perform
//! the writes this hands them.
//!
//! A write is a host id from the plugin's [`MetricTable`]
//! and what to do with it; the adapter passes a sink closure, so nothing is collected or
//! allocated on the request path.

use crate::core::config::{Config, ModelId};
use crate::core::endpoint::Endpoint;
use crate::core::fallback::AttemptOutcome;
use crate::core::flight::{AttemptKind, Effect, Ending, Tokens};
use crate::core::headers::Headers;
use crate::core::health::sla::LatencySample;
use crate::core::metadata::request_metadata;
use crate::core::metrics::MetricTable;
use crate::core::metrics::{PairMetric, Reason, StatusClass, VmMetric};
use crate::core::outbound::Outbound;
use crate::core::overhead::Overhead;
use crate::core::plugin::Plugin;
use crate::core::routing::pins::PinClock;
use crate::core::routing::{CursorKey, RoutingState};
use crate::core::routing::{HealthInput, Plan, Request};
use crate::core::trace::Trace;
use std::cell::Cell;

/// What to do with a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Add to a counter.
    Add(u64),
    /// Record a value in a histogram (or set a gauge).
    Record(u64),
}

/// Where the writes go: (host id, write).
pub trait Sink: FnMut(u32, Write) {}
impl<F: FnMut(u32, Write)> Sink for F {}

fn pair(
    table: &MetricTable,
    vm: Option<usize>,
    t: ModelId,
    m: PairMetric,
    w: Write,
    s: &mut impl Sink,
) {
    if let Some(id) = table.pair(vm, t, m) {
        s(id, w);
    }
}

fn per_vm(table: &MetricTable, vm: Option<usize>, m: VmMetric, w: Write, s: &mut impl Sink) {
    if let Some(id) = table.vm(vm, m) {
        s(id, w);
    }
}

/// A request was routed: it counts against its first target; the decision's time (µs; 0
/// for a stored-response request, whose target its id names) goes to `decision_us` when
/// `request_histograms` is on; and the decision's debug line is written.
pub fn decided(plugin: &Plugin, plan: &Plan, decision_us: u64, mut sink: impl Sink) {
    let (config, table) = (&plugin.config, &plugin.metrics);
    let vm = plan.virtual_model;
    if let Some(first) = plan.primary() {
        pair(
            table,
            vm,
            first,
            PairMetric::Requests,
            Write::Add(1),
            &mut sink,
        );
    }
    if config.request_histograms && decision_us > 0 {
        per_vm(
            table,
            vm,
            VmMetric::DecisionUs,
            Write::Record(decision_us),
            &mut sink,
        );
    }
    log_decided(config, plan, decision_us);
}

/// A failure of `target` on a request to `vm` evicted it.
pub fn evicted(plugin: &Plugin, vm: Option<usize>, target: ModelId, mut sink: impl Sink) {
    pair(
        &plugin.metrics,
        vm,
        target,
        PairMetric::Evictions,
        Write::Add(1),
        &mut sink,
    );
}

/// Whether a request gets the trace header (the token header is only looked for when a token
/// is configured).
pub fn wants_trace(config: &Config, headers: &Headers) -> bool {
    let presented = config
        .trace
        .has_token()
        .then(|| headers.get(&config.header_names.trace_token))
        .flatten();
    config.trace.wanted(presented)
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
            let request = Request::without_body(endpoint, &vm.name, &metadata, headers, state);
            plan.skipped(config, &request)
        }
        None => Vec::new(),
    };
    Box::new(Trace::of_plan(config, plan, health, skipped))
}

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
    fn pinned(
        &self,
        virtual_model: &str,
        session: u64,
        window: u64,
        clock: PinClock,
    ) -> Option<String> {
        let found = self.inner.pinned(virtual_model, session, window, clock);
        self.hit.set(Some(found.is_some()));
        found
    }

    fn next_cursor(&self, whose: CursorKey, len: usize, rng: &mut fastrand::Rng) -> usize {
        self.inner.next_cursor(whose, len, rng)
    }

    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str, clock: PinClock) {
        self.inner.pin(virtual_model, session, window, value, clock);
    }

    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        self.inner.verified_claim(payload, claim)
    }
}

/// What one forwarded request's metrics and trace still need as its flight goes on.
#[derive(Default)]
pub struct Report {
    /// The virtual model called.
    virtual_model: Option<usize>,
    /// The target of the attempt in flight.
    current: Option<ModelId>,
    /// Why the request last fell back.
    fallback: Option<Reason>,
    /// The routing trace, when the request asked for it.
    trace: Option<Box<Trace>>,
    /// Switchboard's own time on it so far (timed only when `request_histograms` is on).
    overhead: Overhead,
    /// The sticky session's target (its pin or rendezvous winner), when it has one.
    sticky_home: Option<ModelId>,
}

impl Report {
    /// The report of a request routed to `virtual_model`, whose own time is `overhead` so far.
    pub fn new(
        virtual_model: Option<usize>,
        trace: Option<Box<Trace>>,
        overhead: Overhead,
    ) -> Report {
        Report {
            virtual_model,
            trace,
            overhead,
            ..Report::default()
        }
    }

    /// Switchboard's own time on the request, for the stream to time its steps.
    pub fn overhead(&mut self) -> &mut Overhead {
        &mut self.overhead
    }

    /// The report of a request whose sticky session's target is `home`.
    pub fn with_sticky_home(mut self, home: Option<ModelId>) -> Report {
        self.sticky_home = home;
        self
    }

    /// The virtual model called.
    pub fn virtual_model(&self) -> Option<usize> {
        self.virtual_model
    }

    /// Why the request last fell back (the access log's `fallback_reason`).
    pub fn fallback(&self) -> Option<Reason> {
        self.fallback
    }

    /// Notes an effect of the flight before it is applied: a retry counts against the
    /// target retried, a fallback against the target left; samples and token counts go to
    /// the target's series; an ending counts the answer's class (or `no_answer`) and writes
    /// the warn line of a request that failed. For an ending, returns the trace header's value
    /// if the request asked for it.
    pub fn effect(
        &mut self,
        plugin: &Plugin,
        effect: &Effect<'_>,
        mut sink: impl Sink,
    ) -> Option<String> {
        let table = &plugin.metrics;
        let vm = self.virtual_model;
        let s = &mut sink;
        match effect {
            Effect::Attempt(a) => {
                match a.kind {
                    AttemptKind::First => {}
                    AttemptKind::Retry(o) => {
                        let m = PairMetric::Retries(Reason::of(o));
                        pair(table, vm, a.target, m, Write::Add(1), s);
                    }
                    AttemptKind::Fallback(o) => {
                        let reason = Reason::of(o);
                        if let Some(from) = self.current {
                            let m = PairMetric::Fallbacks(reason);
                            pair(table, vm, from, m, Write::Add(1), s);
                        }
                        self.fallback = Some(reason);
                    }
                }
                self.current = Some(a.target);
                None
            }
            Effect::Record {
                target, outcome, ..
            } => {
                if let Some(trace) = self.trace.as_mut() {
                    trace.attempt(*target, *outcome);
                }
                if let AttemptOutcome::StreamFailed(fault) = outcome {
                    let m = PairMetric::StreamFailed(*fault);
                    pair(table, vm, *target, m, Write::Add(1), s);
                }
                None
            }
            Effect::Samples {
                target,
                sample,
                tokens,
                ..
            } => {
                samples(table, vm, *target, (sample, tokens), s);
                None
            }
            Effect::Deliver(_) | Effect::Reply(_) | Effect::Fail(_) => {
                ending(effect).and_then(|e| self.ended(plugin, e, s))
            }
            Effect::Pin { .. } => {
                per_vm(table, vm, VmMetric::StickyPins, Write::Add(1), s);
                None
            }
            Effect::ArmTimer { .. } | Effect::ReplaceBody { .. } | Effect::EndAnswer { .. } => None,
        }
    }

    /// The request's answer goes to the client (with the warn line if it failed).
    fn ended(&mut self, plugin: &Plugin, ending: &Ending, s: &mut impl Sink) -> Option<String> {
        let (config, table) = (&plugin.config, &plugin.metrics);
        let vm = self.virtual_model;
        warn_if_failed(config, vm, ending);
        match ending.target {
            Some(t) => {
                let m = PairMetric::Answers(StatusClass::of(ending.status));
                pair(table, vm, t, m, Write::Add(1), s);
            }
            None => per_vm(table, vm, VmMetric::NoAnswer, Write::Add(1), s),
        }
        if let Some(m) = sticky_outcome(self.sticky_home, ending) {
            per_vm(table, vm, m, Write::Add(1), s);
        }
        if config.request_histograms {
            let w = Write::Record(u64::from(ending.attempts));
            per_vm(table, vm, VmMetric::Attempts, w, s);
            if let Some(us) = self.overhead.take_total() {
                per_vm(table, vm, VmMetric::OverheadUs, Write::Record(us), s);
            }
        }
        self.trace.as_ref().map(|t| t.render(config))
    }
}

/// A sticky request's outcome: a hit when its session's target answered, a move when another
/// target answered well (the session is pinned there, `routing::sticky`).
fn sticky_outcome(home: Option<ModelId>, ending: &Ending) -> Option<VmMetric> {
    let (home, target) = (home?, ending.target?);
    if target == home {
        Some(VmMetric::StickyHits)
    } else {
        (200..300)
            .contains(&ending.status)
            .then_some(VmMetric::StickyMoves)
    }
}

/// A successful answer's latency samples and token counts go to its target's series.
fn samples(
    table: &MetricTable,
    vm: Option<usize>,
    t: ModelId,
    (sample, tokens): (&LatencySample, &Tokens),
    s: &mut impl Sink,
) {
    if let Some(ms) = sample.ttft_ms {
        pair(
            table,
            vm,
            t,
            PairMetric::TtftMs,
            Write::Record(u64::from(ms)),
            s,
        );
    }
    if let Some(us) = sample.tpot_us {
        pair(table, vm, t, PairMetric::TpotUs, Write::Record(us), s);
    }
    if let Some(n) = tokens.prompt {
        pair(table, vm, t, PairMetric::PromptTokens, Write::Add(n), s);
    }
    if let Some(n) = tokens.completion {
        pair(table, vm, t, PairMetric::CompletionTokens, Write::Add(n), s);
    }
}

/// The ending an effect carries, if it ends the request.
pub fn ending<'e>(effect: &'e Effect<'_>) -> Option<&'e Ending> {
    match effect {
        Effect::Deliver(d) => Some(&d.ending),
        Effect::Reply(r) => Some(&r.ending),
        Effect::Fail(f) => Some(&f.ending),
        _ => None,
    }
}

/// The debug line of a routing decision: the candidates in order and the decision's time
/// (0 when it was not timed). Names from the config only, never a header value.
fn log_decided(config: &Config, plan: &Plan, decision_us: u64) {
    if log::log_enabled!(log::Level::Debug) {
        let name = |m| config.model(m).map_or("?", |m| m.name.as_str());
        let candidates: Vec<&str> = plan.candidates.iter().map(|m| name(*m)).collect();
        let vm = plan.virtual_model(config);
        log::debug!(
            "{} ({}): candidates {} decided in {} us",
            vm.map_or(crate::core::metrics::DIRECT, |vm| vm.name.as_str()),
            vm.map_or("catalog model", |vm| vm.routing.type_name()),
            candidates.join(", "),
            decision_us
        );
    }
}

/// One debug line per attempt: where it goes, never a header value (they may be keys).
pub fn log_attempt(config: &Config, target: ModelId, n: u32, out: &Outbound<'_>) {
    if log::log_enabled!(log::Level::Debug) {
        let name = config.model(target).map_or("?", |m| m.name.as_str());
        let authority = out.authority.unwrap_or("(client's authority)");
        // Without the query: a client may put a key there.
        let path = out.path.as_deref().map_or("(client's path)", |p| {
            p.split_once('?').map_or(p, |(before, _)| before)
        });
        log::debug!(
            "attempt {n} at {name}: cluster {}, {authority} {path}",
            out.cluster
        );
    }
}

/// The one warn line of a request that failed once every target it could try was tried
/// (`ending.gave_up`); nothing otherwise.
fn warn_if_failed(config: &Config, vm: Option<usize>, ending: &Ending) {
    if !ending.gave_up {
        return;
    }
    let vm = vm.and_then(|i| config.virtual_models.get(i));
    let name = vm.map_or(crate::core::metrics::DIRECT, |vm| vm.name.as_str());
    let (from, target) = match ending.target.and_then(|t| config.model(t)) {
        Some(m) => ("the client gets it from ", m.name.as_str()),
        None => ("no target answered", ""),
    };
    log::warn!(
        "{name}: routing failed after {} attempts with {}; {from}{target}",
        ending.attempts,
        ending.status
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fallback::AttemptOutcome;
    use crate::core::flight::{Attempt, Tokens};
    use crate::core::health::sla::LatencySample;
    use crate::core::metrics::definitions;

    const CONFIG: &str = r#"{
      "models": [
        {"name": "a", "cluster": "a", "model": "m"},
        {"name": "b", "cluster": "b", "model": "m"}
      ],
      "request_histograms": true,
      "virtual_models": [
        {"name": "vm", "model_types": ["chat"], "routing_config": {
          "type": "priority-based-routing", "load_balance_targets": [
            {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}
      ]
    }"#;

    /// The plugin with its metrics defined (id = index), and each id's name.
    fn defined() -> (Plugin, Vec<String>) {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let names: Vec<String> = definitions(&config).into_iter().map(|(_, n)| n).collect();
        let ids = (0..names.len() as u32).collect();
        (Plugin::new(config).with_metric_ids(ids), names)
    }

    fn attempt(target: usize, number: u32, kind: AttemptKind) -> Effect<'static> {
        Effect::Attempt(Attempt {
            target: ModelId(target),
            number,
            kind,
            call: None,
            delay_ms: 0,
        })
    }

    #[test]
    fn each_step_writes_the_metric_of_its_target() {
        let (config, names) = defined();
        let mut writes = Vec::new();
        let mut sink = |id: u32, w: Write| writes.push((names[id as usize].clone(), w));
        let plan = Plan {
            candidates: vec![ModelId(0), ModelId(1)],
            virtual_model: Some(0),
            sticky: None,
            pinned: false,
        };
        decided(&config, &plan, 42, &mut sink);
        decided(&config, &plan, 0, &mut sink); // a stored-response request: nothing timed
        let mut report = Report::new(Some(0), None, Overhead::default());
        let timeout = AttemptOutcome::Timeout;
        let status = AttemptOutcome::Status(503);
        for effect in [
            attempt(0, 1, AttemptKind::First),
            attempt(0, 2, AttemptKind::Retry(timeout)),
            attempt(1, 3, AttemptKind::Fallback(status)),
            Effect::Samples {
                target: ModelId(1),
                sample: LatencySample {
                    ttft_ms: Some(7),
                    sla_tpot_ms: None,
                    tpot_us: None,
                },
                now_ms: 0,
                tokens: Tokens {
                    prompt: Some(11),
                    completion: None,
                },
                for_routing: false,
            },
        ] {
            assert_eq!(report.effect(&config, &effect, &mut sink), None);
        }
        evicted(&config, Some(0), ModelId(0), &mut sink);
        assert_eq!(report.fallback(), Some(Reason::Status));
        let w = |n: &str, w| (format!("switchboard.{n}"), w);
        assert_eq!(
            writes,
            [
                w("requests.vm.vm.target.a", Write::Add(1)),
                w("decision_us.vm.vm", Write::Record(42)),
                w("requests.vm.vm.target.a", Write::Add(1)),
                w("retries.reason.timeout.vm.vm.target.a", Write::Add(1)),
                w("fallbacks.reason.status.vm.vm.target.a", Write::Add(1)),
                w("ttft_ms.vm.vm.target.b", Write::Record(7)),
                w("prompt_tokens.vm.vm.target.b", Write::Add(11)),
                w("evictions.vm.vm.target.a", Write::Add(1)),
            ]
        );
    }

    #[test]
    fn the_overhead_is_recorded_once_at_the_ending() {
        use crate::core::flight::Ending;
        let (plugin, names) = defined();
        let mut writes = Vec::new();
        let mut sink = |id: u32, w: Write| writes.push((names[id as usize].clone(), w));
        let mut overhead = Overhead::started(Some(100));
        overhead.attempt_left(130, 0);
        overhead.failed(1_000);
        overhead.attempt_left(201_012, 200); // the 200 ms retry delay is not counted
        let mut report = Report::new(Some(0), None, overhead);
        let ending = Ending {
            target: None,
            status: 503,
            attempts: 2,
            gave_up: true,
        };
        report.ended(&plugin, &ending, &mut sink);
        report.ended(&plugin, &ending, &mut sink);
        let overheads: Vec<_> = writes
            .iter()
            .filter(|(n, _)| n == "switchboard.overhead_us.vm.vm")
            .collect();
        assert_eq!(
            overheads,
            [&(
                "switchboard.overhead_us.vm.vm".to_string(),
                Write::Record(42)
            )]
        );
    }

    #[test]
    fn a_sticky_request_is_a_hit_at_home_and_a_move_when_another_target_answers_well() {
        let end = |target: Option<usize>, status| Ending {
            target: target.map(ModelId),
            status,
            attempts: 1,
            gave_up: false,
        };
        let home = Some(ModelId(0));
        assert_eq!(
            sticky_outcome(home, &end(Some(0), 200)),
            Some(VmMetric::StickyHits)
        );
        assert_eq!(
            sticky_outcome(home, &end(Some(0), 429)),
            Some(VmMetric::StickyHits)
        );
        assert_eq!(
            sticky_outcome(home, &end(Some(1), 200)),
            Some(VmMetric::StickyMoves)
        );
        assert_eq!(
            sticky_outcome(home, &end(Some(1), 503)),
            None,
            "no move: no pin"
        );
        assert_eq!(sticky_outcome(home, &end(None, 503)), None);
        assert_eq!(sticky_outcome(None, &end(Some(0), 200)), None, "not sticky");
    }
}
