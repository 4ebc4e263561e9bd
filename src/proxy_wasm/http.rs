//! The per-request context: turns proxy-wasm's callbacks into the events of the core's
//! stream machine ([`crate::core::stream`]), with [`Wasm`] as its host.
//!
//! Headers of an LLM request are paused until the body has arrived (Envoy must run with
//! `allow_on_headers_stop_iteration: true`). The machine lives here until the request is
//! forwarded; then it moves into the worker's [`Runtime`], where the root context's timers
//! and call-outs find it too.

use super::host;
use super::runtime::{Runtime, Slot};
use super::stream::{action, call_answer, Wasm};
use crate::core::plugin::Plugin;
use crate::core::stream::{Stream, Verdict};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

/// One per HTTP stream.
pub struct Http {
    context_id: u32,
    plugin: Option<Rc<Plugin>>,
    runtime: Rc<Runtime>,
    /// The stream's machine until it is forwarded (then the runtime holds it).
    stream: Option<Stream>,
}

impl Http {
    /// A context for one request, sharing the root's compiled config and runtime.
    pub fn new(
        context_id: u32,
        plugin: Option<Rc<Plugin>>,
        runtime: Rc<Runtime>,
        rng: fastrand::Rng,
    ) -> Self {
        Http {
            context_id,
            plugin,
            runtime,
            stream: Some(Stream::new(rng)),
        }
    }

    /// Runs an event of this stream's machine (`body_size`: the callback's body, if any),
    /// wherever the machine is; a machine that the event forwarded moves to the runtime.
    fn event<T>(
        &mut self,
        body_size: usize,
        f: impl FnOnce(&mut Stream, &Plugin, &mut Wasm<'_>) -> T,
    ) -> Option<T> {
        let rt = &*self.runtime;
        let mut wasm = Wasm::new(rt, self.context_id, body_size);
        let Some(stream) = self.stream.as_mut() else {
            return rt.with_stream(self.context_id, |slot| {
                f(&mut slot.stream, &slot.plugin, &mut wasm)
            });
        };
        let plugin = self.plugin.clone()?;
        wasm.plugin = Some(Rc::clone(&plugin));
        let out = f(stream, &plugin, &mut wasm);
        if stream.forwarded() {
            if let Some(stream) = self.stream.take() {
                rt.add_stream(self.context_id, Slot { plugin, stream });
            }
        }
        Some(out)
    }

    /// An event whose answer is a verdict (let the stream go on when there is no machine).
    fn hook(
        &mut self,
        body_size: usize,
        f: impl FnOnce(&mut Stream, &Plugin, &mut Wasm<'_>) -> Verdict,
    ) -> Action {
        action(self.event(body_size, f).unwrap_or(Verdict::Continue))
    }
}

impl Context for Http {
    /// A call this stream made (the classifier's, or one made from its own callbacks).
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let _span = super::profile::span("on_http_call_response");
        let answer = call_answer(num_headers, body_size);
        self.runtime.take_call(token);
        self.event(0, |m, plugin, host| {
            m.on_call_done(plugin, host, u64::from(token), answer)
        });
    }
}

impl Drop for Http {
    /// A stream that was forwarded is in the runtime, with its timers and calls: those go with
    /// it. Any other (most requests that are not Switchboard's) has nothing there to find.
    fn drop(&mut self) {
        let forwarded = match self.stream.take() {
            Some(stream) => Some(stream),
            None => self
                .runtime
                .remove_stream(self.context_id)
                .map(|slot| slot.stream),
        };
        if let Some(mut stream) = forwarded {
            stream.on_destroyed();
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_request_headers");
        if self.plugin.is_none() {
            // Never fail open: without a config, no client-chosen cluster either.
            host::remove_request_header("x-switchboard-cluster");
            return Action::Continue;
        }
        // One host call for every header: cheaper than several lookups, and these are the
        // client's headers as sent, which a retry or fallback replays.
        let headers = host::request_headers();
        self.hook(0, |m, plugin, host| {
            m.on_request_headers(plugin, host, headers, end_of_stream)
        })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_request_body");
        self.hook(body_size, |m, plugin, host| {
            m.on_request_body(plugin, host, body_size, end_of_stream)
        })
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        let _span = super::profile::span("on_http_request_trailers");
        // A body that ends with trailers never sees end_of_stream in the body callback; the
        // body callbacks already held it to the size limit.
        self.hook(usize::MAX, |m, plugin, host| {
            m.on_request_trailers(plugin, host)
        })
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_response_headers");
        self.hook(0, |m, plugin, host| {
            m.on_response_headers(plugin, host, end_of_stream)
        })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_response_body");
        self.hook(body_size, |m, plugin, host| {
            m.on_response_body(plugin, host, end_of_stream)
        })
    }

    /// A stream Envoy's router reset after its answer started reaches no body callback: it is
    /// counted here, against its target.
    fn on_log(&mut self) {
        let _span = super::profile::span("on_log");
        self.event(0, |m, plugin, host| m.on_logged(plugin, host));
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        let _span = super::profile::span("on_http_response_trailers");
        self.hook(0, |m, plugin, host| m.on_response_trailers(plugin, host))
    }
}
