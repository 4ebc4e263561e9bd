//! The dozen primitives a host offers the per-stream machine: what it reads when asked and
//! what it writes. The proxy-wasm adapter, the native module and the test simulator each
//! implement [`Host`] once; everything else about a request is written in the core.

use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{Attempt, CallRequest, Chunk, Effect};
use crate::core::headers::Headers;
use crate::core::plugin::Plugin;
use crate::core::report::Write;
use crate::core::request::Edits;
use crate::core::router_path::RouterFlight;
use crate::core::routing::pins::PinClock;
use crate::core::routing::HealthInput;
use crate::core::routing::RoutingState;
use std::cell::RefCell;
use std::rc::Rc;

/// What a hook tells the host about the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on with the next filter.
    Continue,
    /// Stop here (and, in a body hook, keep the data buffered) until resumed.
    Stop,
}

/// One stream's view of its host, for the length of one hook. Reads are made only when the
/// machine asks (each costs the .wasm a crossing into Envoy); writes happen in the order
/// called. A reply or a resumed request may run the host's own hooks again: a host where that
/// re-enters the filter (the native module) queues them until the hook returns.
pub trait Host {
    /// The host's time, in milliseconds since the Unix epoch.
    fn now_ms(&mut self) -> u64;
    /// A finer clock for timing a decision, in microseconds (any epoch).
    fn now_us(&mut self) -> u64;
    /// Every byte of the request body held so far.
    fn request_body(&mut self) -> Vec<u8>;
    /// Runs a routing decision at `now_ms` with the worker's health view of `plugin`'s config
    /// (which the host may refresh, and whose gauges it writes) and its routing state (pins,
    /// cursors, verified claims).
    fn with_routing<T>(
        &mut self,
        plugin: &Plugin,
        now_ms: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState) -> T,
    ) -> T;

    /// Removes a request header.
    fn remove_request_header(&mut self, name: &str);
    /// Sets a request header, replacing the client's.
    fn set_request_header(&mut self, name: &str, value: &str);
    /// Replaces the buffered request body (`body`, as read) with `edits` applied; false if
    /// the host refused.
    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool;
    /// Has the router choose the route again (a host whose header writes leave the cached
    /// route in place needs it after the cluster header changed).
    fn clear_route_cache(&mut self);
    /// Resumes the request held since its headers (after an answer the hook did not wait in).
    fn resume_request(&mut self);
    /// Answers the client locally (the request goes no further; a held answer is replaced).
    fn reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]);

    /// Makes a call-out; the host's id of it, reported back with its answer.
    fn dispatch(&mut self, call: &CallRequest<'_>) -> Option<u64>;
    /// Whether this host can make an attempt a streamed call-out whose answer it forwards to
    /// the client itself as it arrives (the native module; proxy-wasm's call-outs answer
    /// whole). Asked once, for a request that streams.
    fn streams_attempts(&mut self) -> bool {
        false
    }
    /// Starts a streamed call-out with its whole request; the host's id of it. Its answer
    /// comes back through [`super::Stream::on_stream_headers`] and the events after it, during
    /// which the answer accessors below read and edit that answer as held so far; after a
    /// [`Verdict::Continue`] the host sends what it holds on to the client. One at a time: a
    /// new one resets the one before (an abandoned attempt).
    fn start_stream(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        let _ = call;
        None
    }
    /// Hands a router-path request's attempts ([`crate::core::router_path`]) to the host's
    /// upstream passes, which find them by the request; false if this host has none (the
    /// native module streams every attempt itself).
    fn share_router_flight(&mut self, flight: &Rc<RefCell<RouterFlight>>) -> bool {
        let _ = flight;
        false
    }
    /// Wakes the stream with `token` at or after `due_ms`.
    fn arm_timer(&mut self, due_ms: u64, token: u64);
    /// Writes a metric by its host id.
    fn write_metric(&mut self, id: u32, write: Write);
    /// Writes one access-log field as filter state.
    fn write_field(&mut self, key: &'static str, value: Value<'_>);
    /// Applies a [`Effect::Record`] or [`Effect::Samples`] to the shared health store; the
    /// target it evicted, if it did.
    fn record_health(&mut self, config: &Config, effect: &Effect<'_>) -> Option<ModelId>;
    /// Keeps a sticky session on `target` for the rest of its window (or until idle).
    fn pin(
        &mut self,
        virtual_model: &str,
        session: u64,
        window: u64,
        target: &str,
        clock: PinClock,
    );
    /// An attempt starts (the first through the router, or a call-out about to be made): for
    /// a host that watches them (the simulator); metrics and the debug line are the core's.
    fn on_attempt(&mut self, config: &Config, attempt: &Attempt<'_>) {
        let _ = (config, attempt);
    }

    /// The router's answer's `:status` (502 if it has none).
    fn answer_status(&mut self) -> u16;
    /// Envoy's response code details of the router's answer.
    fn answer_code_details(&mut self) -> Option<String>;
    /// Every header of the router's answer.
    fn answer_headers(&mut self) -> Headers;
    /// Every byte of the router's answer held so far, the chunk just received included.
    fn answer_body(&mut self) -> Chunk;
    /// How many bytes [`Host::answer_body`] would read (a host that knows it without a copy
    /// says so).
    fn answer_body_len(&mut self) -> usize {
        self.answer_body().len()
    }
    /// Sets a header of the router's answer.
    fn set_response_header(&mut self, name: &str, value: &str);
    /// Removes a header of the router's answer.
    fn remove_response_header(&mut self, name: &str);
    /// Replaces the answer's bytes in hand (every byte [`Host::answer_body`] read) with `with`
    /// (given, so a host that holds the answer itself keeps it without a copy).
    fn replace_answer_body(&mut self, with: Vec<u8>);
    /// Ends the client's answer now, after what it got and `tail`, and resets the streamed
    /// call-out in flight. A host that cannot end it early does nothing.
    fn end_answer(&mut self, tail: &[u8]) {
        let _ = tail;
    }
}
