//! The state machine of one forwarded request: retries, fallbacks and timeouts after its first
//! attempt left through Envoy's router. Sans-IO: events in, effects out; the host's time and
//! lazily read facts come in as arguments, so every sequence replays in a unit test.
//!
//! The first attempt goes through the router, so a good answer streams to the client as it
//! arrives. A failed answer is held (headers, body and trailers) while the next attempt is made
//! as a call-out with the body rewritten for that target; the last attempt's answer then
//! replaces it (a verified Envoy behaviour: a held answer is replaced by
//! `send_http_response`). The decisions come from [`Attempts`]; this module sequences them.
//!
//! # Events (methods; pass the [`Config`] the machine was started with)
//! - [`Machine::start`]: the request was routed (its first attempt written into the request).
//! - [`Machine::on_answer_headers`]: the router's answer headers (status; Envoy's response
//!   code details read through [`AnswerFacts`] only for a 5xx).
//! - [`Machine::on_answer_body`], [`Machine::on_answer_trailers`]: the router's answer streams.
//! - [`Machine::on_dispatched`] / [`Machine::on_dispatch_refused`]: what became of an
//!   [`Effect::Attempt`]'s call-out.
//! - [`Machine::on_call_answer`]: a call-out answered (or failed without an answer).
//! - [`Machine::on_timer`]: an armed timer fired.
//! - [`Machine::on_destroyed`]: the stream went away.
//!
//! Answer events return a [`Flow`] (hold or let through). Every event pushes its
//! [`Effect`]s into a caller-provided [`Effects`] buffer, to be applied in order: make an
//! attempt, arm a timer, record an outcome or latency samples, pin a session, deliver, reply,
//! fail with an error in the client's API shape, replace body bytes.

mod answer;
mod effects;
mod records;

pub use answer::{call_outcome, health_outcome, hint_ms, router_outcome};
pub use effects::{
    AnswerHeaders, Attempt, AttemptKind, Call, CallId, CallRequest, Delivery, Effect, Effects,
    Ending, Failure, Flow, Reply, Summary,
};
pub use records::{add_samples, record_outcome};

use crate::core::config::{Config, HeaderNames, ModelId, TargetPolicy, DIRECT_POLICY};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::fallback::{AttemptOutcome, Attempts, Step};
use crate::core::headers::Headers;
use crate::core::health::sla::LatencySample;
use crate::core::outbound::{outbound, ClientRequest};
use crate::core::request::Layout;
use crate::core::responses::rewrite::AnswerRewriter;
use crate::core::responses::{rewrite_whole, TurnMinter};
use crate::core::routing::sticky::Session;
use crate::core::routing::Plan;
use crate::core::usage::UsageScanner;

/// Facts about the answer in hand that may cost the host a call to read: the machine asks
/// only when a rule needs one (a plain 2xx answer needs none).
pub trait AnswerFacts {
    /// The host's time, in milliseconds.
    fn now_ms(&mut self) -> u64;
    /// Envoy's response code details of the router's answer (`response.code_details`).
    fn code_details(&mut self) -> Option<String>;
    /// Every header of the router's answer.
    fn headers(&mut self) -> Headers;
    /// The body chunk in hand.
    fn chunk(&mut self) -> Vec<u8>;
}

/// How a request was routed, as its flight starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The virtual model, if one was called.
    pub virtual_model: Option<usize>,
    /// The candidates, best first; the first is the router's attempt.
    pub candidates: Vec<ModelId>,
    /// Pinned to the first candidate: retries only, no fallback.
    pub pinned: bool,
    /// The client asked for a streamed answer.
    pub stream: bool,
    /// Its sticky session, if any.
    pub sticky: Option<Session>,
    /// A Responses API answer of a virtual model: its ids are minted as it streams.
    pub mint_ids: bool,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    pub anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    pub conversation: bool,
}

impl Start {
    /// The start of a request routed by [`crate::core::decision::decide`].
    pub fn routed(endpoint: Endpoint, plan: Plan, stream: bool, conversation: bool) -> Self {
        Start {
            mint_ids: endpoint == Endpoint::Responses && plan.virtual_model.is_some(),
            virtual_model: plan.virtual_model,
            candidates: plan.candidates,
            pinned: plan.pinned,
            stream,
            sticky: plan.sticky,
            anthropic_errors: endpoint.speaks_anthropic(),
            conversation,
        }
    }

