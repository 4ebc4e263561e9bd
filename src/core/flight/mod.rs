//! The state machine of one forwarded request: retries, fallbacks and timeouts after its first
//! attempt left through Envoy's router. Sans-IO: events in, effects out; the host's time and
//! lazily read facts come in as arguments, so every sequence replays in a unit test.
//!
//! The first attempt goes through the router, so a good answer streams to the client as it
//! arrives. A failed answer is held (headers, body and trailers) while the next attempt is made
//! as a call-out with the body rewritten for that target; the last attempt's answer then
//! replaces it (a verified Envoy behaviour: a held answer is replaced by
//! `send_http_response`). On a host that forwards streamed call-outs itself (the native
//! module), a streaming request's every attempt, the first included, is such a call-out whose
//! answer comes as answer events ([`Start::streams_attempts`]). A good streamed answer is held
//! until its first content event (`commit.rs`). The decisions come from [`Attempts`]; this module
//! sequences them.
//!
//! # Events (methods; pass the [`Config`] the machine was started with)
//! - [`Machine::start`]: the request was routed (its first attempt written into the request).
//! - [`Machine::on_answer_headers`]: the router's answer headers (status; Envoy's response
//!   code details read through [`AnswerFacts`] only for a 5xx).
//! - [`Machine::on_answer_body`], [`Machine::on_answer_trailers`]: the router's answer streams
//!   (the body chunk a body event reads through [`AnswerFacts::chunk`] is every byte held so
//!   far: after [`Flow::Hold`], Envoy's buffer and the chunk just received).
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
//!
//! # What its driver does (the stream machine's `src/core/stream/flight.rs`)
//! - Keeps one `Machine` per forwarded stream, with the config it started with, in one map
//!   owned by the worker; call handles and timers map back to (stream, [`CallId`] / token).
//! - [`Effect::Attempt`] with a call: dispatch [`Machine::call_request`], then report
//!   [`Machine::on_dispatched`] or [`Machine::on_dispatch_refused`]; their effects follow
//!   the batch's. The first attempt (`call: None`) was already written into the request.
//! - [`Effect::ArmTimer`]: call [`Machine::on_timer`] with the token at or after `due_ms`;
//!   stale tokens are ignored, so timers never need cancelling.
//! - [`Effect::Record`] / [`Effect::Samples`]: hand them to [`apply_health`], which updates
//!   the health store and the worker's view (a success on a clean record is skipped).
//! - [`Effect::Deliver`]: set its headers on the router's answer before it goes on.
//!   [`Effect::Reply`] / [`Effect::Fail`]: a local reply replacing the held answer.
//!   [`Effect::ReplaceBody`]: replace the body in hand (every byte held so far, as
//!   [`AnswerFacts::chunk`] read it).
//! - Tell the machine whether the answer's headers end it ([`AnswerFacts::ends_with_headers`]):
//!   a good answer to a request that does not stream may be held until its end (see `whole`).
//! - When the stream goes away, [`Machine::on_destroyed`] (its [`Summary`] is the
//!   access-log's) and forget the stream's calls and timers.

mod answers;
mod attempts;
mod commit;
mod deadline;
mod effects;
mod inputs;
mod judge;
mod outcome;
mod records;
mod translation;
mod whole;

pub use effects::{
    AnswerHeaders, Attempt, AttemptKind, Call, CallId, CallRequest, Delivery, Effect, Effects,
    Ending, Failure, Flow, Reply, Summary, Tokens,
};
pub use inputs::{AnswerFacts, CallAnswer, Chunk, Replay, Start};
pub use outcome::{
    attempt_record, call_outcome, failure_class, health_outcome, hint_ms, router_outcome,
};
pub use records::apply_health;
pub use translation::usage_asked;

use crate::core::answer_faults::judged;
use crate::core::config::{
    AnswerFallbacks, Budget, Config, HeaderNames, ModelId, StreamRules, TargetPolicy, TimeoutRules,
    VirtualModel, DIRECT_POLICY,
};
use crate::core::endpoint::Endpoint;
use crate::core::fallback::{AttemptOutcome, Attempts, Step};
use crate::core::responses::rewrite::AnswerRewriter;
use crate::core::routing::sticky::Session;
use crate::core::sse::{Dialect, Watcher};
use crate::core::usage::UsageScanner;
use judge::Judged;

