//! One forwarded request after its first attempt left through Envoy's router: the core's
//! flight machine ([`crate::core::flight`]) decides retries, fallbacks and timeouts; this file
//! feeds it Envoy's events and applies its effects with Envoy's callbacks.
//!
//! Call-outs are `http_filter_http_callout` (their answers come to this stream's
//! `on_http_filter_http_callout_done`); timers are the module's timer thread posting to the
//! stream's scheduler ([`super::timer`]); a held answer is replaced with a local reply.

use super::filter::{After, Verdict};
use super::host::{BodyAt, Side, Stream};
use super::plugin::Plugin;
use super::store::{self, Shared};
use super::timer::{self, Wake};
use crate::core::access_log;
use crate::core::config::Config;
use crate::core::flight::{
    AnswerFacts, CallAnswer, CallId, Effect, Effects, Flow, Machine, Replay, Start,
};
use crate::core::headers::Headers;
use crate::core::report::{self, Report};
use crate::core::routing::pins;
use crate::core::trace::Trace;
use std::collections::VecDeque;
use std::sync::Arc;

/// The state of one forwarded request.
pub struct Flight {
    machine: Machine,
    /// Envoy's ids of the call-outs made, with the machine's.
    calls: Vec<(u64, CallId)>,
    /// The stream's scheduler, made when the first timer is armed.
    wake: Option<Arc<Wake>>,
    /// Its metrics' bookkeeping.
    report: Report,
}

/// What the machine may ask about the router's answer, read from Envoy only when asked.
struct Facts<'s> {
    stream: &'s Stream,
    now: Option<u64>,
    /// The answer ended with the headers in hand.
    ends: bool,
}