    /// The start of a stored-response request (retrieve, input items, cancel, delete) sent to
    /// `target` of virtual model `index`: retries there, no fallback; a minted id's answer
    /// gets minted ids back, and its origin failing is a 409.
    pub fn stored(index: usize, target: ModelId, minted: bool) -> Self {
        Start {
            virtual_model: Some(index),
            candidates: vec![target],
            pinned: true,
            stream: false,
            sticky: None,
            mint_ids: minted,
            anthropic_errors: false,
            conversation: minted,
        }
    }
}

/// What the request needs for another attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// The client's body.
    pub body: Vec<u8>,
    /// Where its parts sit, to rewrite it for another target.
    pub layout: Layout,
    /// The client's request headers.
    pub headers: Headers,
    /// A stored response's path after the version prefix, with the provider's id.
    pub stored_path: Option<String>,
}

/// A call-out's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallAnswer {
    /// Its headers, `:status` included.
    pub headers: Headers,
    /// Its whole body.
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The router's attempt is in flight.
    Routed,
    /// The router's answer is going to the client.
    Delivering,
    /// Waiting out a retry delay before this attempt.
    Waiting(AttemptKind),
    /// A call-out attempt is in flight.
    Calling(CallId),
    /// The answer has been sent, or the stream is gone; nothing more happens.
    Done,
}

/// Timing of an answer as it streams to the client.
#[derive(Debug, Clone)]
struct Measure {
    target: ModelId,
    started_ms: u64,
    first_token_ms: Option<u64>,
    usage: UsageScanner,
}

/// The state of one forwarded request.
#[derive(Debug, Clone)]
pub struct Machine {
    virtual_model: Option<usize>,
    attempts: Attempts,
    /// The target of the router's attempt (the first one).
    routed_target: Option<ModelId>,
    /// When the router's attempt left.
    routed_ms: u64,
    /// Present only while another attempt is possible.
    replay: Option<Replay>,
    state: State,
    /// The token of the one timer that may still fire; bumped when a timer must not.
    seq: u64,
    /// The last call-out's id.
    calls: CallId,
    /// The router's failed answer is held, waiting to be replaced.
    holding: bool,
    /// The client asked for a streamed answer.
    stream: bool,
    /// Start of the call-out in flight.
    started_ms: u64,
    /// `fallback_timeout_ms`, when another attempt is possible.
    fallback_timeout_ms: Option<u64>,
    /// Whether answers feed latency samples (only when routing uses them).
    needs_latency: bool,
    /// Set while a delivered answer is timed for the latency samples.
    measure: Option<Measure>,
    /// The sticky session of the request, to pin it where a fallback worked.
    sticky: Option<Session>,
    /// Whether answers get Switchboard's response ids.
    mint_ids: bool,
    /// Rewrites the delivered answer's ids as it streams.
    rewriter: Option<AnswerRewriter>,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    conversation: bool,
    ending: Option<Ending>,
    last_switch: Option<AttemptKind>,
}

/// The policy of `model` as a target of virtual model `vm` (a catalog model called directly
/// has no retries and no fallback).
fn policy(config: &Config, vm: Option<usize>, model: ModelId) -> &TargetPolicy {
    config
        .virtual_models
        .get(vm.unwrap_or(usize::MAX))
        .map_or(&DIRECT_POLICY, |vm| vm.policy(model))
}

