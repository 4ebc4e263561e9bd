//! What routing consults besides the request and health: sticky-session pins and round-robin
//! cursors. The adapter backs it with shared data and per-worker counters; tests, benchmarks
//! and the command line use [`LocalState`].

use super::pins::{Freshness, PinClock};
use super::round_robin::Cursors;
use crate::core::caller::Caller;
use std::cell::RefCell;

/// Whose round-robin cursor: a virtual model's (its index) for one caller.
pub type CursorKey = (usize, Caller);

/// State a routing decision may read.
pub trait RoutingState {
    /// The target a sticky session was moved to, for this TTL window, unless idle at `clock`.
    fn pinned(
        &self,
        virtual_model: &str,
        session: u64,
        window: u64,
        clock: PinClock,
    ) -> Option<String>;
    /// The next round-robin position of `caller` in a virtual model with `len` targets; each
    /// worker keeps one per caller, started at a random point ([`super::round_robin`]).
    fn next_cursor(&self, whose: CursorKey, len: usize, rng: &mut fastrand::Rng) -> usize;
    /// Pins a session to `value` (a target name, or `tier:<name>`) for a window, used at
    /// `clock`.
    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str, clock: PinClock);
    /// A string claim of the JWT that Envoy's `jwt_authn` filter verified and stored under
    /// `payload` (its `payload_in_metadata`); `None` without one.
    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        let _ = (payload, claim);
        None
    }
}

/// A pin held in memory: (virtual model, session, window, value, last used).
type LocalPin = (String, u64, u64, String, u64);

/// In-memory state.
#[derive(Debug, Default)]
pub struct LocalState {
    cursors: RefCell<Cursors>,
    pins: RefCell<Vec<LocalPin>>,
    claims: Vec<(String, String, Vec<u8>)>,
}

impl LocalState {
    /// State whose verified JWT under `payload` has `claim` = `value`.
    pub fn with_claim(mut self, payload: &str, claim: &str, value: &str) -> Self {
        self.claims.push((
            payload.to_string(),
            claim.to_string(),
            value.as_bytes().to_vec(),
        ));
        self
    }
}

impl RoutingState for LocalState {
    fn pinned(
        &self,
        virtual_model: &str,
        session: u64,
        window: u64,
        clock: PinClock,
    ) -> Option<String> {
        let mut pins = self.pins.borrow_mut();
        let (_, _, _, value, used) = pins
            .iter_mut()
            .rev()
            .find(|(vm, s, w, _, _)| vm == virtual_model && *s == session && *w == window)?;
        match clock.freshness(*used) {
            Freshness::Idle => return None,
            Freshness::Refresh => *used = clock.now_ms,
            Freshness::Keep => {}
        }
        Some(value.clone())
    }

    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str, clock: PinClock) {
        self.pins.borrow_mut().push((
            virtual_model.to_string(),
            session,
            window,
            value.to_string(),
            clock.now_ms,
        ));
    }

    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        self.claims
            .iter()
            .find(|(p, c, _)| p == payload && c == claim)
            .map(|(_, _, v)| v.clone())
    }

    fn next_cursor(&self, whose: CursorKey, len: usize, rng: &mut fastrand::Rng) -> usize {
        self.cursors
            .borrow_mut()
            .next((0, whose.0, whose.1), len, rng)
    }
}
