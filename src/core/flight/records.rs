//! Applying [`super::Effect::Record`] and [`super::Effect::Samples`] to a health [`Store`]:
//! the same update in every adapter (proxy-wasm shared data, a native module's memory) and in
//! the tests' simulated host.

use super::Effect;
use crate::core::config::{Config, ModelId};
use crate::core::health::record::{HealthRecord, Outcome};
use crate::core::health::sla::LatencySample;
use crate::core::health::store::{self, Store};
use crate::core::health::view::HealthView;

/// Applies an effect's change to its target's health in `store` and keeps the record written
/// in `view`: [`Effect::Record`] (skipped for a success on a record the view holds clean: it
/// would change nothing, and the common request then makes no store call) and
/// [`Effect::Samples`] when routing uses them. Other effects are not health's. `clock` is read
/// only for a write. Returns the target whose eviction this started, for the evictions metric.
pub fn apply_health(
    view: &mut HealthView,
    store: &dyn Store,
    config: &Config,
    effect: &Effect<'_>,
    clock: impl FnOnce() -> u64,
) -> Option<ModelId> {
    match *effect {
        Effect::Record {
            target,
            health: Some(outcome),
            ..
        } => {
            if outcome == Outcome::Success && view.is_clean(target) {
                return None;
            }
            let (written, evicted) =
                record_noting_eviction(store, config, target, outcome, clock());
            view.keep(target, written);
            evicted.then_some(target)
        }
        Effect::Samples {
            target,
            ref sample,
            now_ms,
            for_routing: true,
            ..
        } => {
            view.keep(target, add_samples(store, config, target, sample, now_ms));
            None
        }
        _ => None,
    }
}

/// Records an attempt's outcome in `target`'s shared record at `now_ms`: the record as
/// written (`None` if the target is unknown or every write lost its race), and whether this
/// outcome started an eviction of the target (for the evictions metric), judged on the record
/// the write replaced, not on a cached view another worker may have outdated.
fn record_noting_eviction(
    store: &dyn Store,
    config: &Config,
    target: ModelId,
    outcome: Outcome,
    now_ms: u64,
) -> (Option<HealthRecord>, bool) {
    let Some(model) = config.model(target) else {
        return (None, false);
    };
    // The update may run again after a lost race: the last run is the one written.
    let started = std::cell::Cell::new(false);
    let written = store::update(store, &store::key(&model.name), |r| {
        let before = r.evicted_until_ms;
        r.record(outcome, now_ms, &model.health);
        started.set(r.evicted_until_ms != 0 && r.evicted_until_ms != before);
    });
    let started = written.is_some() && started.get();
    (written, started)
}

/// Adds a successful answer's latency samples to `target`'s shared record.
fn add_samples(
    store: &dyn Store,
    config: &Config,
    target: ModelId,
    sample: &LatencySample,
    now_ms: u64,
) -> Option<HealthRecord> {
    let model = config.model(target)?;
    store::update(store, &store::key(&model.name), |r| {
        sample.add_to(r, now_ms)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fallback::AttemptOutcome;
    use crate::core::flight::Tokens;
    use crate::core::health::store::MemoryStore;

    #[test]
    fn health_effects_reach_the_store_and_the_view_and_nothing_else_does() {
        let config = Config::parse(
            br#"{"models": [{"name": "a", "cluster": "c", "model": "m",
                 "health": {"eviction": {"consecutive_failures": 1, "duration": "5s"}}}]}"#,
        )
        .unwrap();
        let store = MemoryStore::default();
        let mut view = HealthView::default();
        view.read(&config, 1_000, &store);
        let a = ModelId(0);
        let record = |health| Effect::Record {
            target: a,
            outcome: AttemptOutcome::Status(200),
            health,
        };
        let samples = |for_routing| Effect::Samples {
            target: a,
            sample: LatencySample {
                ttft_ms: Some(40),
                ..LatencySample::default()
            },
            now_ms: 1_000,
            tokens: Tokens::default(),
            for_routing,
        };
        let mut apply = |effect: &Effect<'_>| {
            let mut clock_read = false;
            let evicted = apply_health(&mut view, &store, &config, effect, || {
                clock_read = true;
                1_000
            });
            (evicted, clock_read)
        };
        let stored = || store::load(&store, &store::key("a"));
        assert_eq!(apply(&record(Some(Outcome::Success))), (None, false));
        assert_eq!(apply(&record(None)), (None, false));
        assert_eq!(apply(&samples(false)), (None, false));
        assert_eq!(stored(), HealthRecord::default(), "nothing written");
        let failure = Outcome::FAILED;
        assert_eq!(apply(&record(Some(failure))), (Some(a), true));
        assert_eq!(
            apply(&record(Some(failure))),
            (None, true),
            "already evicted"
        );
        apply(&samples(true));
        assert_eq!(stored().ttft.0.len(), 1);
        let (_, input) = view.read(&config, 1_001, &store);
        assert_eq!(
            input.records.first(),
            Some(&stored()),
            "the view kept each write"
        );
    }

    #[test]
    fn only_the_failure_that_evicts_is_noted_as_an_eviction() {
        // A Retry-After hint evicts (agentgateway virtual models, "Health vs eviction").
        let config =
            Config::parse(br#"{"models": [{"name": "a", "cluster": "c", "model": "m"}]}"#).unwrap();
        let store = MemoryStore::default();
        let fail = |hint_ms| Outcome::Failure {
            hint_ms,
            class: crate::core::health::failure_class::FailureClass::Other,
        };
        let run = |o, now| record_noting_eviction(&store, &config, ModelId(0), o, now).1;
        assert!(
            !run(fail(None), 1_000),
            "no hint, no eviction policy: unhealthy at most"
        );
        assert!(run(fail(Some(5_000)), 2_000));
        assert!(!run(fail(Some(5_000)), 3_000), "already evicted");
        assert!(
            run(fail(Some(5_000)), 8_000),
            "the first eviction ended at 7 000"
        );
        assert_eq!(
            record_noting_eviction(&store, &config, ModelId(7), fail(None), 9_000),
            (None, false)
        );
    }
}
