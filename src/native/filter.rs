//! One HTTP stream: holds an LLM request until its body is in, asks the core where it goes,
//! writes the decision into the request, and hands the response side to its [`Flight`].
//!
//! Envoy runs a stream's hooks on one worker thread. A call into Envoy can run this filter's
//! hooks again before it returns (a local reply passes through the response hooks; resuming
//! the request can make the router answer at once), so such calls are not made while the
//! filter is borrowed: the filter queues them as [`After`] and the hook makes them after.

use super::flight::Flight;
use super::host::{BodyAt, Side, Stream};
use super::plugin::{Plugin, Routing};
use super::store;
use crate::core::access_log::{self, DecisionFacts};
use crate::core::admission::{admit, route_stored, Admission, StoredPath};
use crate::core::batch;
use crate::core::config::{HeaderNames, Tier};
use crate::core::decision::{
    classifier_call, decide_stored_path, decide_with_tier, ClassifierCall, Decision,
};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::flight::{Replay, Start};
use crate::core::headers::Headers;
use crate::core::outbound::Outbound;
use crate::core::report::{self, PinProbe};
use crate::core::request::ENVOY_SLICE;
use crate::core::routing::classifier::parse_answer;
use crate::core::routing::RoutingState;
use crate::core::routing::{HealthInput, Plan};
use crate::core::trace::Trace;
use std::sync::Arc;

/// What a hook tells Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on with the next filter.
    Continue,
    /// Stop here (and, in a body hook, keep the data in Envoy's buffer) until resumed.
    Stop,
}

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

/// Where the request side of a stream is.
enum Phase {
    /// Not an LLM request: Switchboard leaves it alone.
    PassThrough,
    /// An LLM request whose body is being buffered, with its headers as the client sent them.
    Inspecting(Endpoint, Headers),
    /// Waiting for a complexity virtual model's classifier model to name the tier.
    Classifying {
        endpoint: Endpoint,
        headers: Headers,
        body: Vec<u8>,
        call: u64,
    },
    /// Batch input being buffered to check it names no virtual model: (path, content type).
    CheckingBatch(String, String),
    /// Forwarded; the flight owns the rest.
    Forwarded(Box<Flight>),
    /// Switchboard answered it with a local reply.
    Replied,
}

/// One per HTTP stream.
pub struct Filter {
    plugin: Arc<Plugin>,
    rng: fastrand::Rng,
    phase: Phase,
    /// The client calls an Anthropic API: errors go in Anthropic's shape.
    anthropic: bool,
    /// Calls to make once the current hook has let go of the filter.
    pub after: Vec<After>,
    /// The routing trace, from the decision until the flight takes it (when asked for).
    trace: Option<Box<Trace>>,
}

impl Filter {
    /// A filter for one stream of `plugin`'s config.
    pub fn new(plugin: Arc<Plugin>) -> Filter {
        Filter {
            plugin,
            rng: fastrand::Rng::with_seed(fastrand::u64(..)),
            phase: Phase::PassThrough,
            anthropic: false,
            after: Vec::new(),
            trace: None,
        }
    }

    /// Queues a local reply.
    fn send(&mut self, status: u16, headers: Vec<(String, String)>, body: Vec<u8>) {
        self.after.push(After::Reply {
            status,
            headers,
            body,
        });
    }

    /// Answers with an error in the client's API shape and ends the request side.
    fn reply(&mut self, reply: &ErrorReply) -> Verdict {
        if let Some(note) = &reply.operator_note {
            log::warn!("{note}");
        }
        let shaped;
        let reply = if self.anthropic {
            shaped = reply.in_anthropic_shape();
            &shaped
        } else {
            reply
        };
        let json = vec![("content-type".to_string(), "application/json".to_string())];
        self.send(reply.status, json, reply.body.clone().into_bytes());
        self.phase = Phase::Replied;
        Verdict::Stop
    }

