//! The request phase: admit the request from its headers, buffer an LLM request's body, ask a
//! classifier model when one decides the tier, decide, and write the router's attempt into
//! the request ([`write_attempt`]); then hand the stream to its flight.

use super::flight::Flight;
use super::{Classifying, Host, Phase, Stream, Verdict};
use crate::core::access_log::{self, DecisionFacts};
use crate::core::admission::{admit, route_stored, Admission, StoredPath};
use crate::core::batch;
use crate::core::config::{HeaderNames, Tier};
use crate::core::decision::{
    classifier_call, decide_stored_path, decide_with_tier, ClassifierCall, Decision,
};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::flight::{usage_asked, CallRequest, Replay, Start};
use crate::core::headers::Headers;
use crate::core::outbound::Outbound;
use crate::core::overhead::Overhead;
use crate::core::plugin::Plugin;
use crate::core::report::{self, PinProbe};
use crate::core::router_path::{self, RouterFlight};
use crate::core::routing::classifier::parse_answer;
use crate::core::routing::{HealthInput, Plan};
use crate::core::trace::Trace;
use std::cell::RefCell;
use std::rc::Rc;

impl Stream {
    /// The request's headers arrived (all of them, as the client sent them): the core says
    /// what happens before any body ([`admit`]). A client's cluster header goes first, whatever
    /// follows: a client never picks the cluster through the route's `cluster_header`.
    pub fn on_request_headers(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        headers: Headers,
        end_of_stream: bool,
    ) -> Verdict {
        let config = &plugin.config;
        let names = &config.header_names;
        if headers.get(&names.cluster).is_some() {
            host.remove_request_header(&names.cluster);
            host.clear_route_cache();
        }
        let admission = admit(config, &headers, end_of_stream);
        if let Some(token) = admission.trace_token_to_strip(names, &headers) {
            host.remove_request_header(token);
        }
        match admission {
            Admission::Pass => Verdict::Continue,
            Admission::ModelList(json) => {
                let json_type = [("content-type", "application/json")];
                host.reply(200, &json_type, json.as_bytes());
                self.phase = Phase::Replied;
                Verdict::Stop
            }
            Admission::Refuse { error, endpoint } => {
                self.anthropic = endpoint.is_some_and(Endpoint::speaks_anthropic);
                self.reply(host, &error)
            }
            Admission::Inspect(endpoint) => {
                self.anthropic = endpoint.speaks_anthropic();
                self.phase = Phase::Inspecting(endpoint, headers);
                Verdict::Stop
            }
            Admission::CheckBatch { path, content_type } => {
                self.phase = Phase::CheckingBatch { path, content_type };
                Verdict::Stop
            }
            Admission::Stored(path) => self.forward_stored(plugin, host, headers, &path),
        }
    }

    /// A chunk of the request body arrived: `size` bytes are held so far, `end` when it was
    /// the last.
    pub fn on_request_body(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        size: usize,
        end: bool,
    ) -> Verdict {
        let config = &plugin.config;
        let limit = config.max_request_body_bytes;
        match self.phase {
            Phase::CheckingBatch { .. } if size > limit => {
                // Larger than the limit: passed on unchecked rather than refused.
                self.phase = Phase::PassThrough;
                Verdict::Continue
            }
            Phase::CheckingBatch { .. } if !end => Verdict::Stop,
            Phase::CheckingBatch { .. } => self.finish_batch(plugin, host),
            Phase::Inspecting(..) if size > limit => {
                self.reply(host, &ErrorReply::body_too_large(limit))
            }
            Phase::Inspecting(..) if !end => Verdict::Stop,
            Phase::Inspecting(..) => self.route(plugin, host),
            Phase::Forwarded(_) | Phase::PassThrough => Verdict::Continue,
            Phase::Classifying(_) | Phase::Replied => Verdict::Stop,
        }
    }

    /// The request's trailers arrived: a body that ends with trailers never sees the end of
    /// stream in the body hook.
    pub fn on_request_trailers(&mut self, plugin: &Plugin, host: &mut impl Host) -> Verdict {
        match self.phase {
            Phase::CheckingBatch { .. } => self.finish_batch(plugin, host),
            Phase::Inspecting(..) => self.route(plugin, host),
            Phase::Classifying(_) | Phase::Replied => Verdict::Stop,
            Phase::Forwarded(_) | Phase::PassThrough => Verdict::Continue,
        }
    }