impl Machine {
    /// A machine whose first attempt has just been handed to the router, at `now_ms`. The
    /// client's request is kept only when another attempt is possible.
    pub fn start<'c>(
        config: &'c Config,
        start: Start,
        replay: Replay,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> Machine {
        let vm_index = start.virtual_model;
        let attempts = Attempts::new(start.candidates, start.pinned);
        let replay = attempts
            .may_try_again(|m| policy(config, vm_index, m))
            .then_some(replay);
        let vm = vm_index.and_then(|i| config.virtual_models.get(i));
        let mut m = Machine {
            virtual_model: vm_index,
            routed_target: attempts.current(),
            attempts,
            routed_ms: now_ms,
            fallback_timeout_ms: vm
                .and_then(|vm| vm.fallback_timeout_ms)
                .filter(|_| replay.is_some()),
            replay,
            state: State::Routed,
            seq: 0,
            calls: 0,
            holding: false,
            stream: start.stream,
            started_ms: now_ms,
            needs_latency: vm.is_some_and(|vm| vm.needs_latency()),
            measure: None,
            sticky: start.sticky,
            mint_ids: start.mint_ids,
            rewriter: None,
            anthropic_errors: start.anthropic_errors,
            conversation: start.conversation,
            ending: None,
            last_switch: None,
        };
        if let Some(target) = m.routed_target {
            out.push(Effect::Attempt(Attempt {
                target,
                number: 1,
                kind: AttemptKind::First,
                call: None,
            }));
        }
        // `fallback_timeout_ms` covers the router's attempt too (Zuplo seed, "Failures and
        // retries"): until its answer starts.
        m.arm_fallback_timeout(now_ms, out);
        m
    }

    /// What the request did so far: for access-log fields at its end.
    pub fn summary(&self) -> Summary {
        Summary {
            virtual_model: self.virtual_model,
            attempts: self.attempts.total(),
            ending: self.ending,
            last_switch: self.last_switch,
        }
    }

    /// Whether another attempt could still follow (the client's request is kept for it).
    pub fn may_try_again(&self) -> bool {
        self.replay.is_some()
    }

