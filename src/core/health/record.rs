//! One target's health: recent failures, consecutive failures, a score, eviction state and the
//! latency samples of the SLA cutoff. All times are passed in as `now_ms`.

use super::failure_class::FailureClass;
use super::policy::{FailureWindow, HealthPolicy, DEFAULT_EVICTION_MS, MAX_RATE_LIMIT_EVICTION_MS};

/// Failure timestamps kept per target: enough for any sensible threshold.
pub const MAX_FAILURES: usize = 16;
/// Weight of the newest outcome in the health score (an exponentially weighted average).
const SCORE_ALPHA: f32 = 0.25;
/// A score this close to 1.0 is as good as healthy: successes stop being written back.
const CLEAN_SCORE: f32 = 0.99;
/// A provider's Retry-After is honoured up to this long, so one bad header cannot park a
/// target for hours.
pub const MAX_HINT_MS: u64 = 600_000;

/// What an attempt did, as far as health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The target answered without a failure status.
    Success,
    /// A failure status or connection failure, with the provider's "come back in" hint.
    Failure {
        /// From Retry-After and friends, when the response carried one.
        hint_ms: Option<u64>,
        /// What kind of failure it was: quota, rate limit and credential failures have their
        /// own evictions.
        class: FailureClass,
    },
}

impl Outcome {
    /// A failure of no particular class (a 5xx, no answer), with no hint.
    pub const FAILED: Outcome = Outcome::Failure {
        hint_ms: None,
        class: FailureClass::Other,
    };
}

/// Where a target stands for routing right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// First choice.
    Healthy,
    /// Failing or too slow: moved to the end of the list, used as a last resort.
    Unhealthy,
    /// Evicted: skipped while any other target remains.
    Evicted,
}

/// A bounded set of latency samples: at most 10 kept, averaged over the last 3 minutes and
/// only from 3 samples up (TrueFoundry virtual models, "SLA cutoff").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples(pub Vec<(u64, u32)>);

impl Samples {
    /// Samples kept.
    pub const MAX: usize = 10;
    /// The averaging window.
    pub const WINDOW_MS: u64 = 180_000;
    /// Samples needed before an average counts.
    pub const MIN: usize = 3;

    /// Adds a sample taken at `now_ms`, dropping the oldest beyond [`Samples::MAX`].
    pub fn add(&mut self, value_ms: u32, now_ms: u64) {
        if self.0.len() >= Self::MAX {
            self.0.remove(0);
        }
        self.0.push((now_ms, value_ms));
    }

    /// The average of the samples in the window, if there are enough of them.
    pub fn average(&self, now_ms: u64) -> Option<f64> {
        let recent = self
            .0
            .iter()
            .filter(|(at, _)| now_ms.saturating_sub(*at) <= Self::WINDOW_MS);
        let (n, sum) = recent.fold((0usize, 0u64), |(n, s), (_, v)| (n + 1, s + u64::from(*v)));
        (n >= Self::MIN).then(|| sum as f64 / n as f64)
    }
}

/// Time per output token in one-minute buckets of (minute, sum of µs per token, answers)
/// (TrueFoundry virtual models, "Latency-based routing": TPOT of successful requests of the last 20
/// minutes). Microseconds, because fast providers run under a millisecond per token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TpotWindow(pub Vec<(u32, u64, u32)>);

impl TpotWindow {
    /// Minutes averaged.
    pub const MINUTES: u32 = 20;
    /// Minutes kept: 20 plus a 10-minute epoch, so the window an epoch began with stays whole
    /// until the epoch ends.
    pub const KEPT: u32 = 30;

    /// Adds one answer's TPOT (µs per output token) at `now_ms`.
    pub fn add(&mut self, tpot_us: u64, now_ms: u64) {
        let minute = (now_ms / 60_000) as u32;
        self.0
            .retain(|(m, _, _)| minute.saturating_sub(*m) < Self::KEPT);
        match self.0.iter_mut().find(|(m, _, _)| *m == minute) {
            Some((_, sum, count)) => {
                *sum = sum.saturating_add(tpot_us);
                *count = count.saturating_add(1);
            }
            None => self.0.push((minute, tpot_us, 1)),
        }
    }

    /// The mean TPOT of the 20 minutes before `now_ms` (the current minute included), if there
    /// is any sample.
    pub fn mean(&self, now_ms: u64) -> Option<f64> {
        let minute = (now_ms / 60_000) as u32;
        self.mean_of(|m| minute.saturating_sub(m) < Self::MINUTES)
    }

