//! Drives a forwarded request's flight machine ([`crate::core::flight`]): turns host
//! callbacks into its events and applies the effects it returns. No decision is made here.

use super::host::{self, Clock, Headers};
use super::metrics;
use super::report::Report;
use super::runtime::{Runtime, Slot};
use crate::core::config::Config;
use crate::core::flight::{
    AnswerFacts, Attempt, CallAnswer, Effect, Effects, Flow, Machine, Replay, Start,
};
use crate::core::routing::RoutingState;
use crate::core::trace::Trace;
use proxy_wasm::types::Action;
use std::rc::Rc;

/// The router's answer in hand, read from the host only when the machine asks.
struct RouterAnswer<'a> {
    clock: &'a Clock,
    /// The body held so far: after the filter paused the answer, Envoy's buffered body with
    /// the chunk just received.
    body_size: usize,
    /// It ended with the headers in hand.
    ends: bool,
}

impl AnswerFacts for RouterAnswer<'_> {
    fn now_ms(&mut self) -> u64 {
        self.clock.now_ms()
    }

    fn code_details(&mut self) -> Option<String> {
        host::property(&["response", "code_details"])
    }

    fn headers(&mut self) -> Headers {
        host::response_headers()
    }

    fn chunk(&mut self) -> Vec<u8> {
        if self.body_size > 0 {
            host::response_body(self.body_size)
        } else {
            Vec::new()
        }
    }

    fn ends_with_headers(&mut self) -> bool {
        self.ends
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Hold => Action::Pause,
    }
}

/// Starts the flight of stream `context_id`, whose first attempt the router now sends.
pub fn start(
    rt: &Runtime,
    context_id: u32,
    config: Rc<Config>,
    (start, replay): (Start, Replay),
    now_ms: u64,
    trace: Option<Box<Trace>>,
) {
    let mut fx = Effects::new();
    let report = Report::new(start.virtual_model, trace);
    let machine = Machine::start(&config, start, replay, now_ms, &mut fx);
    let mut slot = Slot {
        config: Rc::clone(&config),
        machine,
        report,
    };
    let flight = (&mut slot.machine, &mut slot.report);
    apply(rt, context_id, &config, flight, fx, &Clock::default());
    rt.add_flight(context_id, slot);
}

/// Runs one answer event on stream `context_id`'s machine and applies its effects.
fn answer_event(
    rt: &Runtime,
    context_id: u32,
    (body_size, ends): (usize, bool),
    event: impl for<'c> FnOnce(
        &mut Machine,
        &'c Config,
        &mut RouterAnswer<'_>,
        &mut Effects<'c>,
    ) -> Flow,
) -> Action {
    let clock = Clock::default();
    let flow = rt.with_flight(context_id, |slot| {
        let mut facts = RouterAnswer {
            clock: &clock,
            body_size,
            ends,
        };
        let mut fx = Effects::new();
        let config = &*slot.config;
        let flow = event(&mut slot.machine, config, &mut facts, &mut fx);
        let flight = (&mut slot.machine, &mut slot.report);
        apply(rt, context_id, config, flight, fx, &clock);
        flow
    });
    action(flow.unwrap_or(Flow::Continue))
}

/// The router's response headers arrived (`end`: with no body after them).
pub fn on_answer_headers(rt: &Runtime, context_id: u32, end: bool) -> Action {
    // One host call for the status; the rest only if the machine asks.
    let status = host::response_header(":status")
        .and_then(|s| std::str::from_utf8(&s).ok()?.parse::<u16>().ok())
        .unwrap_or(502);
    answer_event(rt, context_id, (0, end), |m, config, facts, fx| {
        m.on_answer_headers(config, status, facts, fx)
    })
}

/// A chunk of the router's response body (`size`: the body held so far).
pub fn on_answer_body(rt: &Runtime, context_id: u32, size: usize, end: bool) -> Action {
    answer_event(rt, context_id, (size, end), |m, config, facts, fx| {
        m.on_answer_body(config, end, facts, fx)
    })
}

/// The router's response trailers.
pub fn on_answer_trailers(rt: &Runtime, context_id: u32) -> Action {
    answer_event(rt, context_id, (0, true), |m, config, _, fx| {
        m.on_answer_trailers(config, fx)
    })
}

/// A timer of stream `context_id` fired (on the root's tick, with the stream made effective).
pub fn on_timer(rt: &Runtime, context_id: u32, token: u64, now_ms: u64) {
    let clock = Clock::default();
    rt.with_flight(context_id, |slot| {
        let mut fx = Effects::new();
        let config = &*slot.config;
        slot.machine.on_timer(config, token, now_ms, &mut fx);
        let flight = (&mut slot.machine, &mut slot.report);
        apply(rt, context_id, config, flight, fx, &clock);
    });
}

