//! The next attempt: retry after a delay, fall back, or count a refused call-out as a
//! connection failure and move on; each attempt's call-out built by [`outbound`].

use super::*;
use crate::core::config::AtLast;
use crate::core::fallback::Step;
use crate::core::health::failure_class::FailureClass;
use crate::core::outbound::{outbound, ClientRequest};

impl Machine {
    /// Times the attempt in flight, from `from_ms`: each next target gets the previous one's
    /// time times `fallback_timeout_growth` (Zuplo model load balancing, "Failures and
    /// retries": the retry model "starts over with twice the time"); a retry keeps its
    /// target's time.
    pub(super) fn arm_fallback_timeout<'c>(&mut self, from_ms: u64, out: &mut Effects<'c>) {
        self.seq += 1;
        if let Some(ms) = self.fallback_timeout_ms {
            let ms = self.timeout_rules.timeout_ms(ms, self.attempts.fallbacks());
            out.push(Effect::ArmTimer {
                due_ms: from_ms.saturating_add(ms),
                token: self.seq,
            });
        }
    }

    /// The attempt in flight, the router's or a call-out, did not start answering (a
    /// call-out: did not answer) within its fallback timeout: the next target gets the
    /// request. An abandoned call-out cannot be cancelled; its late answer no longer matches
    /// the state and is ignored. With nowhere else to go the request keeps waiting, or, with
    /// `fallback_timeout_at_last: "fail"` at a target it moved to, fails (Zuplo model load
    /// balancing, "Failures and retries": "the request fails if that runs out too"; a request
    /// with no retry model has no timeout there, so its only target is waited for).
    pub(super) fn on_fallback_timeout<'c>(
        &mut self,
        config: &'c Config,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        let target = if matches!(self.state, State::Routed) {
            self.routed_target
        } else {
            self.attempts.current()
        };
        let moved = self.attempts.fallbacks() > 0;
        let outcome = AttemptOutcome::FallbackTimeout;
        let step = self.step(config, outcome, || now_ms);
        if step == Step::GiveUp {
            if moved && self.timeout_rules.at_last == AtLast::Fail {
                self.record(config, target, outcome, || None, out);
                self.reply_timed_out(config, out);
            }
            return;
        }
        self.record(config, target, outcome, || None, out);
        // A good streamed answer still held for its first event is abandoned with it.
        if self.commit.take().is_some() {
            self.holding = true;
        }
        self.next_attempt(config, step, outcome, now_ms, out);
    }

    /// The next step after the attempt in flight ended with `outcome` at `now` (read only
    /// when the request's budget may stop another attempt).
    pub(super) fn step(
        &mut self,
        config: &Config,
        outcome: AttemptOutcome,
        now: impl FnOnce() -> u64,
    ) -> Step {
        self.step_as(config, (outcome, FailureClass::Other), now)
    }

    /// The next step after the attempt in flight ended with `outcome` of `class`: a class
    /// that moves on goes to the next candidate at once ([`Machine::moves_on`]); the request's
    /// budget may stop it.
    pub(super) fn step_as(
        &mut self,
        config: &Config,
        (outcome, class): (AttemptOutcome, FailureClass),
        now: impl FnOnce() -> u64,
    ) -> Step {
        let vm = self.virtual_model;
        let moves_on = self.moves_on(config, class);
        let mark = self.attempts.mark();
        let step = self
            .attempts
            .after_as(outcome, moves_on, |m| policy(config, vm, m));
        let budgeted = self.deadline_ms.is_some() || self.failed_within_ms.is_some();
        match step {
            // Without the request kept for replay there is no other attempt to make.
            Step::Retry { .. } | Step::Fallback { .. } if self.replay.is_none() => Step::GiveUp,
            Step::Retry { .. } | Step::Fallback { .. } if budgeted => {
                if !self.budget_stops(step, outcome, now()) {
                    return step;
                }
                // The attempt it would make is not made: the failure goes to the client.
                self.attempts.restore(mark);
                Step::GiveUp
            }
            other => other,
        }
    }

    /// Whether a pinned conversation's origin failed with nothing left to try: a 409
    /// rather than its error (TrueFoundry virtual models, "Responses API conversations").
    pub(super) fn ends_conversation(&self, step: Step, outcome: AttemptOutcome) -> bool {
        matches!(step, Step::Deliver | Step::GiveUp)
            && self.conversation_pinned()
            && outcome.is_target_down()
    }

    /// Whether a failure of `class` goes to the next candidate at once, never retried: a
    /// spent quota and a refused gateway key always; a prompt too long for the window or
    /// refused by Azure's content filter when the virtual model's `fallback_on` asks.
    pub(super) fn moves_on(&self, config: &Config, class: FailureClass) -> bool {
        let on = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i))
            .map(|vm| vm.answer_fallbacks)
            .unwrap_or_default();
        match class {
            FailureClass::ContextLength => on.context_length,
            FailureClass::ContentFilter => on.content_filter,
            other => other.moves_on(),
        }
    }

    /// The class of `target`'s failed answer with `body` (empty when not read).
    pub(super) fn class_of(
        &self,
        config: &Config,
        target: Option<ModelId>,
        outcome: AttemptOutcome,
        body: &[u8],
    ) -> FailureClass {
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        target.map_or(FailureClass::Other, |t| {
            failure_class(config, vm, t, outcome, body)
        })
    }

    /// Records an attempt's outcome for `target`, its class told from its status alone.
    pub(super) fn record<'c>(
        &self,
        config: &'c Config,
        target: Option<ModelId>,
        outcome: AttemptOutcome,
        hint: impl FnOnce() -> Option<u64>,
        out: &mut Effects<'c>,
    ) {
        let class = self.class_of(config, target, outcome, &[]);
        self.record_as(config, target, (outcome, class), hint, out);
    }

    /// Records an attempt's outcome of `class` for `target`.
    pub(super) fn record_as<'c>(
        &self,
        config: &'c Config,
        target: Option<ModelId>,
        judged: (AttemptOutcome, FailureClass),
        hint: impl FnOnce() -> Option<u64>,
        out: &mut Effects<'c>,
    ) {
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        if let Some(effect) = target.and_then(|t| attempt_record(config, vm, t, judged, hint)) {
            out.push(effect);
        }
    }

    /// Starts the attempt `step` asks for, now or after its delay.
    pub(super) fn next_attempt<'c>(
        &mut self,
        config: &'c Config,
        step: Step,
        outcome: AttemptOutcome,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        match step {
            Step::Retry { delay_ms, .. } if delay_ms > 0 => {
                self.wait(AttemptKind::Retry(outcome), (now_ms, delay_ms), out)
            }
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
    pub(super) fn wait<'c>(
        &mut self,
        kind: AttemptKind,
        (now_ms, delay_ms): (u64, u64),
        out: &mut Effects<'c>,
    ) {
        self.last_switch = Some(kind);
        self.waited_ms = delay_ms;
        self.state = State::Waiting(kind);
        self.seq += 1;
        out.push(Effect::ArmTimer {
            due_ms: now_ms.saturating_add(delay_ms),
            token: self.seq,
        });
    }

    /// Makes an attempt at `target` with a call-out; one that cannot be built counts as a
    /// refused call (a connection failure) and moves on to the next step at once.
    pub(super) fn dispatch<'c>(
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
                self.started_ms = now_ms;
                self.aim(config, target);
                if self.streamed {
                    self.stream_started(target, call.id, now_ms);
                } else {
                    self.state = State::Calling(call.id);
                }
                out.push(Effect::Attempt(Attempt {
                    target,
                    number: self.attempts.total(),
                    kind,
                    call: Some(Box::new(call)),
                    delay_ms: std::mem::take(&mut self.waited_ms),
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
    pub(super) fn after_refusal<'c>(
        &mut self,
        config: &'c Config,
        target: ModelId,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> Option<(ModelId, AttemptKind)> {
        let outcome = AttemptOutcome::ConnectFailure;
        self.record(config, Some(target), outcome, || None, out);
        match self.step(config, outcome, || now_ms) {
            Step::Retry { delay_ms, .. } if delay_ms > 0 => {
                self.wait(AttemptKind::Retry(outcome), (now_ms, delay_ms), out);
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
    pub(super) fn call<'c>(&mut self, config: &'c Config, target: ModelId) -> Option<Call<'c>> {
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
}
