//! What to do after each attempt of one request: deliver the answer, retry the same target,
//! fall back to the next candidate, or give up and pass the failure through.
//!
//! TrueFoundry virtual models, "Retries and fallbacks": `retry_config` retries the same target on
//! its `on_status_codes`; when retries are exhausted or a `fallback_status_codes` code comes back,
//! the next target is tried; a target with `fallback_candidate: false` never receives another
//! target's fallback. Requests pinned to one target get retries but no fallback (TrueFoundry
//! virtual models, "Responses API conversations").
//!
//! Retries are "exhausted" only when at least one was configured and all were spent: with the
//! default `attempts: 0`, a status in `on_status_codes` but not in `fallback_status_codes` goes to
//! the client, so narrowing `fallback_status_codes` narrows fallback. A connection failure or
//! timeout counts like a status in `on_status_codes` (retried when `attempts` >= 1) and in
//! `fallback_status_codes` (it falls back once retries are spent, or at once with 0). An attempt
//! that has not answered within `fallback_timeout_ms` moves to the next candidate without a retry
//! (Zuplo model load balancing, "Failures and retries": it "moves to the retry model").
//!
//! On a `fail_fast_endpoints` endpoint (Zuplo model load balancing, "Failures and retries":
//! Responses and Messages) a 5xx, 408, 425 or a target that cannot be reached "fails the
//! request": it is neither retried nor moved on, while a 429 is still retried and then moved
//! to the retry model by the target's own rules.

use crate::core::answer_faults::AnswerFault;
use crate::core::config::{ModelId, TargetPolicy};

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The target answered with this status.
    Status(u16),
    /// No answer: connection refused or reset before the response started.
    ConnectFailure,
    /// No answer in time: Envoy's route timeout, or the call-out's `attempt_timeout_ms`.
    Timeout,
    /// No answer within the virtual model's `fallback_timeout_ms`: the attempt is abandoned.
    FallbackTimeout,
    /// A streamed answer that started well (a 2xx) failed: before its first content, a failed
    /// attempt like a failed status; after it, the stream ends with an error event.
    StreamFailed(StreamFault),
    /// A 2xx that answers nothing (a refusal, no content, an error object), judged so because
    /// the virtual model's `fallback_on` asks: the next candidate, never the same target again.
    Answer(AnswerFault),
}

/// How a streamed answer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFault {
    /// The upstream reset the stream (or it ended before the API's last event).
    Reset,
    /// No event for the virtual model's `stream_idle_timeout_ms`.
    Idle,
    /// A line that is not an event of the API.
    Malformed,
    /// The provider reported a failure as an event (`error`, `response.failed`).
    ErrorEvent,
}

impl StreamFault {
    /// The `reason` label of the `stream_failed` metric.
    pub fn label(self) -> &'static str {
        match self {
            StreamFault::Reset => "reset",
            StreamFault::Idle => "idle",
            StreamFault::Malformed => "malformed",
            StreamFault::ErrorEvent => "error_event",
        }
    }
}

impl AttemptOutcome {
    /// What fails the request at once on a `fail_fast_endpoints` endpoint (Zuplo model load
    /// balancing, "Failures and retries": "Returns a 5xx, 408, or 425 status, or can't be
    /// reached": "Fails the request" on Responses and Messages). An upstream timeout is no
    /// answer at all, like an unreachable target.
    pub fn fails_fast(self) -> bool {
        match self {
            AttemptOutcome::Status(s) => (500..600).contains(&s) || s == 408 || s == 425,
            AttemptOutcome::ConnectFailure
            | AttemptOutcome::Timeout
            | AttemptOutcome::StreamFailed(_) => true,
            // No fallback timeout applies on those endpoints ("Keeps waiting"); an answer
            // judged by `fallback_on` is an opt-in of the virtual model's own.
            AttemptOutcome::FallbackTimeout | AttemptOutcome::Answer(_) => false,
        }
    }

    /// A failure of the target itself: a 5xx, or no answer at all. A pinned conversation's
    /// origin failing so gets a 409 rather than its error (TrueFoundry virtual models,
    /// "Responses API conversations").
    pub fn is_target_down(self) -> bool {
        match self {
            AttemptOutcome::Status(s) => (500..600).contains(&s),
            AttemptOutcome::ConnectFailure
            | AttemptOutcome::Timeout
            | AttemptOutcome::FallbackTimeout
            | AttemptOutcome::StreamFailed(_) => true,
            AttemptOutcome::Answer(_) => false,
        }
    }
}