/// A call finished (in the root or in the stream that made it): hands the answer to its
/// request's machine, acting on that request's stream.
pub fn on_call_response(rt: &Runtime, token: u32, num_headers: usize, body_size: usize) {
    // Read the answer before switching streams: it belongs to the context it came to.
    let (headers, body) = host::call_response(body_size);
    let Some((context_id, call)) = rt.take_call(token) else {
        return;
    };
    if !host::set_effective_context(context_id) {
        return;
    }
    let answer = (num_headers > 0).then_some(CallAnswer { headers, body });
    let clock = Clock::default();
    let now = clock.now_ms();
    rt.with_flight(context_id, |slot| {
        let mut fx = Effects::new();
        let config = &*slot.config;
        slot.machine
            .on_call_answer(config, call, answer, now, &mut fx);
        let flight = (&mut slot.machine, &mut slot.report);
        apply(rt, context_id, config, flight, fx, &clock);
    });
}

/// Stream `context_id` went away.
pub fn on_destroyed(rt: &Runtime, context_id: u32) {
    if let Some(mut slot) = rt.remove_flight(context_id) {
        slot.machine.on_destroyed();
    }
}

/// The stream whose machine's effects are being applied.
struct Stream<'a> {
    rt: &'a Runtime,
    context_id: u32,
    /// The host time, read once per callback and only if needed.
    clock: &'a Clock,
}

/// Applies effects in order; a call-out's fate (dispatched or refused) is an event whose own
/// effects follow.
fn apply<'c>(
    rt: &Runtime,
    context_id: u32,
    config: &'c Config,
    (machine, report): (&mut Machine, &mut Report),
    mut fx: Effects<'c>,
    clock: &Clock,
) {
    let stream = Stream {
        rt,
        context_id,
        clock,
    };
    while !fx.is_empty() {
        let mut next = Effects::new();
        for effect in fx.take() {
            // Metrics, access log and trace first: the effect is consumed below.
            let trace = report.effect(config, &effect);
            let noted = (effect, trace.as_deref(), report.virtual_model());
            stream.apply_one(config, machine, noted, &mut next);
        }
        fx = next;
    }
}

impl Stream<'_> {
    fn apply_one<'c>(
        &self,
        config: &'c Config,
        machine: &mut Machine,
        (effect, trace, vm): (Effect<'c>, Option<&str>, Option<usize>),
        next: &mut Effects<'c>,
    ) {
        let rt = self.rt;
        let trace = trace.map(|t| (config.header_names.trace.as_str(), t));
        match effect {
            Effect::Attempt(attempt) => self.dispatch(config, machine, attempt, next),
            Effect::ArmTimer { due_ms, token } => rt.add_timer(due_ms, self.context_id, token),
            Effect::Record { .. } | Effect::Samples { .. } => {
                if let Some(target) = rt.apply_health(config, &effect, || self.clock.now_ms()) {
                    crate::core::report::evicted(config, vm, target, metrics::write);
                }
            }
            Effect::Pin {
                virtual_model,
                session,
                window,
                target,
            } => rt.pin(virtual_model, session, window, target),
            Effect::Deliver(delivery) => {
                if delivery.drop_content_length {
                    host::remove_response_header("content-length");
                }
                for name in delivery.hidden {
                    host::remove_response_header(name);
                }
                for (name, value) in delivery.headers.pairs().chain(trace) {
                    host::set_response_header(name, value);
                }
            }
            Effect::Reply(reply) => {
                let mut headers = reply.headers();
                headers.extend(trace);
                host::send_reply(reply.ending.status, headers, &reply.body);
            }
            Effect::Fail(failure) => {
                let mut headers = failure.headers();
                headers.extend(trace);
                host::send_reply(failure.error.status, headers, failure.error.body.as_bytes());
            }
            Effect::ReplaceBody { len, with } => host::replace_response_body(len, &with),
        }
    }

    /// Makes an attempt's call-out and tells the machine how it went. The router's attempt
    /// was already written into the request.
    fn dispatch<'c>(
        &self,
        config: &'c Config,
        machine: &mut Machine,
        attempt: Attempt<'c>,
        next: &mut Effects<'c>,
    ) {
        let Some(call) = attempt.call else {
            return;
        };
        crate::core::report::log_attempt(config, attempt.target, attempt.number, &call.outbound);
        let token = machine
            .call_request(&call, &config.header_names)
            .and_then(|r| host::dispatch(r.cluster, r.headers, r.body, r.timeout_ms));
        match token {
            Some(token) => {
                self.rt.add_call(token, self.context_id, call.id);
                machine.on_dispatched(call.id, next);
            }
            None => machine.on_dispatch_refused(config, call.id, self.clock.now_ms(), next),
        }
    }
}
