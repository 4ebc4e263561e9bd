//! The request's own budget across its attempts: `request_deadline_ms` and
//! `fallback_if_failed_within_ms`, which answer a problem users of LLM gateways report:
//! fallbacks that double a slow failure, and no bound on a request's time across attempts.
//!
//! The deadline runs from the moment the request is routed. No retry or fallback starts after
//! it, nor a retry whose delay would end past it. At the deadline an attempt that has not
//! started answering is abandoned as `fallback_timeout_ms` abandons one, and the client gets
//! the last failed answer that arrived whole, else a 504 `deadline_exceeded`. A good streamed
//! answer held before its commit point is committed instead (no other attempt could replace
//! it), and an answer already going to the client is never cut.
//!
//! A failure slower than `fallback_if_failed_within_ms` (its attempt's own time, from its start
//! to its failed answer or to no answer) is the client's answer: another attempt would double
//! a wait that already failed. An attempt `fallback_timeout_ms` abandoned is exempt: that
//! timeout exists to move on.

use super::*;
use crate::core::errors::ErrorReply;
use crate::core::headers::Headers;

/// The deadline timer's token: its own bit, apart from the fallback and idle timers'.
pub(super) const DEADLINE: u64 = 1 << 62;

/// The last failed answer held, to give the client if the deadline ends the request.
#[derive(Debug)]
pub(super) struct LastFailure {
    target: Option<ModelId>,
    status: u16,
    headers: Headers,
    body: Vec<u8>,
    /// Its body arrived to its end (a router's answer's body comes after its headers).
    whole: bool,
}

impl Machine {
    /// Arms the deadline timer, if the virtual model has one; `now_ms` is when it was routed.
    pub(super) fn arm_deadline<'c>(&mut self, budget: Budget, now_ms: u64, out: &mut Effects<'c>) {
        self.deadline_ms = budget.deadline_ms.map(|ms| now_ms.saturating_add(ms));
        self.failed_within_ms = budget.failed_within_ms;
        if let Some(due_ms) = self.deadline_ms {
            out.push(Effect::ArmTimer {
                due_ms,
                token: DEADLINE,
            });
        }
    }

    /// Whether the budget forbids the attempt `step` would start after an attempt that ended
    /// with `outcome` at `now_ms`: the deadline is spent or would be before a retry's delay
    /// ends, or the failure took longer than `fallback_if_failed_within_ms`.
    pub(super) fn budget_stops(&self, step: Step, outcome: AttemptOutcome, now_ms: u64) -> bool {
        let delay_ms = match step {
            Step::Retry { delay_ms, .. } => delay_ms,
            Step::Fallback { .. } => 0,
            Step::Deliver | Step::GiveUp => return false,
        };
        let spent = self
            .deadline_ms
            .is_some_and(|due| now_ms.saturating_add(delay_ms) >= due);
        let slow = self.failed_within_ms.is_some_and(|within| {
            outcome != AttemptOutcome::FallbackTimeout
                && now_ms.saturating_sub(self.attempt_started_ms()) > within
        });
        spent || slow
    }

    /// When the attempt in flight started: the router's (or a streamed call-out's) when it was
    /// routed, a call-out's when it was dispatched.
    fn attempt_started_ms(&self) -> u64 {
        match self.state {
            State::Routed => self.routed_ms,
            _ => self.started_ms,
        }
    }

    /// The router's failed answer is held while another attempt is made: its headers are kept
    /// for the deadline (its body follows in [`Machine::keep_failed_body`]).
    pub(super) fn keep_failed_headers(
        &mut self,
        target: Option<ModelId>,
        status: u16,
        facts: &mut dyn AnswerFacts,
    ) {
        if self.deadline_ms.is_none() {
            return;
        }
        let whole = facts.ends_with_headers();
        self.last_failure = Some(Box::new(LastFailure {
            target,
            status,
            headers: facts.headers(),
            body: Vec::new(),
            whole,
        }));
    }

    /// The held failed answer's body ended: it is whole (every byte held so far is in hand).
    pub(super) fn keep_failed_body(&mut self, facts: &mut dyn AnswerFacts) {
        if let Some(failure) = self.last_failure.as_mut().filter(|f| !f.whole) {
            failure.body = Chunk::unwrap_or_clone(facts.chunk());
            failure.whole = true;
        }
    }

    /// A call-out's failed answer by `target`, whole, kept for the deadline.
    pub(super) fn keep_failed_call(
        &mut self,
        target: Option<ModelId>,
        status: u16,
        answer: Option<CallAnswer>,
    ) {
        let Some(answer) = answer.filter(|_| self.deadline_ms.is_some()) else {
            return;
        };
        self.last_failure = Some(Box::new(LastFailure {
            target,
            status,
            headers: answer.headers,
            body: answer.body,
            whole: true,
        }));
    }

    /// The deadline timer fired at `now_ms`.
    pub(super) fn on_deadline<'c>(
        &mut self,
        config: &'c Config,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        match self.state {
            // Already going to the client (a good answer held whole included): never cut.
            State::Delivering | State::Done => {}
            State::Routed if self.buffering.is_some() => {}
            // A good stream held before its commit point: committed at its next chunk, and
            // no longer timed by the fallback timeout.
            State::Routed if self.commit.is_some() => {
                self.seq += 1;
                self.deadline_spent = true;
            }
            State::Routed | State::Calling(_) => {
                let target = match self.state {
                    State::Routed => self.routed_target,
                    _ => self.attempts.current(),
                };
                self.record(
                    config,
                    target,
                    AttemptOutcome::FallbackTimeout,
                    || None,
                    out,
                );
                self.out_of_time(config, now_ms, out);
            }
            State::Waiting(_) => self.out_of_time(config, now_ms, out),
        }
    }

    /// Ends the request at its deadline: the last failed answer that arrived whole, else a 504
    /// in the client's API shape.
    fn out_of_time<'c>(&mut self, config: &'c Config, now_ms: u64, out: &mut Effects<'c>) {
        self.seq += 1;
        self.idle_seq += 1;
        self.deadline_spent = true;
        self.replay = None;
        let Some(failure) = self.last_failure.take().filter(|f| f.whole) else {
            let vm = self
                .virtual_model
                .and_then(|i| config.virtual_models.get(i));
            let name = vm.map_or("the requested model", |vm| vm.name.as_str());
            return self.fail(config, ErrorReply::deadline_exceeded(name), out);
        };
        let LastFailure {
            target,
            status,
            headers,
            body,
            ..
        } = *failure;
        let translated = self.translated_reply(config, target, status, &body, now_ms);
        self.state = State::Done;
        let ending = self.end(target, status, true);
        out.push(Effect::Reply(Box::new(Reply {
            ending,
            added: self
                .answer_headers(config, target, true)
                .with_retry_after(self.retry_after(status, headers.get("retry-after").is_some())),
            hidden: self.hidden_headers(config, target),
            answer: headers,
            body: translated.unwrap_or(body),
        })));
    }
}
