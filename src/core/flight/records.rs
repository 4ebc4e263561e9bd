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
    let model = config.model(target)?;
    store::update(store, &store::key(&model.name), |r| {
        r.record(outcome, now_ms, &model.health)
    })
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
