//! A forwarded stream: the flight machine ([`crate::core::flight`]) fed the router's answer,
//! call-out answers and timers, and the one interpreter of its effects ([`Flight::apply`]).

use super::{Host, Phase, Stream, Verdict};
use crate::core::access_log;
use crate::core::config::Config;
use crate::core::fallback::AttemptOutcome;
use crate::core::flight::{
    AnswerFacts, Attempt, AttemptKind, CallAnswer, CallId, Chunk, Effect, Effects, Flow, Machine,
    Replay, Start, Summary,
};
use crate::core::headers::Headers;
use crate::core::overhead::Overhead;
use crate::core::plugin::Plugin;
use crate::core::report::{self, Report};
use crate::core::router_path::RouterFlight;
use crate::core::routing::pins::PinClock;
use crate::core::trace::Trace;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// The state of one forwarded request.
pub(super) struct Flight {
    machine: Machine,
    /// The host's ids of the call-outs in flight, with the machine's.
    calls: Vec<(u64, CallId)>,
    /// Its metrics' and trace's bookkeeping.
    report: Report,
    /// Its attempts, when Envoy's router makes them (the router path), shared with the
    /// upstream passes that rewrite and watch each.
    router: Option<Rc<RefCell<RouterFlight>>>,
}

/// What the machine may ask about the router's answer, read from the host only when asked.
struct Facts<'h, H> {
    host: &'h mut H,
    now: Option<u64>,
    /// The answer ended with the headers in hand.
    ends: bool,
}

impl<H: Host> AnswerFacts for Facts<'_, H> {
    fn now_ms(&mut self) -> u64 {
        *self.now.get_or_insert_with(|| self.host.now_ms())
    }

    fn code_details(&mut self) -> Option<String> {
        self.host.answer_code_details()
    }

    fn headers(&mut self) -> Headers {
        self.host.answer_headers()
    }

    fn chunk(&mut self) -> Chunk {
        self.host.answer_body()
    }

    fn held_len(&mut self) -> usize {
        self.host.answer_body_len()
    }

    fn ends_with_headers(&mut self) -> bool {
        self.ends
    }
}

fn verdict(flow: Flow) -> Verdict {
    match flow {
        Flow::Continue => Verdict::Continue,
        Flow::Hold => Verdict::Stop,
    }
}

/// Whether an attempt that ended so failed (a retry or fallback may follow): a 2xx or 3xx
/// status is an answer, whatever comes of it.
fn failed(outcome: AttemptOutcome) -> bool {
    !matches!(outcome, AttemptOutcome::Status(s) if s < 400)
}

impl Flight {
    /// The flight of a request whose first attempt was just written into it, at `now_ms`,
    /// with its routing trace if it asked for one and Switchboard's own time on it so far.
    pub(super) fn start(
        plugin: &Plugin,
        host: &mut impl Host,
        (start, replay): (Start, Replay),
        (trace, overhead): (Option<Box<Trace>>, Overhead),
        router: Option<Rc<RefCell<RouterFlight>>>,
        now_ms: u64,
    ) -> Flight {
        let config = &plugin.config;
        let mut out = Effects::new();
        let home = start.sticky.and_then(|s| s.home);
        let report = Report::new(start.virtual_model, trace, overhead).with_sticky_home(home);
        let machine = Machine::start(config, start, replay, now_ms, &mut out);
        let mut flight = Flight {
            machine,
            calls: Vec::new(),
            report,
            router,
        };
        flight.apply(plugin, host, out);
        flight
    }

    /// Runs an event of the router's answer on the machine, with the answer's facts read
    /// from the host only if it asks, and applies its effects.
    fn answer_event<'c, H: Host>(
        &mut self,
        plugin: &'c Plugin,
        host: &mut H,
        ends: bool,
        event: impl FnOnce(&mut Machine, &'c Config, &mut Facts<'_, H>, &mut Effects<'c>) -> Flow,
    ) -> Verdict {
        let config = &plugin.config;
        let mut out = Effects::new();
        let mut facts = Facts {
            host,
            now: None,
            ends,
        };
        let flow = event(&mut self.machine, config, &mut facts, &mut out);
        self.apply(plugin, host, out);
        verdict(flow)
    }

