//! Where a sticky session's pin lives in the adapter's bounded shared-data slots, chosen here
//! so the rule is tested natively; the adapter only reads and writes the slots.
//!
//! TrueFoundry virtual models, "Sticky routing": after a successful fallback the session stays
//! on the target that worked for the rest of its TTL window. Pins take bounded memory: each
//! virtual model has [`PIN_SLOTS`] slots per Envoy instance, and a session may use the
//! [`PIN_PROBES`] slots from its first one on (wrapping). A new pin takes the slot already
//! holding that session, else the first empty slot, else the slot holding the oldest expired
//! pin (one from an earlier window); when every probed slot holds another session's pin of the
//! current window, the new pin is dropped rather than move an unexpired session.
//!
//! The first slot is a keyed hash of the session under a random secret of the Envoy instance
//! ([`SlotSecret`]), not the session hash itself: that hash is public (every instance computes
//! it alike, [`super::sticky::session`]), so a client could pick session keys that land on the
//! slots of another session and fill them with its own pins. The secret only places pins in
//! one instance's slots; which target a session gets stays the rendezvous hash every instance
//! agrees on.
//!
//! A pin is never placed past an empty slot of its probe sequence (empty slots are taken
//! first and never emptied again), so a lookup stops at the first empty slot.
//!
//! `idle_ttl_seconds`: a pin also holds when it was last used, and one unused for the idle TTL
//! is forgotten (the session goes back to its rendezvous target; its prompt cache, which
//! providers keep minutes, is cold by then anyway) and its slot counts as expired. So that a
//! busy session costs no shared-data write per request, a lookup rewrites the time only when
//! it is older than a quarter of the idle TTL: a session is kept while its requests come less
//! than ¾ of the idle TTL apart, and forgotten at the latest once idle the whole idle TTL.

use crate::core::health::store::Store;
use std::hash::Hasher;

/// Slots per virtual model.
pub const PIN_SLOTS: u64 = 1024;

/// Slots a session may use: its hash's slot and the next ones.
pub const PIN_PROBES: u64 = 4;

/// A pin as stored: the session's hash (never its key), its window, when it was last used
/// and the pinned value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Hash of the virtual model and the session key.
    pub session: u64,
    /// The TTL window it holds for.
    pub window: u64,
    /// When it was written or last refreshed, milliseconds.
    pub used_ms: u64,
    /// A target name, or `tier:<name>`.
    pub value: String,
}

impl Pin {
    /// The stored form: `session window used_ms value`.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.session, self.window, self.used_ms, self.value
        )
    }

    /// Reads the stored form; `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Pin> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(4, ' ');
        Some(Pin {
            session: parts.next()?.parse().ok()?,
            window: parts.next()?.parse().ok()?,
            used_ms: parts.next()?.parse().ok()?,
            value: parts.next()?.to_string(),
        })
    }
}

/// The time a pin is looked up or written at, and the virtual model's idle TTL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinClock {
    /// Now, milliseconds.
    pub now_ms: u64,
    /// `idle_ttl_seconds` in milliseconds; `None`: pins last their window.
    pub idle_ms: Option<u64>,
}

/// What a lookup does with a pin last used at `used_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Unused for the idle TTL: forgotten.
    Idle,
    /// Kept as it is.
    Keep,
    /// Kept, its time rewritten (older than a quarter of the idle TTL).
    Refresh,
}

impl PinClock {
    /// What a lookup does with a pin last used at `used_ms`.
    pub fn freshness(self, used_ms: u64) -> Freshness {
        let Some(idle) = self.idle_ms else {
            return Freshness::Keep;
        };
        let age = self.now_ms.saturating_sub(used_ms);
        if age >= idle {
            Freshness::Idle
        } else if age >= idle / 4 {
            Freshness::Refresh
        } else {
            Freshness::Keep
        }
    }
}

/// The per-instance secret that places sessions in the pin slots: 128 random bits, made once
/// per Envoy (the adapter's choice of randomness; the core only uses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotSecret {
    k0: u64,
    k1: u64,
}

impl SlotSecret {
    /// A secret from two random words.
    pub fn new(k0: u64, k1: u64) -> Self {
        SlotSecret { k0, k1 }
    }

