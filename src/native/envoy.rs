//! Envoy, through the dynamic-modules ABI, as the core stream machine's [`Host`] for one
//! stream's hook: each primitive is one or two of Envoy's callbacks; the calls that would
//! run this filter's hooks again (a reply, resuming the request, sending or resetting a
//! streamed answer) are queued as [`After`]. A request that streams has every attempt made as
//! a streamed call-out whose answer the module holds and forwards ([`Held`]): the answer
//! accessors then read and edit that answer.

pub use super::after::After;
use super::forward::Held;
use super::host::{BodyAt, Side, Stream};
use super::plugin::{Plugin, Routing};
use super::store::{self, Shared};
use super::timer::{self, Wake};
use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{CallRequest, Chunk, Effect};
use crate::core::headers::Headers;
use crate::core::plugin::Plugin as CorePlugin;
use crate::core::report::Write;
use crate::core::request::Edits;
use crate::core::routing::pins::{self, PinClock};
use crate::core::routing::HealthInput;
use crate::core::routing::RoutingState;
use crate::core::stream::Host;
use std::sync::Arc;

/// Envoy, as one stream's host for one hook.
pub struct Envoy<'a> {
    pub s: &'a mut Stream,
    pub plugin: &'a Plugin,
    /// Where the request body's bytes are in this hook.
    pub at: BodyAt,
    /// The stream's scheduler for timers, made when the first one is armed.
    pub wake: &'a mut Option<Arc<Wake>>,
    /// Calls to make once the hook has let go of the filter.
    pub after: &'a mut Vec<After>,
    /// The streamed call-out in flight and its answer as held.
    pub held: &'a mut Held,
}

impl Envoy<'_> {
    /// The answer the accessors read: the held one when the module forwards answers itself.
    fn held_answer(&mut self) -> Option<&mut Held> {
        Some(&mut *self.held).filter(|h| h.forwards)
    }
}

impl Host for Envoy<'_> {
    fn now_ms(&mut self) -> u64 {
        super::now_ms()
    }

    fn now_us(&mut self) -> u64 {
        super::now_us()
    }

    fn request_body(&mut self) -> Vec<u8> {
        self.s.body(Side::Request, self.at)
    }

    fn with_routing<T>(
        &mut self,
        plugin: &CorePlugin,
        now_ms: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState) -> T,
    ) -> T {
        let s = &*self.s;
        let config = &plugin.config;
        let gauges = |health: &HealthInput<'_>, last: &mut Vec<u8>| {
            super::metrics::update_health(s, plugin, health, last);
        };
        let routing = Routing {
            plugin: self.plugin,
            stream: s,
        };
        store::with_health(self.plugin.id, config, now_ms, gauges, |health| {
            decide(health, &routing)
        })
    }

    fn remove_request_header(&mut self, name: &str) {
        self.s.remove_header(Side::Request, name);
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        self.s.set_header(Side::Request, name, value.as_bytes());
    }

    /// Written over Envoy's own slices where it can be (no byte the edit keeps in place is
    /// copied); else, if Envoy refused a call, the body is replaced whole, in slice-sized parts
    /// straight from the client's body (no edited copy of it is made).
    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool {
        self.s
            .edit_body_in_place(Side::Request, self.at, body.len(), edits)
            || edits
                .parts(body)
                .is_some_and(|parts| self.s.replace_body(Side::Request, self.at, parts))
    }

    /// Unlike proxy-wasm, a dynamic module's header writes leave the cached route in place.
    fn clear_route_cache(&mut self) {
        self.s.clear_route_cache();
    }

    fn resume_request(&mut self) {
        self.after.push(After::ContinueRequest);
    }

    /// A streamed call-out still running is reset first: its answer no longer goes anywhere.
    fn reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        if let Some(id) = self.held.abandon() {
            self.after.push(After::ResetStream(id));
        }
        self.held.client_done();
        self.after.push(After::Reply {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
        });
    }

    fn dispatch(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        self.s
            .callout(call.cluster, &call.headers, call.body, call.timeout_ms)
    }

    fn streams_attempts(&mut self) -> bool {
        true
    }

    /// No timeout of Envoy's (0): the flight's timers bound the attempt, and a stream may
    /// run far longer than any call-out. The call-out before, abandoned, is reset.
    fn start_stream(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        if let Some(id) = self.held.abandon() {
            self.after.push(After::ResetStream(id));
        }
        // From the first attempt on, even one Envoy refuses: the router never answers.
        self.held.forwards = true;
        let id = self
            .s
            .start_stream(call.cluster, &call.headers, call.body)?;
        self.held.start(id);
        Some(id)
    }

    fn end_answer(&mut self, tail: &[u8]) {
        self.held.end_now(tail, self.after);
    }

    fn arm_timer(&mut self, due_ms: u64, token: u64) {
        let wake = match self.wake {
            Some(w) => Arc::clone(w),
            None => {
                let w = Wake::new(self.s.api(), self.s.new_scheduler());
                *self.wake = Some(Arc::clone(&w));
                w
            }
        };
        timer::arm(&wake, due_ms, token);
    }

    fn write_metric(&mut self, id: u32, write: Write) {
        self.s.write_metric(id, write);
    }

    fn write_field(&mut self, key: &'static str, value: Value<'_>) {
        self.s.write_fields(std::iter::once((key, value)));
    }

    fn record_health(&mut self, config: &Config, effect: &Effect<'_>) -> Option<ModelId> {
        store::apply_health(self.plugin.id, config, effect)
    }

    /// Only the session's hash is stored, never its key; a pin that finds no room is dropped.
    fn pin(
        &mut self,
        virtual_model: &str,
        session: u64,
        window: u64,
        target: &str,
        clock: PinClock,
    ) {
        let secret = store::slot_secret();
        let key = (virtual_model, session, window);
        if !pins::save(&Shared, secret, key, target, clock) {
            log::debug!("no room to pin a sticky session of {virtual_model}");
        }
    }

    fn answer_status(&mut self) -> u16 {
        if let Some(held) = self.held_answer() {
            return held.status();
        }
        self.s
            .header(Side::Response, ":status")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .unwrap_or(502)
    }

    /// None for a streamed answer: Envoy's details are of the router's.
    fn answer_code_details(&mut self) -> Option<String> {
        if self.held.forwards {
            return None;
        }
        self.s.response_code_details()
    }

    fn answer_headers(&mut self) -> Headers {
        if let Some(held) = self.held_answer() {
            return held.headers();
        }
        self.s.headers(Side::Response)
    }

    /// After the machine held the answer, the earlier chunks wait in Envoy's buffer.
    fn answer_body(&mut self) -> Chunk {
        if let Some(held) = self.held_answer() {
            return held.body();
        }
        Chunk::new(self.s.body(Side::Response, BodyAt::BufferAndChunk))
    }

    fn set_response_header(&mut self, name: &str, value: &str) {
        if let Some(held) = self.held_answer() {
            return held.set_header(name, value);
        }
        self.s.set_header(Side::Response, name, value.as_bytes());
    }

    fn remove_response_header(&mut self, name: &str) {
        if let Some(held) = self.held_answer() {
            return held.remove_header(name);
        }
        self.s.remove_header(Side::Response, name);
    }

    fn replace_answer_body(&mut self, with: Vec<u8>) {
        if let Some(held) = self.held_answer() {
            return held.replace_body(with);
        }
        self.s
            .replace_body(Side::Response, BodyAt::BufferAndChunk, [with.as_slice()]);
    }
}
