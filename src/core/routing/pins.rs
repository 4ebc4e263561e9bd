//! Where a sticky session's pin lives in the adapter's bounded shared-data slots, chosen here
//! so the rule is tested natively; the adapter only reads and writes the slots.
//!
//! TrueFoundry virtual models, "Sticky routing": after a successful fallback the session stays
//! on the target that worked for the rest of its TTL window. Pins take bounded memory: each
//! virtual model has [`PIN_SLOTS`] slots per Envoy instance, and a session may use the
//! [`PIN_PROBES`] slots from its hash on (wrapping). A new pin takes the slot already holding
//! that session, else the first empty slot, else the slot holding the oldest expired pin (one
//! from an earlier window); when every probed slot holds another session's pin of the current
//! window, the new pin is dropped rather than move an unexpired session.
//!
//! A pin is never placed past an empty slot of its probe sequence (empty slots are taken
//! first and never emptied again), so a lookup stops at the first empty slot.

use crate::core::health::store::Store;

/// Slots per virtual model.
pub const PIN_SLOTS: u64 = 1024;

/// Slots a session may use: its hash's slot and the next ones.
pub const PIN_PROBES: u64 = 4;

/// A pin as stored: the session's hash (never its key), its window and the pinned value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Hash of the virtual model and the session key.
    pub session: u64,
    /// The TTL window it holds for.
    pub window: u64,
    /// A target name, or `tier:<name>`.
    pub value: String,
}

impl Pin {
    /// The stored form: `session window value`.
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.session, self.window, self.value)
    }

    /// Reads the stored form; `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Pin> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(3, ' ');
        Some(Pin {
            session: parts.next()?.parse().ok()?,
            window: parts.next()?.parse().ok()?,
            value: parts.next()?.to_string(),
        })
    }
}

/// The slot numbers a session may use, in probe order.
pub fn probe_slots(session: u64) -> impl Iterator<Item = u64> {
    (0..PIN_PROBES).map(move |i| (session % PIN_SLOTS + i) % PIN_SLOTS)
}

/// Which of the probed slots (`held[i]`: the `(session, window)` in the i-th probed slot, or
/// `None` when it is empty) a new pin of `session` for `window` takes, or `None` to drop it.
pub fn choose_slot(held: &[Option<(u64, u64)>], session: u64, window: u64) -> Option<usize> {
    let own = held
        .iter()
        .position(|h| h.is_some_and(|(s, _)| s == session));
    let empty = || held.iter().position(Option::is_none);
    let oldest_expired = || {
        held.iter()
            .enumerate()
            .filter_map(|(i, h)| h.filter(|(_, w)| *w < window).map(|(_, w)| (w, i)))
            .min()
            .map(|(_, i)| i)
    };
    own.or_else(empty).or_else(oldest_expired)
}

/// The shared-data key of one slot of a virtual model.
pub fn slot_key(virtual_model: &str, slot: u64) -> String {
    format!("switchboard.sticky.v1.{virtual_model}.{slot}")
}

/// The value `session` is pinned to for `window`, probing its slots up to the first empty one.
pub fn lookup(store: &dyn Store, virtual_model: &str, session: u64, window: u64) -> Option<String> {
    for slot in probe_slots(session) {
        let (bytes, _) = store.get(&slot_key(virtual_model, slot))?;
        if let Some(pin) = Pin::decode(&bytes) {
            if pin.session == session && pin.window == window {
                return Some(pin.value);
            }
        }
    }
    None
}

