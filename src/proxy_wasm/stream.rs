//! proxy-wasm as the core stream machine's [`Host`]: each primitive is one host call (or a
//! note in the worker's [`Runtime`], for timers and call tokens), and the events that arrive
//! on the root context (timers on its tick, call-outs it made) find their stream here.

use super::host::{self, Clock, Headers};
use super::metrics;
use super::runtime::Runtime;
use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{CallAnswer, CallRequest, Chunk, Effect};
use crate::core::plugin::Plugin;
use crate::core::report::Write;
use crate::core::request::Edits;
use crate::core::router_path::RouterFlight;
use crate::core::routing::pins::PinClock;
use crate::core::routing::HealthInput;
use crate::core::routing::RoutingState;
use crate::core::stream::{Host, Verdict};
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::Rc;

/// The proxy-wasm action for a verdict.
pub fn action(verdict: Verdict) -> Action {
    match verdict {
        Verdict::Continue => Action::Continue,
        Verdict::Stop => Action::Pause,
    }
}

/// Envoy through proxy-wasm, as stream `context_id`'s host for one callback (`body_size`: the
/// body the callback was given, request or response).
pub struct Wasm<'a> {
    pub rt: &'a Runtime,
    pub context_id: u32,
    pub body_size: usize,
    /// The host's time, read once per callback and only if needed.
    pub clock: Clock,
    /// The plugin the request was routed with, for the router path's passes.
    pub plugin: Option<Rc<Plugin>>,
}

impl<'a> Wasm<'a> {
    /// The host of stream `context_id` for a callback with `body_size` bytes of body.
    pub fn new(rt: &'a Runtime, context_id: u32, body_size: usize) -> Self {
        Wasm {
            rt,
            context_id,
            body_size,
            clock: Clock::default(),
            plugin: None,
        }
    }
}

impl Host for Wasm<'_> {
    fn now_ms(&mut self) -> u64 {
        self.clock.now_ms()
    }

    fn now_us(&mut self) -> u64 {
        host::now_ns() / 1000
    }

    fn request_body(&mut self) -> Vec<u8> {
        host::request_body(self.body_size)
    }

    fn with_routing<T>(
        &mut self,
        plugin: &Plugin,
        now_ms: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState) -> T,
    ) -> T {
        let rt = self.rt;
        rt.with_health(plugin, now_ms, |health| {
            let _span = super::profile::span("core: inspect, decide, rewrite");
            decide(health, rt)
        })
    }

    fn remove_request_header(&mut self, name: &str) {
        host::remove_request_header(name);
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        host::set_request_header(name, value);
    }

    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool {
        host::edit_request_body(body, edits)
    }

    /// proxy-wasm has Envoy pick the route again after every request header write.
    fn clear_route_cache(&mut self) {}

    fn resume_request(&mut self) {
        host::resume_request();
    }

    fn reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        host::send_reply(status, headers.to_vec(), body);
    }

    fn dispatch(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        let token = host::dispatch(
            call.cluster,
            call.headers.clone(),
            call.body,
            call.timeout_ms,
        )?;
        self.rt.add_call(token, self.context_id);
        Some(u64::from(token))
    }

    fn share_router_flight(&mut self, flight: &Rc<RefCell<RouterFlight>>) -> bool {
        match &self.plugin {
            Some(plugin) => super::router_path::share(Rc::clone(plugin), flight, self.context_id),
            None => false,
        }
    }

    fn arm_timer(&mut self, due_ms: u64, token: u64) {
        self.rt.add_timer(due_ms, self.context_id, token);
    }

    fn write_metric(&mut self, id: u32, write: Write) {
        metrics::write(id, write);
    }

    fn write_field(&mut self, key: &'static str, value: Value<'_>) {
        let mut buf = [0u8; 20];
        host::set_filter_state(key, value.bytes(&mut buf));
    }

    fn record_health(&mut self, config: &Config, effect: &Effect<'_>) -> Option<ModelId> {
        let clock = &self.clock;
        self.rt.apply_health(config, effect, || clock.now_ms())
    }

    fn pin(
        &mut self,
        virtual_model: &str,
        session: u64,
        window: u64,
        target: &str,
        clock: PinClock,
    ) {
        self.rt.pin(virtual_model, session, window, target, clock);
    }

    fn answer_status(&mut self) -> u16 {
        host::response_status()
    }

    fn answer_code_details(&mut self) -> Option<String> {
        host::property(&["response", "code_details"])
    }

    fn answer_headers(&mut self) -> Headers {
        host::response_headers()
    }

    fn answer_body(&mut self) -> Chunk {
        Chunk::new(match self.body_size > 0 {
            true => host::response_body(self.body_size),
            false => Vec::new(),
        })
    }

    fn answer_body_len(&mut self) -> usize {
        self.body_size
    }

    fn set_response_header(&mut self, name: &str, value: &str) {
        host::set_response_header(name, value);
    }

    fn remove_response_header(&mut self, name: &str) {
        host::remove_response_header(name);
    }

    fn replace_answer_body(&mut self, with: Vec<u8>) {
        host::replace_response_body(self.body_size, &with);
    }
}

/// A timer of stream `context_id` fired (on the root's tick, with the stream made effective).
pub fn on_timer(rt: &Runtime, context_id: u32, token: u64) {
    let mut wasm = Wasm::new(rt, context_id, 0);
    rt.with_stream(context_id, |slot| {
        slot.stream.on_timer(&slot.plugin, &mut wasm, token)
    });
}

/// A call finished on the root context (one made from a timer's tick): hands the answer to
/// its stream's machine, acting on that stream.
pub fn on_root_call_response(rt: &Runtime, token: u32, num_headers: usize, body_size: usize) {
    // Read the answer before switching streams: it belongs to the context it came to.
    let answer = call_answer(num_headers, body_size);
    let Some(context_id) = rt.take_call(token) else {
        return;
    };
    if !host::set_effective_context(context_id) {
        return;
    }
    let mut wasm = Wasm::new(rt, context_id, 0);
    rt.with_stream(context_id, |slot| {
        slot.stream
            .on_call_done(&slot.plugin, &mut wasm, u64::from(token), answer)
    });
}

/// A call's answer, `None` when it got none (no headers: reset, timeout, refused).
pub fn call_answer(num_headers: usize, body_size: usize) -> Option<CallAnswer> {
    let (headers, body) = host::call_response(body_size);
    (num_headers > 0).then_some(CallAnswer { headers, body })
}
