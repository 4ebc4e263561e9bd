//! State every worker of this Envoy shares, and each worker's cached view of it.
//!
//! The Wasm build keeps health records and session pins in proxy-wasm shared data; here the
//! workers are threads of one process, so the same core code ([`crate::core::health::store`],
//! [`crate::core::routing::pins`]) runs against one synchronised map. It is process-wide, so
//! like shared data it outlives config reloads.

use crate::core::config::{Config, ModelId};
use crate::core::flight;
use crate::core::health::record::{HealthRecord, Outcome};
use crate::core::health::sla::LatencySample;
use crate::core::health::store::{self, Store, WriteError};
use crate::core::routing::HealthInput;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

/// A value and its compare-and-swap token, as shared data keeps them.
type Entry = (Vec<u8>, u32);

/// Every shared value, by key.
static VALUES: LazyLock<Mutex<HashMap<String, Entry>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The process-wide store.
pub struct Shared;

impl Store for Shared {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        let values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
        values.get(key).cloned()
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), WriteError> {
        let mut values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
        let current = values.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(WriteError::CasMismatch);
        }
        let next = current.unwrap_or(0).wrapping_add(1);
        values.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

/// A worker's copy of one plugin config's health records, re-read when older than
/// `health_view_ms`, so requests lock the shared map at most that often.
struct View {
    plugin: u64,
    records: Vec<HealthRecord>,
    fetched_ms: Option<u64>,
}

/// The plugin configs Envoy still holds; a worker drops its views of others.
static LIVE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Notes a plugin config Envoy created.
pub fn register(plugin: u64) {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(plugin);
}

/// Notes a plugin config Envoy dropped: each worker forgets its view when it next makes one.
pub fn forget(plugin: u64) {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|p| *p != plugin);
}

thread_local! {
    /// This worker's views, one per plugin config it has served.
    static VIEWS: RefCell<Vec<View>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this worker's view of `plugin`'s records (made on first use).
fn with_view<T>(plugin: u64, f: impl FnOnce(&mut View) -> T) -> T {
    VIEWS.with(|views| {
        let mut views = views.borrow_mut();
        let at = match views.iter().position(|v| v.plugin == plugin) {
            Some(at) => at,
            None => {
                // A new config: drop views of configs Envoy has dropped since (reloads).
                let live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
                views.retain(|v| live.contains(&v.plugin));
                drop(live);
                views.push(View {
                    plugin,
                    records: Vec::new(),
                    fetched_ms: None,
                });
                views.len() - 1
            }
        };
        match views.get_mut(at) {
            Some(view) => f(view),
            None => f(&mut View {
                plugin,
                records: Vec::new(),
                fetched_ms: None,
            }),
        }
    })
}

/// Runs `f` with the health input of `now_ms`, refreshing the cached view if it is stale.
pub fn with_health<T>(
    plugin: u64,
    config: &Config,
    now_ms: u64,
    f: impl FnOnce(&HealthInput<'_>) -> T,
) -> T {
    with_view(plugin, |view| {
        let stale = view
            .fetched_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= config.health_view_ms)
            || view.records.len() != config.models.len();
        if stale {
            view.records = config
                .models
                .iter()
                .map(|m| store::load(&Shared, &store::key(&m.name)))
                .collect();
            view.fetched_ms = Some(now_ms);
        }
        f(&HealthInput {
            records: &view.records,
            now_ms,
            window: config.failure_window,
        })
    })
}

/// Records an attempt's outcome in the shared store and in this worker's view.
pub fn record(plugin: u64, config: &Config, model: ModelId, outcome: Outcome, now_ms: u64) {
    // A success changes nothing on a clean record: skip the shared map.
    let clean = || {
        with_view(plugin, |v| {
            v.records.get(model.0).is_some_and(HealthRecord::is_clean)
        })
    };
    if outcome == Outcome::Success && clean() {
        return;
    }
    let written = flight::record_outcome(&Shared, config, model, outcome, now_ms);
    keep_in_view(plugin, model, written);
}

/// Adds the latency samples of a successful answer to a target's record.
pub fn add_samples(plugin: u64, config: &Config, model: ModelId, sample: &LatencySample, now: u64) {
    let written = flight::add_samples(&Shared, config, model, sample, now);
    keep_in_view(plugin, model, written);
}

/// Keeps this worker's view in step with a record it wrote.
fn keep_in_view(plugin: u64, model: ModelId, written: Option<HealthRecord>) {
    if let Some(record) = written {
        with_view(plugin, |v| {
            if let Some(slot) = v.records.get_mut(model.0) {
                *slot = record;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_store_refuses_a_stale_cas_token() {
        let key = "native.store.test.cas";
        Shared.set(key, b"a", None).unwrap();
        let (_, cas) = Shared.get(key).unwrap();
        Shared.set(key, b"b", Some(cas)).unwrap();
        assert_eq!(
            Shared.set(key, b"c", Some(cas)),
            Err(WriteError::CasMismatch)
        );
        assert_eq!(Shared.get(key).unwrap().0, b"b");
    }

    #[test]
    fn a_record_written_on_one_thread_is_read_on_another() {
        let key = store::key("native-store-test/model");
        store::update(&Shared, &key, |r| r.consecutive_failures = 3).unwrap();
        let seen = std::thread::spawn(move || store::load(&Shared, &key).consecutive_failures)
            .join()
            .unwrap();
        assert_eq!(seen, 3);
    }
}