/// Pins `session` to `value` for `window` in the slot [`choose_slot`] picks; false when the
/// pin was dropped (every probed slot holds another unexpired session) or the write failed.
pub fn save(
    store: &dyn Store,
    virtual_model: &str,
    session: u64,
    window: u64,
    value: &str,
) -> bool {
    let mut probed: Vec<(String, Option<u32>)> = Vec::with_capacity(PIN_PROBES as usize);
    let mut held = Vec::with_capacity(PIN_PROBES as usize);
    for slot in probe_slots(session) {
        let key = slot_key(virtual_model, slot);
        match store.get(&key) {
            Some((bytes, cas)) => {
                // An unreadable slot counts as the oldest expired pin of another session.
                let h = Pin::decode(&bytes).map_or((!session, 0), |p| (p.session, p.window));
                held.push(Some(h));
                probed.push((key, Some(cas)));
            }
            None => {
                // No pin of this session lies past an empty slot.
                held.push(None);
                probed.push((key, None));
                break;
            }
        }
    }
    let Some((key, cas)) = choose_slot(&held, session, window).and_then(|i| probed.get(i)) else {
        return false;
    };
    let pin = Pin {
        session,
        window,
        value: value.to_string(),
    };
    store.set(key, pin.encode().as_bytes(), *cas).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_round_trips_through_its_stored_form() {
        let pin = Pin {
            session: 42,
            window: 7,
            value: "azure east/gpt-4o".to_string(),
        };
        assert_eq!(pin.encode(), "42 7 azure east/gpt-4o");
        assert_eq!(Pin::decode(pin.encode().as_bytes()), Some(pin));
        assert_eq!(Pin::decode(b"42 x y"), None);
        assert_eq!(Pin::decode(b"\xff"), None);
    }

    #[test]
    fn probes_wrap_around_the_slots() {
        assert_eq!(probe_slots(5).collect::<Vec<_>>(), [5, 6, 7, 8]);
        assert_eq!(
            probe_slots(PIN_SLOTS * 3 + 1022).collect::<Vec<_>>(),
            [1022, 1023, 0, 1]
        );
    }

    #[test]
    fn a_session_keeps_its_own_slot_else_takes_an_empty_one() {
        let held = [Some((9, 5)), None, Some((1, 5)), None];
        assert_eq!(choose_slot(&held, 1, 5), Some(2), "its own slot");
        assert_eq!(
            choose_slot(&held, 1, 6),
            Some(2),
            "its own, from an older window"
        );
        assert_eq!(choose_slot(&held, 3, 5), Some(1), "the first empty one");
    }

    #[test]
    fn a_colliding_pin_evicts_the_oldest_expired_pin() {
        let held = [Some((1, 4)), Some((2, 2)), Some((3, 5)), Some((4, 3))];
        assert_eq!(choose_slot(&held, 9, 5), Some(1), "window 2 is the oldest");
    }

    #[test]
    fn pins_survive_collisions_until_four_live_sessions_share_the_slots() {
        use crate::core::health::store::MemoryStore;
        let store = MemoryStore::default();
        // Six sessions whose hashes all start probing at slot 3.
        let sessions: Vec<u64> = (0..6).map(|i| 3 + i * PIN_SLOTS).collect();
        for (i, s) in sessions.iter().take(4).enumerate() {
            assert!(save(&store, "vm", *s, 10, &format!("t{i}")));
        }
        for (i, s) in sessions.iter().take(4).enumerate() {
            assert_eq!(lookup(&store, "vm", *s, 10), Some(format!("t{i}")));
        }
        // A fifth live session in the same window finds no room: dropped, nobody moved.
        assert!(!save(&store, "vm", sessions[4], 10, "t4"));
        assert_eq!(lookup(&store, "vm", sessions[4], 10), None);
        assert_eq!(
            lookup(&store, "vm", sessions[0], 10),
            Some("t0".to_string())
        );
        // A session re-pinned later keeps its slot.
        assert!(save(&store, "vm", sessions[1], 10, "t1b"));
        assert_eq!(
            lookup(&store, "vm", sessions[1], 10),
            Some("t1b".to_string())
        );
        // In the next window the old pins are expired: the oldest goes first.
        assert!(save(&store, "vm", sessions[2], 11, "new2"));
        assert!(save(&store, "vm", sessions[4], 11, "t4"));
        assert_eq!(
            lookup(&store, "vm", sessions[4], 11),
            Some("t4".to_string())
        );
        assert_eq!(
            lookup(&store, "vm", sessions[2], 11),
            Some("new2".to_string())
        );
        assert_eq!(
            lookup(&store, "vm", sessions[0], 10),
            None,
            "session 0's slot was taken"
        );
        assert_eq!(
            lookup(&store, "vm", sessions[3], 10),
            Some("t3".to_string())
        );
        // Another virtual model has slots of its own.
        assert_eq!(lookup(&store, "other", sessions[3], 10), None);
    }

    #[test]
    fn an_unexpired_session_is_never_evicted() {
        let held = [Some((1, 5)), Some((2, 5)), Some((3, 6)), Some((4, 5))];
        assert_eq!(choose_slot(&held, 9, 5), None);
    }
}