    /// Answers with an error in the client's API shape and ends the request side. The
    /// operator's fix goes to a warn line; so does a 5xx (the request named something
    /// routable, yet routing found nowhere to send it).
    pub(super) fn reply(&mut self, host: &mut impl Host, reply: &ErrorReply) -> Verdict {
        if let Some(note) = &reply.operator_note {
            log::warn!("{note}");
        } else if reply.status >= 500 {
            log::warn!("routing failed: {} {}", reply.status, reply.body);
        }
        let shaped;
        let reply = if self.anthropic {
            shaped = reply.in_anthropic_shape();
            &shaped
        } else {
            reply
        };
        let json_type = [("content-type", "application/json")];
        host.reply(reply.status, &json_type, reply.body.as_bytes());
        self.phase = Phase::Replied;
        Verdict::Stop
    }

    /// Checks the whole buffered batch input.
    fn finish_batch(&mut self, plugin: &Plugin, host: &mut impl Host) -> Verdict {
        let config = &plugin.config;
        let Phase::CheckingBatch { path, content_type } =
            std::mem::replace(&mut self.phase, Phase::PassThrough)
        else {
            return Verdict::Continue;
        };
        match batch::check(&path, &content_type, &host.request_body(), config) {
            Ok(()) => Verdict::Continue,
            Err(reply) => self.reply(host, &reply),
        }
    }

    /// Routes the fully buffered request, or answers it with an error. A complexity model
    /// with a classifier asks it first; its call has its own timeout, after which the
    /// heuristic decides.
    fn route(&mut self, plugin: &Plugin, host: &mut impl Host) -> Verdict {
        let config = &plugin.config;
        let Phase::Inspecting(endpoint, headers) =
            std::mem::replace(&mut self.phase, Phase::Replied)
        else {
            return Verdict::Continue;
        };
        let body = host.request_body();
        if let Some(call) = classifier_call(config, endpoint, &body, &headers) {
            if let Some(id) = call_classifier(plugin, host, &call) {
                self.phase = Phase::Classifying(Box::new(Classifying {
                    endpoint,
                    headers,
                    body,
                    call: id,
                }));
                return Verdict::Stop;
            }
        }
        self.decide_and_forward(plugin, host, (endpoint, headers, body), None)
    }

    /// The classifier call `id` answered (`None`: no answer): decide with its tier and resume
    /// the request held since its body. False if `id` is not the classifier call.
    pub(super) fn on_classifier_answer(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        id: u64,
        answer: Option<&[u8]>,
    ) -> bool {
        if !matches!(&self.phase, Phase::Classifying(c) if c.call == id) {
            return false;
        }
        let Phase::Classifying(waiting) = std::mem::replace(&mut self.phase, Phase::Replied) else {
            return false;
        };
        let Classifying {
            endpoint,
            headers,
            body,
            ..
        } = *waiting;
        // No answer (timeout, failure) or no tier in it: the heuristic decides.
        let tier = answer.and_then(parse_answer);
        let request = (endpoint, headers, body);
        if self.decide_and_forward(plugin, host, request, tier) == Verdict::Continue {
            host.resume_request();
        }
        true
    }

