//! One forwarded request after its first attempt left through Envoy's router: health
//! bookkeeping, and the retries and fallbacks that replace a failed answer.
//!
//! The first attempt goes through the router, so a good answer streams to the client as it
//! arrives. A failed answer is held back (headers and body paused) while the next attempt is
//! made with `dispatch_http_call`, with the body rewritten for that target; the answer of the
//! last attempt then replaces it (DESIGN.md, "Fallback by replacing a failed response"). The
//! decisions come from [`Attempts`] in the core; this file moves bytes.

use super::host::{self, Headers};
use super::runtime::Runtime;
use crate::core::config::{Config, ModelId, TargetPolicy, DIRECT_POLICY};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::fallback::{AttemptOutcome, Attempts, Step};
use crate::core::health::record::Outcome;
use crate::core::health::retry_after;
use crate::core::health::sla::LatencySample;
use crate::core::outbound::{outbound, ClientRequest};
use crate::core::request::Layout;
use crate::core::responses::rewrite::AnswerRewriter;
use crate::core::responses::{rewrite_whole, TurnMinter};
use crate::core::routing::state::RoutingState;
use crate::core::routing::sticky::Session;
use crate::core::usage::UsageScanner;
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::Rc;

/// Response headers not copied into a replacement answer (Envoy sets its own framing).
const NOT_REPLAYED: &[&str] = &[
    ":status",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The router's attempt is in flight.
    Routed,
    /// The router's answer is going to the client.
    Delivering,
    /// Waiting for a retry delay.
    Waiting,
    /// A dispatched attempt is in flight.
    Calling(u32),
    /// The answer has been sent; nothing more happens.
    Done,
}

/// What the request needs for another attempt.
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

/// How a request was routed, as the flight starts.
pub struct Start {
    /// The virtual model, if one was called.
    pub virtual_model: Option<usize>,
    /// The candidates, the first in flight.
    pub attempts: Attempts,
    /// The client asked for a streamed answer.
    pub stream: bool,
    /// Its sticky session, if any.
    pub sticky: Option<Session>,
    /// When the first attempt left.
    pub now_ms: u64,
    /// A Responses API answer of a virtual model: its ids are minted as it streams.
    pub mint_ids: bool,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    pub anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    pub conversation: bool,
}

/// The state of one forwarded request.
pub struct Flight {
    /// The stream this flight belongs to.
    pub context_id: u32,
    config: Rc<Config>,
    virtual_model: Option<usize>,
    attempts: Attempts,
    /// The target of the router's attempt (the first one).
    routed_target: Option<ModelId>,
    /// Present only when another attempt is possible.
    replay: Option<Replay>,
    state: State,
    /// Bumped whenever a pending timer must no longer fire.
    seq: u64,
    /// The router's failed answer is paused, waiting to be replaced.
    holding: bool,
    /// The client asked for a streamed answer.
    stream: bool,
    /// Start of the attempt in flight.
    started_ms: u64,
    /// Set while a delivered answer is timed for the latency samples.
    measure: Option<Measure>,
    /// The sticky session of the request, to pin it where a fallback worked.
    sticky: Option<Session>,
    /// Whether answers get Switchboard's response ids.
    mint_ids: bool,
    /// Rewrites the delivered answer's ids as it streams.
    rewriter: Option<AnswerRewriter>,
    /// The target whose answer is being delivered (not always the attempt in flight: an
    /// abandoned router attempt may answer after a call-out left).
    answered_by: Option<ModelId>,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    conversation: bool,
}

/// Timing of an answer as it streams to the client.
#[derive(Default)]
struct Measure {
    first_token_ms: Option<u64>,
    usage: UsageScanner,
}

impl Flight {
    /// A flight whose first attempt has just been handed to the router.
    pub fn new(context_id: u32, config: Rc<Config>, start: Start, replay: Option<Replay>) -> Self {
        Flight {
            context_id,
            config,
            virtual_model: start.virtual_model,
            routed_target: start.attempts.current(),
            attempts: start.attempts,
            replay,
            state: State::Routed,
            seq: 0,
            holding: false,
            stream: start.stream,
            started_ms: start.now_ms,
            measure: None,
            sticky: start.sticky,
            mint_ids: start.mint_ids,
            rewriter: None,
            answered_by: None,
            anthropic_errors: start.anthropic_errors,
            conversation: start.conversation,
        }
    }

