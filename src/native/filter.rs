//! One HTTP stream: the core's per-stream machine ([`crate::core::stream`]) fed Envoy's
//! events, with Envoy's callbacks as its host ([`Envoy`]).
//!
//! Envoy runs a stream's hooks on one worker thread. A call into Envoy can run this filter's
//! hooks again before it returns (a local reply passes through the response hooks; resuming
//! the request can make the router answer at once), so such calls are not made while the
//! filter is borrowed: the host queues them as [`After`] and the hook makes them after.

pub use super::envoy::After;
use super::envoy::Envoy;
use super::host::{BodyAt, Side, Stream};
use super::plugin::Plugin;
use super::timer::Wake;
use crate::core::flight::CallAnswer;
use crate::core::headers::Headers;
use crate::core::plugin::Plugin as CorePlugin;
use crate::core::stream;
use std::sync::Arc;

pub use crate::core::stream::Verdict;

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