/// The next step for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The answer goes to the client.
    Deliver,
    /// Try the same target again after a delay.
    Retry {
        /// The target, unchanged.
        target: ModelId,
        /// `retry_config.delay`.
        delay_ms: u64,
    },
    /// Try another target now.
    Fallback {
        /// The next eligible candidate.
        target: ModelId,
    },
    /// Nothing left to try: the failure goes to the client as it is.
    GiveUp,
}

/// The attempt history of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempts {
    candidates: Vec<ModelId>,
    current: usize,
    retries_here: u32,
    total: u32,
    /// Moves to another target so far.
    fallbacks: u32,
    pinned: bool,
    /// The request's endpoint is one of `fail_fast_endpoints`.
    fail_fast: bool,
}

/// Where an [`Attempts`] history stood, to go back to when the step it decides next is not
/// taken (the request's budget ran out first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    current: usize,
    retries_here: u32,
    total: u32,
    fallbacks: u32,
}

impl Attempts {
    /// Where the history stands now.
    pub fn mark(&self) -> Mark {
        Mark {
            current: self.current,
            retries_here: self.retries_here,
            total: self.total,
            fallbacks: self.fallbacks,
        }
    }

    /// Goes back to `mark`: the attempt [`Attempts::after`] counted since is not made.
    pub fn restore(&mut self, mark: Mark) {
        self.current = mark.current;
        self.retries_here = mark.retries_here;
        self.total = mark.total;
        self.fallbacks = mark.fallbacks;
    }

    /// Envoy's router made `total` attempts, `fallbacks` of them at another target, the last
    /// at `target` (the router path): the history as if this had made them.
    pub fn made_by_router(&mut self, target: ModelId, total: u32, fallbacks: u32) {
        if let Some(i) = self.candidates.iter().position(|m| *m == target) {
            self.current = i;
        }
        self.total = total.max(1);
        self.fallbacks = fallbacks;
    }

    /// Starts with the first candidate as the attempt in flight.
    pub fn new(candidates: Vec<ModelId>, pinned: bool) -> Self {
        Attempts {
            candidates,
            current: 0,
            retries_here: 0,
            total: 1,
            fallbacks: 0,
            pinned,
            fail_fast: false,
        }
    }

    /// The same, on an endpoint where [`AttemptOutcome::fails_fast`] outcomes end the request.
    pub fn with_fail_fast(mut self, fail_fast: bool) -> Self {
        self.fail_fast = fail_fast;
        self
    }

    /// The target of the attempt in flight.
    pub fn current(&self) -> Option<ModelId> {
        self.candidates.get(self.current).copied()
    }

    /// Whether the request is pinned to its first candidate (no fallback).
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// Attempts made so far, the one in flight included.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// How many times the request moved to another target: the attempt in flight is at the
    /// request's (n+1)-th target.
    pub fn fallbacks(&self) -> u32 {
        self.fallbacks
    }