    /// The request headers arrived: the core says what happens before any body
    /// ([`admit`]).
    pub fn on_request_headers(&mut self, s: &mut Stream, end_of_stream: bool) -> Verdict {
        let plugin = Arc::clone(&self.plugin);
        let config = &plugin.config;
        strip_client_cluster(s, &config.header_names.cluster);
        // One call for every header: these are the client's headers as sent (less the cluster
        // header), which a retry or fallback replays.
        let headers = s.headers(Side::Request);
        // Before anything can fail: a panic's 500 answers in this API's shape.
        self.anthropic = headers
            .get_str(":path")
            .and_then(Endpoint::from_path)
            .is_some_and(Endpoint::speaks_anthropic);
        let admission = admit(config, &headers, end_of_stream);
        // The trace token (the cluster header is gone already).
        let strip = admission.client_headers_to_strip(&config.header_names, &headers);
        for name in strip.into_iter().flatten() {
            s.remove_header(Side::Request, name);
        }
        match admission {
            Admission::Pass { .. } => Verdict::Continue,
            Admission::ModelList(json) => {
                let json_type = vec![("content-type".to_string(), "application/json".to_string())];
                self.send(200, json_type, json.as_bytes().to_vec());
                self.phase = Phase::Replied;
                Verdict::Stop
            }
            Admission::Refuse { error, endpoint } => {
                self.anthropic = endpoint.is_some_and(Endpoint::speaks_anthropic);
                self.reply(&error)
            }
            Admission::Inspect(endpoint) => {
                self.anthropic = endpoint.speaks_anthropic();
                self.phase = Phase::Inspecting(endpoint, headers);
                Verdict::Stop
            }
            Admission::CheckBatch { path, content_type } => {
                self.phase = Phase::CheckingBatch(path, content_type);
                Verdict::Stop
            }
            Admission::Stored(path) => self.forward_stored(s, &plugin, headers, &path),
        }
    }

    /// Whether errors go to this client in Anthropic's shape (it called `/v1/messages`).
    pub fn speaks_anthropic(&self) -> bool {
        self.anthropic
    }

    /// A chunk of the request body arrived (`size` bytes held so far, this chunk included).
    pub fn on_request_body(&mut self, s: &mut Stream, size: usize, end: bool) -> Verdict {
        let limit = self.plugin.config.max_request_body_bytes;
        match self.phase {
            Phase::CheckingBatch(..) if size > limit => {
                // Larger than the limit: passed on unchecked rather than refused.
                self.phase = Phase::PassThrough;
                Verdict::Continue
            }
            Phase::CheckingBatch(..) if !end => Verdict::Stop,
            Phase::CheckingBatch(..) => self.finish_batch(s, BodyAt::BufferAndChunk),
            Phase::Inspecting(..) if size > limit => self.reply(&ErrorReply::body_too_large(limit)),
            Phase::Inspecting(..) if !end => Verdict::Stop,
            Phase::Inspecting(..) => self.route(s, BodyAt::BufferAndChunk),
            Phase::Forwarded(_) | Phase::PassThrough => Verdict::Continue,
            Phase::Classifying { .. } | Phase::Replied => Verdict::Stop,
        }
    }

    /// The request's trailers arrived: a body that ends with trailers never sees the end of
    /// stream in the body hook.
    pub fn on_request_trailers(&mut self, s: &mut Stream) -> Verdict {
        match self.phase {
            Phase::CheckingBatch(..) => self.finish_batch(s, BodyAt::Buffer),
            Phase::Inspecting(..) => self.route(s, BodyAt::Buffer),
            Phase::Classifying { .. } | Phase::Replied => Verdict::Stop,
            Phase::Forwarded(_) | Phase::PassThrough => Verdict::Continue,
        }
    }

