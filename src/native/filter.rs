//! One HTTP stream: the core's per-stream machine ([`crate::core::stream`]) fed Envoy's
//! events, with Envoy's callbacks as its [`Host`].
//!
//! Envoy runs a stream's hooks on one worker thread. A call into Envoy can run this filter's
//! hooks again before it returns (a local reply passes through the response hooks; resuming
//! the request can make the router answer at once), so such calls are not made while the
//! filter is borrowed: the host queues them as [`After`] and the hook makes them after.

use super::host::{BodyAt, Side, Stream};
use super::plugin::{Plugin, Routing};
use super::store::{self, Shared};
use super::timer::{self, Wake};
use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{CallAnswer, CallRequest, Effect};
use crate::core::headers::Headers;
use crate::core::plugin::Plugin as CorePlugin;
use crate::core::report::Write;
use crate::core::request::{Edits, ENVOY_SLICE};
use crate::core::routing::pins;
use crate::core::routing::HealthInput;
use crate::core::routing::RoutingState;
use crate::core::stream::{self, Host};
use std::sync::Arc;

pub use crate::core::stream::Verdict;

/// A call into Envoy to make once the hook has let go of the filter.
pub enum After {
    /// Resume the request stopped earlier.
    ContinueRequest,
    /// Answer the client locally.
    Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

/// One per HTTP stream.
pub struct Filter {
    plugin: Arc<Plugin>,
    stream: stream::Stream,
    /// The stream's scheduler for timers, made when the first one is armed.
    wake: Option<Arc<Wake>>,
    /// Calls to make once the current hook has let go of the filter.
    pub after: Vec<After>,
}

impl Filter {
    /// A filter for one stream of `plugin`'s config.
    pub fn new(plugin: Arc<Plugin>) -> Filter {
        Filter {
            plugin,
            stream: stream::Stream::new(fastrand::Rng::with_seed(fastrand::u64(..))),
            wake: None,
            after: Vec::new(),
        }
    }

    /// Whether errors Switchboard makes for this stream go in Anthropic's shape.
    pub fn speaks_anthropic(&self) -> bool {
        self.stream.speaks_anthropic()
    }

    /// Runs an event of the stream's machine with Envoy as its host for this hook (`at`:
    /// where the request body's bytes are).
    fn event<T>(
        &mut self,
        s: &mut Stream,
        at: BodyAt,
        f: impl FnOnce(&mut stream::Stream, &CorePlugin, &mut Envoy<'_>) -> T,
    ) -> T {
        let mut host = Envoy {
            s,
            plugin: &self.plugin,
            at,
            wake: &mut self.wake,
            after: &mut self.after,
        };
        f(&mut self.stream, &self.plugin.core, &mut host)
    }

    /// The request headers arrived.
    pub fn on_request_headers(&mut self, s: &mut Stream, end_of_stream: bool) -> Verdict {
        // One call for every header: these are the client's headers as sent, which a retry or
        // fallback replays.
        let headers = s.headers(Side::Request);
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_request_headers(plugin, host, headers, end_of_stream)
        })
    }

    /// A chunk of the request body arrived (`size` bytes held so far, this chunk included).
    pub fn on_request_body(&mut self, s: &mut Stream, size: usize, end: bool) -> Verdict {
        self.event(s, BodyAt::BufferAndChunk, |m, plugin, host| {
            m.on_request_body(plugin, host, size, end)
        })
    }

    /// The request's trailers arrived.
    pub fn on_request_trailers(&mut self, s: &mut Stream) -> Verdict {
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_request_trailers(plugin, host)
        })
    }

    /// A call-out this stream made finished: `answer` is `None` when it got none.
    pub fn on_callout_done(&mut self, s: &mut Stream, id: u64, answer: Option<(Headers, Vec<u8>)>) {
        let answer = answer.map(|(headers, body)| CallAnswer { headers, body });
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_call_done(plugin, host, id, answer)
        });
    }

    /// An event this stream's scheduler posted: a timer's token.
    pub fn on_scheduled(&mut self, s: &mut Stream, token: u64) {
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_timer(plugin, host, token)
        });
    }

    /// The response headers arrived (`end`: with no body after them).
    pub fn on_response_headers(&mut self, s: &mut Stream, end: bool) -> Verdict {
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_response_headers(plugin, host, end)
        })
    }

    /// A chunk of the response body arrived.
    pub fn on_response_body(&mut self, s: &mut Stream, end: bool) -> Verdict {
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_response_body(plugin, host, end)
        })
    }

    /// The response trailers arrived.
    pub fn on_response_trailers(&mut self, s: &mut Stream) -> Verdict {
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_response_trailers(plugin, host)
        })
    }
}

impl Drop for Filter {
    /// The stream ended: late answers and timers are ignored, and pending timers find the
    /// stream's scheduler gone.
    fn drop(&mut self) {
        self.stream.on_destroyed();
        if let Some(wake) = &self.wake {
            wake.close();
        }
    }
}

/// Envoy, as one stream's host for one hook.
struct Envoy<'a> {
    s: &'a mut Stream,
    plugin: &'a Plugin,
    /// Where the request body's bytes are in this hook.
    at: BodyAt,
    wake: &'a mut Option<Arc<Wake>>,
    after: &'a mut Vec<After>,
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

    /// A short body is joined and handed over in one call: copying a few KB here costs less
    /// than more calls into Envoy. A long one goes in slice-sized parts straight from the
    /// client's body, with no edited copy of it (1 MB bodies: one copy fewer in memory per
    /// request in flight).
    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool {
        if body.len() < ENVOY_SLICE {
            match edits.apply(body) {
                Some(edited) => self
                    .s
                    .replace_body(Side::Request, self.at, [edited.as_slice()]),
                None => false,
            }
        } else {
            match edits.parts(body) {
                Some(parts) => self.s.replace_body(Side::Request, self.at, parts),
                None => false,
            }
        }
    }

    /// Unlike proxy-wasm, a dynamic module's header writes leave the cached route in place.
    fn clear_route_cache(&mut self) {
        self.s.clear_route_cache();
    }

    fn resume_request(&mut self) {
        self.after.push(After::ContinueRequest);
    }

    fn reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
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
    fn pin(&mut self, virtual_model: &str, session: u64, window: u64, target: &str) {
        let secret = store::slot_secret();
        if !pins::save(&Shared, secret, virtual_model, session, window, target) {
            log::debug!("no room to pin a sticky session of {virtual_model}");
        }
    }

    fn answer_status(&mut self) -> u16 {
        self.s
            .header(Side::Response, ":status")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .unwrap_or(502)
    }

    fn answer_code_details(&mut self) -> Option<String> {
        self.s.response_code_details()
    }

    fn answer_headers(&mut self) -> Headers {
        self.s.headers(Side::Response)
    }

    /// After the machine held the answer, the earlier chunks wait in Envoy's buffer.
    fn answer_body(&mut self) -> Vec<u8> {
        self.s.body(Side::Response, BodyAt::BufferAndChunk)
    }

    fn set_response_header(&mut self, name: &str, value: &str) {
        self.s.set_header(Side::Response, name, value.as_bytes());
    }

    fn remove_response_header(&mut self, name: &str) {
        self.s.remove_header(Side::Response, name);
    }

    fn replace_answer_body(&mut self, with: &[u8]) {
        self.s
            .replace_body(Side::Response, BodyAt::BufferAndChunk, [with]);
    }
}
