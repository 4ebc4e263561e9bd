//! One HTTP stream: the core's per-stream machine ([`crate::core::stream`]) fed Envoy's
//! events, with Envoy's callbacks as its host ([`Envoy`]).
//!
//! Envoy runs a stream's hooks on one worker thread. A call into Envoy can run this filter's
//! hooks again before it returns (a local reply passes through the response hooks; resuming
//! the request can make the router answer at once), so such calls are not made while the
//! filter is borrowed: the host queues them as [`After`] and the hook makes them after.
//!
//! A request that streams is answered by the module itself: each attempt is a streamed
//! call-out, its events ([`StreamEvent`]) run the machine with the held answer as the one it
//! reads ([`Held`]), and what the machine lets through is sent on to the client.

pub use super::envoy::After;
use super::envoy::Envoy;
use super::forward::{Held, StreamEvent};
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
    /// The streamed call-out in flight and its answer as held.
    held: Held,
}

impl Filter {
    /// A filter for one stream of `plugin`'s config.
    pub fn new(plugin: Arc<Plugin>) -> Filter {
        Filter {
            plugin,
            stream: stream::Stream::new(fastrand::Rng::with_seed(fastrand::u64(..))),
            wake: None,
            after: Vec::new(),
            held: Held::default(),
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
            held: &mut self.held,
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

    /// An event of a streamed call-out: the held answer's, unless its call-out was abandoned
    /// (for another attempt, a reply, the client's end), when it is dropped.
    pub fn on_stream_event(&mut self, s: &mut Stream, event: StreamEvent) {
        let id = event.id();
        if !self.held.is_current(id) {
            return;
        }
        match event {
            StreamEvent::Headers { headers, end, .. } => {
                self.held.on_headers(headers, end);
                self.answer_event(s, id, end, |m, plugin, host| {
                    m.on_stream_headers(plugin, host, id, end)
                });
            }
            StreamEvent::Data { bytes, end, .. } => {
                self.held.on_data(bytes, end);
                self.answer_event(s, id, end, |m, plugin, host| {
                    m.on_stream_body(plugin, host, id, end)
                });
            }
            StreamEvent::Trailers { .. } => {
                self.held.on_trailers();
                self.answer_event(s, id, true, |m, plugin, host| {
                    m.on_stream_trailers(plugin, host, id)
                });
            }
            StreamEvent::Complete { .. } => {
                self.held.gone();
                self.held.close(&mut self.after);
            }
            StreamEvent::Reset { .. } => {
                self.held.gone();
                self.event(s, BodyAt::Buffer, |m, plugin, host| {
                    m.on_stream_reset(plugin, host, id)
                });
                self.held.close(&mut self.after);
            }
        }
    }

    /// Runs an answer event of call-out `id`; if the machine lets the answer through, what
    /// is held of it goes to the client (`end`: the answer ended with this event).
    fn answer_event(
        &mut self,
        s: &mut Stream,
        id: u64,
        end: bool,
        f: impl FnOnce(&mut stream::Stream, &CorePlugin, &mut Envoy<'_>) -> Verdict,
    ) {
        let verdict = self.event(s, BodyAt::Buffer, f);
        // A new attempt may have replaced the call-out during the event.
        if verdict == Verdict::Continue && self.held.is_current(id) {
            self.held.flush(end, &mut self.after);
        }
    }

    /// The client's stream is over (answered, or the client went away): a streamed call-out
    /// still running is reset, and forgotten first, so its reset reaches no machine (a client
    /// that hangs up counts against no target).
    pub fn on_client_done(&mut self) {
        if let Some(id) = self.held.abandon() {
            self.after.push(After::ResetStream(id));
        }
        self.held.client_done();
    }

    /// The response headers arrived (`end`: with no body after them). When the module
    /// forwards the answer itself, this is its own send passing by.
    pub fn on_response_headers(&mut self, s: &mut Stream, end: bool) -> Verdict {
        if self.held.forwards {
            return Verdict::Continue;
        }
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_response_headers(plugin, host, end)
        })
    }

    /// A chunk of the response body arrived.
    pub fn on_response_body(&mut self, s: &mut Stream, end: bool) -> Verdict {
        if self.held.forwards {
            return Verdict::Continue;
        }
        self.event(s, BodyAt::Buffer, |m, plugin, host| {
            m.on_response_body(plugin, host, end)
        })
    }

    /// The response trailers arrived.
    pub fn on_response_trailers(&mut self, s: &mut Stream) -> Verdict {
        if self.held.forwards {
            return Verdict::Continue;
        }
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