    /// Checks the whole buffered batch input.
    fn finish_batch(&mut self, s: &mut Stream, at: BodyAt) -> Verdict {
        let Phase::CheckingBatch(path, content_type) =
            std::mem::replace(&mut self.phase, Phase::PassThrough)
        else {
            return Verdict::Continue;
        };
        let body = s.body(Side::Request, at);
        match batch::check(&path, &content_type, &body, &self.plugin.config) {
            Ok(()) => Verdict::Continue,
            Err(reply) => self.reply(&reply),
        }
    }

    /// Routes the fully buffered request, or answers it with an error.
    fn route(&mut self, s: &mut Stream, at: BodyAt) -> Verdict {
        let Phase::Inspecting(endpoint, headers) =
            std::mem::replace(&mut self.phase, Phase::Replied)
        else {
            return Verdict::Continue;
        };
        let body = s.body(Side::Request, at);
        let plugin = Arc::clone(&self.plugin);
        // A complexity model with a classifier asks it first; its call has its own timeout,
        // after which the heuristic decides.
        if let Some(call) = classifier_call(&plugin.config, endpoint, &body, &headers) {
            if let Some(id) = Self::call_classifier(s, &plugin, &call) {
                self.phase = Phase::Classifying {
                    endpoint,
                    headers,
                    body,
                    call: id,
                };
                return Verdict::Stop;
            }
        }
        self.decide_and_forward(s, at, endpoint, headers, body, None)
    }

