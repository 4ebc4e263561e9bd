//! A failed answer held until its body ends, to tell its class: a 429 may be a spent quota or a
//! rate limit, a 401/403 a refused key or a quota, a 400 a prompt too long for the window
//! (`health::failure_class`). The router's answer (and a streamed call-out's) brings its status
//! before its body, so an answer with such a status is held whole, up to
//! [`MAX_JUDGED_BODY`] bytes (error bodies are small; past it, it is judged by status alone),
//! and judged at its end. A call-out's answer arrives whole and is judged at once.

use super::*;
use crate::core::health::failure_class::{FailureClass, MAX_JUDGED_BODY};
use crate::core::outbound::carries_gateway_credential;

/// What became of a body chunk of a failed answer held to be judged.
pub(super) enum Judged {
    /// Still held: its end has not come.
    Hold,
    /// Judged and held while the next attempt is made, or answered by Switchboard.
    Replaced,
    /// Judged and delivered: the body in hand (every byte held) goes on as a delivered
    /// answer's.
    Delivered(Chunk),
}

/// A failed answer of the attempt in flight, held until its body ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Judging {
    status: u16,
    /// The provider's "come back in" hint, read from the headers (a 429's only).
    hint_ms: Option<u64>,
    /// When its headers came: the time of a judgement made at its trailers.
    at_ms: u64,
}

impl Machine {
    /// Whether the router's `status` answer is held to be judged with its body: only when the
    /// body can change what happens. A 429 may be a quota; a 400-403 to the gateway's own key
    /// may be a quota (Anthropic's and OpenAI's billing errors are 400s) or a refused key; a
    /// 400 may be a prompt the virtual model's `fallback_on` moves on. A 4xx to the client's
    /// own key is the client's and goes on as it comes.
    pub(super) fn judges_body(
        &self,
        config: &Config,
        status: u16,
        facts: &mut dyn AnswerFacts,
    ) -> bool {
        if !FailureClass::needs_body(status) {
            return false;
        }
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        let on = vm.map(|vm| vm.answer_fallbacks).unwrap_or_default();
        let matters = status == 429
            || (status == 400 && (on.context_length || on.content_filter))
            || self
                .routed_target
                .is_some_and(|t| carries_gateway_credential(config, vm, t));
        matters && !facts.ends_with_headers()
    }

    /// Holds the failed answer's body; the fallback timeout no longer applies (it started).
    pub(super) fn hold_to_judge(&mut self, status: u16, facts: &mut dyn AnswerFacts) {
        self.seq += 1;
        let at_ms = facts.now_ms();
        let hint_ms = (status == 429)
            .then(|| hint_ms(&facts.headers(), at_ms))
            .flatten();
        self.judging = Some(Judging {
            status,
            hint_ms,
            at_ms,
        });
    }

    /// A body chunk of the held failed answer (`end`: its last): held until its end or its
    /// bound, then judged. `None` when no answer is being judged.
    pub(super) fn on_judged_body<'c>(
        &mut self,
        config: &'c Config,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Option<Judged> {
        let judging = self.judging?;
        let body = facts.chunk();
        let over = body.len() > MAX_JUDGED_BODY;
        if !end && !over {
            return Some(Judged::Hold);
        }
        self.judging = None;
        let judged = if over { &[][..] } else { &body[..] };
        let now = facts.now_ms();
        Some(match self.judge(config, judging, judged, now, out) {
            Flow::Continue => Judged::Delivered(body),
            Flow::Hold => {
                if self.holding {
                    // Kept, whole, for a deadline that ends the request before the next
                    // attempt answers.
                    self.keep_failed_headers(self.routed_target, judging.status, facts);
                    self.keep_failed_body(facts);
                }
                Judged::Replaced
            }
        })
    }

    /// Trailers of the held failed answer: judged by its status alone (the body is no
    /// longer in hand there).
    pub(super) fn on_judged_trailers<'c>(
        &mut self,
        config: &'c Config,
        out: &mut Effects<'c>,
    ) -> Option<Flow> {
        let judging = self.judging.take()?;
        Some(self.judge(config, judging, &[], judging.at_ms, out))
    }

    /// The held failed answer of a streamed call-out was cut before its body ended: judged by
    /// its status alone. Its answer cannot go on whole, so with nothing left to try the client
    /// gets Switchboard's 503, as for an attempt that got no answer.
    pub(super) fn on_judged_cut<'c>(
        &mut self,
        config: &'c Config,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> bool {
        let Some(judging) = self.judging.take() else {
            return false;
        };
        let outcome = AttemptOutcome::Status(judging.status);
        let class = self.class_of(config, self.routed_target, outcome, &[]);
        let routed = self.routed_target;
        self.record_as(config, routed, (outcome, class), || judging.hint_ms, out);
        match self.step_as(config, (outcome, class), || now_ms) {
            step @ (Step::Retry { .. } | Step::Fallback { .. }) => {
                self.next_attempt(config, step, outcome, now_ms, out)
            }
            Step::Deliver | Step::GiveUp => self.reply_unavailable(config, out),
        }
        true
    }

    fn judge<'c>(
        &mut self,
        config: &'c Config,
        judging: Judging,
        body: &[u8],
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> Flow {
        let outcome = AttemptOutcome::Status(judging.status);
        let class = self.class_of(config, self.routed_target, outcome, body);
        self.routed_answer(
            config,
            (outcome, class),
            (judging.status, judging.hint_ms),
            || now_ms,
            out,
        )
    }

    /// The router's (or a streamed call-out's) answer with `status` ended its attempt with
    /// `outcome` of `class`: recorded, then delivered or held while the next attempt is made.
    pub(super) fn routed_answer<'c>(
        &mut self,
        config: &'c Config,
        (outcome, class): (AttemptOutcome, FailureClass),
        (status, hint_ms): (u16, Option<u64>),
        mut now_ms: impl FnMut() -> u64,
        out: &mut Effects<'c>,
    ) -> Flow {
        let routed = self.routed_target;
        self.record_as(config, routed, (outcome, class), || hint_ms, out);
        // Time is read only when a budget or another attempt needs it.
        let step = self.step_as(config, (outcome, class), &mut now_ms);
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
                self.next_attempt(config, step, outcome, now_ms(), out);
                Flow::Hold
            }
        }
    }
}