    /// Its stored form: 16 bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        let (a, b) = out.split_at_mut(8);
        a.copy_from_slice(&self.k0.to_le_bytes());
        b.copy_from_slice(&self.k1.to_le_bytes());
        out
    }

    /// Reads the stored form; `None` if it is not 16 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (a, b) = (bytes.get(..8)?, bytes.get(8..)?);
        Some(SlotSecret::new(
            u64::from_le_bytes(a.try_into().ok()?),
            u64::from_le_bytes(b.try_into().ok()?),
        ))
    }

    /// The first slot `session` probes: SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast
    /// short-input PRF", 2012: a keyed hash built against chosen-input collisions) of the
    /// session hash under the secret. `core::hash::SipHasher` is the standard library's
    /// SipHash-2-4; it is deprecated only in favour of `DefaultHasher`, whose keys cannot be set.
    #[allow(deprecated)]
    fn first_slot(self, session: u64) -> u64 {
        let mut h = std::hash::SipHasher::new_with_keys(self.k0, self.k1);
        h.write(&session.to_le_bytes());
        h.finish() % PIN_SLOTS
    }
}

/// The shared-data key of the secret the Wasm build's workers share.
pub const SECRET_KEY: &str = "switchboard.sticky.slot_secret.v1";

/// The secret every user of `store` shares: the one stored under [`SECRET_KEY`], else `fresh`
/// stored there first. Shared data has no create-if-absent write, so two writers at once both
/// write and each keeps what it reads back (Envoy configures a plugin on its main thread before
/// the workers, so that writer comes first); `None` if no secret could be made or stored.
pub fn shared_secret(
    store: &dyn Store,
    fresh: impl FnOnce() -> Option<SlotSecret>,
) -> Option<SlotSecret> {
    let stored = || SlotSecret::from_bytes(&store.get(SECRET_KEY)?.0);
    if let Some(secret) = stored() {
        return Some(secret);
    }
    store.set(SECRET_KEY, &fresh()?.to_bytes(), None).ok()?;
    stored()
}

/// The slot numbers a session may use under `secret`, in probe order.
pub fn probe_slots(secret: SlotSecret, session: u64) -> impl Iterator<Item = u64> {
    probes_from(secret.first_slot(session))
}

