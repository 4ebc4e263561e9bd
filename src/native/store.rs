//! State every worker of this Envoy shares, and each worker's cached view of it.
//!
//! The Wasm build keeps health records and session pins in proxy-wasm shared data; here the
//! workers are threads of one process, so the same core code ([`crate::core::health::store`],
//! [`crate::core::routing::pins`]) runs against one synchronised map. It is process-wide, so
//! like shared data it outlives config reloads.

use crate::core::config::{Config, ModelId};
use crate::core::flight::{self, Effect};
use crate::core::health::store::{Store, WriteError};
use crate::core::health::view::HealthView;
use crate::core::routing::pins::SlotSecret;
use crate::core::routing::HealthInput;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError};

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

/// This process's secret for placing sticky pins in their slots ([`SlotSecret`]): 128 bits
/// from std's `RandomState`, whose keys come from the operating system's random source
/// (getrandom(2) on Linux), made on first use. Pins live in this process's memory only, so no
/// other process needs it.
pub fn slot_secret() -> SlotSecret {
    static SECRET: OnceLock<SlotSecret> = OnceLock::new();
    *SECRET.get_or_init(|| {
        let random = std::collections::hash_map::RandomState::new();
        SlotSecret::new(random.hash_one(0u8), random.hash_one(1u8))
    })
}

/// A worker's copy of one plugin config's health records, so requests lock the shared map at
/// most every `health_view_ms`.
struct View {
    plugin: u64,
    health: HealthView,
    /// The `health` gauges this worker last set, by pair number.
    gauges: Vec<u8>,
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
                    health: HealthView::default(),
                    gauges: Vec::new(),
                });
                views.len() - 1
            }
        };
        match views.get_mut(at) {
            Some(view) => f(view),
            None => f(&mut View {
                plugin,
                health: HealthView::default(),
                gauges: Vec::new(),
            }),
        }
    })
}

/// Runs `f` with the health input of `now_ms`, refreshing the cached view if it is stale;
/// a refresh sets the `health` gauges that changed, through `gauges`.
pub fn with_health<T>(
    plugin: u64,
    config: &Config,
    now_ms: u64,
    gauges: impl FnOnce(&HealthInput<'_>, &mut Vec<u8>),
    f: impl FnOnce(&HealthInput<'_>) -> T,
) -> T {
    with_view(plugin, |view| {
        let (refreshed, input) = view.health.read(config, now_ms, &Shared);
        if refreshed {
            gauges(&input, &mut view.gauges);
        }
        f(&input)
    })
}

/// Applies an effect's change to a target's health in the shared store and in this worker's
/// view ([`flight::apply_health`]); the target whose eviction it started.
pub fn apply_health(plugin: u64, config: &Config, effect: &Effect<'_>) -> Option<ModelId> {
    with_view(plugin, |view| {
        flight::apply_health(&mut view.health, &Shared, config, effect, super::now_ms)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::health::store;

    #[test]
    fn the_process_keeps_one_random_slot_secret() {
        let secret = slot_secret();
        let from_another_thread = std::thread::spawn(slot_secret).join().unwrap();
        assert_eq!(secret, from_another_thread);
        assert_ne!(secret, SlotSecret::new(0, 0));
    }

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