    /// The mean TPOT of the 20 whole minutes before `at_ms` (that minute excluded): what an
    /// epoch starting at `at_ms` decides with, so the inputs stay fixed for the epoch.
    pub fn mean_before(&self, at_ms: u64) -> Option<f64> {
        let minute = (at_ms / 60_000) as u32;
        self.mean_of(|m| m < minute && minute - m <= Self::MINUTES)
    }

    fn mean_of(&self, counted: impl Fn(u32) -> bool) -> Option<f64> {
        let (sum, count) = self
            .0
            .iter()
            .filter(|(m, _, _)| counted(*m))
            .fold((0u64, 0u64), |(s, c), (_, sum, count)| {
                (s.saturating_add(*sum), c + u64::from(*count))
            });
        (count > 0).then(|| sum as f64 / count as f64)
    }
}

/// The health record of one catalog model, shared by every worker through shared data.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthRecord {
    /// Times of the most recent failures, oldest first.
    pub failures: Vec<u64>,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// 1.0 is perfectly healthy, 0.0 always failing.
    pub score: f32,
    /// Evicted until this time; 0 when not evicted.
    pub evicted_until_ms: u64,
    /// Evictions in a row without a success between them (drives the backoff).
    pub evictions: u32,
    /// Time to first token of streaming answers.
    pub ttft: Samples,
    /// Time per output token of answers with at least 30 output tokens.
    pub tpot: Samples,
    /// Time per output token of every successful answer, last 20 minutes (latency routing).
    pub latency: TpotWindow,
}

impl Default for HealthRecord {
    fn default() -> Self {
        HealthRecord {
            failures: Vec::new(),
            consecutive_failures: 0,
            score: 1.0,
            evicted_until_ms: 0,
            evictions: 0,
            ttft: Samples::default(),
            tpot: Samples::default(),
            latency: TpotWindow::default(),
        }
    }
}

impl HealthRecord {
    /// Updates the record with one attempt's outcome.
    pub fn record(&mut self, outcome: Outcome, now_ms: u64, policy: &HealthPolicy) {
        self.end_eviction_if_over(now_ms, policy);
        match outcome {
            Outcome::Success => {
                self.consecutive_failures = 0;
                self.score += SCORE_ALPHA * (1.0 - self.score);
                if self.evicted_until_ms == 0 {
                    self.evictions = 0;
                }
            }
            Outcome::Failure { hint_ms, class } => {
                if self.failures.len() >= MAX_FAILURES {
                    self.failures.remove(0);
                }
                self.failures.push(now_ms);
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.score -= SCORE_ALPHA * self.score;
                if self.evicted_until_ms == 0 {
                    if let Some(ms) = self.eviction_ms(hint_ms, class, policy) {
                        self.evicted_until_ms = now_ms.saturating_add(ms).max(1);
                        self.evictions = self.evictions.saturating_add(1);
                        self.consecutive_failures = 0;
                    }
                }
            }
        }
    }

    /// How long to evict for after a failure of `class`, or `None` to stay in service.
    ///
    /// A spent quota evicts for `quota_duration` (default 1 h) and a refused gateway key for
    /// `credential_duration` (default 5 min), configured or not, and whatever the triggers:
    /// retrying either cannot succeed until someone acts. A 429 evicts for its provider's hint
    /// (below), or, with no hint and no configured eviction that applies, for 1 s doubled for
    /// each eviction in a row up to 60 s, reset by a success.
    fn eviction_ms(
        &self,
        hint_ms: Option<u64>,
        class: FailureClass,
        policy: &HealthPolicy,
    ) -> Option<u64> {
        match class {
            FailureClass::Quota => Some(policy.quota_ms).filter(|ms| *ms > 0),
            FailureClass::Credential => Some(policy.credential_ms).filter(|ms| *ms > 0),
            FailureClass::RateLimit => self
                .status_eviction_ms(hint_ms, policy)
                .or_else(|| hint_ms.is_none().then(|| self.rate_limit_backoff_ms())),
            _ => self.status_eviction_ms(hint_ms, policy),
        }
    }

    /// 1 s, 2 s, 4 s ... 60 s: a 429 that said nothing of when to come back.
    fn rate_limit_backoff_ms(&self) -> u64 {
        let factor = 1u64.checked_shl(self.evictions.min(16)).unwrap_or(u64::MAX);
        1_000u64
            .saturating_mul(factor)
            .min(MAX_RATE_LIMIT_EVICTION_MS)
    }

