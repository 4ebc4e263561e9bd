//! Applying [`super::Effect::Record`] and [`super::Effect::Samples`] to a health [`Store`]:
//! the same update in every adapter (proxy-wasm shared data, a native module's memory) and in
//! the tests' simulated host.

use crate::core::config::{Config, ModelId};
use crate::core::health::record::{HealthRecord, Outcome};
use crate::core::health::sla::LatencySample;
use crate::core::health::store::{self, Store};

/// Records an attempt's outcome in `target`'s shared record at `now_ms`; the record as
/// written, or `None` if the target is unknown or every write lost its race.
pub fn record_outcome(
    store: &dyn Store,
    config: &Config,
    target: ModelId,
    outcome: Outcome,
    now_ms: u64,
) -> Option<HealthRecord> {
    record_noting_eviction(store, config, target, outcome, now_ms).0
}

/// [`record_outcome`], also saying whether this outcome started an eviction of the target
/// (for the evictions metric): judged on the record the write replaced, not on a cached view
/// another worker may have outdated.
pub fn record_noting_eviction(
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
pub fn add_samples(
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
    use crate::core::health::store::MemoryStore;

    #[test]
    fn only_the_failure_that_evicts_is_noted_as_an_eviction() {
        // A Retry-After hint evicts (agentgateway seed, "Health vs eviction").
        let config =
            Config::parse(br#"{"models": [{"name": "a", "cluster": "c", "model": "m"}]}"#).unwrap();
        let store = MemoryStore::default();
        let fail = |hint_ms| Outcome::Failure { hint_ms };
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
