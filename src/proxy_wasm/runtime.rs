//! Per-worker state shared by the root context and every request context of one plugin: the
//! cached health view, the machine of each forwarded stream, and the retry and timeout
//! timers and outstanding HTTP calls that lead back to them.
//!
//! proxy-wasm has no per-stream timers, so delays run on the root context's tick; a call made
//! from the tick reports back to the root. Both find the request by its context id here (one
//! map of machines; timers and calls name the context), and act on its stream after
//! `set_effective_context`.

use super::host::{self, SharedData};
use super::metrics;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{self, Effect};
use crate::core::health::view::HealthView;
use crate::core::plugin::Plugin;
use crate::core::routing::pins::{self, PinClock, SlotSecret};
use crate::core::routing::round_robin::Cursors;
use crate::core::routing::HealthInput;
use crate::core::routing::{CursorKey, RoutingState};
use crate::core::stream::Stream;
use hashbrown::HashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Tick period while timers are pending: the granularity of retry delays and timeouts.
pub const TICK_MS: u64 = 10;

/// A pending wake-up of a request's machine.
struct Timer {
    due_ms: u64,
    context_id: u32,
    token: u64,
}

/// One forwarded request: its stream's machine and the config it was routed with (a reload
/// does not change a request in flight).
pub struct Slot {
    /// The plugin the request started with.
    pub plugin: Rc<Plugin>,
    /// Its machine.
    pub stream: Stream,
}

/// The worker's shared state.
#[derive(Default)]
pub struct Runtime {
    /// This worker's copy of the shared health records, so the request path reads shared
    /// data at most every `health_view_ms`.
    health: RefCell<HealthView>,
    /// Forwarded requests by context id: timers and call-outs made on the root context come
    /// back to them here.
    streams: RefCell<HashMap<u32, Slot>>,
    timers: RefCell<Vec<Timer>>,
    ticking: Cell<bool>,
    /// Outstanding call-outs: (host token, context id). Only retries, fallbacks and
    /// classifier calls in flight are here, so a list does; a map cost 2 KB of `.wasm`.
    calls: RefCell<Vec<(u32, u32)>>,
    /// This worker's round-robin cursors, one per caller per virtual model.
    cursors: RefCell<Cursors>,
    /// The `health` gauge values this worker last wrote, by pair number.
    gauges: RefCell<Vec<u8>>,
    /// The secret placing sticky pins in their slots, the same in every worker's VM of this
    /// Envoy (pins live in shared data); none yet: no pins.
    slot_secret: Cell<Option<SlotSecret>>,
}

impl RoutingState for Runtime {
    fn pinned(
        &self,
        virtual_model: &str,
        session: u64,
        window: u64,
        clock: PinClock,
    ) -> Option<String> {
        let secret = self.slot_secret.get()?;
        pins::lookup(&SharedData, secret, (virtual_model, session, window), clock)
    }