    /// The answer's headers, the router's or a streamed call-out's.
    fn on_headers(&mut self, plugin: &Plugin, host: &mut impl Host, end: bool) -> Verdict {
        let status = host.answer_status();
        if let Some(router) = &self.router {
            self.router_answered(plugin, host, Rc::clone(router));
        }
        self.answer_event(plugin, host, end, |m, config, facts, out| {
            m.on_answer_headers(config, status, facts, out)
        })
    }

    /// The router path's answer: the machine learns which target it is from, and what the
    /// attempts before it did (health, metrics, the trace) is applied now.
    fn router_answered(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        router: Rc<RefCell<RouterFlight>>,
    ) {
        let now = host.now_ms();
        let answer = router.borrow_mut().take_answered(&plugin.config, now);
        let last = answer.log.iter().rev().find_map(|e| match e {
            Effect::Attempt(a) => Some(a.kind),
            _ => None,
        });
        let made = (answer.attempts, answer.fallbacks);
        self.machine
            .router_answered(&plugin.config, answer.target, made, last);
        let mut out = Effects::new();
        for effect in answer.log {
            out.push(effect);
        }
        self.apply(plugin, host, out);
    }

    /// A chunk of the answer (`end`: the last).
    fn on_body(&mut self, plugin: &Plugin, host: &mut impl Host, end: bool) -> Verdict {
        self.answer_event(plugin, host, end, |m, config, facts, out| {
            m.on_answer_body(config, end, facts, out)
        })
    }

    /// The answer's trailers.
    fn on_trailers(&mut self, plugin: &Plugin, host: &mut impl Host) -> Verdict {
        self.answer_event(plugin, host, true, |m, config, _, out| {
            m.on_answer_trailers(config, out)
        })
    }

    /// Whether `id` is the streamed call-out whose answer the machine waits for (a stream
    /// abandoned for the next attempt is not).
    fn is_current_stream(&self, id: u64) -> bool {
        self.calls
            .iter()
            .any(|(host_id, call)| *host_id == id && self.machine.is_current_call(*call))
    }

    /// A call-out of this flight finished; false if `id` is none of its.
    fn on_call_done(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
        answer: Option<CallAnswer>,
    ) -> bool {
        let config = &plugin.config;
        let Some(at) = self.calls.iter().position(|(host_id, _)| *host_id == id) else {
            return false;
        };
        let (_, call) = self.calls.swap_remove(at);
        let mut out = Effects::new();
        let now = host.now_ms();
        self.machine
            .on_call_answer(config, call, answer, now, &mut out);
        self.apply(plugin, host, out);
        true
    }