    /// Decides where the request goes (with the classifier's tier, if it gave one), notes the
    /// decision (metrics, access log, trace) and forwards it.
    fn decide_and_forward(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        (endpoint, headers, body): (Endpoint, Headers, Vec<u8>),
        tier: Option<Tier>,
    ) -> Verdict {
        let config = &plugin.config;
        let started_us = config.times_decisions().then(|| host.now_us());
        // Switchboard's own time starts with the decision (only the histogram wants it).
        self.overhead = Overhead::started(started_us.filter(|_| config.request_histograms));
        let now = host.now_ms();
        let traced = report::wants_trace(config, &headers);
        let rng = &mut self.rng;
        let (decided, trace, sticky_hit) = host.with_routing(plugin, now, |health, state| {
            let probe = PinProbe::new(state);
            let decided =
                decide_with_tier(config, endpoint, &body, &headers, health, &probe, tier, rng);
            let trace = match &decided {
                Ok(d) if traced => Some(report::trace(
                    config, endpoint, &headers, &probe, &d.plan, health,
                )),
                _ => None,
            };
            (decided, trace, probe.sticky_hit())
        });
        self.trace = trace;
        let decision = match decided {
            Ok(decision) => decision,
            Err(reply) => return self.reply(host, &reply),
        };
        let decision_us = started_us.map_or(0, |t| host.now_us().saturating_sub(t));
        let facts = DecisionFacts {
            sticky_hit,
            decision_us,
        };
        note_decision(plugin, host, &decision.plan, facts);
        self.forward(plugin, host, endpoint, decision, (headers, body), now)
    }

    /// Writes the decision's first attempt into the request and starts the flight.
    fn forward(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        endpoint: Endpoint,
        decision: Decision<'_>,
        (headers, body): (Headers, Vec<u8>),
        now: u64,
    ) -> Verdict {
        let config = &plugin.config;
        let ((mut start, mut replay), (outbound, first_target)) =
            decision.into_flight(endpoint, headers, body);
        if start.dialect.is_some() && host.streams_attempts() {
            // Every attempt is a streamed call-out the host forwards itself: the request
            // stays here, and its first attempt is made by the flight like any other.
            start.streams_attempts = true;
            self.start_flight(plugin, host, (start, replay), None, now);
            return Verdict::Stop;
        }
        if let Err(reply) = write_attempt(host, &outbound, &replay.body, &replay.headers, plugin) {
            return self.reply(host, &reply);
        }
        report::log_attempt(config, first_target, 1, &outbound);
        let router = take_router_path(plugin, host, &mut start, &mut replay);
        self.start_flight(plugin, host, (start, replay), router, now)
    }

    /// Hands the request to its flight.
    fn start_flight(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        (start, replay): (Start, Replay),
        router: Option<Rc<RefCell<RouterFlight>>>,
        now: u64,
    ) -> Verdict {
        let noted = (self.trace.take(), std::mem::take(&mut self.overhead));
        let flight = Flight::start(plugin, host, (start, replay), noted, router, now);
        self.phase = Phase::Forwarded(Box::new(flight));
        Verdict::Continue
    }

    /// A retrieve, input-items list, cancel or delete of a stored response: to the target
    /// holding it, with the provider's id in the path; retries there, no fallback
    /// ([`route_stored`]).
    fn forward_stored(
        &mut self,
        plugin: &Plugin,
        host: &mut impl Host,
        headers: Headers,
        path: &StoredPath,
    ) -> Verdict {
        let config = &plugin.config;
        let started_us = config.request_histograms.then(|| host.now_us());
        self.overhead = Overhead::started(started_us);
        let now = host.now_ms();
        let rng = &mut self.rng;
        let routed = host.with_routing(plugin, now, |health, state| {
            let pick = |index| decide_stored_path(config, index, &headers, health, state, rng);
            route_stored(config, &headers, path, state, pick)
        });
        let route = match routed {
            Ok(route) => route,
            Err(reply) => return self.reply(host, &reply),
        };
        if let Err(reply) = write_attempt(host, &route.outbound, &[], &headers, plugin) {
            return self.reply(host, &reply);
        }
        report::log_attempt(config, route.target, 1, &route.outbound);
        let plan = Plan {
            candidates: vec![route.target],
            virtual_model: route.start.virtual_model,
            sticky: None,
            pinned: true,
        };
        // Its id names its target: no decision time (0) is recorded.
        note_decision(plugin, host, &plan, DecisionFacts::default());
        if report::wants_trace(config, &headers) {
            let health = &HealthInput::NONE;
            self.trace = Some(Box::new(Trace::of_plan(config, &plan, health, Vec::new())));
        }
        let replay = route.replay(headers);
        self.start_flight(plugin, host, (route.start, replay), None, now)
    }
}

