//! Switchboard's Prometheus metrics: their names, compiled once per config into a table the
//! request path indexes with plain numbers.
//!
//! Every name comes from the config (a virtual model's name, a catalog model's name), never
//! from a client, so the number of series is fixed by the config. The virtual model and the
//! target are part of the metric NAME, so every Envoy shows them on `/stats/prometheus`; the
//! `stats_config.stats_tags` rules shipped with the Envoy configs ([`STATS_TAGS`]) turn them
//! into `virtual_model` and `target` labels. The scheme, checked with Envoy 1.40:
//!
//! ```text
//! switchboard.<metric>[.<class|reason>.<value>].vm.<virtual model>[.target.<target>]
//! ```
//!
//! Envoy files a Wasm metric `N` as `wasmcustom.N` and prints it on `/stats/prometheus`
//! without that prefix, every character of the name outside `[A-Za-z0-9_]` as `_`; label
//! values keep theirs (`/`, `.`, `:`).
//!
//! The adapter defines every name when a config loads ([`definitions`]) and hands the host's
//! ids back ([`MetricTable::with_ids`]); a request then only looks an id up by index.

use crate::core::answer_faults::AnswerFault;
use crate::core::config::{Config, ModelId, VirtualModel, Visibility};
use crate::core::fallback::{AttemptOutcome, StreamFault};
use crate::core::health::record::Standing;
use crate::core::routing::HealthInput;

/// What Envoy keeps for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever goes up; summed over workers.
    Counter,
    /// Set to a value.
    Gauge,
    /// A distribution of recorded values.
    Histogram,
}

/// A metric kept per virtual model and target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairMetric {
    /// Requests whose first attempt went to the target (the routing decision).
    Requests,
    /// Answers of the target delivered to the client, by status class.
    Answers(StatusClass),
    /// Retries of the target after its attempt failed so.
    Retries(Reason),
    /// Requests that left the target for the next candidate after it failed so.
    Fallbacks(Reason),
    /// Evictions of the target caused by a failure of this virtual model's requests.
    Evictions,
    /// `usage` prompt (input) tokens of the target's successful answers.
    PromptTokens,
    /// `usage` completion (output) tokens of the target's successful answers.
    CompletionTokens,
    /// The target's standing as the virtual model sees it (gauge, [`health_value`]).
    Health,
    /// Time to first token of streamed answers, milliseconds.
    TtftMs,
    /// Time per output token, microseconds.
    TpotUs,
    /// Streamed answers of the target that failed after they started (before or after their
    /// first content), by how.
    StreamFailed(StreamFault),
}

/// Why an attempt failed, as the `reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The target answered with a status that moves the request on.
    Status,
    /// No answer: connection refused or reset.
    ConnectFailure,
    /// No answer in time.
    Timeout,
    /// A streamed answer failed before its first content.
    StreamFailed,
    /// `fallback_on`: a 2xx refusal (content filter).
    ContentFilter,
    /// `fallback_on`: a 2xx with no content and no tool call.
    Empty,
    /// `fallback_on`: a 2xx whose body is an error object.
    ErrorBody,
}

impl Reason {
    /// Every reason, in table order. The last three only ever move a request to another
    /// target (an answer judged by `fallback_on` is never retried): `retries` has the first
    /// four, `fallbacks` all.
    pub const ALL: [Reason; 7] = [
        Reason::Status,
        Reason::ConnectFailure,
        Reason::Timeout,
        Reason::StreamFailed,
        Reason::ContentFilter,
        Reason::Empty,
        Reason::ErrorBody,
    ];

    /// The label value (also the access log's `fallback_reason`).
    pub fn name(self) -> &'static str {
        match self {
            Reason::Status => "status",
            Reason::ConnectFailure => "connect_failure",
            Reason::Timeout => "timeout",
            Reason::StreamFailed => "stream_failed",
            Reason::ContentFilter => "content_filter",
            Reason::Empty => "empty",
            Reason::ErrorBody => "error_body",
        }
    }

    /// The reason of a failed attempt.
    pub fn of(outcome: AttemptOutcome) -> Reason {
        match outcome {
            AttemptOutcome::Status(_) => Reason::Status,
            AttemptOutcome::ConnectFailure => Reason::ConnectFailure,
            AttemptOutcome::Timeout | AttemptOutcome::FallbackTimeout => Reason::Timeout,
            AttemptOutcome::StreamFailed(_) => Reason::StreamFailed,
            AttemptOutcome::Answer(AnswerFault::ContentFilter) => Reason::ContentFilter,
            AttemptOutcome::Answer(AnswerFault::Empty) => Reason::Empty,
            AttemptOutcome::Answer(AnswerFault::ErrorBody) => Reason::ErrorBody,
        }
    }
}