    /// The router's answer headers arrived with `status`.
    pub fn on_answer_headers<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        match self.state {
            State::Routed => {}
            // Abandoned after a timeout, yet it answered well first: deliver it, drop the rest.
            State::Waiting(_) | State::Calling(_) if (200..300).contains(&status) => {
                let routed = self.routed_target;
                self.record(config, routed, AttemptOutcome::Status(status), || None, out);
                self.deliver(config, routed, status, false, out);
                return Flow::Continue;
            }
            // Abandoned and failed (already counted as a timeout): keep it from the client.
            State::Waiting(_) | State::Calling(_) => {
                self.holding = true;
                return Flow::Hold;
            }
            State::Delivering | State::Done => return Flow::Continue,
        }
        self.seq += 1; // the answer started: the fallback timeout no longer applies
        let outcome = router_outcome(status, || facts.code_details());
        let routed = self.routed_target;
        let hint = |f: &mut dyn AnswerFacts| {
            let now = f.now_ms();
            hint_ms(&f.headers(), now)
        };
        self.record(config, routed, outcome, || hint(facts), out);
        let step = self.step(config, outcome);
        if self.ends_conversation(step, outcome) {
            self.holding = true;
            self.reply_unavailable(config, out);
            return Flow::Hold;
        }
        match step {
            Step::Deliver | Step::GiveUp => {
                // Envoy's own 503 for an unreachable upstream names no target that answered.
                let answered = matches!(outcome, AttemptOutcome::Status(_))
                    .then_some(routed)
                    .flatten();
                self.deliver(config, answered, status, step == Step::GiveUp, out);
                Flow::Continue
            }
            Step::Retry { .. } | Step::Fallback { .. } => {
                self.holding = true;
                self.next_attempt(config, step, outcome, facts.now_ms(), out);
                Flow::Hold
            }
        }
    }

    /// A chunk of the router's answer body (`end`: the last one).
    pub fn on_answer_body<'c>(
        &mut self,
        config: &'c Config,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        if self.holding {
            return Flow::Hold;
        }
        if self.measure.is_none() && self.rewriter.is_none() {
            return Flow::Continue;
        }
        let chunk = facts.chunk();
        if let Some(mut m) = self.measure.take() {
            let now = facts.now_ms();
            m.usage.feed(&chunk);
            // Time to the first token, not to a role-only first chunk.
            if m.usage.has_content() {
                m.first_token_ms.get_or_insert(now);
            }
            if end {
                let tokens = m.usage.output_tokens();
                self.add_samples(m.target, m.started_ms, m.first_token_ms, tokens, now, out);
            } else {
                self.measure = Some(m);
            }
        }
        self.rewrite_chunk(config, &chunk, end, out);
        Flow::Continue
    }

    /// Trailers of the router's answer: a held failed answer stays held.
    pub fn on_answer_trailers(&self) -> Flow {
        if self.holding {
            Flow::Hold
        } else {
            Flow::Continue
        }
    }

    /// A timer armed with `token` fired at `now_ms`.
    pub fn on_timer<'c>(
        &mut self,
        config: &'c Config,
        token: u64,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        if token != self.seq {
            return;
        }
        match self.state {
            State::Waiting(kind) => {
                if let Some(target) = self.attempts.current() {
                    self.dispatch(config, target, kind, now_ms, out);
                }
            }
            // The attempt in flight, the router's or a call-out, did not start answering (a
            // call-out: did not answer) within fallback_timeout_ms. An abandoned call-out
            // cannot be cancelled; its late answer no longer matches the state and is ignored.
            State::Routed | State::Calling(_) => {
                let target = if self.state == State::Routed {
                    self.routed_target
                } else {
                    self.attempts.current()
                };
                let outcome = AttemptOutcome::FallbackTimeout;
                let step = self.step(config, outcome);
                if step == Step::GiveUp {
                    return; // nowhere else to go: keep waiting for this one
                }
                self.record(config, target, outcome, || None, out);
                self.next_attempt(config, step, outcome, now_ms, out);
            }
            State::Delivering | State::Done => {}
        }
    }

    /// The call-out of the [`Effect::Attempt`] `call` left.
    pub fn on_dispatched<'c>(&mut self, call: CallId, out: &mut Effects<'c>) {
        if self.state == State::Calling(call) {
            // `fallback_timeout_ms` covers every attempt (TrueFoundry virtual models,
            // "Retries and fallbacks"; Zuplo seed, "Failures and retries"). A call's answer
            // arrives whole, so here it bounds the whole answer.
            self.arm_fallback_timeout(self.started_ms, out);
        }
    }

    /// The host refused the call-out of `call` (unknown cluster, ...): a connection failure,
    /// and the next step at once.
    pub fn on_dispatch_refused<'c>(
        &mut self,
        config: &'c Config,
        call: CallId,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        if self.state != State::Calling(call) {
            return;
        }
        if let Some(target) = self.attempts.current() {
            if let Some((next, kind)) = self.after_refusal(config, target, now_ms, out) {
                self.dispatch(config, next, kind, now_ms, out);
            }
        }
    }

    /// The call-out `call` finished at `now_ms`: its answer, or `None` if it got none.
    pub fn on_call_answer<'c>(
        &mut self,
        config: &'c Config,
        call: CallId,
        answer: Option<CallAnswer>,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        if self.state != State::Calling(call) {
            return; // abandoned after a timeout
        }
        let outcome = call_outcome(answer.as_ref().map(|a| &a.headers));
        let hint = || hint_ms(&answer.as_ref()?.headers, now_ms);
        self.record(config, self.attempts.current(), outcome, hint, out);
        let step = self.step(config, outcome);
        if self.ends_conversation(step, outcome) {
            return self.reply_unavailable(config, out);
        }
        match (step, answer, outcome) {
            (Step::Retry { .. } | Step::Fallback { .. }, _, _) => {
                self.next_attempt(config, step, outcome, now_ms, out);
            }
            (_, Some(answer), AttemptOutcome::Status(status)) => {
                self.reply(config, status, answer, step == Step::GiveUp, now_ms, out);
            }
            _ => self.reply_unavailable(config, out),
        }
    }

    /// The stream went away: nothing more happens (a late answer or timer is ignored).
    pub fn on_destroyed(&mut self) -> Summary {
        self.state = State::Done;
        self.replay = None;
        self.summary()
    }

    /// The call-out of an [`Effect::Attempt`], ready to dispatch: the client's headers with
    /// the outbound changes, and the body for that target.
    pub fn call_request<'a>(
        &'a self,
        call: &'a Call<'_>,
        names: &HeaderNames,
    ) -> Option<CallRequest<'a>> {
        let replay = self.replay.as_ref()?;
        let headers = call
            .outbound
            .call_headers(&replay.headers, names, &call.content_length);
        Some(CallRequest {
            cluster: call.outbound.cluster,
            headers,
            body: call.body.as_deref().unwrap_or(&replay.body),
            timeout_ms: call.timeout_ms,
        })
    }

    fn arm_fallback_timeout<'c>(&mut self, from_ms: u64, out: &mut Effects<'c>) {
        self.seq += 1;
        if let Some(ms) = self.fallback_timeout_ms {
            out.push(Effect::ArmTimer {
                due_ms: from_ms.saturating_add(ms),
                token: self.seq,
            });
        }
    }

    /// The next step after the attempt in flight ended with `outcome`.
    fn step(&mut self, config: &Config, outcome: AttemptOutcome) -> Step {
        let vm = self.virtual_model;
        let step = self.attempts.after(outcome, |m| policy(config, vm, m));
        match step {
            // Without the request kept for replay there is no other attempt to make.
            Step::Retry { .. } | Step::Fallback { .. } if self.replay.is_none() => Step::GiveUp,
            other => other,
        }
    }

    /// Whether a pinned conversation's origin failed with nothing left to try: a 409
    /// rather than its error (TrueFoundry virtual models, "Responses API conversations").
    fn ends_conversation(&self, step: Step, outcome: AttemptOutcome) -> bool {
        matches!(step, Step::Deliver | Step::GiveUp)
            && self.conversation_pinned()
            && outcome.is_target_down()
    }

    /// Records an attempt's outcome for `target`.
    fn record<'c>(
        &self,
        config: &'c Config,
        target: Option<ModelId>,
        outcome: AttemptOutcome,
        hint: impl FnOnce() -> Option<u64>,
        out: &mut Effects<'c>,
    ) {
        let Some((target, model)) = target.and_then(|t| Some((t, config.model(t)?))) else {
            return;
        };
        out.push(Effect::Record {
            target,
            outcome,
            health: health_outcome(model, outcome, hint),
        });
    }

    /// Starts the attempt `step` asks for, now or after its delay.
    fn next_attempt<'c>(
        &mut self,
        config: &'c Config,
        step: Step,
        outcome: AttemptOutcome,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        match step {
            Step::Retry { delay_ms, .. } if delay_ms > 0 => self.wait(
                AttemptKind::Retry(outcome),
                now_ms.saturating_add(delay_ms),
                out,
            ),
            Step::Retry { target, .. } => {
                self.dispatch(config, target, AttemptKind::Retry(outcome), now_ms, out)
            }
            Step::Fallback { target } => {
                self.dispatch(config, target, AttemptKind::Fallback(outcome), now_ms, out)
            }
            Step::Deliver | Step::GiveUp => {}
        }
    }

    /// Waits for a retry's delay.
    fn wait<'c>(&mut self, kind: AttemptKind, due_ms: u64, out: &mut Effects<'c>) {
        self.last_switch = Some(kind);
        self.state = State::Waiting(kind);
        self.seq += 1;
        out.push(Effect::ArmTimer {
            due_ms,
            token: self.seq,
        });
    }

    /// Makes an attempt at `target` with a call-out; one that cannot be built counts as a
    /// refused call (a connection failure) and moves on to the next step at once.
    fn dispatch<'c>(
        &mut self,
        config: &'c Config,
        mut target: ModelId,
        mut kind: AttemptKind,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        loop {
            self.last_switch = Some(kind);
            if let Some(call) = self.call(config, target) {
                self.state = State::Calling(call.id);
                self.started_ms = now_ms;
                out.push(Effect::Attempt(Attempt {
                    target,
                    number: self.attempts.total(),
                    kind,
                    call: Some(Box::new(call)),
                }));
                return;
            }
            match self.after_refusal(config, target, now_ms, out) {
                Some((next, k)) => (target, kind) = (next, k),
                None => return,
            }
        }
    }

    /// After an attempt at `target` was refused: the next target to call at once, if any (a
    /// retry with a delay waits for it, even at the same target).
    fn after_refusal<'c>(
        &mut self,
        config: &'c Config,
        target: ModelId,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> Option<(ModelId, AttemptKind)> {
        let outcome = AttemptOutcome::ConnectFailure;
        self.record(config, Some(target), outcome, || None, out);
        match self.step(config, outcome) {
            Step::Retry { delay_ms, .. } if delay_ms > 0 => {
                self.wait(
                    AttemptKind::Retry(outcome),
                    now_ms.saturating_add(delay_ms),
                    out,
                );
                None
            }
            Step::Retry { target, .. } => Some((target, AttemptKind::Retry(outcome))),
            Step::Fallback { target } => Some((target, AttemptKind::Fallback(outcome))),
            Step::Deliver | Step::GiveUp => {
                self.reply_unavailable(config, out);
                None
            }
        }
    }

    /// The call-out of an attempt at `target`: the outbound request the core builds for it,
    /// as the router's attempt got its own.
    fn call<'c>(&mut self, config: &'c Config, target: ModelId) -> Option<Call<'c>> {
        let replay = self.replay.as_ref()?;
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        let client = ClientRequest {
            endpoint: replay.endpoint,
            headers: &replay.headers,
            // A stored-response request has no body to rewrite: it goes as the client sent it.
            body: replay
                .stored_path
                .is_none()
                .then_some((replay.body.as_slice(), &replay.layout)),
            stored_path: replay.stored_path.as_deref(),
        };
        let outbound = outbound(config, vm, target, &client)?;
        let body = match &outbound.edits {
            Some(edits) => Some(edits.apply(&replay.body)?),
            None => None,
        };
        let length = body.as_ref().map_or(replay.body.len(), Vec::len);
        self.calls += 1;
        Some(Call {
            id: self.calls,
            outbound,
            body,
            content_length: length.to_string(),
            timeout_ms: config.attempt_timeout_ms,
        })
    }

    /// Lets the router's answer through, with the resolved-model and attempts headers.
    fn deliver<'c>(
        &mut self,
        config: &'c Config,
        answered_by: Option<ModelId>,
        status: u16,
        gave_up: bool,
        out: &mut Effects<'c>,
    ) {
        self.state = State::Delivering;
        self.seq += 1;
        self.holding = false;
        // No attempt follows: free the client's body now rather than when a long stream ends.
        self.replay = None;
        if let Some(target) = answered_by.filter(|_| (200..300).contains(&status)) {
            if self.needs_latency {
                self.measure = Some(Measure {
                    target,
                    started_ms: self.routed_ms,
                    first_token_ms: None,
                    usage: UsageScanner::default(),
                });
            }
        }
        // Minted ids are longer than the provider's: the length is no longer known.
        let rewrite = self.mint_ids && answered_by.is_some();
        if rewrite {
            self.rewriter = Some(AnswerRewriter::new());
        }
        let ending = self.end(answered_by, status, gave_up);
        out.push(Effect::Deliver(Delivery {
            ending,
            headers: self.answer_headers(config, answered_by, gave_up),
            drop_content_length: rewrite,
        }));
    }

    fn end(&mut self, target: Option<ModelId>, status: u16, gave_up: bool) -> Ending {
        let ending = Ending {
            target,
            status,
            attempts: self.attempts.total(),
            gave_up,
        };
        self.ending = Some(ending);
        ending
    }

    /// The headers Switchboard adds to the answer the client gets.
    fn answer_headers<'c>(
        &self,
        config: &'c Config,
        answered_by: Option<ModelId>,
        gave_up: bool,
    ) -> AnswerHeaders<'c> {
        let names = &config.header_names;
        let total = self.attempts.total();
        AnswerHeaders {
            resolved_model: answered_by
                .and_then(|t| config.model(t))
                .map(|m| (names.resolved_model.as_str(), m.name.as_str())),
            attempts: (gave_up || total > 1).then(|| (names.attempts.as_str(), total.to_string())),
        }
    }

    /// The minter of answers by `target` to this request.
    fn minter<'c>(&self, config: &'c Config, target: ModelId) -> Option<TurnMinter<'c>> {
        let vm = config.virtual_models.get(self.virtual_model?)?;
        Some(TurnMinter {
            keys: &config.response_keys,
            virtual_model: &vm.name,
            model: &config.model(target)?.name,
        })
    }

    /// Rewrites the ids in a chunk of the delivered answer.
    fn rewrite_chunk<'c>(
        &mut self,
        config: &'c Config,
        chunk: &[u8],
        end: bool,
        out: &mut Effects<'c>,
    ) {
        let Some(mut rewriter) = self.rewriter.take() else {
            return;
        };
        let answered_by = self.ending.and_then(|e| e.target);
        let Some(mut minter) = answered_by.and_then(|t| self.minter(config, t)) else {
            return;
        };
        let mut with = Vec::with_capacity(chunk.len() + 128);
        rewriter.feed(chunk, &mut minter, &mut with);
        if end {
            rewriter.finish(&mut with);
        }
        if with != chunk {
            out.push(Effect::ReplaceBody {
                len: chunk.len(),
                with,
            });
        }
        if !end {
            self.rewriter = Some(rewriter);
        }
    }

    /// The TTFT and TPOT samples of a successful answer by `target` that ended at `now_ms`.
    fn add_samples<'c>(
        &self,
        target: ModelId,
        started_ms: u64,
        first_token_ms: Option<u64>,
        tokens: u64,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        let first = first_token_ms.map(|t| t.saturating_sub(started_ms));
        let total = now_ms.saturating_sub(started_ms);
        let sample = LatencySample::of(self.stream, first, total, tokens);
        if !sample.is_empty() {
            out.push(Effect::Samples {
                target,
                sample,
                now_ms,
            });
        }
    }

    /// After a fallback answered well, keeps the request's sticky session on that target for
    /// the rest of its window (TrueFoundry seed, "Fallback during a sticky session").
    fn pin_session<'c>(&self, config: &'c Config, out: &mut Effects<'c>) {
        let (Some(session), Some(target)) = (self.sticky, self.attempts.current()) else {
            return;
        };
        if Some(target) == self.routed_target {
            return;
        }
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        if let (Some(vm), Some(model)) = (vm, config.model(target)) {
            out.push(Effect::Pin {
                virtual_model: &vm.name,
                session: session.hash,
                window: session.window,
                target: &model.name,
            });
        }
    }

    /// Answers the client with a call-out's answer.
    fn reply<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        answer: CallAnswer,
        gave_up: bool,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        let target = self.attempts.current();
        if let Some(t) = target.filter(|_| (200..300).contains(&status)) {
            self.pin_session(config, out);
            if self.needs_latency {
                let mut usage = UsageScanner::default();
                usage.feed(&answer.body);
                // The whole answer arrived at once: no time to first token here.
                let (started, tokens) = (self.started_ms, usage.output_tokens());
                self.add_samples(t, started, None, tokens, now_ms, out);
            }
        }
        self.state = State::Done;
        let minted = match target.filter(|_| self.mint_ids) {
            Some(t) => self
                .minter(config, t)
                .map(|mut m| rewrite_whole(&answer.body, &mut m)),
            None => None,
        };
        let ending = self.end(target, status, gave_up);
        out.push(Effect::Reply(Box::new(Reply {
            ending,
            added: self.answer_headers(config, target, gave_up),
            answer: answer.headers,
            body: minted.unwrap_or(answer.body),
        })));
    }

    /// Whether the request continues a Responses conversation at its origin.
    fn conversation_pinned(&self) -> bool {
        self.conversation && self.attempts.pinned()
    }

    /// Answers 503 when the last attempt got no answer at all. A pinned conversation's origin
    /// that failed gets 409 instead: another target would not hold the conversation, so there
    /// is no fallback (TrueFoundry virtual models, "Responses API conversations").
    fn reply_unavailable<'c>(&mut self, config: &'c Config, out: &mut Effects<'c>) {
        let name = self
            .attempts
            .current()
            .and_then(|t| config.model(t))
            .map(|m| m.name.as_str());
        let error = if self.conversation_pinned() {
            ErrorReply::origin_unavailable(name.unwrap_or("the model"))
        } else {
            ErrorReply::no_target_available(name.unwrap_or("the requested model"))
        };
        let error = if self.anthropic_errors {
            error.in_anthropic_shape()
        } else {
            error
        };
        self.state = State::Done;
        let ending = self.end(None, error.status, true);
        out.push(Effect::Fail(Box::new(Failure {
            ending,
            error,
            added: self.answer_headers(config, None, true),
        })));
    }
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod twins;