/// The router path ([`crate::core::router_path`]), when the request's virtual model asks for it
/// and the host has upstream passes: the router's headers go into the request (after the first
/// attempt's, which a route without the router path would still send right), and the client's
/// request moves to the attempts the passes share; the machine makes no attempt of its own.
fn take_router_path(
    plugin: &Plugin,
    host: &mut impl Host,
    start: &mut Start,
    replay: &mut Replay,
) -> Option<Rc<RefCell<RouterFlight>>> {
    let config = &plugin.config;
    let plan = router_path::plan(config, replay.endpoint, start)?;
    let dialect = start.dialect?;
    let rules = config.virtual_models.get(plan.virtual_model)?.streams;
    let headers = plan.request_headers(config)?;
    let empty = Replay {
        endpoint: replay.endpoint,
        body: Vec::new(),
        layout: Default::default(),
        headers: Headers::default(),
        stored_path: None,
    };
    // The machine keeps no request on the router path: what a translated stream needs of it
    // is read now.
    let vm = config.virtual_models.get(plan.virtual_model);
    start.include_usage = usage_asked(config, vm, &start.candidates, replay, start.stream);
    let client = std::mem::replace(replay, empty);
    let flight = Rc::new(RefCell::new(RouterFlight::new(
        plan, client, dialect, rules,
    )));
    if !host.share_router_flight(&flight) {
        let flight = Rc::try_unwrap(flight).ok()?.into_inner();
        *replay = flight.into_client();
        return None;
    }
    for (name, value) in &headers {
        host.set_request_header(name, value);
    }
    start.router_path = true;
    Some(flight)
}

/// A request was routed: its metrics, and the decision's access-log fields when they are
/// written.
fn note_decision(plugin: &Plugin, host: &mut impl Host, plan: &Plan, facts: DecisionFacts) {
    let config = &plugin.config;
    report::decided(plugin, plan, facts.decision_us, |id, w| {
        host.write_metric(id, w)
    });
    if config.filter_state {
        for (key, value) in access_log::decision(config, plan, facts) {
            host.write_field(key, value);
        }
    }
}

/// Asks the classifier model for the tier, in that model's own request shape; the host's id
/// of the call.
fn call_classifier(plugin: &Plugin, host: &mut impl Host, call: &ClassifierCall) -> Option<u64> {
    let config = &plugin.config;
    let out = call.outbound(config)?;
    let length = call.body.len().to_string();
    let request = CallRequest {
        cluster: out.cluster,
        headers: out.call_headers(&call.headers, &config.header_names, &length),
        body: &call.body,
        timeout_ms: call.timeout_ms,
    };
    host.dispatch(&request)
}

/// Writes the router's attempt into the request: the body for the target, then path,
/// authority and headers, and the cluster header last; then has the router pick the route
/// again with the final headers.
pub(super) fn write_attempt(
    host: &mut impl Host,
    out: &Outbound<'_>,
    body: &[u8],
    headers: &Headers,
    plugin: &Plugin,
) -> Result<(), ErrorReply> {
    let config = &plugin.config;
    if let Some(edits) = &out.edits {
        if !host.edit_request_body(body, edits) {
            return Err(ErrorReply::invalid_json("the body could not be rewritten"));
        }
        // The body is now whole and of known length: send it that way upstream. A rewrite
        // keeps the length when it can (core::request::rewrite), and then the client's
        // content-length still holds.
        let new_len = edits.new_len(body);
        let chunked = headers.get("transfer-encoding").is_some();
        if chunked {
            host.remove_request_header("transfer-encoding");
        }
        if chunked || new_len != body.len() || headers.get("content-length").is_none() {
            host.set_request_header("content-length", &new_len.to_string());
        }
    }
    write_headers(host, out, &config.header_names);
    Ok(())
}

/// The attempt's path, authority and headers, the cluster header last.
fn write_headers(host: &mut impl Host, out: &Outbound<'_>, names: &HeaderNames) {
    if let Some(path) = &out.path {
        host.set_request_header(":path", path);
    }
    if let Some(authority) = out.authority {
        host.set_request_header(":authority", authority);
    }
    for name in &out.remove {
        host.remove_request_header(name);
    }
    for (name, value) in &out.set {
        host.set_request_header(name, value);
    }
    host.set_request_header(&names.cluster, out.cluster);
    host.clear_route_cache();
}
