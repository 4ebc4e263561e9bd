//! What the fallback timeout covers of the router's answer to a request that does not
//! stream (`fallback_timeout_scope`), and the router's answer after it was abandoned.
//!
//! Zuplo model load balancing, "Failures and retries": "A request that doesn't stream gets
//! its response only when the model finishes, so on chat completions and embeddings
//! fallbackTimeoutSeconds limits the whole response." A call-out's answer arrives whole, so
//! its time always bounds the whole answer; with `whole_answer` (the default) the router's
//! good answer is held until its end too, and abandoned like a call-out if the time runs out
//! first. With `answer_start` it goes on as soon as its headers come. A streamed answer is
//! let through as it starts, whatever the scope, so a long stream is never cut off.

//!
//! `fallback_on` holds it whole too, to judge it before the client gets any of it (a refusal,
//! an empty answer, an error object in a 200 falls back, see `answer_faults`), but only while
//! another attempt is possible and only up to [`MAX_JUDGED`] bytes: an answer longer than that
//! is no refusal or empty answer, and goes on unjudged.

use super::*;
use crate::core::answer_faults::{judge_stream, judge_whole, AnswerFault};
use crate::core::config::TimeoutScope;

/// Bytes of a good answer held to be judged whole; past them it goes on unjudged.
pub(super) const MAX_JUDGED: usize = 1 << 20;

impl Machine {
    /// Whether the router's `status` answer is held until its end, still timed or to be
    /// judged.
    pub(super) fn holds_whole(&self, status: u16, facts: &mut dyn AnswerFacts) -> bool {
        let timed = self.fallback_timeout_ms.is_some()
            && self.timeout_rules.scope == TimeoutScope::WholeAnswer;
        (timed || self.judges_whole())
            && !self.stream
            && (200..300).contains(&status)
            && !facts.ends_with_headers()
    }

    /// Whether a good answer is held whole to be judged: `fallback_on` asks, and another
    /// attempt could follow.
    fn judges_whole(&self) -> bool {
        self.judge.is_some() && self.replay.is_some()
    }

    /// What `fallback_on` makes of a whole 2xx answer `body` (an event stream, when the
    /// request streams, read up to its first content).
    pub(super) fn judge_answer(&self, body: &[u8]) -> Option<AnswerFault> {
        let on = self.judge?;
        match self.dialect.filter(|_| self.stream) {
            Some(dialect) => judge_stream(dialect, body, on),
            None => judge_whole(body, on),
        }
    }

    /// A chunk of the router's answer held whole with `status`, not its last: past
    /// [`MAX_JUDGED`] bytes it is no longer judged, and goes on now unless the fallback timeout
    /// still covers it. Whether it goes on.
    pub(super) fn held_whole_grew<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> bool {
        if !self.judges_whole() || facts.held_len() <= MAX_JUDGED {
            return false;
        }
        self.judge = None;
        let timed = self.fallback_timeout_ms.is_some()
            && self.timeout_rules.scope == TimeoutScope::WholeAnswer;
        if timed || !matches!(self.state, State::Routed) {
            return false;
        }
        self.buffering = None;
        self.whole_answer_ended(config, status, None, out)
    }

    /// The router's answer held whole with `status` ended (`body`: all of it when in hand,
    /// and the time):
    /// delivered if the request still waits for it, even after its attempt was abandoned (a
    /// late good answer wins, as a late one does at its headers), unless `fallback_on` judges
    /// it no answer. Whether it goes on.
    pub(super) fn whole_answer_ended<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        body: Option<(&[u8], u64)>,
        out: &mut Effects<'c>,
    ) -> bool {
        let fault = body.and_then(|(b, now)| Some((self.judge_answer(b)?, now)));
        match (self.state, fault) {
            (State::Routed | State::Waiting(_) | State::Calling(_), Some((fault, now))) => {
                self.judged_no_answer(config, (fault, status), now, out)
            }
            (State::Routed | State::Waiting(_) | State::Calling(_), None) => {
                let routed = self.routed_target;
                self.record(config, routed, AttemptOutcome::Status(status), || None, out);
                self.deliver(config, routed, status, false, out);
                true
            }
            // A call-out's answer (or Switchboard's error) replaced it.
            (State::Delivering | State::Done, _) => false,
        }
    }

    /// The router's whole answer was judged no answer: counted as `fault` says, then the next
    /// attempt replaces it; with none to make, it goes on as it is. Whether it goes on.
    fn judged_no_answer<'c>(
        &mut self,
        config: &'c Config,
        (fault, status): (AnswerFault, u16),
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> bool {
        let routed = self.routed_target;
        let outcome = AttemptOutcome::Answer(fault);
        self.record(config, routed, outcome, || None, out);
        if !matches!(self.state, State::Routed) {
            // Abandoned for its fallback timeout: the attempt that replaced it goes on.
            self.holding = true;
            return false;
        }
        self.seq += 1; // the answer ended: its fallback timeout no longer applies
        let step = self.step(config, outcome, || now_ms);
        match step {
            Step::Retry { .. } | Step::Fallback { .. } => {
                self.holding = true;
                self.next_attempt(config, step, outcome, now_ms, out);
                false
            }
            Step::Deliver | Step::GiveUp => {
                self.deliver(config, routed, status, step == Step::GiveUp, out);
                true
            }
        }
    }

    /// Headers of the router's attempt after it was abandoned for its fallback timeout: a
    /// good answer is still delivered (whole, when the time covers whole answers), and the
    /// next attempt's answer ignored; a failed one, already counted as a timeout, is kept from
    /// the client.
    pub(super) fn on_late_answer_headers<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        if !(200..300).contains(&status) {
            self.holding = true;
            return Flow::Hold;
        }
        if self.holds_whole(status, facts) {
            self.buffering = Some(status);
            return Flow::Hold;
        }
        let routed = self.routed_target;
        self.record(config, routed, AttemptOutcome::Status(status), || None, out);
        self.deliver(config, routed, status, false, out);
        Flow::Continue
    }
}
