//! The per-request context: pauses an LLM request until its body is in, asks the core where it
//! goes, writes the decision into the request, and hands the response side to its flight
//! machine ([`super::flight`]).
//!
//! Headers of an LLM request are paused until the body has arrived (Envoy must run with
//! `allow_on_headers_stop_iteration: true`).

use super::flight;
use super::host::{self, Headers};
use super::report::{self, PinProbe};
use super::runtime::Runtime;
use crate::core::access_log::DecisionFacts;
use crate::core::admission::{admit, route_stored, Admission, StoredPath};
use crate::core::batch;
use crate::core::config::{Config, HeaderNames, Tier};
use crate::core::decision::{
    classifier_call, decide_stored_path, decide_with_tier, ClassifierCall, Decision,
};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::flight::{Replay, Start};
use crate::core::outbound::Outbound;
use crate::core::report as core_report;
use crate::core::routing::classifier::parse_answer;
use crate::core::routing::{HealthInput, Plan};
use crate::core::trace::Trace;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

/// Where the request side of a stream is.
enum Phase {
    /// Not an LLM request: Switchboard leaves it alone.
    PassThrough,
    /// An LLM request whose body is being buffered, with its headers as the client sent them.
    Inspecting(Endpoint, Headers),
    /// Waiting for a complexity virtual model's classifier model to name the tier.
    Classifying {
        /// The endpoint called.
        endpoint: Endpoint,
        /// The client's headers.
        headers: Headers,
        /// The client's body.
        body: Vec<u8>,
        /// The classifier call.
        token: u32,
    },
    /// Batch input being buffered to check it names no virtual model: (path, content type).
    CheckingBatch(String, String),
    /// Forwarded; its flight machine, in the runtime's map, owns the rest.
    Forwarded,
    /// Switchboard answered it with a local reply.
    Replied,
}

/// One per HTTP stream.
pub struct Http {
    context_id: u32,
    config: Option<Rc<Config>>,
    runtime: Rc<Runtime>,
    rng: fastrand::Rng,
    phase: Phase,
    /// The client calls an Anthropic API: errors go in Anthropic's shape.
    anthropic: bool,
    /// The routing trace, from the decision until the flight takes it (when asked for).
    trace: Option<Box<Trace>>,
}

impl Http {
    /// A context for one request, sharing the root's compiled config and runtime.
    pub fn new(
        context_id: u32,
        config: Option<Rc<Config>>,
        runtime: Rc<Runtime>,
        rng: fastrand::Rng,
    ) -> Self {
        Http {
            context_id,
            config,
            runtime,
            rng,
            phase: Phase::PassThrough,
            anthropic: false,
            trace: None,
        }
    }

    fn reply(&mut self, reply: &ErrorReply) -> Action {
        if let Some(note) = &reply.operator_note {
            log::warn!("{note}");
        } else if reply.status >= 500 {
            // The request named something routable, yet routing found nowhere to send it.
            log::warn!("routing failed: {} {}", reply.status, reply.body);
        }
        let shaped;
        let reply = if self.anthropic {
            shaped = reply.in_anthropic_shape();
            &shaped
        } else {
            reply
        };
        host::send_json_reply(reply.status, &reply.body, vec![]);
        self.phase = Phase::Replied;
        Action::Pause
    }

    /// Routes the fully buffered request, or answers it with an error.
    fn route(&mut self, config: Rc<Config>, body_size: usize) -> Action {
        let Phase::Inspecting(endpoint, headers) =
            std::mem::replace(&mut self.phase, Phase::Replied)
        else {
            return Action::Continue;
        };
        let body = host::request_body(body_size);
        // A complexity model with a classifier asks it first; its call has its own timeout,
        // after which the heuristic decides.
        if let Some(call) = classifier_call(&config, endpoint, &body, &headers) {
            if let Some(token) = Self::call_classifier(&config, &call) {
                self.phase = Phase::Classifying {
                    endpoint,
                    headers,
                    body,
                    token,
                };
                return Action::Pause;
            }
        }
        self.decide_and_forward(config, endpoint, headers, body, None)
    }

    fn decide_and_forward(
        &mut self,
        config: Rc<Config>,
        endpoint: Endpoint,
        headers: Headers,
        body: Vec<u8>,
        tier: Option<Tier>,
    ) -> Action {
        let started_ns = host::now_ns();
        let now = started_ns / 1_000_000;
        let rng = &mut self.rng;
        let runtime = &*self.runtime;
        let state = PinProbe::new(runtime);
        let traced = core_report::wants_trace(&config, &headers);
        let decided = runtime.with_health(&config, now, |health| {
            let _span = super::profile::span("core: inspect, decide, rewrite");
            let decided = decide_with_tier(
                &config, endpoint, &body, &headers, health, &state, tier, rng,
            );
            let trace = match &decided {
                Ok(d) if traced => Some(core_report::trace(
                    &config, endpoint, &headers, &state, &d.plan, health,
                )),
                _ => None,
            };
            (decided, trace)
        });
        let (decided, trace) = decided;
        self.trace = trace;
        match decided {
            Ok(decision) => {
                let _span = super::profile::span("forward (own code)");
                let timed = config.times_decisions();
                let facts = DecisionFacts {
                    sticky_hit: state.sticky_hit(),
                    decision_us: if timed {
                        host::now_ns().saturating_sub(started_ns) / 1000
                    } else {
                        0
                    },
                };
                report::decided(&config, &decision.plan, facts);
                self.forward(&config, endpoint, decision, body, headers, now)
            }
            Err(reply) => self.reply(&reply),
        }
    }