/// A status class of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 1xx and 2xx.
    Success,
    /// 3xx.
    Redirect,
    /// 4xx.
    ClientError,
    /// 5xx and anything out of range.
    ServerError,
}

impl StatusClass {
    /// Every class, in table order.
    pub const ALL: [StatusClass; 4] = [
        StatusClass::Success,
        StatusClass::Redirect,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    /// The class of `status`. A final answer is never 1xx; counted with 2xx if it were.
    pub fn of(status: u16) -> StatusClass {
        match status {
            0..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirect,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            StatusClass::Success => "2xx",
            StatusClass::Redirect => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

/// A metric kept per virtual model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmMetric {
    /// Attempts one request took (histogram).
    Attempts,
    /// The routing decision's own time, microseconds (histogram).
    DecisionUs,
    /// Requests no target answered: Switchboard sent its own error after the attempts.
    NoAnswer,
    /// Switchboard's own time on a request, microseconds (histogram, [`crate::core::overhead`]).
    OverheadUs,
    /// Sticky requests answered by their session's target (its pin, or its rendezvous winner).
    StickyHits,
    /// Sticky pins written (a session moved to the target that answered).
    StickyPins,
    /// Sticky sessions moved: answered well by another target than theirs (theirs unhealthy,
    /// evicted, or failing so a fallback answered).
    StickyMoves,
}

/// One name and kind, with its place in the table.
struct Spec {
    metric: &'static str,
    label: Option<(&'static str, &'static str)>,
    kind: Kind,
}

const fn spec(metric: &'static str, kind: Kind) -> Spec {
    Spec {
        metric,
        label: None,
        kind,
    }
}

const fn labelled(metric: &'static str, label: (&'static str, &'static str), kind: Kind) -> Spec {
    Spec {
        metric,
        label: Some(label),
        kind,
    }
}

/// The per-pair metrics in table order; [`pair_offset`] must agree with it.
const PAIR: [Spec; 26] = [
    spec("requests", Kind::Counter),
    labelled("answers", ("class", "2xx"), Kind::Counter),
    labelled("answers", ("class", "3xx"), Kind::Counter),
    labelled("answers", ("class", "4xx"), Kind::Counter),
    labelled("answers", ("class", "5xx"), Kind::Counter),
    labelled("retries", ("reason", "status"), Kind::Counter),
    labelled("retries", ("reason", "connect_failure"), Kind::Counter),
    labelled("retries", ("reason", "timeout"), Kind::Counter),
    labelled("retries", ("reason", "stream_failed"), Kind::Counter),
    labelled("fallbacks", ("reason", "status"), Kind::Counter),
    labelled("fallbacks", ("reason", "connect_failure"), Kind::Counter),
    labelled("fallbacks", ("reason", "timeout"), Kind::Counter),
    labelled("fallbacks", ("reason", "stream_failed"), Kind::Counter),
    spec("evictions", Kind::Counter),
    spec("prompt_tokens", Kind::Counter),
    spec("completion_tokens", Kind::Counter),
    spec("health", Kind::Gauge),
    spec("ttft_ms", Kind::Histogram),
    spec("tpot_us", Kind::Histogram),
    labelled("stream_failed", ("reason", "reset"), Kind::Counter),
    labelled("stream_failed", ("reason", "idle"), Kind::Counter),
    labelled("stream_failed", ("reason", "malformed"), Kind::Counter),
    labelled("stream_failed", ("reason", "error_event"), Kind::Counter),
    labelled("fallbacks", ("reason", "content_filter"), Kind::Counter),
    labelled("fallbacks", ("reason", "empty"), Kind::Counter),
    labelled("fallbacks", ("reason", "error_body"), Kind::Counter),
];

/// The per-virtual-model metrics in table order; [`vm_offset`] must agree with it.
const VM: [Spec; 7] = [
    spec("attempts", Kind::Histogram),
    spec("decision_us", Kind::Histogram),
    spec("no_answer", Kind::Counter),
    spec("overhead_us", Kind::Histogram),
    spec("sticky_hits", Kind::Counter),
    spec("sticky_pins", Kind::Counter),
    spec("sticky_moves", Kind::Counter),
];

/// `None` for a series the table does not hold (a retry for a reason that is never retried).
fn pair_offset(m: PairMetric) -> Option<usize> {
    let class = |c: StatusClass| StatusClass::ALL.iter().position(|x| *x == c).unwrap_or(0);
    let reason = |r: Reason| Reason::ALL.iter().position(|x| *x == r).unwrap_or(0);
    Some(match m {
        PairMetric::Requests => 0,
        PairMetric::Answers(c) => 1 + class(c),
        PairMetric::Retries(r) if reason(r) < 4 => 5 + reason(r),
        PairMetric::Retries(_) => return None,
        PairMetric::Fallbacks(r) if reason(r) < 4 => 9 + reason(r),
        // Appended after the table's earlier series, which keep their places.
        PairMetric::Fallbacks(r) => 23 + reason(r) - 4,
        PairMetric::Evictions => 13,
        PairMetric::PromptTokens => 14,
        PairMetric::CompletionTokens => 15,
        PairMetric::Health => 16,
        PairMetric::TtftMs => 17,
        PairMetric::TpotUs => 18,
        PairMetric::StreamFailed(f) => {
            19 + match f {
                StreamFault::Reset => 0,
                StreamFault::Idle => 1,
                StreamFault::Malformed => 2,
                StreamFault::ErrorEvent => 3,
            }
        }
    })
}

fn vm_offset(m: VmMetric) -> usize {
    match m {
        VmMetric::Attempts => 0,
        VmMetric::DecisionUs => 1,
        VmMetric::NoAnswer => 2,
        VmMetric::OverheadUs => 3,
        VmMetric::StickyHits => 4,
        VmMetric::StickyPins => 5,
        VmMetric::StickyMoves => 6,
    }
}

/// The `virtual_model` label of a catalog model called directly.
pub const DIRECT: &str = "(direct)";

/// The name of the config version gauge.
pub const CONFIG_VERSION: &str = "switchboard.config_version";

/// The value of the `health` gauge for a standing.
pub fn health_value(standing: Standing) -> u64 {
    match standing {
        Standing::Healthy => 0,
        Standing::Unhealthy => 1,
        Standing::Evicted => 2,
    }
}

/// Where each metric of a config sits, and (once the adapter has defined them) the host's id
/// of each. Slots: one per virtual model, then one for catalog models called directly.
#[derive(Debug, Clone, Default)]
pub struct MetricTable {
    models: usize,
    /// Index of each slot's first per-virtual-model metric.
    vm_base: Vec<u32>,
    /// Index of each (slot, model)'s first per-pair metric; `NONE` when not a pair.
    pair_base: Vec<u32>,
    /// The host's id of each metric, by index; empty until defined.
    ids: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// The id the adapter hands back for a metric the host refused to define.
pub const UNDEFINED: u32 = u32::MAX;

impl MetricTable {
    /// Lays the metrics of `config` out: the version gauge, then each slot's metrics, then
    /// each pair's.
    pub fn new(config: &Config) -> MetricTable {
        let models = config.models.len();
        let slots = config.virtual_models.len() + 1;
        let mut next = 1u32; // 0 is the config version
        let mut vm_base = Vec::with_capacity(slots);
        for _ in 0..slots {
            vm_base.push(next);
            next += VM.len() as u32;
        }
        let mut pair_base = vec![NONE; slots * models];
        for (slot, targets) in slot_targets(config).enumerate() {
            for m in targets {
                if let Some(b) = pair_base.get_mut(slot * models + m.0) {
                    if *b == NONE {
                        *b = next;
                        next += PAIR.len() as u32;
                    }
                }
            }
        }
        MetricTable {
            models,
            vm_base,
            pair_base,
            ids: Vec::new(),
        }
    }

    /// The table with the host's id of every metric, in [`definitions`] order.
    pub fn with_ids(mut self, ids: Vec<u32>) -> MetricTable {
        self.ids = ids;
        self
    }

    /// How many metrics the table holds.
    pub fn count(&self) -> usize {
        self.pair_base
            .iter()
            .filter(|b| **b != NONE)
            .count()
            .saturating_mul(PAIR.len())
            + self.vm_base.len() * VM.len()
            + 1
    }

    fn slot(&self, vm: Option<usize>) -> usize {
        vm.unwrap_or(self.vm_base.len().saturating_sub(1))
            .min(self.vm_base.len().saturating_sub(1))
    }

    /// The host id of a per-pair metric; `None` if the pair is not in the config or the
    /// metrics are not defined.
    pub fn pair(&self, vm: Option<usize>, target: ModelId, m: PairMetric) -> Option<u32> {
        if target.0 >= self.models {
            return None;
        }
        let base = *self.pair_base.get(self.slot(vm) * self.models + target.0)?;
        if base == NONE {
            return None;
        }
        self.id_at(base as usize + pair_offset(m)?)
    }

    /// The host id of a per-virtual-model metric.
    pub fn vm(&self, vm: Option<usize>, m: VmMetric) -> Option<u32> {
        let base = *self.vm_base.get(self.slot(vm))?;
        self.id_at(base as usize + vm_offset(m))
    }

    /// The host id of the config version gauge.
    pub fn config_version(&self) -> Option<u32> {
        self.id_at(0)
    }

    /// The host id at `index`; [`UNDEFINED`] (a name the host refused) is none.
    fn id_at(&self, index: usize) -> Option<u32> {
        self.ids.get(index).copied().filter(|id| *id != UNDEFINED)
    }
}

/// The targets of each slot: each virtual model's, then the public catalog models.
fn slot_targets(config: &Config) -> impl Iterator<Item = Vec<ModelId>> + '_ {
    let vms = config
        .virtual_models
        .iter()
        .map(|vm| vm.targets.iter().map(|t| t.model).collect());
    let direct = config
        .models
        .iter()
        .enumerate()
        .filter(|(_, m)| m.visibility == Visibility::Public)
        .map(|(i, _)| ModelId(i))
        .collect();
    vms.chain(std::iter::once(direct))
}

/// Each pair's `health` gauge as `health` stands: (pair number, host id, value). Pair numbers
/// run from 0 in table order, so an adapter can keep the last value it wrote of each.
pub fn health_gauges<'a>(
    (config, table): (&'a Config, &'a MetricTable),
    health: &'a HealthInput<'_>,
) -> impl Iterator<Item = (usize, u32, u64)> + 'a {
    let slots = config.virtual_models.len();
    slot_targets(config)
        .enumerate()
        .flat_map(move |(slot, targets)| {
            let vm = config.virtual_models.get(slot);
            let mut seen = Vec::with_capacity(targets.len());
            targets.into_iter().filter_map(move |m| {
                if seen.contains(&m) {
                    return None;
                }
                seen.push(m);
                let standing = match vm {
                    Some(vm) => health.standing(vm, m),
                    None => health.records.get(m.0).map_or(Standing::Healthy, |r| {
                        r.standing(health.now_ms, &health.window)
                    }),
                };
                let index = (slot < slots).then_some(slot);
                let id = table.pair(index, m, PairMetric::Health);
                Some((id, health_value(standing)))
            })
        })
        .enumerate()
        .filter_map(|(n, (id, value))| Some((n, id?, value)))
}

/// Hands `set` each [`health_gauges`] value that differs from `last` (the values an adapter
/// last set, by pair number; grown as needed) and notes it there: a view refresh sets only
/// the gauges that moved.
pub fn changed_health_gauges(
    of: (&Config, &MetricTable),
    health: &HealthInput<'_>,
    last: &mut Vec<u8>,
    mut set: impl FnMut(u32, u64),
) {
    for (n, id, value) in health_gauges(of, health) {
        if last.len() <= n {
            last.resize(n + 1, u8::MAX);
        }
        let value_u8 = u8::try_from(value).unwrap_or(u8::MAX - 1);
        if let Some(slot) = last.get_mut(n) {
            if *slot != value_u8 {
                *slot = value_u8;
                set(id, value);
            }
        }
    }
}

/// Every metric of `config` with its kind, in the order of [`MetricTable`]'s indices: what
/// the adapter defines when the config loads.
pub fn definitions(config: &Config) -> Vec<(Kind, String)> {
    let table = MetricTable::new(config);
    let mut out = vec![(Kind::Gauge, CONFIG_VERSION.to_string())];
    let slot_name = |slot: usize| {
        config
            .virtual_models
            .get(slot)
            .map_or(DIRECT, |vm: &VirtualModel| vm.name.as_str())
    };
    for slot in 0..table.vm_base.len() {
        let vm = vm_segment(slot_name(slot));
        for s in &VM {
            out.push((s.kind, name(s, &vm, None)));
        }
    }
    for (slot, targets) in slot_targets(config).enumerate() {
        let vm = vm_segment(slot_name(slot));
        let mut seen = Vec::new();
        for m in targets {
            if seen.contains(&m) {
                continue;
            }
            seen.push(m);
            let target = config.model(m).map_or("", |m| m.name.as_str());
            let target = target_segment(target);
            for s in &PAIR {
                out.push((s.kind, name(s, &vm, Some(&target))));
            }
        }
    }
    out
}

fn name(s: &Spec, vm: &str, target: Option<&str>) -> String {
    let (label, value) = s.label.unwrap_or_default();
    let dot = if label.is_empty() { "" } else { "." };
    let (tag, target) = target.map_or(("", ""), |t| (".target.", t));
    [
        "switchboard.",
        s.metric,
        dot,
        label,
        dot,
        value,
        ".vm.",
        vm,
        tag,
        target,
    ]
    .concat()
}

/// A virtual model name as it goes into a metric name: a `.` that would start `.target.`
/// becomes `_`, so the tag rules split the name where Switchboard put `.target.`; a trailing
/// `.` becomes `_` (Envoy drops a stat name's trailing dot).
pub fn vm_segment(name: &str) -> String {
    let mut out = name.replace(".target.", "_target.");
    // `x.target.target.y`: the replacement cannot overlap itself; repeat until stable.
    while out.contains(".target.") {
        out = out.replace(".target.", "_target.");
    }
    trailing_dot(out)
}

/// A target name as it goes into a metric name: only a trailing `.` changes (to `_`).
pub fn target_segment(name: &str) -> String {
    trailing_dot(name.to_string())
}

fn trailing_dot(mut s: String) -> String {
    if s.ends_with('.') {
        s.pop();
        s.push('_');
    }
    s
}

/// Where Envoy 1.40 files a filter's metric `N`: `wasmcustom.N` for the Wasm build,
/// `dynamicmodulescustom.N` for the dynamic module (checked on `/stats`). The rules below
/// accept both, so one `stats_config` serves either build.
pub const NAMESPACES: [&str; 2] = ["wasmcustom", "dynamicmodulescustom"];

/// The `stats_config.stats_tags` rules that turn the names into labels (the first capture
/// group is cut from the name, the second is the value); every config under `envoy/`
/// carries exactly these.
pub const STATS_TAGS: [(&str, &str); 4] = [
    (
        "class",
        r"^(?:wasmcustom|dynamicmodulescustom)\.switchboard\.[a-z0-9_]+(\.class\.([0-9a-z]+))\.vm\.",
    ),
    (
        "reason",
        r"^(?:wasmcustom|dynamicmodulescustom)\.switchboard\.[a-z0-9_]+(\.reason\.([a-z_]+))\.vm\.",
    ),
    (
        "virtual_model",
        r"^(?:wasmcustom|dynamicmodulescustom)\.switchboard\.[a-z0-9_.]+?(\.vm\.(.+?))(?:\.target\..+)?$",
    ),
    (
        "target",
        r"^(?:wasmcustom|dynamicmodulescustom)\.switchboard\.[a-z0-9_.]+?\.vm\..+?(\.target\.(.+))$",
    ),
];

/// Histogram buckets (`stats_config.histogram_bucket_settings`, matched by name prefix)
/// shipped with the Envoy configs, once per [`NAMESPACES`] entry; Envoy's defaults (0.5 to
/// 3,600,000) fit the others.
pub const BUCKETS: [(&str, &[f64]); 3] = [
    (
        "switchboard.attempts.",
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0],
    ),
    (
        "switchboard.decision_us.",
        &[
            5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
        ],
    ),
    (
        "switchboard.tpot_us.",
        &[
            1000.0, 2500.0, 5000.0, 10000.0, 25000.0, 50000.0, 100000.0, 250000.0, 1000000.0,
        ],
    ),
];

