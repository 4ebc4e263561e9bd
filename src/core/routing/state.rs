//! What routing consults besides the request and health: sticky-session pins and round-robin
//! cursors. The adapter backs it with shared data and per-worker counters; tests, benchmarks
//! and the command line use [`LocalState`].

use std::cell::RefCell;

/// State a routing decision may read.
pub trait RoutingState {
    /// The target a sticky session was moved to after a fallback, for this TTL window.
    fn pinned(&self, virtual_model: &str, session: u64, window: u64) -> Option<String>;
    /// The next round-robin position of a virtual model with `len` targets; each worker starts
    /// at a random point (Zuplo seed, "Round robin").
    fn next_cursor(&self, virtual_model: usize, len: usize, rng: &mut fastrand::Rng) -> usize;
    /// Pins a session to `value` (a target name, or `tier:<name>`) for a window.
    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str);
}

/// In-memory state.
#[derive(Debug, Default)]
pub struct LocalState {
    cursors: RefCell<Vec<(usize, usize)>>,
    pins: RefCell<Vec<(String, u64, u64, String)>>,
}

impl RoutingState for LocalState {
    fn pinned(&self, virtual_model: &str, session: u64, window: u64) -> Option<String> {
        self.pins
            .borrow()
            .iter()
            .rev()
            .find(|(vm, s, w, _)| vm == virtual_model && *s == session && *w == window)
            .map(|(_, _, _, t)| t.clone())
    }

    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str) {
        self.pins.borrow_mut().push((
            virtual_model.to_string(),
            session,
            window,
            value.to_string(),
        ));
    }

    fn next_cursor(&self, virtual_model: usize, len: usize, rng: &mut fastrand::Rng) -> usize {
        let mut cursors = self.cursors.borrow_mut();
        let slot = match cursors.iter_mut().find(|(vm, _)| *vm == virtual_model) {
            Some((_, c)) => c,
            None => {
                cursors.push((virtual_model, rng.usize(0..len.max(1))));
                match cursors.last_mut() {
                    Some((_, c)) => c,
                    None => return 0,
                }
            }
        };
        let at = *slot % len.max(1);
        *slot = at.wrapping_add(1);
        at
    }
}
