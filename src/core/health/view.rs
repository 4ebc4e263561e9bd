//! A worker's cached copy of the shared health records: routing reads them on every request,
//! and the shared store (proxy-wasm shared data, or a lock in the native build) is read at
//! most every `health_view_ms`. Every adapter and the tests' simulated worker keep one.

use super::record::HealthRecord;
use super::store::{self, Store};
use crate::core::config::{Config, ModelId};
use crate::core::routing::HealthInput;

/// One config's health records, by [`ModelId`], and when they were read.
#[derive(Debug, Default)]
pub struct HealthView {
    records: Vec<HealthRecord>,
    fetched_ms: Option<u64>,
}

impl HealthView {
    /// The health input at `now_ms`, re-reading every record from `store` first when the
    /// copy is older than `health_view_ms` or was made for another catalog size. True with
    /// it when it was re-read (the Wasm build then updates its health gauges).
    pub fn read(
        &mut self,
        config: &Config,
        now_ms: u64,
        store: &dyn Store,
    ) -> (bool, HealthInput<'_>) {
        let stale = self
            .fetched_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= config.health_view_ms)
            || self.records.len() != config.models.len();
        if stale {
            self.records = config
                .models
                .iter()
                .map(|m| store::load(store, &store::key(&m.name)))
                .collect();
            self.fetched_ms = Some(now_ms);
        }
        let input = HealthInput {
            records: &self.records,
            now_ms,
            window: config.failure_window,
        };
        (stale, input)
    }

    /// Whether the copy of `model`'s record is clean: a success then changes nothing, so
    /// its write to the shared store can be skipped.
    pub fn is_clean(&self, model: ModelId) -> bool {
        self.records
            .get(model.0)
            .is_some_and(HealthRecord::is_clean)
    }

    /// Takes a record this worker just wrote, so its next requests see it before the
    /// copy is next re-read.
    pub fn keep(&mut self, model: ModelId, written: Option<HealthRecord>) {
        if let (Some(record), Some(slot)) = (written, self.records.get_mut(model.0)) {
            *slot = record;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::health::store::MemoryStore;

    fn config() -> Config {
        Config::parse(
            br#"{"models": [{"name": "a", "cluster": "c", "model": "m"}],
                 "health_view_ms": 100}"#,
        )
        .unwrap()
    }

    fn failures(view: &mut HealthView, config: &Config, now: u64, store: &MemoryStore) -> u32 {
        let (_, input) = view.read(config, now, store);
        input.records.first().map_or(99, |r| r.consecutive_failures)
    }

    #[test]
    fn the_store_is_read_again_only_when_the_copy_is_stale() {
        let (config, store) = (config(), MemoryStore::default());
        let key = store::key("a");
        let mut view = HealthView::default();
        assert!(
            view.read(&config, 1_000, &store).0,
            "the first read fetches"
        );
        store::update(&store, &key, |r| r.consecutive_failures = 2).unwrap();
        assert!(!view.read(&config, 1_099, &store).0);
        assert_eq!(
            failures(&mut view, &config, 1_099, &store),
            0,
            "still cached"
        );
        assert!(
            view.read(&config, 1_100, &store).0,
            "health_view_ms elapsed"
        );
        assert_eq!(failures(&mut view, &config, 1_100, &store), 2);
    }

    #[test]
    fn a_new_catalog_size_is_read_at_once() {
        let store = MemoryStore::default();
        let mut view = HealthView::default();
        view.read(&config(), 1_000, &store);
        let two = Config::parse(
            br#"{"models": [{"name": "a", "cluster": "c", "model": "m"},
                            {"name": "b", "cluster": "c", "model": "m"}]}"#,
        )
        .unwrap();
        let (refreshed, input) = view.read(&two, 1_001, &store);
        assert!(refreshed);
        assert_eq!(input.records.len(), 2);
    }

    #[test]
    fn a_kept_write_is_seen_before_the_next_read() {
        let (config, store) = (config(), MemoryStore::default());
        let mut view = HealthView::default();
        view.read(&config, 1_000, &store);
        assert!(view.is_clean(ModelId(0)));
        let written = HealthRecord {
            consecutive_failures: 1,
            ..HealthRecord::default()
        };
        view.keep(ModelId(0), Some(written));
        view.keep(ModelId(5), Some(HealthRecord::default()));
        assert!(!view.is_clean(ModelId(0)));
        assert_eq!(failures(&mut view, &config, 1_001, &store), 1);
        assert!(
            !view.is_clean(ModelId(5)),
            "an unknown model is never clean"
        );
    }
}