    /// Applies effects in order; making an attempt reports back to the machine, whose new
    /// effects follow every effect already pending. Metrics, access-log fields and the trace
    /// come first, since the effect is consumed by its own step.
    fn apply<'c>(&mut self, plugin: &'c Plugin, host: &mut impl Host, mut out: Effects<'c>) {
        if out.is_empty() {
            return; // most answer events (every body chunk of a plain answer) have none
        }
        // The queue is allocated only when an attempt adds effects (most events make none).
        let mut first = out.take();
        let mut pending: VecDeque<Effect<'c>> = VecDeque::new();
        while let Some(effect) = first.next().or_else(|| pending.pop_front()) {
            let trace = self.note(plugin, host, &effect);
            self.apply_one(plugin, host, effect, trace, &mut pending);
        }
    }

    /// An effect's metrics, and at the request's ending its access-log fields; the trace
    /// header's value at the ending, if the request asked for one.
    fn note(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        effect: &Effect<'_>,
    ) -> Option<String> {
        let config = &plugin.config;
        if config.request_histograms {
            self.time_overhead(host, effect);
        }
        let trace = self
            .report
            .effect(plugin, effect, |id, w| host.write_metric(id, w));
        if let (true, Some(ending)) = (config.filter_state, report::ending(effect)) {
            let fallback = self.report.fallback();
            for (key, value) in
                access_log::outcome(config, ending.target, ending.attempts, fallback)
            {
                host.write_field(key, value);
            }
        }
        trace
    }

    /// Times Switchboard's own steps ([`crate::core::overhead`]): a failed attempt opens a
    /// gap, and the router's first attempt, already in the request, closes the decision's.
    /// On the router path Envoy's router makes the retries and fallbacks: not timed here.
    /// The host's clock is read only at these effects, never per body chunk.
    fn time_overhead(&mut self, host: &mut impl Host, effect: &Effect<'_>) {
        match effect {
            Effect::Record { outcome, .. } if self.router.is_none() && failed(*outcome) => {
                let now = host.now_us();
                self.report.overhead().failed(now);
            }
            Effect::Attempt(Attempt {
                kind: AttemptKind::First,
                call: None,
                ..
            }) if self.report.overhead().is_open() => {
                let now = host.now_us();
                self.report.overhead().attempt_left(now, 0);
            }
            _ => {}
        }
    }

    /// Performs one effect; `trace` is the trace header's value, at the request's ending.
    fn apply_one<'c>(
        &mut self,
        plugin: &'c Plugin,
        host: &mut impl Host,
        effect: Effect<'c>,
        trace: Option<String>,
        pending: &mut VecDeque<Effect<'c>>,
    ) {
        let config = &plugin.config;
        let name = config.header_names.trace.as_str();
        let trace = trace.as_deref().map(|value| (name, value));
        match effect {
            Effect::Attempt(attempt) => self.attempt(plugin, host, attempt, pending),
            Effect::ArmTimer { due_ms, token } => host.arm_timer(due_ms, token),
            Effect::Record { .. } | Effect::Samples { .. } => {
                if let Some(target) = host.record_health(config, &effect) {
                    let vm = self.report.virtual_model();
                    report::evicted(plugin, vm, target, |id, w| host.write_metric(id, w));
                }
            }
            Effect::Pin {
                virtual_model,
                session,
                window,
                target,
                idle_ms,
            } => {
                let clock = PinClock {
                    now_ms: host.now_ms(),
                    idle_ms,
                };
                host.pin(virtual_model, session, window, target, clock)
            }
            Effect::Deliver(delivery) => {
                if delivery.drop_content_length {
                    host.remove_response_header("content-length");
                }
                for name in delivery.hidden {
                    host.remove_response_header(name);
                }
                for (name, value) in delivery.headers.pairs().chain(trace) {
                    host.set_response_header(name, value);
                }
            }
            Effect::Reply(reply) => {
                let mut headers = reply.headers();
                headers.extend(trace);
                host.reply(reply.ending.status, &headers, &reply.body);
            }
            Effect::Fail(failure) => {
                let mut headers = failure.headers();
                headers.extend(trace);
                host.reply(
                    failure.error.status,
                    &headers,
                    failure.error.body.as_bytes(),
                );
            }
            Effect::ReplaceBody { with, .. } => host.replace_answer_body(with),
            Effect::EndAnswer { tail } => host.end_answer(&tail),
        }
    }

    /// Makes an attempt's call-out (the first attempt is already in the request the router
    /// sends) and tells the machine how it went; its effects join the pending ones.
    fn attempt<'c>(
        &mut self,
        plugin: &'c Plugin,
        host: &mut impl Host,
        attempt: Attempt<'c>,
        pending: &mut VecDeque<Effect<'c>>,
    ) {
        let config = &plugin.config;
        host.on_attempt(config, &attempt);
        let delay_ms = attempt.delay_ms;
        let Some(call) = attempt.call else {
            return;
        };
        report::log_attempt(config, attempt.target, attempt.number, &call.outbound);
        let streamed = self.machine.streams_attempts();
        let sent = self
            .machine
            .call_request(&call, &config.header_names)
            .and_then(|request| {
                if streamed {
                    host.start_stream(&request)
                } else {
                    host.dispatch(&request)
                }
            });
        let mut more = Effects::new();
        match sent {
            Some(id) => {
                self.calls.push((id, call.id));
                if self.report.overhead().is_open() {
                    let now = host.now_us();
                    self.report.overhead().attempt_left(now, delay_ms);
                }
                self.machine.on_dispatched(call.id, &mut more);
            }
            None => {
                let now = host.now_ms();
                self.machine
                    .on_dispatch_refused(config, call.id, now, &mut more)
            }
        }
        pending.extend(more.take());
    }
}