impl AnswerFacts for Facts<'_> {
    fn now_ms(&mut self) -> u64 {
        *self.now.get_or_insert_with(super::now_ms)
    }

    fn code_details(&mut self) -> Option<String> {
        self.stream.response_code_details()
    }

    fn headers(&mut self) -> Headers {
        self.stream.headers(Side::Response)
    }

    fn chunk(&mut self) -> Vec<u8> {
        // After the machine held the answer, the earlier chunks wait in Envoy's buffer.
        self.stream.body(Side::Response, BodyAt::BufferAndChunk)
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

impl Flight {
    /// The flight of a request whose first attempt was just written into it, at `now_ms`,
    /// with its routing trace if it asked for one.
    pub fn start(
        s: &mut Stream,
        plugin: &Plugin,
        ((start, replay), trace): ((Start, Replay), Option<Box<Trace>>),
        now_ms: u64,
        after: &mut Vec<After>,
    ) -> Flight {
        let mut out = Effects::new();
        let report = Report::new(start.virtual_model, trace);
        let machine = Machine::start(&plugin.config, start, replay, now_ms, &mut out);
        let mut flight = Flight {
            machine,
            calls: Vec::new(),
            wake: None,
            report,
        };
        flight.apply(s, plugin, out, after);
        flight
    }

    /// The router's response headers arrived (`end`: with no body after them).
    pub fn on_response_headers(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        end: bool,
        after: &mut Vec<After>,
    ) -> Verdict {
        let status = s
            .header(Side::Response, ":status")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .unwrap_or(502);
        self.answer_event(s, plugin, end, after, |m, config, facts, out| {
            m.on_answer_headers(config, status, facts, out)
        })
    }

    /// A chunk of the router's answer.
    pub fn on_response_body(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        end: bool,
        after: &mut Vec<After>,
    ) -> Verdict {
        self.answer_event(s, plugin, end, after, |m, config, facts, out| {
            m.on_answer_body(config, end, facts, out)
        })
    }

    /// Runs an event of the router's answer on the machine, with the answer's facts read
    /// from Envoy only if it asks, and applies its effects.
    fn answer_event<'c>(
        &mut self,
        s: &mut Stream,
        plugin: &'c Plugin,
        ends: bool,
        after: &mut Vec<After>,
        event: impl FnOnce(&mut Machine, &'c Config, &mut Facts<'_>, &mut Effects<'c>) -> Flow,
    ) -> Verdict {
        let mut out = Effects::new();
        let mut facts = Facts {
            stream: s,
            now: None,
            ends,
        };
        let flow = event(&mut self.machine, &plugin.config, &mut facts, &mut out);
        self.apply(s, plugin, out, after);
        verdict(flow)
    }

    /// The router's answer's trailers arrived.
    pub fn on_response_trailers(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        after: &mut Vec<After>,
    ) -> Verdict {
        self.answer_event(s, plugin, true, after, |m, config, _, out| {
            m.on_answer_trailers(config, out)
        })
    }

    /// A call-out finished: `answer` is `None` when it got none (reset, timeout, refused).
    /// False if it is none of this flight's.
    pub fn on_callout_done(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        id: u64,
        answer: Option<(Headers, Vec<u8>)>,
        after: &mut Vec<After>,
    ) -> bool {
        let Some(at) = self.calls.iter().position(|(host, _)| *host == id) else {
            return false;
        };
        let (_, call) = self.calls.swap_remove(at);
        let answer = answer.map(|(headers, body)| CallAnswer { headers, body });
        let mut out = Effects::new();
        self.machine
            .on_call_answer(&plugin.config, call, answer, super::now_ms(), &mut out);
        self.apply(s, plugin, out, after);
        true
    }

    /// A timer of this flight fired.
    pub fn on_timer(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        token: u64,
        after: &mut Vec<After>,
    ) {
        let mut out = Effects::new();
        self.machine
            .on_timer(&plugin.config, token, super::now_ms(), &mut out);
        self.apply(s, plugin, out, after);
    }

    /// Applies effects in order; making an attempt reports back to the machine, whose new
    /// effects follow.
    fn apply<'c>(
        &mut self,
        s: &mut Stream,
        plugin: &'c Plugin,
        mut out: Effects<'c>,
        after: &mut Vec<After>,
    ) {
        if out.is_empty() {
            return; // most answer events (every body chunk of a plain answer) have none
        }
        let config = &plugin.config;
        // An attempt's own effects go after every effect already pending; only then is the
        // queue allocated (most events make no attempt).
        let mut first = out.take();
        let mut pending: VecDeque<Effect<'c>> = VecDeque::new();
        while let Some(effect) = first.next().or_else(|| pending.pop_front()) {
            // Metrics and trace first: the effect is consumed below.
            let trace = self
                .report
                .effect(config, &effect, |id, w| s.write_metric(id, w))
                .map(|t| (config.header_names.trace.clone(), t));
            if let (true, Some(ending)) = (config.filter_state, report::ending(&effect)) {
                let fallback = self.report.fallback();
                s.write_fields(access_log::outcome(
                    config,
                    ending.target,
                    ending.attempts,
                    fallback,
                ));
            }
            match effect {
                Effect::Attempt(attempt) => {
                    // The first attempt is already in the request the router sends.
                    let Some(call) = attempt.call else {
                        continue;
                    };
                    report::log_attempt(config, attempt.target, attempt.number, &call.outbound);
                    let sent = self
                        .machine
                        .call_request(&call, &config.header_names)
                        .and_then(|r| s.callout(r.cluster, &r.headers, r.body, r.timeout_ms));
                    let mut more = Effects::new();
                    match sent {
                        Some(host) => {
                            self.calls.push((host, call.id));
                            self.machine.on_dispatched(call.id, &mut more);
                        }
                        None => self.machine.on_dispatch_refused(
                            config,
                            call.id,
                            super::now_ms(),
                            &mut more,
                        ),
                    }
                    pending.extend(more.take());
                }
                Effect::ArmTimer { due_ms, token } => {
                    let wake = match &self.wake {
                        Some(w) => Arc::clone(w),
                        None => {
                            let w = Wake::new(s.api(), s.new_scheduler());
                            self.wake = Some(Arc::clone(&w));
                            w
                        }
                    };
                    timer::arm(&wake, due_ms, token);
                }
                Effect::Record { .. } | Effect::Samples { .. } => {
                    if let Some(target) = store::apply_health(plugin.id, config, &effect) {
                        let vm = self.report.virtual_model();
                        report::evicted(config, vm, target, |id, w| s.write_metric(id, w));
                    }
                }
                Effect::Pin {
                    virtual_model,
                    session,
                    window,
                    target,
                } => {
                    let secret = store::slot_secret();
                    if !pins::save(&Shared, secret, virtual_model, session, window, target) {
                        log::debug!("no room to pin a sticky session of {virtual_model}");
                    }
                }
                Effect::Deliver(delivery) => {
                    if delivery.drop_content_length {
                        s.remove_header(Side::Response, "content-length");
                    }
                    for name in delivery.hidden {
                        s.remove_header(Side::Response, name);
                    }
                    for (name, value) in delivery.headers.pairs() {
                        s.set_header(Side::Response, name, value.as_bytes());
                    }
                    if let Some((name, value)) = &trace {
                        s.set_header(Side::Response, name, value.as_bytes());
                    }
                }
                Effect::Reply(reply) => after.push(After::Reply {
                    status: reply.ending.status,
                    headers: owned(reply.headers()).into_iter().chain(trace).collect(),
                    body: reply.body,
                }),
                Effect::Fail(failure) => after.push(After::Reply {
                    status: failure.error.status,
                    headers: owned(failure.headers()).into_iter().chain(trace).collect(),
                    body: failure.error.body.into_bytes(),
                }),
                Effect::ReplaceBody { with, .. } => {
                    s.replace_body(Side::Response, BodyAt::BufferAndChunk, [with.as_slice()]);
                }
            }
        }
    }
}

impl Drop for Flight {
    /// The stream ended: late answers and timers are ignored, and pending timers find the
    /// stream's scheduler gone.
    fn drop(&mut self) {
        self.machine.on_destroyed();
        if let Some(wake) = &self.wake {
            wake.close();
        }
    }
}

fn owned(pairs: Vec<(&str, &str)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