    /// Runs a routing decision at `now` with what it consults: the health view, the shared
    /// routing state and this stream's RNG.
    fn with_routing<T>(
        &mut self,
        s: &Stream,
        plugin: &Plugin,
        now: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState, &mut fastrand::Rng) -> T,
    ) -> T {
        let rng = &mut self.rng;
        let config = &plugin.config;
        let gauges = |health: &HealthInput<'_>, last: &mut Vec<u8>| {
            super::metrics::update_health(s, config, health, last);
        };
        store::with_health(plugin.id, config, now, gauges, |health| {
            let routing = Routing { plugin, stream: s };
            decide(health, &routing, rng)
        })
    }

    /// Asks the classifier model for the tier, in that model's own request shape.
    fn call_classifier(s: &mut Stream, plugin: &Plugin, call: &ClassifierCall) -> Option<u64> {
        let config = &plugin.config;
        let out = call.outbound(config)?;
        let length = call.body.len().to_string();
        let headers = out.call_headers(&call.headers, &config.header_names, &length);
        s.callout(out.cluster, &headers, &call.body, call.timeout_ms)
    }

    /// A call-out this stream made finished: `answer` is `None` when it got none.
    pub fn on_callout_done(&mut self, s: &mut Stream, id: u64, answer: Option<(Headers, Vec<u8>)>) {
        if matches!(&self.phase, Phase::Classifying { call, .. } if *call == id) {
            let Phase::Classifying {
                endpoint,
                headers: client,
                body: client_body,
                ..
            } = std::mem::replace(&mut self.phase, Phase::Replied)
            else {
                return;
            };
            // No answer (timeout, failure) or no tier in it: the heuristic decides.
            let tier = answer.and_then(|(_, body)| parse_answer(&body));
            let verdict =
                self.decide_and_forward(s, BodyAt::Buffer, endpoint, client, client_body, tier);
            if verdict == Verdict::Continue {
                self.after.push(After::ContinueRequest);
            }
            return;
        }
        if let Phase::Forwarded(flight) = &mut self.phase {
            flight.on_callout_done(s, &self.plugin, id, answer, &mut self.after);
        }
    }

    /// An event this stream's scheduler posted: a timer of its flight.
    pub fn on_scheduled(&mut self, s: &mut Stream, token: u64) {
        if let Phase::Forwarded(flight) = &mut self.phase {
            flight.on_timer(s, &self.plugin, token, &mut self.after);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn decide_and_forward(
        &mut self,
        s: &mut Stream,
        at: BodyAt,
        endpoint: Endpoint,
        headers: Headers,
        body: Vec<u8>,
        tier: Option<Tier>,
    ) -> Verdict {
        let plugin = Arc::clone(&self.plugin);
        let config = &plugin.config;
        let now = super::now_ms();
        let started = config.times_decisions().then(std::time::Instant::now);
        let traced = report::wants_trace(config, &headers);
        let mut sticky_hit = None;
        let (decided, trace) = self.with_routing(s, &plugin, now, |health, routing, rng| {
            let probe = PinProbe::new(routing);
            let decided =
                decide_with_tier(config, endpoint, &body, &headers, health, &probe, tier, rng);
            let trace = match &decided {
                Ok(d) if traced => Some(report::trace(
                    config, endpoint, &headers, &probe, &d.plan, health,
                )),
                _ => None,
            };
            sticky_hit = probe.sticky_hit();
            (decided, trace)
        });
        self.trace = trace;
        match decided {
            Ok(decision) => {
                let us = started.map_or(0, |t| {
                    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
                });
                report::decided(config, &decision.plan, us, |id, w| s.write_metric(id, w));
                if config.filter_state {
                    let facts = DecisionFacts {
                        sticky_hit,
                        decision_us: us,
                    };
                    s.write_fields(access_log::decision(config, &decision.plan, facts));
                }
                self.forward(s, at, &plugin, endpoint, decision, body, headers, now)
            }
            Err(reply) => self.reply(&reply),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        s: &mut Stream,
        at: BodyAt,
        plugin: &Arc<Plugin>,
        endpoint: Endpoint,
        decision: Decision<'_>,
        body: Vec<u8>,
        headers: Headers,
        now: u64,
    ) -> Verdict {
        let config = &plugin.config;
        if let Err(reply) = apply(
            s,
            at,
            &decision.outbound,
            &body,
            &headers,
            &config.header_names,
        ) {
            return self.reply(&reply);
        }
        report::log_attempt(&plugin.config, decision.target, 1, &decision.outbound);
        let request = decision.into_flight(endpoint, headers, body);
        self.start_flight(s, plugin, request, now)
    }

    /// Hands the request to its flight.
    fn start_flight(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        request: (Start, Replay),
        now: u64,
    ) -> Verdict {
        let trace = self.trace.take();
        let flight = Flight::start(s, plugin, (request, trace), now, &mut self.after);
        self.phase = Phase::Forwarded(Box::new(flight));
        Verdict::Continue
    }

    /// A retrieve, input-items list, cancel or delete of a stored response: to the target
    /// holding it, with the provider's id in the path; retries there, no fallback
    /// ([`route_stored`]).
    fn forward_stored(
        &mut self,
        s: &mut Stream,
        plugin: &Arc<Plugin>,
        headers: Headers,
        path: &StoredPath,
    ) -> Verdict {
        let config = &plugin.config;
        let now = super::now_ms();
        let picked = {
            let pick = |index| {
                self.with_routing(s, plugin, now, |health, routing, rng| {
                    decide_stored_path(config, index, &headers, health, routing, rng)
                })
            };
            let state = Routing { plugin, stream: s };
            route_stored(config, &headers, path, &state, pick)
        };
        let route = match picked {
            Ok(route) => route,
            Err(reply) => return self.reply(&reply),
        };
        if let Err(e) = apply(
            s,
            BodyAt::Buffer,
            &route.outbound,
            &[],
            &headers,
            &config.header_names,
        ) {
            return self.reply(&e);
        }
        report::log_attempt(&plugin.config, route.target, 1, &route.outbound);
        let plan = Plan {
            candidates: vec![route.target],
            virtual_model: route.start.virtual_model,
            sticky: None,
            pinned: true,
        };
        // Its id names its target: no decision time (0) is recorded.
        report::decided(config, &plan, 0, |id, w| s.write_metric(id, w));
        if config.filter_state {
            let facts = DecisionFacts::default();
            s.write_fields(access_log::decision(config, &plan, facts));
        }
        if report::wants_trace(config, &headers) {
            let health = &HealthInput::NONE;
            self.trace = Some(Box::new(Trace::of_plan(config, &plan, health, Vec::new())));
        }
        let replay = route.replay(headers);
        self.start_flight(s, plugin, (route.start, replay), now)
    }

    /// The response headers arrived (`end`: with no body after them).
    pub fn on_response_headers(&mut self, s: &mut Stream, end: bool) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => {
                flight.on_response_headers(s, &self.plugin, end, &mut self.after)
            }
            _ => Verdict::Continue,
        }
    }

    /// A chunk of the response body arrived.
    pub fn on_response_body(&mut self, s: &mut Stream, end: bool) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => {
                flight.on_response_body(s, &self.plugin, end, &mut self.after)
            }
            _ => Verdict::Continue,
        }
    }

    /// The response trailers arrived.
    pub fn on_response_trailers(&mut self, s: &mut Stream) -> Verdict {
        match &mut self.phase {
            Phase::Forwarded(flight) => {
                flight.on_response_trailers(s, &self.plugin, &mut self.after)
            }
            _ => Verdict::Continue,
        }
    }
}