    /// Asks the classifier model for the tier, in that model's own request shape.
    fn call_classifier(config: &Config, call: &ClassifierCall) -> Option<u32> {
        let out = call.outbound(config)?;
        let length = call.body.len().to_string();
        let headers = out.call_headers(&call.headers, &config.header_names, &length);
        host::dispatch(out.cluster, headers, &call.body, call.timeout_ms)
    }

    /// Buffers batch input and refuses it if it names a virtual model; otherwise lets it pass
    /// unchanged. Input larger than the body limit is passed on unchecked rather than refused.
    fn check_batch(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        if body_size > config.max_request_body_bytes {
            self.phase = Phase::PassThrough;
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.finish_batch(body_size)
    }

    /// Checks the whole buffered batch input (`size` bytes, or all of it).
    fn finish_batch(&mut self, size: usize) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        let Phase::CheckingBatch(path, content_type) =
            std::mem::replace(&mut self.phase, Phase::PassThrough)
        else {
            return Action::Continue;
        };
        match batch::check(&path, &content_type, &host::request_body(size), &config) {
            Ok(()) => Action::Continue,
            Err(reply) => self.reply(&reply),
        }
    }

    fn forward(
        &mut self,
        config: &Rc<Config>,
        endpoint: Endpoint,
        decision: Decision<'_>,
        body: Vec<u8>,
        headers: Headers,
        now: u64,
    ) -> Action {
        if let Err(reply) = Self::apply(&decision.outbound, &body, &headers, &config.header_names) {
            return self.reply(&reply);
        }
        core_report::log_attempt(config, decision.target, 1, &decision.outbound);
        let (start, replay) = decision.into_flight(endpoint, headers, body);
        self.start_flight(config, start, replay, now)
    }

    /// Hands the request to its flight machine.
    fn start_flight(
        &mut self,
        config: &Rc<Config>,
        start: Start,
        replay: Replay,
        now: u64,
    ) -> Action {
        let config = Rc::clone(config);
        let trace = self.trace.take();
        let flight = (start, replay);
        flight::start(&self.runtime, self.context_id, config, flight, now, trace);
        self.phase = Phase::Forwarded;
        Action::Continue
    }

    /// A retrieve, input-items list, cancel or delete of a stored response: to the target
    /// holding it, with the provider's id in the path; retries there, no fallback
    /// ([`route_stored`]).
    fn forward_stored(
        &mut self,
        config: &Rc<Config>,
        headers: Headers,
        path: &StoredPath,
    ) -> Action {
        let now = host::now_ms();
        let (rng, runtime) = (&mut self.rng, &*self.runtime);
        let pick = |index| {
            runtime.with_health(config, now, |health| {
                decide_stored_path(config, index, &headers, health, runtime, rng)
            })
        };
        let route = match route_stored(config, &headers, path, runtime, pick) {
            Ok(route) => route,
            Err(reply) => return self.reply(&reply),
        };
        if let Err(reply) = Self::apply(&route.outbound, &[], &headers, &config.header_names) {
            return self.reply(&reply);
        }
        core_report::log_attempt(config, route.target, 1, &route.outbound);
        let plan = Plan {
            candidates: vec![route.target],
            virtual_model: route.start.virtual_model,
            sticky: None,
            pinned: true,
        };
        // Its id names its target: no decision time (0) is recorded.
        report::decided(config, &plan, DecisionFacts::default());
        if core_report::wants_trace(config, &headers) {
            let health = &HealthInput::NONE;
            self.trace = Some(Box::new(Trace::of_plan(config, &plan, health, Vec::new())));
        }
        let replay = route.replay(headers);
        self.start_flight(config, route.start, replay, now)
    }