    /// Only the session's hash is stored, never its key. The slot is the core's choice
    /// ([`pins::choose_slot`]): a pin that finds no room is dropped.
    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str, clock: PinClock) {
        let Some(secret) = self.slot_secret.get() else {
            return;
        };
        let key = (virtual_model, session, window);
        if !pins::save(&SharedData, secret, key, value, clock) {
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

    fn next_cursor(&self, whose: CursorKey, len: usize, rng: &mut fastrand::Rng) -> usize {
        // One VM per worker: the config's cursors are cleared when it is replaced.
        self.cursors
            .borrow_mut()
            .next((0, whose.0, whose.1), len, rng)
    }
}

impl Runtime {
    /// Takes the pin-slot secret this Envoy's workers share ([`pins::shared_secret`]): the
    /// stored one, else one made from the host's entropy (WASI `random_get`) and stored.
    pub fn share_slot_secret(&self) {
        if self.slot_secret.get().is_some() {
            return;
        }
        let fresh = || Some(SlotSecret::new(host::entropy()?, host::entropy()?));
        match pins::shared_secret(&SharedData, fresh) {
            Some(secret) => self.slot_secret.set(Some(secret)),
            None => log::warn!(
                "no secret for sticky pins (no entropy or shared data): this worker pins no session"
            ),
        }
    }

    /// Forgets what is indexed by the config (model and virtual model indices change with it).
    pub fn reset_for_new_config(&self) {
        *self.health.borrow_mut() = HealthView::default();
        *self.cursors.borrow_mut() = Cursors::default();
        self.gauges.borrow_mut().clear();
    }

    /// Runs `f` with the health input of `now_ms`, refreshing the cached view if it is stale.
    pub fn with_health<T>(
        &self,
        plugin: &Plugin,
        now_ms: u64,
        f: impl FnOnce(&HealthInput<'_>) -> T,
    ) -> T {
        let mut view = self.health.borrow_mut();
        let (refreshed, input) = view.read(&plugin.config, now_ms, &SharedData);
        if refreshed {
            metrics::update_health(plugin, &input, &mut self.gauges.borrow_mut());
        }
        f(&input)
    }

    /// Applies an effect's change to a target's health in shared data and in this worker's
    /// view ([`flight::apply_health`]); the target whose eviction it started.
    pub fn apply_health(
        &self,
        config: &Config,
        effect: &Effect<'_>,
        now_ms: impl FnOnce() -> u64,
    ) -> Option<ModelId> {
        let mut view = self.health.borrow_mut();
        flight::apply_health(&mut view, &SharedData, config, effect, now_ms)
    }

    /// Keeps the forwarded stream `context_id`.
    pub fn add_stream(&self, context_id: u32, slot: Slot) {
        if let Ok(mut streams) = self.streams.try_borrow_mut() {
            streams.insert(context_id, slot);
        }
    }

    /// Runs `f` on forwarded stream `context_id`, if it is here. Host callbacks nest only
    /// through a local reply, whose own callbacks then find the map busy and let the reply
    /// through; a surprise must not abort the VM.
    pub fn with_stream<T>(&self, context_id: u32, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let mut streams = self.streams.try_borrow_mut().ok()?;
        streams.get_mut(&context_id).map(f)
    }

    /// Forgets stream `context_id`: its machine, timers and outstanding calls (a call whose
    /// stream went away is never answered to us).
    pub fn remove_stream(&self, context_id: u32) -> Option<Slot> {
        if let Ok(mut timers) = self.timers.try_borrow_mut() {
            if !timers.is_empty() {
                timers.retain(|t| t.context_id != context_id);
            }
        }
        if let Ok(mut calls) = self.calls.try_borrow_mut() {
            if !calls.is_empty() {
                calls.retain(|(_, c)| *c != context_id);
            }
        }
        self.streams.try_borrow_mut().ok()?.remove(&context_id)
    }

    /// Wakes stream `context_id`'s machine at `due_ms` (on a root tick) with `token`.
    pub fn add_timer(&self, due_ms: u64, context_id: u32, token: u64) {
        self.timers.borrow_mut().push(Timer {
            due_ms,
            context_id,
            token,
        });
        if !self.ticking.replace(true) {
            host::set_tick_ms(TICK_MS);
        }
    }

    /// Takes the timers due at `now_ms` as (context id, token); stops ticking when none are
    /// left.
    pub fn take_due(&self, now_ms: u64) -> Vec<(u32, u64)> {
        let mut timers = self.timers.borrow_mut();
        let mut due = Vec::new();
        timers.retain(|t| {
            if t.due_ms > now_ms {
                return true;
            }
            due.push((t.context_id, t.token));
            false
        });
        if timers.is_empty() && self.ticking.replace(false) {
            host::set_tick_ms(0);
        }
        due
    }

    /// Remembers which stream a host call token belongs to.
    pub fn add_call(&self, token: u32, context_id: u32) {
        self.calls.borrow_mut().push((token, context_id));
    }

    /// The stream of a finished host call.
    pub fn take_call(&self, token: u32) -> Option<u32> {
        let mut calls = self.calls.borrow_mut();
        let at = calls.iter().position(|(t, _)| *t == token)?;
        let (_, context_id) = calls.swap_remove(at);
        Some(context_id)
    }
}