    /// Whether any later step could make another attempt (so the request must be kept).
    pub fn may_try_again<'p>(&self, policy: impl Fn(ModelId) -> &'p TargetPolicy) -> bool {
        let retries = self.current().is_some_and(|t| policy(t).retry_attempts > 0);
        let fallbacks = !self.pinned
            && self
                .candidates
                .iter()
                .skip(self.current + 1)
                .any(|m| policy(*m).fallback_candidate);
        retries || fallbacks
    }

    /// Decides the next step after the attempt in flight ended with `outcome`.
    pub fn after<'p>(
        &mut self,
        outcome: AttemptOutcome,
        policy: impl Fn(ModelId) -> &'p TargetPolicy,
    ) -> Step {
        self.after_as(outcome, false, policy)
    }

    /// The same, for a failure whose class `moves_on`: never retried at the same target, it
    /// goes to the next candidate at once, whatever the status codes say (a spent quota or a
    /// refused key answers every retry the same way; a prompt too long for this window may fit
    /// the next). A departure from TrueFoundry's default retry on 429 (TrueFoundry virtual
    /// models, "Retries and fallbacks"), since such a retry cannot succeed.
    pub fn after_as<'p>(
        &mut self,
        outcome: AttemptOutcome,
        moves_on: bool,
        policy: impl Fn(ModelId) -> &'p TargetPolicy,
    ) -> Step {
        let Some(target) = self.current() else {
            return Step::GiveUp;
        };
        if self.fail_fast && outcome.fails_fast() {
            return Step::GiveUp;
        }
        let p = policy(target);
        let (retryable, fallbackable) = match outcome {
            _ if moves_on => (false, true),
            AttemptOutcome::Status(s) => (p.retry_on.contains(s), p.fallback_on.contains(s)),
            // No answer at all: retried like an `on_status_codes` status when retries are
            // configured, and a reason to fall back.
            // A stream that failed before its content is retried and falls back the same way.
            AttemptOutcome::ConnectFailure
            | AttemptOutcome::Timeout
            | AttemptOutcome::StreamFailed(_) => (p.retry_no_answer, true),
            // Abandoned for being slow: the next candidate, never the same target again. A
            // refusal or an empty answer would most likely come back the same from it too.
            AttemptOutcome::FallbackTimeout | AttemptOutcome::Answer(_) => (false, true),
        };
        if retryable && self.retries_here < p.retry_attempts {
            // Retry n waits delay × multiplier^(n-1) (Zuplo model load balancing, "Failures and
            // retries": 250 ms, then 500 ms).
            let factor = u64::from(p.retry_backoff).saturating_pow(self.retries_here);
            self.retries_here += 1;
            self.total += 1;
            return Step::Retry {
                target,
                delay_ms: p.retry_delay_ms.saturating_mul(factor),
            };
        }
        // Exhausted only if there was at least one retry to spend.
        let exhausted = retryable && p.retry_attempts > 0;
        if !fallbackable && !exhausted {
            return Step::Deliver;
        }
        if self.pinned {
            return Step::GiveUp;
        }
        let next = self
            .candidates
            .iter()
            .enumerate()
            .skip(self.current + 1)
            .find(|(_, m)| policy(**m).fallback_candidate);
        match next {
            Some((index, model)) => {
                self.current = index;
                self.retries_here = 0;
                self.total += 1;
                self.fallbacks += 1;
                Step::Fallback { target: *model }
            }
            None => Step::GiveUp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::status_set::StatusSet;

    fn policies() -> Vec<TargetPolicy> {
        vec![TargetPolicy::default(); 4]
    }

    fn run(p: &[TargetPolicy], attempts: &mut Attempts, outcome: AttemptOutcome) -> Step {
        attempts.after(outcome, |m| &p[m.0])
    }

    fn ids(n: usize) -> Vec<ModelId> {
        (0..n).map(ModelId).collect()
    }

    #[test]
    fn a_failure_that_moves_on_falls_back_at_once_without_a_retry() {
        let mut p = policies();
        p[0].retry_attempts = 3;
        p[0].retry_on = StatusSet::of(&[429]);
        p[0].fallback_on = StatusSet::of(&[503]);
        let mut a = Attempts::new(ids(2), false);
        let quota = a.after_as(AttemptOutcome::Status(429), true, |m| &p[m.0]);
        assert_eq!(quota, Step::Fallback { target: ModelId(1) });
        let mut a = Attempts::new(ids(2), false);
        let limited = a.after_as(AttemptOutcome::Status(429), false, |m| &p[m.0]);
        assert!(matches!(limited, Step::Retry { .. }), "{limited:?}");
        // Pinned: nowhere to move.
        let mut a = Attempts::new(ids(2), true);
        let pinned = a.after_as(AttemptOutcome::Status(400), true, |m| &p[m.0]);
        assert_eq!(pinned, Step::GiveUp);
    }

    #[test]
    fn success_and_non_failure_statuses_are_delivered() {
        let p = policies();
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(200)), Step::Deliver);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(400)),
            Step::Deliver,
            "a client error is not the target's fault"
        );
        assert_eq!(a.total(), 1);
    }

    #[test]
    fn default_policy_falls_back_on_the_seed_codes_then_gives_up() {
        let p = policies();
        let mut a = Attempts::new(ids(3), false);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(503)),
            Step::Fallback { target: ModelId(1) }
        );
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::ConnectFailure),
            Step::Fallback { target: ModelId(2) }
        );
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), Step::GiveUp);
        assert_eq!((a.total(), a.fallbacks()), (3, 2));
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(504)),
            Step::Deliver,
            "504 is not a default fallback code"
        );
    }

    #[test]
    fn retries_the_same_target_then_falls_back_when_exhausted() {
        let mut p = policies();
        p[0].retry_attempts = 2;
        p[0].retry_delay_ms = 200;
        p[0].fallback_on = StatusSet::EMPTY;
        let mut a = Attempts::new(ids(2), false);
        let retry = Step::Retry {
            target: ModelId(0),
            delay_ms: 200,
        };
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(500)), retry);
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(500)), retry);
        // Retries exhausted: TrueFoundry virtual models, "Retries and fallbacks", falls back even
        // though 500 is not a fallback code here.
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Fallback { target: ModelId(1) }
        );
        assert_eq!(
            (a.total(), a.fallbacks()),
            (4, 1),
            "retries are not fallbacks"
        );
    }

    #[test]
    fn fallback_skips_targets_that_are_not_fallback_candidates() {
        let mut p = policies();
        p[1].fallback_candidate = false;
        let mut a = Attempts::new(ids(3), false);
        assert!(a.may_try_again(|m| &p[m.0]));
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Fallback { target: ModelId(2) }
        );
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(500)), Step::GiveUp);
        // The first target is never a "fallback", even with fallback_candidate: false.
        let mut p = policies();
        p[0].fallback_candidate = false;
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(a.current(), Some(ModelId(0)));
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Fallback { target: ModelId(1) }
        );
    }

    #[test]
    fn narrowed_fallback_codes_return_other_retry_codes_to_the_client() {
        // TrueFoundry virtual models, "Retries and fallbacks": the example's second target,
        // `fallback_status_codes: ["429"]`, default retry_config.
        let mut p = policies();
        p[0].fallback_on = StatusSet::of(&[429]);
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Deliver,
            "500 is in on_status_codes, but no retry was configured, so none was exhausted"
        );
        assert_eq!(a.total(), 1);
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(429)),
            Step::Fallback { target: ModelId(1) }
        );
        // With one retry configured and spent, 500 does fall back.
        p[0].retry_attempts = 1;
        let mut a = Attempts::new(ids(2), false);
        assert!(matches!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Retry { .. }
        ));
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(500)),
            Step::Fallback { target: ModelId(1) }
        );
    }

    #[test]
    fn connection_failures_and_timeouts_are_retried_when_retries_are_configured() {
        let mut p = policies();
        p[0].retry_attempts = 2;
        p[0].retry_delay_ms = 50;
        let retry = Step::Retry {
            target: ModelId(0),
            delay_ms: 50,
        };
        let mut a = Attempts::new(ids(3), false);
        assert_eq!(run(&p, &mut a, AttemptOutcome::ConnectFailure), retry);
        assert_eq!(run(&p, &mut a, AttemptOutcome::Timeout), retry);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::ConnectFailure),
            Step::Fallback { target: ModelId(1) },
            "retries spent"
        );
        // With the default 0 attempts they fall back at once.
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Timeout),
            Step::Fallback { target: ModelId(2) }
        );
    }

    #[test]
    fn an_attempt_past_the_fallback_timeout_moves_on_without_a_retry() {
        let mut p = policies();
        p[0].retry_attempts = 3;
        let mut a = Attempts::new(ids(2), false);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::FallbackTimeout),
            Step::Fallback { target: ModelId(1) }
        );
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::FallbackTimeout),
            Step::GiveUp
        );
    }

    #[test]
    fn retry_delays_grow_by_the_backoff_multiplier() {
        // Zuplo model load balancing, "Failures and retries": a 429 is retried twice, after 250 ms
        // and then 500 ms, then the request moves to the retry model. A fixed delay (the old
        // behaviour) would wait 250 ms twice.
        let mut p = policies();
        p[0].retry_attempts = 2;
        p[0].retry_delay_ms = 250;
        p[0].retry_backoff = 2;
        p[0].retry_on = StatusSet::of(&[429]);
        let mut a = Attempts::new(ids(2), false);
        let retry = |delay_ms| Step::Retry {
            target: ModelId(0),
            delay_ms,
        };
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), retry(250));
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), retry(500));
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(429)),
            Step::Fallback { target: ModelId(1) }
        );
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), Step::GiveUp);
        // The default multiplier of 1 keeps TrueFoundry's fixed delay ("Retries and fallbacks").
        let mut p = policies();
        p[0].retry_attempts = 3;
        let mut a = Attempts::new(ids(1), false);
        for _ in 0..3 {
            assert_eq!(run(&p, &mut a, AttemptOutcome::Status(503)), retry(100));
        }
        // A huge multiplier saturates instead of overflowing.
        let mut p = policies();
        (p[0].retry_attempts, p[0].retry_backoff) = (10, 10);
        p[0].retry_delay_ms = u64::MAX / 2;
        let mut a = Attempts::new(ids(1), false);
        run(&p, &mut a, AttemptOutcome::Status(503));
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(503)),
            retry(u64::MAX)
        );
    }

    #[test]
    fn without_retries_on_connection_failure_an_unreachable_target_falls_back_at_once() {
        // Zuplo model load balancing, "Failures and retries": a model that can't be reached moves
        // to the retry model; only 429 is retried on the same model.
        let mut p = policies();
        p[0].retry_attempts = 2;
        p[0].retry_on = StatusSet::of(&[429]);
        p[0].retry_no_answer = false;
        for outcome in [AttemptOutcome::ConnectFailure, AttemptOutcome::Timeout] {
            let mut a = Attempts::new(ids(2), false);
            assert_eq!(
                run(&p, &mut a, outcome),
                Step::Fallback { target: ModelId(1) }
            );
        }
    }

    #[test]
    fn on_a_fail_fast_endpoint_a_5xx_408_425_or_no_answer_fails_but_a_429_still_moves_on() {
        // Zuplo model load balancing, "Failures and retries", Responses and Messages: a 429 is
        // retried twice then moves to the retry model; a 5xx, 408, 425 or an unreachable model
        // fails the request. Without fail_fast every one of these would be retried or moved.
        let mut p = policies();
        p[0].retry_attempts = 2;
        p[0].retry_on = StatusSet::of(&[429, 503]);
        p[0].fallback_on = StatusSet::of(&[408, 425, 429, 500, 502, 503, 504]);
        let failing = [
            AttemptOutcome::Status(500),
            AttemptOutcome::Status(503),
            AttemptOutcome::Status(504),
            AttemptOutcome::Status(408),
            AttemptOutcome::Status(425),
            AttemptOutcome::ConnectFailure,
            AttemptOutcome::Timeout,
        ];
        for outcome in failing {
            let mut a = Attempts::new(ids(2), false).with_fail_fast(true);
            assert_eq!(run(&p, &mut a, outcome), Step::GiveUp, "{outcome:?}");
            assert_eq!(a.total(), 1);
            let mut a = Attempts::new(ids(2), false);
            assert_ne!(run(&p, &mut a, outcome), Step::GiveUp, "{outcome:?}");
        }
        let mut a = Attempts::new(ids(2), false).with_fail_fast(true);
        let retry = Step::Retry {
            target: ModelId(0),
            delay_ms: 100,
        };
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), retry);
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(429)), retry);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(429)),
            Step::Fallback { target: ModelId(1) }
        );
        // On the retry model too, a 5xx ends the request; a 400 is its own answer.
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(502)), Step::GiveUp);
        let mut a = Attempts::new(ids(2), false).with_fail_fast(true);
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(400)), Step::Deliver);
    }

    #[test]
    fn pinned_requests_retry_but_never_fall_back() {
        let mut p = policies();
        p[0].retry_attempts = 1;
        let mut a = Attempts::new(ids(2), true);
        assert_eq!(
            run(&p, &mut a, AttemptOutcome::Status(503)),
            Step::Retry {
                target: ModelId(0),
                delay_ms: 100
            }
        );
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(503)), Step::GiveUp);
        let mut a = Attempts::new(ids(2), true);
        p[0].retry_attempts = 0;
        assert!(!a.may_try_again(|m| &p[m.0]));
        assert_eq!(run(&p, &mut a, AttemptOutcome::Status(503)), Step::GiveUp);
    }
}
