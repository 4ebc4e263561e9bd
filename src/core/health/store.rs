//! Where health records live: a key-value store with compare-and-swap, which the adapter backs
//! with proxy-wasm shared data (shared by every worker of one Envoy, kept across reloads) and
//! tests back with memory.

use super::codec::{decode, encode};
use super::record::HealthRecord;
use std::cell::RefCell;
use std::collections::HashMap;

/// Retries of a compare-and-swap update before giving up (another worker kept winning).
pub const CAS_ATTEMPTS: usize = 8;

/// Why a write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// Another writer changed the value since it was read.
    CasMismatch,
    /// The store refused the write.
    Failed,
}

/// A shared key-value store with compare-and-swap.
pub trait Store {
    /// The value and its CAS token, if present.
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)>;
    /// Writes the value if the CAS token still matches (`None`: unconditionally).
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), WriteError>;
}

/// The shared-data key of a catalog model's record.
pub fn key(model_name: &str) -> String {
    format!("switchboard.health.v1.{model_name}")
}

/// Reads a record; absent or unreadable values are a fresh record.
pub fn load(store: &dyn Store, key: &str) -> HealthRecord {
    store
        .get(key)
        .and_then(|(bytes, _)| decode(&bytes))
        .unwrap_or_default()
}

/// Applies `change` to the stored record with a bounded compare-and-swap loop and returns
/// the record as written, or `None` if every attempt lost a race or failed.
pub fn update(
    store: &dyn Store,
    key: &str,
    change: impl Fn(&mut HealthRecord),
) -> Option<HealthRecord> {
    for _ in 0..CAS_ATTEMPTS {
        let (mut record, cas) = match store.get(key) {
            Some((bytes, cas)) => (decode(&bytes).unwrap_or_default(), Some(cas)),
            None => (HealthRecord::default(), None),
        };
        change(&mut record);
        match store.set(key, &encode(&record), cas) {
            Ok(()) => return Some(record),
            Err(WriteError::CasMismatch) => continue,
            Err(WriteError::Failed) => return None,
        }
    }
    None
}

/// An in-memory [`Store`] with the host's CAS semantics, for tests and the CLI.
#[derive(Default)]
pub struct MemoryStore {
    values: RefCell<HashMap<String, (Vec<u8>, u32)>>,
    /// When set, this many upcoming writes fail with a CAS mismatch (to test the retry loop).
    pub fail_next_writes: RefCell<usize>,
}

impl Store for MemoryStore {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.values.borrow().get(key).cloned()
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), WriteError> {
        let mut pending = self.fail_next_writes.borrow_mut();
        if *pending > 0 {
            *pending -= 1;
            return Err(WriteError::CasMismatch);
        }
        let mut values = self.values.borrow_mut();
        let current = values.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(WriteError::CasMismatch);
        }
        let next = current.unwrap_or(0).wrapping_add(1);
        values.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_reads_modifies_and_writes() {
        let store = MemoryStore::default();
        let k = key("openai/gpt-4o");
        assert_eq!(load(&store, &k), HealthRecord::default());
        update(&store, &k, |r| r.consecutive_failures += 1).unwrap();
        update(&store, &k, |r| r.consecutive_failures += 1).unwrap();
        assert_eq!(load(&store, &k).consecutive_failures, 2);
    }

    #[test]
    fn update_retries_lost_races_a_bounded_number_of_times() {
        let store = MemoryStore::default();
        *store.fail_next_writes.borrow_mut() = CAS_ATTEMPTS - 1;
        assert!(update(&store, "k", |r| r.evictions = 5).is_some());
        assert_eq!(load(&store, "k").evictions, 5);
        *store.fail_next_writes.borrow_mut() = CAS_ATTEMPTS;
        assert!(update(&store, "k", |r| r.evictions = 6).is_none());
        assert_eq!(
            load(&store, "k").evictions,
            5,
            "a lost update leaves the record as it was"
        );
    }

    #[test]
    fn a_stale_cas_token_is_refused() {
        let store = MemoryStore::default();
        store.set("k", b"a", None).unwrap();
        let (_, cas) = store.get("k").unwrap();
        store.set("k", b"b", Some(cas)).unwrap();
        assert_eq!(
            store.set("k", b"c", Some(cas)),
            Err(WriteError::CasMismatch)
        );
    }
}