#[derive(Debug, Clone, Copy)]
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
#[derive(Debug)]
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
    /// A failed answer held until its body ends, to tell its class.
    judging: Option<judge::Judging>,
    /// The router's good answer is held until its end, with this status: the fallback
    /// timeout covers the whole answer (`fallback_timeout_scope`), or it is judged whole
    /// (`fallback_on`).
    buffering: Option<u16>,
    /// The 2xx answers `fallback_on` judges (a refusal, an empty answer, an error object),
    /// when the virtual model asks for any and the endpoint is an LLM API; otherwise none, and
    /// a good answer is never held for it.
    judge: Option<AnswerFallbacks>,
    /// The client asked for a streamed answer.
    stream: bool,
    /// Start of the call-out in flight.
    started_ms: u64,
    /// `fallback_timeout_ms`, when another attempt is possible.
    fallback_timeout_ms: Option<u64>,
    /// How it grows from target to target.
    timeout_rules: TimeoutRules,
    /// Whether answers feed latency samples into health (only when routing uses them).
    needs_latency: bool,
    /// Whether successful answers are timed and their usage read: for the latency samples,
    /// or for the metrics when the config asks (`usage_metrics`). Otherwise a plain answer's
    /// body streams past unread.
    measures: bool,
    /// Set while a successful answer is timed and its usage read.
    measure: Option<Measure>,
    /// The sticky session of the request, to pin it where a fallback worked.
    sticky: Option<Session>,
    /// Whether answers get Switchboard's response ids.
    mint_ids: bool,
    /// The caller those ids are bound to, if they are.
    caller: Option<crate::core::caller::Caller>,
    /// Rewrites the delivered answer's ids as it streams.
    rewriter: Option<AnswerRewriter>,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    conversation: bool,
    ending: Option<Ending>,
    last_switch: Option<AttemptKind>,
    /// The configured delay of the retry being waited for, for its [`Attempt`].
    waited_ms: u64,
    /// The target of the request's first attempt (a fallback that answers is pinned).
    first_target: Option<ModelId>,
    /// Every attempt is a streamed call-out whose answer comes as answer events.
    streamed: bool,
    /// The streamed call-out whose answer is awaited.
    stream_call: CallId,
    /// How the streamed answer's events read (a streaming request on a watched API): the
    /// dialect of the attempt's target, set as each attempt starts ([`Machine::aim`]).
    dialect: Option<Dialect>,
    /// The client's dialect, when its request streams on a watched API.
    client_dialect: Option<Dialect>,
    /// The endpoint the client called.
    endpoint: Endpoint,
    /// A translated stream to a Chat Completions client ends with a usage chunk.
    include_usage: bool,
    /// Every candidate was evicted when it was routed: the shortest eviction time left.
    evicted_for_ms: Option<u64>,
    /// The router's answer brought its own `Retry-After` (read only with `evicted_for_ms`).
    answer_hinted: bool,
    /// The delivered answer came from a translated attempt: it goes back into the client's
    /// API as it is delivered.
    translation: Option<Box<translation::Translation>>,
    /// `stream_commit` and `stream_idle_timeout_ms`.
    stream_rules: StreamRules,
    /// A 2xx streamed answer held until its first content event.
    commit: Option<Box<commit::Commit>>,
    /// The delivered stream's events, watched for a failure after the commit point.
    watch: Option<Box<Watcher>>,
    /// The delivered stream failed and was ended: anything after is dropped.
    ended: bool,
    /// When the streamed answer last sent anything, for `stream_idle_timeout_ms`.
    idle_from_ms: u64,
    /// The idle timer's token (its own series: [`commit::IDLE`] set).
    idle_seq: u64,
    /// When `request_deadline_ms` is spent, in the host's milliseconds.
    deadline_ms: Option<u64>,
    /// The deadline fired: a held stream is committed at its next chunk.
    deadline_spent: bool,
    /// `fallback_if_failed_within_ms`.
    failed_within_ms: Option<u64>,
    /// The last failed answer, kept only when the deadline may need it.
    last_failure: Option<Box<deadline::LastFailure>>,
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
        let vm = vm_index.and_then(|i| config.virtual_models.get(i));
        // Zuplo model load balancing, "Failures and retries": on these endpoints a failed
        // model fails the request, and a slow one is waited for ("Keeps waiting").
        let fail_fast = vm.is_some_and(|vm| vm.fail_fast.contains(replay.endpoint.api()));
        let include_usage = start.include_usage
            || translation::usage_asked(config, vm, &start.candidates, &replay, start.stream);
        let attempts = Attempts::new(start.candidates, start.pinned).with_fail_fast(fail_fast);
        let may_try_again =
            !start.router_path && attempts.may_try_again(|m| policy(config, vm_index, m));
        // A streamed first attempt is a call-out too: it needs the request.
        let streamed = start.streams_attempts;
        let endpoint = replay.endpoint;
        let replay = (may_try_again || streamed).then_some(replay);
        let mut m = Machine {
            virtual_model: vm_index,
            routed_target: attempts.current(),
            attempts,
            routed_ms: now_ms,
            fallback_timeout_ms: vm
                .and_then(|vm| vm.fallback_timeout_ms)
                .filter(|_| may_try_again && !fail_fast),
            timeout_rules: vm.map(|vm| vm.timeout_rules).unwrap_or_default(),
            replay,
            state: State::Routed,
            seq: 0,
            calls: 0,
            holding: false,
            judging: None,
            buffering: None,
            judge: vm
                .and_then(|vm| judged(vm.answer_fallbacks))
                .filter(|_| Dialect::of(endpoint).is_some()),
            stream: start.stream,
            started_ms: now_ms,
            needs_latency: vm.is_some_and(|vm| vm.needs_latency()),
            measures: config.usage_metrics || vm.is_some_and(|vm| vm.needs_latency()),
            measure: None,
            sticky: start.sticky,
            mint_ids: start.mint_ids,
            caller: start.caller,
            rewriter: None,
            anthropic_errors: start.anthropic_errors,
            conversation: start.conversation,
            ending: None,
            last_switch: None,
            waited_ms: 0,
            first_target: None,
            streamed,
            stream_call: 0,
            dialect: start.dialect,
            client_dialect: start.dialect,
            endpoint,
            include_usage,
            evicted_for_ms: start.evicted_for_ms,
            answer_hinted: false,
            translation: None,
            stream_rules: vm.map(|vm| vm.streams).unwrap_or_default(),
            commit: None,
            watch: None,
            ended: false,
            idle_from_ms: now_ms,
            idle_seq: 0,
            deadline_ms: None,
            deadline_spent: false,
            failed_within_ms: None,
            last_failure: None,
        };
        m.first_target = m.routed_target;
        if let Some(target) = m.routed_target {
            m.aim(config, target);
        }
        let budget = vm.map(|vm| vm.budget).unwrap_or_default();
        if streamed {
            if let Some(target) = m.routed_target {
                m.dispatch(config, target, AttemptKind::First, now_ms, out);
            }
            m.arm_deadline(budget, now_ms, out);
            return m;
        }
        if let Some(target) = m.routed_target {
            out.push(Effect::Attempt(Attempt {
                target,
                number: 1,
                kind: AttemptKind::First,
                call: None,
                delay_ms: 0,
            }));
        }
        m.arm_deadline(budget, now_ms, out);
        // `fallback_timeout_ms` covers the router's attempt too (Zuplo model load balancing, "Failures and
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

    /// Whether `call` is the call-out whose answer the machine waits for.
    pub fn is_current_call(&self, call: CallId) -> bool {
        match self.state {
            State::Calling(c) => c == call,
            State::Routed | State::Delivering => self.streamed && self.stream_call == call,
            State::Waiting(_) | State::Done => false,
        }
    }

    /// Whether every attempt is a streamed call-out the host forwards itself.
    pub fn streams_attempts(&self) -> bool {
        self.streamed
    }

    /// Whether another attempt could still follow (the client's request is kept for it).
    pub fn may_try_again(&self) -> bool {
        self.replay.is_some()
    }

    /// The router path's attempts ended with an answer from `target` after `attempts`
    /// attempts, `fallbacks` of them at another target, the last made as `last`: the answer is
    /// judged as that target's.
    pub fn router_answered(
        &mut self,
        config: &Config,
        target: Option<ModelId>,
        (attempts, fallbacks): (u32, u32),
        last: Option<AttemptKind>,
    ) {
        if let Some(target) = target {
            self.routed_target = Some(target);
            self.attempts.made_by_router(target, attempts, fallbacks);
            self.aim(config, target);
        }
        if attempts > 1 {
            self.last_switch = last;
        }
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
            // The time covers the whole answer: held, and still timed, until its end.
            State::Routed if self.holds_whole(status, facts) => {
                self.buffering = Some(status);
                return Flow::Hold;
            }
            // A good streamed answer waits for its first content event (the commit point).
            State::Routed if self.holds_until_content(status, facts) => {
                self.hold_until_content(status, facts, out);
                return Flow::Hold;
            }
            // A failure whose class needs its body is held until the body ends.
            State::Routed if self.judges_body(config, status, facts) => {
                self.hold_to_judge(status, facts);
                return Flow::Hold;
            }
            State::Routed => {}
            State::Waiting(_) | State::Calling(_) => {
                return self.on_late_answer_headers(config, status, facts, out)
            }
            State::Delivering | State::Done => return Flow::Continue,
        }
        self.seq += 1; // the answer started: the fallback timeout no longer applies
        if self.evicted_for_ms.is_some() {
            self.answer_hinted = facts.headers().get("retry-after").is_some();
        }
        let outcome = router_outcome(status, || facts.code_details());
        let class = self.class_of(config, self.routed_target, outcome, &[]);
        let hint = (status == 429)
            .then(|| {
                let now = facts.now_ms();
                hint_ms(&facts.headers(), now)
            })
            .flatten();
        let flow = self.routed_answer(
            config,
            (outcome, class),
            (status, hint),
            || facts.now_ms(),
            out,
        );
        if flow == Flow::Hold && self.holding {
            // Kept for a deadline that ends the request before the next attempt answers.
            self.keep_failed_headers(self.routed_target, status, facts);
        }
        flow
    }

    /// A chunk of the router's answer body (`end`: the last one).
    pub fn on_answer_body<'c>(
        &mut self,
        config: &'c Config,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        // A failed answer judged at its end and delivered goes on with the body in hand; an
        // answer held whole to be judged good is read once.
        let mut whole = match self.on_judged_body(config, end, facts, out) {
            Some(Judged::Hold | Judged::Replaced) => return Flow::Hold,
            Some(Judged::Delivered(body)) => Some(body),
            None => None,
        };
        if let Some(status) = self.buffering.filter(|_| end) {
            self.buffering = None;
            let body = self.judge.map(|_| (facts.chunk(), facts.now_ms()));
            let judged = body.as_ref().map(|(b, now)| (b.as_slice(), *now));
            if !self.whole_answer_ended(config, status, judged, out) {
                return Flow::Hold;
            }
            whole = body.map(|(b, _)| b);
        } else if self.holding {
            if end {
                self.keep_failed_body(facts);
            }
            return Flow::Hold;
        } else if let Some(status) = self.buffering {
            if !self.held_whole_grew(config, status, facts, out) {
                return Flow::Hold;
            }
        }
        if self.streamed {
            self.idle_from_ms = facts.now_ms();
        }
        if self.commit.is_some() {
            return self.on_uncommitted_body(config, end, facts, out);
        }
        if self.ended {
            // The stream was ended for a failure: nothing after its end event goes on.
            let len = facts.chunk().len();
            if len > 0 {
                out.push(Effect::ReplaceBody {
                    len,
                    with: Vec::new(),
                });
            }
            return Flow::Continue;
        }
        if self.measure.is_none()
            && self.rewriter.is_none()
            && self.watch.is_none()
            && self.translation.is_none()
        {
            return Flow::Continue;
        }
        // A translated whole answer is held to its end: JSON translates only whole.
        if !end && self.holds_translated() {
            return Flow::Hold;
        }
        let chunk = whole.unwrap_or_else(|| facts.chunk());
        self.deliver_chunk(config, &chunk, 0, end, facts, out);
        Flow::Continue
    }

    /// Passes on a chunk of the delivered answer, from `from` not yet watched: watched for a
    /// failure (which cuts it and ends the stream), timed, its usage read (all in the
    /// provider's own events), then its ids rewritten or translated into the client's API.
    fn deliver_chunk<'c>(
        &mut self,
        config: &'c Config,
        chunk: &[u8],
        from: usize,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) {
        let cut = self.watch_chunk(config, chunk, from, end, out);
        let keep = cut.as_ref().map_or(chunk.len(), |c| c.keep);
        let kept = chunk.get(..keep).unwrap_or(chunk);
        if let Some(mut m) = self.measure.take() {
            let now = facts.now_ms();
            m.usage.feed(kept);
            // Time to the first token, not to a role-only first chunk.
            if m.usage.has_content() {
                m.first_token_ms.get_or_insert(now);
            }
            if end && cut.is_none() {
                let times = (m.started_ms, m.first_token_ms, now);
                self.add_samples(m.target, times, &m.usage, out);
            } else if cut.is_none() {
                self.measure = Some(m);
            }
        }
        match cut {
            Some(cut) => self.end_in_chunk(config, chunk, cut, out),
            None => {
                if let Some(with) = self.outgoing(config, chunk, end) {
                    out.push(Effect::ReplaceBody {
                        len: chunk.len(),
                        with,
                    });
                }
            }
        }
    }

    /// Trailers of the router's answer: a held failed answer stays held; an answer held
    /// whole ends here (its body is no longer in hand: its ids and usage are not read).
    pub fn on_answer_trailers<'c>(&mut self, config: &'c Config, out: &mut Effects<'c>) -> Flow {
        if let Some(flow) = self.on_judged_trailers(config, out) {
            return flow;
        }
        if self.commit.is_some() {
            // It ended with no content event: it goes on as it is.
            self.commit_held(config, out);
            return Flow::Continue;
        }
        if let Some(status) = self.buffering.take() {
            if self.whole_answer_ended(config, status, None, out) {
                return Flow::Continue;
            }
            return Flow::Hold;
        }
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
        if token == deadline::DEADLINE {
            return self.on_deadline(config, now_ms, out);
        }
        if token & commit::IDLE != 0 {
            return self.on_idle_timer(config, token, now_ms, out);
        }
        if token != self.seq {
            return;
        }
        match self.state {
            State::Waiting(kind) => {
                if let Some(target) = self.attempts.current() {
                    self.dispatch(config, target, kind, now_ms, out);
                }
            }
            State::Routed | State::Calling(_) => self.on_fallback_timeout(config, now_ms, out),
            State::Delivering | State::Done => {}
        }
    }

    /// The call-out of the [`Effect::Attempt`] `call` left.
    pub fn on_dispatched<'c>(&mut self, call: CallId, out: &mut Effects<'c>) {
        if self.is_current_call(call) {
            // `fallback_timeout_ms` covers every attempt (TrueFoundry virtual models,
            // "Retries and fallbacks"; Zuplo model load balancing, "Failures and retries"). A
            // call's answer arrives whole, so here it bounds the whole answer; a streamed
            // call-out's, the time to its first content event (its commit point).
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
        if !self.is_current_call(call) {
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
        if !matches!(self.state, State::Calling(c) if c == call) {
            return; // abandoned after a timeout
        }
        let mut outcome = call_outcome(answer.as_ref());
        let status = match outcome {
            AttemptOutcome::Status(status) => Some(status),
            _ => None,
        };
        // A call-out's answer arrives whole: `fallback_on` judges every good one.
        if let (Some(200..=299), Some(answer)) = (status, answer.as_ref()) {
            if let Some(fault) = self.judge_answer(&answer.body) {
                outcome = AttemptOutcome::Answer(fault);
            }
        }
        let hint = || hint_ms(&answer.as_ref()?.headers, now_ms);
        let target = self.attempts.current();
        let body = answer.as_ref().map_or(&[][..], |a| &a.body[..]);
        let class = self.class_of(config, target, outcome, body);
        self.record_as(config, target, (outcome, class), hint, out);
        let step = self.step_as(config, (outcome, class), || now_ms);
        if self.ends_conversation(step, outcome) {
            return self.reply_unavailable(config, out);
        }
        match (step, answer, status) {
            (Step::Retry { .. } | Step::Fallback { .. }, answer, _) => {
                // Kept for a deadline that ends the request before the next attempt answers
                // (a judged 2xx too: a refusal is still an answer to give back).
                if let Some(status) = status {
                    self.keep_failed_call(target, status, answer);
                }
                self.next_attempt(config, step, outcome, now_ms, out);
            }
            (_, Some(answer), Some(status)) => {
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
}

#[cfg(test)]
mod tests;
