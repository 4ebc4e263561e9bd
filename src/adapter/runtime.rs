//! Per-worker state shared by the root context and every request context of one plugin: the
//! cached health view, the retry and timeout timers, and the outstanding HTTP calls.
//!
//! proxy-wasm has no per-stream timers, so delays run on the root context's tick; a call made
//! from the tick reports back to the root. Both find the request's [`Flight`] here, keyed by
//! call token, and act on its stream after `set_effective_context`.

use super::flight::Flight;
use super::host::{self, SharedData};
use crate::core::config::{Config, ModelId};
use crate::core::health::record::{HealthRecord, Outcome};
use crate::core::health::sla::LatencySample;
use crate::core::health::store;
use crate::core::routing::pins;
use crate::core::routing::state::RoutingState;
use crate::core::routing::HealthInput;
use hashbrown::HashMap;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

/// Tick period while timers are pending: the granularity of retry delays and timeouts.
pub const TICK_MS: u64 = 10;

/// A pending wake-up of a flight.
struct Timer {
    due_ms: u64,
    seq: u64,
    flight: Weak<RefCell<Flight>>,
}

/// The worker's shared state.
#[derive(Default)]
pub struct Runtime {
    health: RefCell<HealthView>,
    timers: RefCell<Vec<Timer>>,
    ticking: Cell<bool>,
    calls: RefCell<HashMap<u32, Weak<RefCell<Flight>>>>,
    cursors: RefCell<HashMap<usize, usize>>,
}

impl RoutingState for Runtime {
    fn pinned(&self, virtual_model: &str, session: u64, window: u64) -> Option<String> {
        pins::lookup(&SharedData, virtual_model, session, window)
    }

    /// Only the session's hash is stored, never its key. The slot is the core's choice
    /// ([`pins::choose_slot`]): a pin that finds no room is dropped.
    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str) {
        if !pins::save(&SharedData, virtual_model, session, window, value) {
            log::debug!("no room to pin a sticky session of {virtual_model}");
        }
    }

    /// Envoy's `jwt_authn` filter, run before this one, stores the verified payload (a
    /// `google.protobuf.Struct`) in the stream's dynamic metadata under its
    /// `payload_in_metadata` name; the host walks the Struct, so a string claim comes back as
    /// its bytes (an unverified or absent token leaves nothing there).
    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        host::property_bytes(&[
            "metadata",
            "filter_metadata",
            "envoy.filters.http.jwt_authn",
            payload,
            claim,
        ])
        .filter(|v| !v.is_empty())
    }

    fn next_cursor(&self, virtual_model: usize, len: usize, rng: &mut fastrand::Rng) -> usize {
        let mut cursors = self.cursors.borrow_mut();
        let slot = cursors
            .entry(virtual_model)
            .or_insert_with(|| rng.usize(0..len.max(1)));
        let at = *slot % len.max(1);
        *slot = at.wrapping_add(1);
        at
    }
}

/// This worker's copy of the shared health records, re-read when older than
/// `health_view_ms`, so the request path reads shared data at most that often.
#[derive(Default)]
struct HealthView {
    records: Vec<HealthRecord>,
    fetched_ms: Option<u64>,
}

impl Runtime {
    /// Forgets what is indexed by the config (model and virtual model indices change with it).
    pub fn reset_for_new_config(&self) {
        *self.health.borrow_mut() = HealthView::default();
        self.cursors.borrow_mut().clear();
    }

    /// Runs `f` with the health input of `now_ms`, refreshing the cached view if it is stale.
    pub fn with_health<T>(
        &self,
        config: &Config,
        now_ms: u64,
        f: impl FnOnce(&HealthInput<'_>) -> T,
    ) -> T {
        let mut view = self.health.borrow_mut();
        let stale = view
            .fetched_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= config.health_view_ms)
            || view.records.len() != config.models.len();
        if stale {
            view.records = config
                .models
                .iter()
                .map(|m| store::load(&SharedData, &store::key(&m.name)))
                .collect();
            view.fetched_ms = Some(now_ms);
        }
        f(&HealthInput {
            records: &view.records,
            now_ms,
            window: config.failure_window,
        })
    }

    /// Records an attempt's outcome in shared data and in this worker's view.
    pub fn record(
        &self,
        config: &Config,
        model: ModelId,
        outcome: Outcome,
        now_ms: impl FnOnce() -> u64,
    ) {
        // A success changes nothing on a clean record: skip two shared-data calls per request.
        let clean = || {
            self.health
                .borrow()
                .records
                .get(model.0)
                .is_some_and(HealthRecord::is_clean)
        };
        if outcome == Outcome::Success && clean() {
            return;
        }
        if let Some(m) = config.model(model) {
            let now_ms = now_ms();
            self.update(config, model, |r| r.record(outcome, now_ms, &m.health));
        }
    }

    /// Adds the latency samples of a successful answer to a target's record.
    pub fn add_samples(&self, config: &Config, model: ModelId, sample: LatencySample, now_ms: u64) {
        self.update(config, model, |r| sample.add_to(r, now_ms));
    }

    /// Changes a target's shared record and keeps this worker's view in step with it.
    fn update(&self, config: &Config, model: ModelId, change: impl Fn(&mut HealthRecord)) {
        let Some(m) = config.model(model) else {
            return;
        };
        if let Some(record) = store::update(&SharedData, &store::key(&m.name), change) {
            if let Some(slot) = self.health.borrow_mut().records.get_mut(model.0) {
                *slot = record;
            }
        }
    }

    /// Wakes `flight` at `due_ms` (on a root tick) unless its `seq` has moved on by then.
    pub fn add_timer(&self, due_ms: u64, seq: u64, flight: &Rc<RefCell<Flight>>) {
        self.timers.borrow_mut().push(Timer {
            due_ms,
            seq,
            flight: Rc::downgrade(flight),
        });
        if !self.ticking.replace(true) {
            host::set_tick_ms(TICK_MS);
        }
    }

    /// Takes the timers due at `now_ms`; stops ticking when none are left.
    pub fn take_due(&self, now_ms: u64) -> Vec<(u64, Rc<RefCell<Flight>>)> {
        let mut timers = self.timers.borrow_mut();
        let mut due = Vec::new();
        timers.retain(|t| {
            if t.due_ms > now_ms {
                return t.flight.strong_count() > 0;
            }
            if let Some(f) = t.flight.upgrade() {
                due.push((t.seq, f));
            }
            false
        });
        if timers.is_empty() && self.ticking.replace(false) {
            host::set_tick_ms(0);
        }
        due
    }

    /// Remembers which flight a call token belongs to.
    pub fn add_call(&self, token: u32, flight: &Rc<RefCell<Flight>>) {
        let mut calls = self.calls.borrow_mut();
        // A call whose stream went away is never answered to us: forget it here.
        calls.retain(|_, f| f.strong_count() > 0);
        calls.insert(token, Rc::downgrade(flight));
    }

    /// A call finished (in the root or in the stream that made it): hands the answer to its
    /// flight, acting on that flight's stream.
    pub fn call_finished(&self, token: u32, num_headers: usize, body_size: usize) {
        // Read the answer before switching streams: it belongs to the context it came to.
        let (headers, body) = host::call_response(body_size);
        let Some(flight) = self
            .calls
            .borrow_mut()
            .remove(&token)
            .and_then(|f| f.upgrade())
        else {
            return;
        };
        let context_id = flight.try_borrow().map(|f| f.context_id).ok();
        if context_id.is_some_and(host::set_effective_context) {
            Flight::on_call_response(&flight, self, token, num_headers, headers, body);
        }
    }
}