/// [`PIN_PROBES`] slots from `first` on, wrapping.
fn probes_from(first: u64) -> impl Iterator<Item = u64> {
    (0..PIN_PROBES).map(move |i| (first + i) % PIN_SLOTS)
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

/// The shared-data key of one slot of a virtual model (`v2`: pins hold their last use).
pub fn slot_key(virtual_model: &str, slot: u64) -> String {
    format!("switchboard.sticky.v2.{virtual_model}.{slot}")
}

/// The value `session` is pinned to for `window`, probing its slots (placed by `secret`) up to
/// the first empty one; an idle pin is none, and a pin due a refresh gets its time rewritten
/// (a failed rewrite only means the next lookup tries again).
pub fn lookup(
    store: &dyn Store,
    secret: SlotSecret,
    (virtual_model, session, window): (&str, u64, u64),
    clock: PinClock,
) -> Option<String> {
    for slot in probe_slots(secret, session) {
        let key = slot_key(virtual_model, slot);
        let (bytes, cas) = store.get(&key)?;
        let Some(mut pin) = Pin::decode(&bytes) else {
            continue;
        };
        if pin.session != session || pin.window != window {
            continue;
        }
        match clock.freshness(pin.used_ms) {
            Freshness::Idle => return None,
            Freshness::Keep => {}
            Freshness::Refresh => {
                pin.used_ms = clock.now_ms;
                let _ = store.set(&key, pin.encode().as_bytes(), Some(cas));
            }
        }
        return Some(pin.value);
    }
    None
}

/// Pins `session` to `value` for `window` in the slot [`choose_slot`] picks among those
/// `secret` gives it; false when the pin was dropped (every probed slot holds another unexpired
/// session) or the write failed.
pub fn save(
    store: &dyn Store,
    secret: SlotSecret,
    (virtual_model, session, window): (&str, u64, u64),
    value: &str,
    clock: PinClock,
) -> bool {
    let mut probed: Vec<(String, Option<u32>)> = Vec::with_capacity(PIN_PROBES as usize);
    let mut held = Vec::with_capacity(PIN_PROBES as usize);
    for slot in probe_slots(secret, session) {
        let key = slot_key(virtual_model, slot);
        match store.get(&key) {
            Some((bytes, cas)) => {
                // An unreadable slot counts as the oldest expired pin of another session, an
                // idle pin as expired.
                let h = Pin::decode(&bytes).map_or((!session, 0), |p| {
                    match clock.freshness(p.used_ms) {
                        Freshness::Idle => (p.session, 0),
                        _ => (p.session, p.window),
                    }
                });
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
        used_ms: clock.now_ms,
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
            used_ms: 9,
            value: "azure east/gpt-4o".to_string(),
        };
        assert_eq!(pin.encode(), "42 7 9 azure east/gpt-4o");
        assert_eq!(Pin::decode(pin.encode().as_bytes()), Some(pin));
        assert_eq!(Pin::decode(b"42 x y"), None);
        assert_eq!(Pin::decode(b"\xff"), None);
    }

    const SECRET: SlotSecret = SlotSecret {
        k0: 0x0706_0504_0302_0100,
        k1: 0x0f0e_0d0c_0b0a_0908,
    };

    fn first(secret: SlotSecret, session: u64) -> u64 {
        probe_slots(secret, session).next().unwrap()
    }

    /// `n` sessions whose probes start at the same slot under `secret`.
    fn colliding(secret: SlotSecret, n: usize) -> Vec<u64> {
        let slot = first(secret, 0);
        (0..)
            .filter(|s| first(secret, *s) == slot)
            .take(n)
            .collect()
    }

    #[test]
    fn probes_wrap_around_the_slots() {
        assert_eq!(probes_from(5).collect::<Vec<_>>(), [5, 6, 7, 8]);
        assert_eq!(probes_from(1022).collect::<Vec<_>>(), [1022, 1023, 0, 1]);
        let slots: Vec<u64> = probe_slots(SECRET, 42).collect();
        assert_eq!(slots, probes_from(slots[0]).collect::<Vec<_>>());
        assert!(slots[0] < PIN_SLOTS);
    }

    #[test]
    fn the_secret_places_a_session_the_same_way_every_time_and_another_secret_elsewhere() {
        let other = SlotSecret::new(1, 2);
        let sessions = 0..2_000u64;
        assert!(sessions
            .clone()
            .all(|s| first(SECRET, s) == first(SECRET, s)));
        let moved = sessions
            .filter(|s| first(SECRET, *s) != first(other, *s))
            .count();
        // The same slot by chance is 1 in 1,024: about 2 of 2,000.
        assert!(moved >= 1_980, "{moved}");
        // And sessions spread over every part of the slots.
        let slots: std::collections::HashSet<u64> = (0..5_000).map(|s| first(SECRET, s)).collect();
        assert!(slots.len() > 950, "{}", slots.len());
    }

    #[test]
    fn sessions_aimed_at_one_slot_by_their_public_hash_land_all_over_the_slots() {
        // Session hashes are public (every Envoy computes them alike): these all name slot 3.
        let aimed: Vec<u64> = (0..64).map(|i| 3 + i * PIN_SLOTS).collect();
        let slots: std::collections::HashSet<u64> =
            aimed.iter().map(|s| first(SECRET, *s)).collect();
        assert!(slots.len() > 56, "{} slots", slots.len());
    }

    #[test]
    fn pins_aimed_at_a_sessions_slots_by_its_hash_do_not_crowd_out_its_pin() {
        use crate::core::health::store::MemoryStore;
        let store = MemoryStore::default();
        let victim = 7 + 40 * PIN_SLOTS;
        // Four live pins whose session hashes name the victim's hash's slots, in its window.
        for i in 0..PIN_PROBES {
            let aimed = (7 + i) + (i + 1) * PIN_SLOTS;
            assert!(save(
                &store,
                SECRET,
                ("vm", aimed, 10),
                "attacker",
                PinClock::default()
            ));
        }
        assert!(save(
            &store,
            SECRET,
            ("vm", victim, 10),
            "t",
            PinClock::default()
        ));
        assert_eq!(
            lookup(&store, SECRET, ("vm", victim, 10), PinClock::default()),
            Some("t".into())
        );
    }

    #[test]
    fn every_worker_takes_the_secret_the_first_one_stored() {
        use crate::core::health::store::MemoryStore;
        let store = MemoryStore::default();
        assert_eq!(
            shared_secret(&store, || None),
            None,
            "none made, none stored"
        );
        let mine = SlotSecret::new(11, 12);
        assert_eq!(shared_secret(&store, || Some(mine)), Some(mine));
        let theirs = SlotSecret::new(21, 22);
        assert_eq!(shared_secret(&store, || Some(theirs)), Some(mine));
        assert_eq!(SlotSecret::from_bytes(&mine.to_bytes()), Some(mine));
        assert_eq!(SlotSecret::from_bytes(&[1; 15]), None);
        // What the other worker reads: the same slots, so the same pins.
        assert!(save(&store, mine, ("vm", 99, 1), "t", PinClock::default()));
        let read = shared_secret(&store, || None).unwrap();
        assert_eq!(
            lookup(&store, read, ("vm", 99, 1), PinClock::default()),
            Some("t".into())
        );
        assert_eq!(
            lookup(&store, theirs, ("vm", 99, 1), PinClock::default()),
            None
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
        // Six sessions that all start probing at the same slot.
        let sessions = colliding(SECRET, 6);
        let save = |session: u64, window, value: &str| {
            save(
                &store,
                SECRET,
                ("vm", session, window),
                value,
                PinClock::default(),
            )
        };
        let lookup = |vm, session: u64, window| {
            lookup(&store, SECRET, (vm, session, window), PinClock::default())
        };
        for (i, s) in sessions.iter().take(4).enumerate() {
            assert!(save(*s, 10, &format!("t{i}")));
        }
        for (i, s) in sessions.iter().take(4).enumerate() {
            assert_eq!(lookup("vm", *s, 10), Some(format!("t{i}")));
        }
        // A fifth live session in the same window finds no room: dropped, nobody moved.
        assert!(!save(sessions[4], 10, "t4"));
        assert_eq!(lookup("vm", sessions[4], 10), None);
        assert_eq!(lookup("vm", sessions[0], 10), Some("t0".to_string()));
        // A session re-pinned later keeps its slot.
        assert!(save(sessions[1], 10, "t1b"));
        assert_eq!(lookup("vm", sessions[1], 10), Some("t1b".to_string()));
        // In the next window the old pins are expired: the oldest goes first.
        assert!(save(sessions[2], 11, "new2"));
        assert!(save(sessions[4], 11, "t4"));
        assert_eq!(lookup("vm", sessions[4], 11), Some("t4".to_string()));
        assert_eq!(lookup("vm", sessions[2], 11), Some("new2".to_string()));
        assert_eq!(
            lookup("vm", sessions[0], 10),
            None,
            "session 0's slot was taken"
        );
        assert_eq!(lookup("vm", sessions[3], 10), Some("t3".to_string()));
        // Another virtual model has slots of its own.
        assert_eq!(lookup("other", sessions[3], 10), None);
    }

    #[test]
    fn an_unexpired_session_is_never_evicted() {
        let held = [Some((1, 5)), Some((2, 5)), Some((3, 6)), Some((4, 5))];
        assert_eq!(choose_slot(&held, 9, 5), None);
    }

    #[test]
    fn an_idle_pin_is_forgotten_and_a_used_one_refreshed_only_after_a_quarter_of_the_idle_ttl() {
        use crate::core::health::store::MemoryStore;
        let store = MemoryStore::default();
        let at = |now_ms| PinClock {
            now_ms,
            idle_ms: Some(400),
        };
        let key = ("vm", 5, 1);
        let stored = || {
            let slot = probe_slots(SECRET, 5).next().unwrap();
            Pin::decode(&store.get(&slot_key("vm", slot)).unwrap().0).unwrap()
        };
        assert!(save(&store, SECRET, key, "t", at(1_000)));
        // Used within a quarter of the idle TTL: no write.
        assert_eq!(lookup(&store, SECRET, key, at(1_099)), Some("t".into()));
        assert_eq!(stored().used_ms, 1_000);
        // Older than a quarter: its time is rewritten, so it lives on.
        assert_eq!(lookup(&store, SECRET, key, at(1_100)), Some("t".into()));
        assert_eq!(stored().used_ms, 1_100);
        assert_eq!(lookup(&store, SECRET, key, at(1_499)), Some("t".into()));
        assert_eq!(stored().used_ms, 1_499);
        // Idle the whole idle TTL: forgotten.
        assert_eq!(lookup(&store, SECRET, key, at(1_899)), None);
        // Without an idle TTL the same pin holds its window.
        assert_eq!(
            lookup(
                &store,
                SECRET,
                key,
                PinClock {
                    now_ms: 9_999_999,
                    idle_ms: None
                }
            ),
            Some("t".into())
        );
        assert_eq!(Freshness::Keep, at(0).freshness(0));
        assert_eq!(Freshness::Idle, at(400).freshness(0));
    }

    #[test]
    fn an_idle_pin_gives_up_its_slot_inside_its_window() {
        use crate::core::health::store::MemoryStore;
        let store = MemoryStore::default();
        let sessions = colliding(SECRET, 5);
        let at = |now_ms| PinClock {
            now_ms,
            idle_ms: Some(1_000),
        };
        for s in sessions.iter().take(4) {
            assert!(save(&store, SECRET, ("vm", *s, 10), "t", at(0)));
        }
        assert!(
            !save(&store, SECRET, ("vm", sessions[4], 10), "t", at(500)),
            "all live"
        );
        assert!(
            save(&store, SECRET, ("vm", sessions[4], 10), "t", at(1_000)),
            "all idle"
        );
    }
}