/// The `stats_config` block of an Envoy bootstrap with [`STATS_TAGS`] and [`BUCKETS`], as
/// shipped in every config under `envoy/` (`switchboard stats-config` prints it).
pub fn stats_config_yaml() -> String {
    let mut out = String::from("stats_config:\n  stats_tags:\n");
    for (tag, regex) in STATS_TAGS {
        out.push_str(&format!("  - tag_name: {tag}\n    regex: '{regex}'\n"));
    }
    out.push_str("  histogram_bucket_settings:\n");
    for namespace in NAMESPACES {
        for (prefix, buckets) in BUCKETS {
            let list: Vec<String> = buckets.iter().map(|b| format!("{b}")).collect();
            out.push_str(&format!(
                "  - match: {{ prefix: {namespace}.{prefix} }}\n    buckets: [{}]\n",
                list.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
      "models": [
        {"name": "openai/gpt-4.1:latest", "cluster": "a", "model": "m"},
        {"name": "azure-east/gpt-4o", "cluster": "b", "model": "m"},
        {"name": "openai/gpt-4o-mini", "cluster": "a", "model": "m", "visibility": "public"}
      ],
      "virtual_models": [
        {"name": "my-group/production-chat", "model_types": ["chat"], "routing_config": {
          "type": "weight-based-routing", "load_balance_targets": [
            {"target": "openai/gpt-4.1:latest", "weight": 80},
            {"target": "azure-east/gpt-4o", "weight": 20}]}},
        {"name": "solo", "model_types": ["chat"], "routing_config": {
          "type": "priority-based-routing", "load_balance_targets": [
            {"target": "azure-east/gpt-4o", "priority": 0}]}}
      ]
    }"#;

    fn config() -> Config {
        Config::parse(CONFIG.as_bytes()).unwrap()
    }

    /// A table whose host ids are 1000 + index, so a lookup shows which name it found.
    fn defined() -> (Vec<(Kind, String)>, MetricTable) {
        let config = config();
        let defs = definitions(&config);
        let ids = (0..defs.len() as u32).map(|i| 1000 + i).collect();
        (defs, MetricTable::new(&config).with_ids(ids))
    }

    fn name_of(defs: &[(Kind, String)], id: Option<u32>) -> &str {
        &defs[(id.unwrap() - 1000) as usize].1
    }

    #[test]
    fn names_carry_the_virtual_model_and_target_as_configured() {
        let (defs, t) = defined();
        assert_eq!(
            name_of(&defs, t.pair(Some(0), ModelId(0), PairMetric::Requests)),
            "switchboard.requests.vm.my-group/production-chat.target.openai/gpt-4.1:latest"
        );
        assert_eq!(
            name_of(
                &defs,
                t.pair(
                    Some(0),
                    ModelId(1),
                    PairMetric::Answers(StatusClass::of(503))
                )
            ),
            "switchboard.answers.class.5xx.vm.my-group/production-chat.target.azure-east/gpt-4o"
        );
        assert_eq!(
            name_of(
                &defs,
                t.pair(
                    Some(1),
                    ModelId(1),
                    PairMetric::Fallbacks(Reason::of(AttemptOutcome::FallbackTimeout))
                )
            ),
            "switchboard.fallbacks.reason.timeout.vm.solo.target.azure-east/gpt-4o"
        );
        let refused = Reason::of(AttemptOutcome::Answer(AnswerFault::ContentFilter));
        assert_eq!(
            name_of(
                &defs,
                t.pair(Some(1), ModelId(1), PairMetric::Fallbacks(refused))
            ),
            "switchboard.fallbacks.reason.content_filter.vm.solo.target.azure-east/gpt-4o"
        );
        assert_eq!(
            t.pair(Some(1), ModelId(1), PairMetric::Retries(refused)),
            None,
            "an answer judged by fallback_on is never retried"
        );
        assert_eq!(
            name_of(&defs, t.vm(Some(1), VmMetric::DecisionUs)),
            "switchboard.decision_us.vm.solo"
        );
        for (m, name) in [
            (VmMetric::StickyHits, "sticky_hits"),
            (VmMetric::StickyPins, "sticky_pins"),
            (VmMetric::StickyMoves, "sticky_moves"),
        ] {
            assert_eq!(
                name_of(&defs, t.vm(Some(1), m)),
                format!("switchboard.{name}.vm.solo")
            );
        }
        assert_eq!(
            name_of(&defs, t.vm(Some(1), VmMetric::OverheadUs)),
            "switchboard.overhead_us.vm.solo"
        );
        assert_eq!(
            name_of(&defs, t.pair(None, ModelId(2), PairMetric::TtftMs)),
            "switchboard.ttft_ms.vm.(direct).target.openai/gpt-4o-mini"
        );
        assert_eq!(name_of(&defs, t.config_version()), CONFIG_VERSION);
    }

    #[test]
    fn every_lookup_finds_a_name_of_its_own_kind_and_only_pairs_of_the_config_exist() {
        let (defs, t) = defined();
        let pair_metrics = [
            (PairMetric::Requests, Kind::Counter),
            (PairMetric::Answers(StatusClass::Redirect), Kind::Counter),
            (PairMetric::Retries(Reason::ConnectFailure), Kind::Counter),
            (PairMetric::Evictions, Kind::Counter),
            (PairMetric::PromptTokens, Kind::Counter),
            (PairMetric::CompletionTokens, Kind::Counter),
            (PairMetric::Health, Kind::Gauge),
            (PairMetric::TpotUs, Kind::Histogram),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (vm, m) in [(Some(0), 0), (Some(0), 1), (Some(1), 1), (None, 2)] {
            for (metric, kind) in pair_metrics {
                let id = t.pair(vm, ModelId(m), metric).unwrap();
                assert_eq!(defs[(id - 1000) as usize].0, kind, "{metric:?}");
                assert!(seen.insert(id), "two lookups share {id}");
            }
        }
        assert_eq!(
            t.pair(Some(1), ModelId(0), PairMetric::Requests),
            None,
            "not a target of solo"
        );
        assert_eq!(
            t.pair(None, ModelId(0), PairMetric::Requests),
            None,
            "internal"
        );
        assert_eq!(t.pair(Some(0), ModelId(9), PairMetric::Requests), None);
        assert_eq!(t.count(), defs.len());
        // 1 version + 3 slots × 7 + 4 pairs × 26.
        assert_eq!(defs.len(), 1 + 3 * 7 + 4 * 26);
        let names: std::collections::BTreeSet<_> = defs.iter().map(|(_, n)| n).collect();
        assert_eq!(names.len(), defs.len(), "every name is distinct");
    }

    #[test]
    fn undefined_metrics_are_never_written() {
        let t = MetricTable::new(&config());
        assert_eq!(t.pair(Some(0), ModelId(0), PairMetric::Requests), None);
        assert_eq!(t.config_version(), None);
        let refused = MetricTable::new(&config()).with_ids(vec![UNDEFINED; 100]);
        assert_eq!(refused.config_version(), None);
        assert_eq!(refused.vm(Some(0), VmMetric::Attempts), None);
    }

    #[test]
    fn health_gauges_follow_each_virtual_models_view_of_its_targets() {
        use crate::core::health::policy::FailureWindow;
        use crate::core::health::record::HealthRecord;
        let config = config();
        let n = definitions(&config).len() as u32;
        let table = MetricTable::new(&config).with_ids((0..n).map(|i| 1000 + i).collect());
        let (defs, _) = defined();
        let records = vec![
            HealthRecord::default(),
            HealthRecord {
                evicted_until_ms: 5_000,
                ..HealthRecord::default()
            },
        ];
        let health = HealthInput {
            records: &records,
            now_ms: 1_000,
            window: FailureWindow::default(),
        };
        let gauges: Vec<(usize, String, u64)> = health_gauges((&config, &table), &health)
            .map(|(n, id, v)| (n, defs[(id - 1000) as usize].1.clone(), v))
            .collect();
        let vm = "vm.my-group/production-chat";
        assert_eq!(
            gauges,
            [
                (
                    0,
                    format!("switchboard.health.{vm}.target.openai/gpt-4.1:latest"),
                    0
                ),
                (
                    1,
                    format!("switchboard.health.{vm}.target.azure-east/gpt-4o"),
                    2
                ),
                (
                    2,
                    "switchboard.health.vm.solo.target.azure-east/gpt-4o".into(),
                    2
                ),
                (
                    3,
                    "switchboard.health.vm.(direct).target.openai/gpt-4o-mini".into(),
                    0
                ),
            ]
        );
    }

    #[test]
    fn a_health_gauge_is_set_again_only_when_its_value_moved() {
        use crate::core::health::policy::FailureWindow;
        use crate::core::health::record::HealthRecord;
        let config = config();
        let n = definitions(&config).len() as u32;
        let table = MetricTable::new(&config).with_ids((0..n).collect());
        let mut records = vec![HealthRecord::default(), HealthRecord::default()];
        let mut last = Vec::new();
        let sets = |records: &[HealthRecord], last: &mut Vec<u8>| {
            let health = HealthInput {
                records,
                now_ms: 1_000,
                window: FailureWindow::default(),
            };
            let mut out = Vec::new();
            changed_health_gauges((&config, &table), &health, last, |id, v| out.push((id, v)));
            out.len()
        };
        assert_eq!(
            sets(&records, &mut last),
            4,
            "every pair's gauge, the first time"
        );
        assert_eq!(sets(&records, &mut last), 0, "nothing moved");
        records[1].evicted_until_ms = 5_000;
        // azure-east/gpt-4o is a target of both virtual models.
        assert_eq!(sets(&records, &mut last), 2);
    }

    #[test]
    fn every_shipped_envoy_bootstrap_carries_the_stats_config() {
        let block = stats_config_yaml();
        assert!(
            block.contains("buckets: [1, 2, 3, 4, 5, 6, 8, 10]"),
            "{block}"
        );
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("envoy");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // A bootstrap has static resources; an ECDS resource file does not.
            if path.extension().is_some_and(|e| e == "yaml") && text.contains("static_resources:") {
                assert!(
                    text.contains(&block),
                    "{} lacks the stats_config of `switchboard stats-config`",
                    path.display()
                );
                checked += 1;
            }
        }
        assert!(checked >= 3, "{checked}");
    }

    #[test]
    fn names_that_would_confuse_the_tag_rules_are_rewritten() {
        assert_eq!(vm_segment("my-group/gpt-4.1"), "my-group/gpt-4.1");
        assert_eq!(vm_segment("a.target.b"), "a_target.b");
        assert_eq!(vm_segment("a.target.target.b"), "a_target_target.b");
        assert_eq!(vm_segment("ends."), "ends_");
        assert_eq!(target_segment("x.target.y."), "x.target.y_");
    }

    #[test]
    fn labels_and_reasons_are_named_as_the_tag_rules_expect() {
        assert_eq!(StatusClass::of(200).name(), "2xx");
        assert_eq!(StatusClass::of(429).name(), "4xx");
        assert_eq!(StatusClass::of(999).name(), "5xx");
        assert_eq!(Reason::of(AttemptOutcome::Status(503)).name(), "status");
        assert_eq!(Reason::of(AttemptOutcome::Timeout).name(), "timeout");
        assert_eq!(
            Reason::of(AttemptOutcome::ConnectFailure).name(),
            "connect_failure"
        );
        for s in PAIR.iter().chain(VM.iter()) {
            assert!(s
                .metric
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(health_value(Standing::Evicted), 2);
    }
}