    /// Writes the router's attempt into the request: body edits, then path, authority and
    /// headers, and the cluster header last, so the route is re-selected with the final
    /// headers.
    fn apply(
        out: &Outbound<'_>,
        body: &[u8],
        headers: &Headers,
        names: &HeaderNames,
    ) -> Result<(), ErrorReply> {
        if let Some(edits) = &out.edits {
            if !host::edit_request_body(body, edits) {
                return Err(ErrorReply::invalid_json("the body could not be rewritten"));
            }
            // The body is now whole and of known length: send it that way upstream. A rewrite
            // keeps the length when it can (core::request::rewrite), and then the client's
            // content-length still holds.
            let new_len = edits.new_len(body);
            let chunked = headers.get("transfer-encoding").is_some();
            if chunked {
                host::remove_request_header("transfer-encoding");
            }
            if chunked || new_len != body.len() || headers.get("content-length").is_none() {
                host::set_request_header("content-length", &new_len.to_string());
            }
        }
        if let Some(path) = &out.path {
            host::set_request_header(":path", path);
        }
        if let Some(authority) = out.authority {
            host::set_request_header(":authority", authority);
        }
        for name in &out.remove {
            host::remove_request_header(name);
        }
        for (name, value) in &out.set {
            host::set_request_header(name, value);
        }
        host::set_request_header(&names.cluster, out.cluster);
        Ok(())
    }
}

impl Context for Http {
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let _span = super::profile::span("on_http_call_response");
        if matches!(&self.phase, Phase::Classifying { token: t, .. } if *t == token) {
            let (_, answer) = host::call_response(body_size);
            // No answer (timeout, failure) or no tier in it: the heuristic decides.
            let tier = (num_headers > 0).then(|| parse_answer(&answer)).flatten();
            let (
                Phase::Classifying {
                    endpoint,
                    headers,
                    body,
                    ..
                },
                Some(config),
            ) = (
                std::mem::replace(&mut self.phase, Phase::Replied),
                self.config.clone(),
            )
            else {
                return;
            };
            if self.decide_and_forward(config, endpoint, headers, body, tier) == Action::Continue {
                host::resume_request();
            }
            return;
        }
        flight::on_call_response(&self.runtime, token, num_headers, body_size);
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        if let Phase::Forwarded = self.phase {
            flight::on_destroyed(&self.runtime, self.context_id);
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_request_headers");
        let Some(config) = self.config.clone() else {
            // Never fail open: without a config, no client-chosen cluster either.
            host::remove_request_header("x-switchboard-cluster");
            return Action::Continue;
        };
        // One host call for every header: cheaper than several lookups, and these are the
        // client's headers as sent, which a retry or fallback replays.
        let headers = host::request_headers();
        let admission = admit(&config, &headers, end_of_stream);
        let strip = admission.client_headers_to_strip(&config.header_names, &headers);
        for name in strip.into_iter().flatten() {
            host::remove_request_header(name);
        }
        match admission {
            Admission::Pass { .. } => Action::Continue,
            Admission::ModelList(json) => {
                let headers = vec![("content-type", "application/json")];
                host::send_reply(200, headers, json.as_bytes());
                self.phase = Phase::Replied;
                Action::Pause
            }
            Admission::Refuse { error, endpoint } => {
                self.anthropic = endpoint.is_some_and(Endpoint::speaks_anthropic);
                self.reply(&error)
            }
            Admission::Inspect(endpoint) => {
                self.anthropic = endpoint.speaks_anthropic();
                self.phase = Phase::Inspecting(endpoint, headers);
                Action::Pause
            }
            Admission::CheckBatch { path, content_type } => {
                self.phase = Phase::CheckingBatch(path, content_type);
                Action::Pause
            }
            Admission::Stored(path) => self.forward_stored(&config, headers, &path),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_request_body");
        if let Phase::CheckingBatch(..) = self.phase {
            return self.check_batch(body_size, end_of_stream);
        }
        let (Phase::Inspecting(..), Some(config)) = (&self.phase, self.config.clone()) else {
            return Action::Continue;
        };
        if body_size > config.max_request_body_bytes {
            return self.reply(&ErrorReply::body_too_large(config.max_request_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.route(config, body_size)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        let _span = super::profile::span("on_http_request_trailers");
        // A body that ends with trailers never sees end_of_stream in the body callback.
        match (&self.phase, self.config.clone()) {
            // The body callbacks already held it to the size limit.
            (Phase::CheckingBatch(..), _) => self.finish_batch(usize::MAX),
            (Phase::Inspecting(..), Some(config)) => self.route(config, usize::MAX),
            _ => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_response_headers");
        match &self.phase {
            Phase::Forwarded => {
                flight::on_answer_headers(&self.runtime, self.context_id, end_of_stream)
            }
            _ => Action::Continue,
        }
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        let _span = super::profile::span("on_http_response_trailers");
        match &self.phase {
            Phase::Forwarded => flight::on_answer_trailers(&self.runtime, self.context_id),
            _ => Action::Continue,
        }
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = super::profile::span("on_http_response_body");
        match &self.phase {
            Phase::Forwarded => {
                flight::on_answer_body(&self.runtime, self.context_id, body_size, end_of_stream)
            }
            _ => Action::Continue,
        }
    }
}