impl Stream {
    /// The router's response headers arrived (`end`: with no body after them).
    pub fn on_response_headers(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        end: bool,
    ) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => flight.on_headers(plugin, host, end),
            _ => Verdict::Continue,
        }
    }

    /// A chunk of the router's answer (`end`: the last).
    pub fn on_response_body(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        end: bool,
    ) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => flight.on_body(plugin, host, end),
            _ => Verdict::Continue,
        }
    }

    /// The router's answer's trailers arrived.
    pub fn on_response_trailers(&mut self, plugin: &Plugin, host: &mut impl Host) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => flight.on_trailers(plugin, host),
            _ => Verdict::Continue,
        }
    }

    /// The flight whose streamed call-out `id` is awaited (an abandoned one's events are
    /// dropped: [`Verdict::Stop`] keeps them from the client).
    fn streaming(&mut self, id: u64) -> Option<&mut Flight> {
        match &mut self.phase {
            Phase::Forwarded(flight) if flight.is_current_stream(id) => Some(flight),
            _ => None,
        }
    }

    /// The answer headers of the streamed call-out `id` arrived (`end`: with no body); the
    /// host's answer accessors read that answer, as the router's events read the router's.
    /// [`Verdict::Continue`]: send what the host holds of it to the client.
    pub fn on_stream_headers(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
        end: bool,
    ) -> Verdict {
        self.streaming(id)
            .map_or(Verdict::Stop, |f| f.on_headers(plugin, host, end))
    }

    /// A chunk of the streamed call-out `id`'s answer (`end`: the last).
    pub fn on_stream_body(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
        end: bool,
    ) -> Verdict {
        self.streaming(id)
            .map_or(Verdict::Stop, |f| f.on_body(plugin, host, end))
    }

    /// The streamed call-out `id`'s answer ended with trailers.
    pub fn on_stream_trailers(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
    ) -> Verdict {
        self.streaming(id)
            .map_or(Verdict::Stop, |f| f.on_trailers(plugin, host))
    }

    /// The streamed call-out `id` was reset (or failed to connect) before its end.
    pub fn on_stream_reset(&mut self, plugin: &Plugin, host: &mut impl Host, id: u64) {
        if let Some(flight) = self.streaming(id) {
            flight.answer_event(plugin, host, true, |m, config, facts, out| {
                m.on_answer_reset(config, facts, out);
                Flow::Continue
            });
        }
    }

    /// A call-out this stream made finished: `answer` is `None` when it got none (reset,
    /// timeout, refused). False if the stream made no call with this id (it may belong to a
    /// stream that went away).
    pub fn on_call_done(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
        answer: Option<CallAnswer>,
    ) -> bool {
        if let Phase::Classifying(_) = self.phase {
            let body = answer.as_ref().map(|a| a.body.as_slice());
            return self.on_classifier_answer(plugin, host, id, body);
        }
        match &mut self.phase {
            Phase::Forwarded(flight) => flight.on_call_done(plugin, host, id, answer),
            _ => false,
        }
    }

    /// A timer this stream armed fired.
    pub fn on_timer(&mut self, plugin: &Plugin, host: &mut impl Host, token: u64) {
        let config = &plugin.config;
        if let Phase::Forwarded(flight) = &mut self.phase {
            let mut out = Effects::new();
            let now = host.now_ms();
            flight.machine.on_timer(config, token, now, &mut out);
            flight.apply(plugin, host, out);
        }
    }

    /// The request is over and its access log is due: a stream the router's reset cut counts
    /// against its target (for a host that cannot forward streams itself).
    pub fn on_logged(&mut self, plugin: &Plugin, host: &mut impl Host) {
        if let Phase::Forwarded(flight) = &mut self.phase {
            flight.answer_event(plugin, host, true, |m, config, facts, out| {
                m.on_logged(config, facts, out);
                Flow::Continue
            });
        }
    }

    /// The stream went away: late answers and timers are ignored from now on. What the
    /// request did, if it was forwarded.
    pub fn on_destroyed(&mut self) -> Option<Summary> {
        match &mut self.phase {
            Phase::Forwarded(flight) => Some(flight.machine.on_destroyed()),
            _ => None,
        }
    }
}