    /// How long to evict for after a failure judged by its status, or `None`.
    ///
    /// With `health.eviction` configured: when the consecutive-failure count or the score
    /// threshold is crossed (a single failure when neither is set), for the configured
    /// duration, else the hint, else 3 s, doubled for each eviction in a row. Without it, only a
    /// provider's explicit Retry-After evicts, for exactly that long.
    fn status_eviction_ms(&self, hint_ms: Option<u64>, policy: &HealthPolicy) -> Option<u64> {
        let hint_ms = hint_ms.map(|h| h.min(MAX_HINT_MS));
        let Some(e) = policy.eviction else {
            return hint_ms.filter(|h| *h > 0);
        };
        let by_count = e
            .consecutive_failures
            .is_some_and(|n| self.consecutive_failures >= n);
        let by_score = e.health_threshold.is_some_and(|t| self.score < t);
        let neither_set = e.consecutive_failures.is_none() && e.health_threshold.is_none();
        if !(by_count || by_score || neither_set) {
            return None;
        }
        let base = e.duration_ms.or(hint_ms).unwrap_or(DEFAULT_EVICTION_MS);
        let factor = 1u64.checked_shl(self.evictions.min(32)).unwrap_or(u64::MAX);
        Some(base.saturating_mul(factor))
    }

    fn end_eviction_if_over(&mut self, now_ms: u64, policy: &HealthPolicy) {
        if self.evicted_until_ms != 0 && now_ms >= self.evicted_until_ms {
            self.evicted_until_ms = 0;
            if let Some(restore) = policy.eviction.and_then(|e| e.restore_health) {
                self.score = restore;
            }
        }
    }

    /// Whether a success would leave the record as it is (nothing to forget or restore).
    pub fn is_clean(&self) -> bool {
        self.consecutive_failures == 0
            && self.evictions == 0
            && self.evicted_until_ms == 0
            && self.score >= CLEAN_SCORE
    }