    /// The minter of answers by `target` to this request.
    fn minter(&self, target: ModelId) -> Option<TurnMinter<'_>> {
        let vm = self.config.virtual_models.get(self.virtual_model?)?;
        Some(TurnMinter {
            keys: &self.config.response_keys,
            virtual_model: &vm.name,
            model: &self.config.model(target)?.name,
        })
    }

    /// Whether this request's answers feed latency samples (only when routing uses them).
    fn needs_latency(&self) -> bool {
        self.virtual_model
            .and_then(|i| self.config.virtual_models.get(i))
            .is_some_and(|vm| vm.needs_latency())
    }

    /// Adds the TTFT and TPOT samples of a successful answer that ended at `now`.
    fn add_samples(&self, rt: &Runtime, first_token_ms: Option<u64>, tokens: u64, now: u64) {
        let Some(target) = self.attempts.current() else {
            return;
        };
        let first = first_token_ms.map(|t| t.saturating_sub(self.started_ms));
        let total = now.saturating_sub(self.started_ms);
        let sample = LatencySample::of(self.stream, first, total, tokens);
        if !sample.is_empty() {
            rt.add_samples(&self.config, target, sample, now);
        }
    }

    fn policy(config: &Config, virtual_model: Option<usize>, model: ModelId) -> &TargetPolicy {
        config
            .virtual_models
            .get(virtual_model.unwrap_or(usize::MAX))
            .map_or(&DIRECT_POLICY, |vm| vm.policy(model))
    }

    /// Whether another attempt could follow the first.
    pub fn may_try_again(
        config: &Config,
        virtual_model: Option<usize>,
        attempts: &Attempts,
    ) -> bool {
        attempts.may_try_again(|m| Self::policy(config, virtual_model, m))
    }

    fn fallback_timeout_ms(&self) -> Option<u64> {
        self.replay.as_ref()?;
        self.config
            .virtual_models
            .get(self.virtual_model?)?
            .fallback_timeout_ms
    }

    /// Arms the `fallback_timeout_ms` timer of the router's attempt, which just started.
    pub fn arm_fallback_timeout(this: &Rc<RefCell<Flight>>, rt: &Runtime, now_ms: u64) {
        let Ok(mut f) = this.try_borrow_mut() else {
            return;
        };
        f.seq += 1;
        if let Some(ms) = f.fallback_timeout_ms() {
            rt.add_timer(now_ms.saturating_add(ms), f.seq, this);
        }
    }

    /// The router's response headers arrived.
    pub fn on_response_headers(this: &Rc<RefCell<Flight>>, rt: &Runtime) -> Action {
        // Host callbacks never nest, so the flight is free; a surprise must not abort the VM.
        let Ok(mut f) = this.try_borrow_mut() else {
            return Action::Continue;
        };
        let status = host::response_header(":status")
            .and_then(|s| std::str::from_utf8(&s).ok()?.parse::<u16>().ok())
            .unwrap_or(502);
        // Read only if used: a success on a clean record, the usual answer, needs no time.
        let clock = host::Clock::default();
        match f.state {
            State::Routed => {}
            // Abandoned after a timeout, yet it answered well first: deliver it, drop the rest.
            State::Waiting | State::Calling(_) if (200..300).contains(&status) => {
                f.record(
                    rt,
                    f.routed_target,
                    AttemptOutcome::Status(status),
                    || None,
                    || clock.now_ms(),
                );
                let routed = f.routed_target;
                f.deliver(routed, status, false);
                return Action::Continue;
            }
            // Abandoned and failed (already counted as a timeout): keep it from the client.
            State::Waiting | State::Calling(_) => {
                f.holding = true;
                return Action::Pause;
            }
            State::Delivering | State::Done => return Action::Continue,
        }
        f.seq += 1; // the answer started: the fallback timeout no longer applies
        let outcome = router_outcome(status);
        let hint = || hint_ms(&host::response_headers(), clock.now_ms());
        f.record(rt, f.routed_target, outcome, hint, || clock.now_ms());
        let step = f.step(outcome);
        if matches!(step, Step::Deliver | Step::GiveUp)
            && f.conversation_pinned()
            && outcome.is_target_down()
        {
            f.holding = true;
            f.reply_unavailable();
            return Action::Pause;
        }
        match step {
            Step::Deliver | Step::GiveUp => {
                // Envoy's own 503 for an unreachable upstream names no target that answered.
                let answered = matches!(outcome, AttemptOutcome::Status(_))
                    .then_some(f.routed_target)
                    .flatten();
                f.deliver(answered, status, step == Step::GiveUp);
                Action::Continue
            }
            Step::Retry { .. } | Step::Fallback { .. } => {
                f.holding = true;
                drop(f);
                Flight::next_attempt(this, rt, step, clock.now_ms());
                Action::Pause
            }
        }
    }

    /// After a fallback answered well, keeps the request's sticky session on that target for
    /// the rest of its window (TrueFoundry seed, "Fallback during a sticky session").
    fn pin_session(&self, rt: &Runtime) {
        let (Some(session), Some(target)) = (self.sticky, self.attempts.current()) else {
            return;
        };
        if Some(target) == self.routed_target {
            return;
        }
        let vm = self
            .virtual_model
            .and_then(|i| self.config.virtual_models.get(i));
        if let (Some(vm), Some(model)) = (vm, self.config.model(target)) {
            rt.pin(&vm.name, session.hash, session.window, &model.name);
        }
    }

    /// Lets the router's answer through, with the resolved-model and attempts headers.
    fn deliver(&mut self, answered_by: Option<ModelId>, status: u16, gave_up: bool) {
        self.state = State::Delivering;
        self.seq += 1;
        self.holding = false;
        // No attempt follows: free the client's body now rather than when a long stream ends.
        self.replay = None;
        if (200..300).contains(&status) && self.needs_latency() {
            self.measure = Some(Measure::default());
        }
        self.answered_by = answered_by;
        if self.mint_ids && answered_by.is_some() {
            // Minted ids are longer than the provider's: the length is no longer known.
            self.rewriter = Some(AnswerRewriter::new());
            host::remove_response_header("content-length");
        }
        for (name, value) in self.answer_headers(answered_by, gave_up) {
            host::set_response_header(name, &value);
        }
    }

    /// The headers Switchboard adds to the answer the client gets.
    fn answer_headers(&self, answered_by: Option<ModelId>, gave_up: bool) -> Vec<(&str, String)> {
        let names = &self.config.header_names;
        let mut out = Vec::with_capacity(2);
        if let Some(m) = answered_by.and_then(|t| self.config.model(t)) {
            out.push((names.resolved_model.as_str(), m.name.clone()));
        }
        if gave_up || self.attempts.total() > 1 {
            out.push((names.attempts.as_str(), self.attempts.total().to_string()));
        }
        out
    }

    /// Trailers of the router's answer: a held failed answer stays held.
    pub fn on_response_trailers(&self) -> Action {
        if self.holding {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    /// A chunk of the router's response body.
    pub fn on_response_body(
        this: &Rc<RefCell<Flight>>,
        rt: &Runtime,
        size: usize,
        end: bool,
    ) -> Action {
        let Ok(mut f) = this.try_borrow_mut() else {
            return Action::Continue;
        };
        if f.holding {
            return Action::Pause;
        }
        if f.measure.is_none() && f.rewriter.is_none() {
            return Action::Continue;
        }
        let chunk = if size > 0 {
            host::response_body(size)
        } else {
            Vec::new()
        };
        if let Some(m) = f.measure.as_mut() {
            let now = host::now_ms();
            if size > 0 {
                m.usage.feed(&chunk);
                // Time to the first token, not to a role-only first chunk.
                if m.usage.has_content() {
                    m.first_token_ms.get_or_insert(now);
                }
            }
            if end {
                let (first, tokens) = (m.first_token_ms, m.usage.output_tokens());
                f.measure = None;
                f.add_samples(rt, first, tokens, now);
            }
        }
        f.rewrite_chunk(&chunk, end);
        Action::Continue
    }

    /// Rewrites the ids in a chunk of the delivered answer, in place in Envoy's buffer.
    fn rewrite_chunk(&mut self, chunk: &[u8], end: bool) {
        let Some(mut rewriter) = self.rewriter.take() else {
            return;
        };
        let Some(mut minter) = self.answered_by.and_then(|t| self.minter(t)) else {
            return;
        };
        let mut out = Vec::with_capacity(chunk.len() + 128);
        rewriter.feed(chunk, &mut minter, &mut out);
        if end {
            rewriter.finish(&mut out);
        }
        if out != chunk {
            host::replace_response_body(chunk.len(), &out);
        }
        if !end {
            self.rewriter = Some(rewriter);
        }
    }

    /// A timer of this flight fired (on the root's tick, with the stream made effective).
    pub fn on_timer(this: &Rc<RefCell<Flight>>, rt: &Runtime, seq: u64) {
        let Ok(mut f) = this.try_borrow_mut() else {
            return;
        };
        if seq != f.seq {
            return;
        }
        let now = host::now_ms();
        match f.state {
            State::Waiting => {
                let Some(target) = f.attempts.current() else {
                    return;
                };
                drop(f);
                Flight::dispatch(this, rt, target, now);
            }
            // The attempt in flight, the router's or a call-out, did not start answering
            // (a call-out: did not answer) within fallback_timeout_ms. An abandoned call-out
            // cannot be cancelled; its late answer no longer matches the state and is ignored.
            State::Routed | State::Calling(_) => {
                let target = if f.state == State::Routed {
                    f.routed_target
                } else {
                    f.attempts.current()
                };
                let step = f.step(AttemptOutcome::FallbackTimeout);
                if step == Step::GiveUp {
                    return; // nowhere else to go: keep waiting for this one
                }
                f.record(rt, target, AttemptOutcome::FallbackTimeout, || None, || now);
                drop(f);
                Flight::next_attempt(this, rt, step, now);
            }
            State::Delivering | State::Done => {}
        }
    }

    /// A dispatched attempt finished (`num_headers` 0: it failed without an answer).
    pub fn on_call_response(
        this: &Rc<RefCell<Flight>>,
        rt: &Runtime,
        token: u32,
        num_headers: usize,
        headers: Headers,
        body: Vec<u8>,
    ) {
        let Ok(mut f) = this.try_borrow_mut() else {
            return;
        };
        if f.state != State::Calling(token) {
            return; // abandoned after a timeout
        }
        let now = host::now_ms();
        let status = headers
            .get_str(":status")
            .and_then(|s| s.parse::<u16>().ok());
        let outcome = match (num_headers, status) {
            (0, _) | (_, None) => AttemptOutcome::ConnectFailure,
            (_, Some(s)) => AttemptOutcome::Status(s),
        };
        f.record(
            rt,
            f.attempts.current(),
            outcome,
            || hint_ms(&headers, now),
            || now,
        );
        let step = f.step(outcome);
        if matches!(step, Step::Deliver | Step::GiveUp)
            && f.conversation_pinned()
            && outcome.is_target_down()
        {
            return f.reply_unavailable();
        }
        match (step, status) {
            (Step::Retry { .. } | Step::Fallback { .. }, _) => {
                drop(f);
                Flight::next_attempt(this, rt, step, now);
            }
            (_, Some(status)) if outcome != AttemptOutcome::ConnectFailure => {
                if (200..300).contains(&status) {
                    f.pin_session(rt);
                }
                if (200..300).contains(&status) && f.needs_latency() {
                    let mut usage = UsageScanner::default();
                    usage.feed(&body);
                    // The whole answer arrived at once: no time to first token here.
                    f.add_samples(rt, None, usage.output_tokens(), now);
                }
                f.reply(status, &headers, &body, step == Step::GiveUp);
            }
            _ => f.reply_unavailable(),
        }
    }

    fn step(&mut self, outcome: AttemptOutcome) -> Step {
        let (config, vm) = (Rc::clone(&self.config), self.virtual_model);
        let step = self
            .attempts
            .after(outcome, |m| Self::policy(&config, vm, m));
        match step {
            // Without the request kept for replay there is no other attempt to make.
            Step::Retry { .. } | Step::Fallback { .. } if self.replay.is_none() => Step::GiveUp,
            other => other,
        }
    }

    /// Updates `target`'s health with an attempt's outcome. Statuses the model does not count
    /// as failures and that are not successes (a 404, say) change nothing. The provider's
    /// "come back in" hint is only read from a 429 (agentgateway seed).
    fn record(
        &self,
        rt: &Runtime,
        target: Option<ModelId>,
        outcome: AttemptOutcome,
        hint: impl FnOnce() -> Option<u64>,
        now: impl FnOnce() -> u64,
    ) {
        let Some((target, model)) = target.and_then(|t| Some((t, self.config.model(t)?))) else {
            return;
        };
        let health = match outcome {
            AttemptOutcome::Status(s) if model.health.is_failure(s) => Outcome::Failure {
                hint_ms: if s == 429 { hint() } else { None },
            },
            AttemptOutcome::Status(s) if s < 400 => Outcome::Success,
            AttemptOutcome::Status(_) => return,
            AttemptOutcome::ConnectFailure
            | AttemptOutcome::Timeout
            | AttemptOutcome::FallbackTimeout => Outcome::Failure { hint_ms: None },
        };
        rt.record(&self.config, target, health, now);
    }

    /// Starts the attempt `step` asks for, now or after its delay.
    fn next_attempt(this: &Rc<RefCell<Flight>>, rt: &Runtime, step: Step, now: u64) {
        match step {
            Step::Retry { delay_ms, .. } if delay_ms > 0 => {
                let mut f = this.borrow_mut();
                f.state = State::Waiting;
                f.seq += 1;
                rt.add_timer(now.saturating_add(delay_ms), f.seq, this);
            }
            Step::Retry { target, .. } | Step::Fallback { target } => {
                Flight::dispatch(this, rt, target, now);
            }
            Step::Deliver | Step::GiveUp => {}
        }
    }

    /// Sends the request to `target` with `dispatch_http_call`; a refused call counts as a
    /// connection failure and moves on to the next step at once.
    fn dispatch(this: &Rc<RefCell<Flight>>, rt: &Runtime, mut target: ModelId, now: u64) {
        loop {
            let mut f = this.borrow_mut();
            let token = f.call(target);
            if let Some(token) = token {
                f.state = State::Calling(token);
                f.started_ms = now;
                rt.add_call(token, this);
                // `fallback_timeout_ms` covers every attempt (TrueFoundry virtual models,
                // "Retries and fallbacks"; Zuplo seed, "Failures and retries"). A call's
                // answer arrives whole, so here it bounds the whole answer.
                f.seq += 1;
                if let Some(ms) = f.fallback_timeout_ms() {
                    rt.add_timer(now.saturating_add(ms), f.seq, this);
                }
                return;
            }
            f.record(
                rt,
                Some(target),
                AttemptOutcome::ConnectFailure,
                || None,
                || now,
            );
            match f.step(AttemptOutcome::ConnectFailure) {
                // A retry honours its delay; a refused call to the same target waits for it.
                step @ Step::Retry { delay_ms, .. } if delay_ms > 0 => {
                    drop(f);
                    return Flight::next_attempt(this, rt, step, now);
                }
                Step::Retry { target: t, .. } | Step::Fallback { target: t } => target = t,
                Step::Deliver | Step::GiveUp => return f.reply_unavailable(),
            }
        }
    }

    /// Makes the HTTP call of an attempt at `target`: the outbound request the core builds
    /// for it, as the router's attempt got its own.
    fn call(&self, target: ModelId) -> Option<u32> {
        let replay = self.replay.as_ref()?;
        let vm = self
            .virtual_model
            .and_then(|i| self.config.virtual_models.get(i));
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
        let out = outbound(&self.config, vm, target, &client)?;
        super::http::log_attempt(&self.config, target, self.attempts.total(), &out);
        let body = out.body(&replay.body)?;
        let length = body.len().to_string();
        let headers = out.call_headers(&replay.headers, &self.config.header_names, &length);
        host::dispatch(out.cluster, headers, &body, self.config.attempt_timeout_ms)
    }

    /// Answers the client with a dispatched attempt's response.
    fn reply(&mut self, status: u16, headers: &Headers, body: &[u8], gave_up: bool) {
        self.state = State::Done;
        let minted = match self.attempts.current().filter(|_| self.mint_ids) {
            Some(t) => self.minter(t).map(|mut m| rewrite_whole(body, &mut m)),
            None => None,
        };
        let body = minted.as_deref().unwrap_or(body);
        let added = self.answer_headers(self.attempts.current(), gave_up);
        let mut out: Vec<(&str, &str)> = headers
            .text_pairs()
            .filter(|(k, _)| !NOT_REPLAYED.contains(k))
            .collect();
        out.extend(added.iter().map(|(k, v)| (*k, v.as_str())));
        host::send_reply(status, out, body);
    }

    /// Whether the request continues a Responses conversation at its origin.
    fn conversation_pinned(&self) -> bool {
        self.conversation && self.attempts.pinned()
    }

    /// Sends an error Switchboard answers itself, in the shape the client's API uses.
    fn send_error(&mut self, reply: &ErrorReply, gave_up: bool) {
        self.state = State::Done;
        let reply = if self.anthropic_errors {
            reply.in_anthropic_shape()
        } else {
            reply.clone()
        };
        let added = self.answer_headers(None, gave_up);
        let extra = added.iter().map(|(k, v)| (*k, v.as_str())).collect();
        host::send_json_reply(reply.status, &reply.body, extra);
    }

    /// Answers 503 when the last attempt got no answer at all. A pinned conversation's origin
    /// that failed gets 409 instead: another target would not hold the conversation, so there
    /// is no fallback (TrueFoundry virtual models, "Responses API conversations").
    fn reply_unavailable(&mut self) {
        let reply = if self.conversation_pinned() {
            ErrorReply::origin_unavailable(self.current_name("the model"))
        } else {
            ErrorReply::no_target_available(self.current_name("the requested model"))
        };
        self.send_error(&reply, true);
    }

    /// The catalog name of the attempt's target, or `otherwise`.
    fn current_name<'a>(&'a self, otherwise: &'a str) -> &'a str {
        self.attempts
            .current()
            .and_then(|t| self.config.model(t))
            .map_or(otherwise, |m| m.name.as_str())
    }
}

/// How the router's attempt ended: Envoy's own 5xx replies mean no answer came.
fn router_outcome(status: u16) -> AttemptOutcome {
    if !(500..600).contains(&status) {
        return AttemptOutcome::Status(status);
    }
    match host::property(&["response", "code_details"]).as_deref() {
        Some(d) if d.starts_with("upstream_reset_before_response_started") => {
            AttemptOutcome::ConnectFailure
        }
        Some("no_healthy_upstream" | "cluster_not_found") => AttemptOutcome::ConnectFailure,
        Some("upstream_response_timeout" | "upstream_per_try_timeout") => AttemptOutcome::Timeout,
        _ => AttemptOutcome::Status(status),
    }
}

/// The provider's "come back in" hint from a failed answer's headers.
fn hint_ms(headers: &Headers, now_ms: u64) -> Option<u64> {
    let names: Vec<&str> = headers.text_pairs().map(|(k, _)| k).collect();
    retry_after::hint_ms(|n| headers.get_str(n), &names, now_ms)
}