/// Removes the cluster header a client sent, first thing on every request: a client never
/// picks the cluster through the route's `cluster_header`, whatever happens to the request
/// later (passed on, refused, or a bug's panic on the way). One lookup when it is absent, which
/// is every honest request; when present, the route Envoy cached from the client's headers
/// named the client's cluster and is selected again.
fn strip_client_cluster(s: &mut Stream, name: &str) {
    if s.has_header(Side::Request, name) {
        s.remove_header(Side::Request, name);
        // Unlike proxy-wasm, a dynamic module's header writes leave the cached route in place.
        s.clear_route_cache();
    }
}

/// Writes the router's attempt into the request: the body for the target, then path,
/// authority and headers, and the cluster header last; then has Envoy pick the route again
/// with the final headers.
fn apply(
    s: &mut Stream,
    at: BodyAt,
    out: &Outbound<'_>,
    body: &[u8],
    headers: &Headers,
    names: &HeaderNames,
) -> Result<(), ErrorReply> {
    if let Some(edits) = &out.edits {
        let failed = || ErrorReply::invalid_json("the body could not be rewritten");
        // A short body is joined and handed over in one call: copying a few KB here costs
        // less than more calls into Envoy. A long one goes in slice-sized parts straight from
        // the client's body, with no edited copy of it (1 MB bodies: one copy fewer in memory
        // per request in flight).
        let replaced = if body.len() < ENVOY_SLICE {
            let edited = edits.apply(body).ok_or_else(failed)?;
            s.replace_body(Side::Request, at, [edited.as_slice()])
        } else {
            s.replace_body(Side::Request, at, edits.parts(body).ok_or_else(failed)?)
        };
        if !replaced {
            return Err(failed());
        }
        // The body is now whole and of known length: send it that way upstream.
        let new_len = edits.new_len(body);
        let chunked = headers.get("transfer-encoding").is_some();
        if chunked {
            s.remove_header(Side::Request, "transfer-encoding");
        }
        if chunked || new_len != body.len() || headers.get("content-length").is_none() {
            s.set_header(
                Side::Request,
                "content-length",
                new_len.to_string().as_bytes(),
            );
        }
    }
    if let Some(path) = &out.path {
        s.set_header(Side::Request, ":path", path.as_bytes());
    }
    if let Some(authority) = out.authority {
        s.set_header(Side::Request, ":authority", authority.as_bytes());
    }
    for name in &out.remove {
        s.remove_header(Side::Request, name);
    }
    for (name, value) in &out.set {
        s.set_header(Side::Request, name, value.as_bytes());
    }
    s.set_header(Side::Request, &names.cluster, out.cluster.as_bytes());
    // Unlike proxy-wasm, a dynamic module's header writes leave the cached route in place.
    s.clear_route_cache();
    Ok(())
}