    /// Where the target stands at `now_ms`.
    pub fn standing(&self, now_ms: u64, window: &FailureWindow) -> Standing {
        if now_ms < self.evicted_until_ms {
            return Standing::Evicted;
        }
        let recent = self
            .failures
            .iter()
            .filter(|at| now_ms.saturating_sub(**at) < window.window_ms)
            .count();
        if window.failures > 0 && recent >= window.failures as usize {
            Standing::Unhealthy
        } else {
            Standing::Healthy
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::health::policy::Eviction;

    const FAIL: Outcome = Outcome::FAILED;

    fn failed(hint_ms: Option<u64>) -> Outcome {
        Outcome::Failure {
            hint_ms,
            class: FailureClass::Other,
        }
    }

    fn evicting(e: Eviction) -> HealthPolicy {
        HealthPolicy {
            eviction: Some(e),
            ..HealthPolicy::default()
        }
    }

    fn eviction() -> Eviction {
        Eviction {
            duration_ms: None,
            consecutive_failures: None,
            health_threshold: None,
            restore_health: None,
        }
    }

    #[test]
    fn two_failures_in_two_minutes_make_a_target_unhealthy_until_they_age_out() {
        let w = FailureWindow::default();
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        r.record(FAIL, 1_000, &p);
        assert_eq!(
            r.standing(1_000, &w),
            Standing::Healthy,
            "one failure is not enough"
        );
        r.record(FAIL, 60_000, &p);
        assert_eq!(r.standing(60_000, &w), Standing::Unhealthy);
        assert_eq!(r.standing(120_999, &w), Standing::Unhealthy);
        // The first failure leaves the window at 121 s: recovery without any new request.
        assert_eq!(r.standing(121_000, &w), Standing::Healthy);
    }

    #[test]
    fn a_failure_window_of_zero_failures_never_marks_a_target_unhealthy() {
        // `failure_window: {failures: 0}`: agentgateway's failover, where only eviction moves
        // a target back, and Zuplo's policy, which remembers no failures.
        let w = FailureWindow {
            failures: 0,
            window_ms: 120_000,
        };
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        for at in 0..MAX_FAILURES as u64 {
            r.record(FAIL, at, &p);
        }
        assert_eq!(r.standing(MAX_FAILURES as u64, &w), Standing::Healthy);
    }

    #[test]
    fn a_record_is_clean_once_successes_have_restored_it() {
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        assert!(r.is_clean());
        r.record(FAIL, 0, &p);
        assert!(!r.is_clean());
        let mut successes = 0;
        while !r.is_clean() {
            r.record(Outcome::Success, 1, &p);
            successes += 1;
        }
        assert_eq!(
            successes, 12,
            "the score climbs back from 0.75 to 0.99 in 12 successes"
        );
    }

    #[test]
    fn successes_do_not_erase_the_failure_window() {
        let w = FailureWindow::default();
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        r.record(FAIL, 0, &p);
        r.record(Outcome::Success, 1, &p);
        r.record(FAIL, 2, &p);
        assert_eq!(r.standing(3, &w), Standing::Unhealthy);
        assert_eq!(r.consecutive_failures, 1);
    }

    #[test]
    fn without_eviction_config_only_a_retry_after_evicts_for_exactly_that_long() {
        let w = FailureWindow {
            failures: 100,
            window_ms: 1,
        };
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        r.record(FAIL, 0, &p);
        assert_eq!(r.standing(0, &w), Standing::Healthy);
        r.record(failed(Some(2_000)), 10, &p);
        assert_eq!(r.standing(10, &w), Standing::Evicted);
        assert_eq!(r.standing(2_009, &w), Standing::Evicted);
        assert_eq!(r.standing(2_010, &w), Standing::Healthy);
        // Hints are capped.
        let mut r = HealthRecord::default();
        r.record(failed(Some(u64::MAX)), 0, &p);
        assert_eq!(r.evicted_until_ms, MAX_HINT_MS);
    }

    #[test]
    fn eviction_after_consecutive_failures_with_doubling_backoff() {
        let w = FailureWindow {
            failures: 0,
            window_ms: 0,
        };
        let p = evicting(Eviction {
            consecutive_failures: Some(2),
            duration_ms: Some(1_000),
            ..eviction()
        });
        let mut r = HealthRecord::default();
        r.record(FAIL, 0, &p);
        assert_eq!(r.standing(0, &w), Standing::Healthy);
        r.record(FAIL, 0, &p);
        assert_eq!(r.evicted_until_ms, 1_000);
        // Back after 1 s; two more failures without a success in between: 2 s, then 4 s.
        r.record(FAIL, 1_000, &p);
        r.record(FAIL, 1_000, &p);
        assert_eq!(r.evicted_until_ms, 3_000);
        r.record(FAIL, 3_000, &p);
        r.record(FAIL, 3_000, &p);
        assert_eq!(r.evicted_until_ms, 7_000);
        // A success after an eviction resets the backoff.
        r.record(Outcome::Success, 7_000, &p);
        r.record(FAIL, 7_001, &p);
        r.record(FAIL, 7_001, &p);
        assert_eq!(r.evicted_until_ms, 8_001);
    }

    #[test]
    fn failures_while_evicted_do_not_extend_the_eviction() {
        let p = evicting(eviction());
        let mut r = HealthRecord::default();
        r.record(FAIL, 0, &p);
        assert_eq!(
            r.evicted_until_ms, DEFAULT_EVICTION_MS,
            "a single failure evicts when no trigger is set"
        );
        r.record(FAIL, 100, &p);
        assert_eq!(r.evicted_until_ms, DEFAULT_EVICTION_MS);
    }

    #[test]
    fn eviction_duration_falls_back_to_the_hint_then_three_seconds() {
        let p = evicting(eviction());
        let mut r = HealthRecord::default();
        r.record(failed(Some(5_000)), 0, &p);
        assert_eq!(r.evicted_until_ms, 5_000);
        let p = evicting(Eviction {
            duration_ms: Some(60_000),
            ..eviction()
        });
        let mut r = HealthRecord::default();
        r.record(failed(Some(5_000)), 0, &p);
        assert_eq!(
            r.evicted_until_ms, 60_000,
            "a configured duration wins over the hint"
        );
    }

    #[test]
    fn health_threshold_evicts_and_restore_health_resets_the_score() {
        let p = evicting(Eviction {
            health_threshold: Some(0.5),
            restore_health: Some(0.8),
            ..eviction()
        });
        let mut r = HealthRecord::default();
        r.record(FAIL, 0, &p); // 0.75
        r.record(FAIL, 0, &p); // 0.5625
        assert_eq!(r.evicted_until_ms, 0);
        r.record(FAIL, 0, &p); // 0.42 < 0.5
        assert_eq!(r.evicted_until_ms, DEFAULT_EVICTION_MS);
        r.record(Outcome::Success, DEFAULT_EVICTION_MS, &p);
        assert!((r.score - (0.8 + 0.25 * 0.2)).abs() < 1e-6, "{}", r.score);
    }

    fn of(class: FailureClass, hint_ms: Option<u64>) -> Outcome {
        Outcome::Failure { hint_ms, class }
    }

    #[test]
    fn a_quota_evicts_for_the_quota_duration_without_any_eviction_config() {
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::Quota, Some(2_000)), 10, &p);
        assert_eq!(r.evicted_until_ms, 10 + 3_600_000, "1 h, not the hint");
        let p = HealthPolicy {
            quota_ms: 1_500,
            ..HealthPolicy::default()
        };
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::Quota, None), 0, &p);
        assert_eq!(r.evicted_until_ms, 1_500);
        // "0s" turns it off.
        let p = HealthPolicy {
            quota_ms: 0,
            ..HealthPolicy::default()
        };
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::Quota, None), 0, &p);
        assert_eq!(r.evicted_until_ms, 0);
    }

    #[test]
    fn a_refused_gateway_key_evicts_for_the_credential_duration() {
        let p = HealthPolicy::default();
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::Credential, None), 0, &p);
        assert_eq!(r.evicted_until_ms, 300_000);
        let p = HealthPolicy {
            credential_ms: 0,
            ..HealthPolicy::default()
        };
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::Credential, None), 0, &p);
        assert_eq!(r.evicted_until_ms, 0);
    }

    #[test]
    fn a_429_without_a_hint_backs_off_one_two_four_up_to_sixty_seconds_reset_by_a_success() {
        let p = HealthPolicy::default();
        let limited = of(FailureClass::RateLimit, None);
        let mut r = HealthRecord::default();
        let mut now = 0;
        let mut got = Vec::new();
        for _ in 0..8 {
            r.record(limited, now, &p);
            got.push(r.evicted_until_ms - now);
            now = r.evicted_until_ms;
        }
        assert_eq!(
            got,
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
        // A success after the eviction ended starts over at 1 s.
        r.record(Outcome::Success, now, &p);
        r.record(limited, now + 1, &p);
        assert_eq!(r.evicted_until_ms, now + 1 + 1_000);
        // A hint still wins over the backoff.
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::RateLimit, Some(7_000)), 0, &p);
        assert_eq!(r.evicted_until_ms, 7_000);
    }

    #[test]
    fn a_configured_eviction_still_decides_a_hinted_429_and_backs_off_an_unhinted_one() {
        let p = evicting(Eviction {
            consecutive_failures: Some(3),
            ..eviction()
        });
        let mut r = HealthRecord::default();
        r.record(of(FailureClass::RateLimit, Some(5_000)), 0, &p);
        assert_eq!(r.evicted_until_ms, 0, "one of three failures");
        r.record(of(FailureClass::RateLimit, None), 0, &p);
        assert_eq!(r.evicted_until_ms, 1_000, "no hint: the 429 backoff");
    }

    #[test]
    fn latency_window_averages_twenty_minutes_of_tpot() {
        let mut w = TpotWindow::default();
        assert_eq!(w.mean(0), None);
        w.add(10, 0);
        w.add(30, 30_000);
        w.add(50, 600_000);
        assert_eq!(w.mean(600_000), Some(30.0));
        assert_eq!(
            w.mean(1_200_000),
            Some(50.0),
            "the first minute aged out at 20 minutes"
        );
        for i in 0..100 {
            w.add(1, 1_200_000 + i * 60_000);
        }
        assert!(
            w.0.len() <= TpotWindow::KEPT as usize,
            "bounded: {}",
            w.0.len()
        );
    }

    #[test]
    fn the_window_an_epoch_began_with_survives_new_samples_until_the_epoch_ends() {
        let start = 60 * 60_000;
        let mut w = TpotWindow::default();
        w.add(10, start - 20 * 60_000); // the oldest minute the epoch counts
        w.add(30, start - 60_000);
        let before = w.mean_before(start);
        assert_eq!(before, Some(20.0));
        for minute in 0..10 {
            w.add(1_000, start + minute * 60_000);
            assert_eq!(w.mean_before(start), before, "minute {minute} of the epoch");
        }
    }

    #[test]
    fn sla_samples_need_three_within_three_minutes_and_keep_ten() {
        let mut s = Samples::default();
        s.add(100, 0);
        s.add(200, 1);
        assert_eq!(s.average(2), None);
        s.add(300, 2);
        assert_eq!(s.average(2), Some(200.0));
        assert_eq!(s.average(180_001), None, "the first sample aged out");
        for i in 0..20 {
            s.add(1_000, 10 + i);
        }
        assert_eq!(s.0.len(), Samples::MAX);
        assert_eq!(s.average(100), Some(1_000.0));
    }
}
