//! Switchboard's own time on one request (the `overhead_us` histogram), kept apart from the
//! providers' time, which Envoy's upstream timing reports (`envoy_cluster_upstream_rq_time`,
//! `%UPSTREAM_SERVICE_TIME%`).
//!
//! What counts, in microseconds of the host's clock:
//! - the decision and the first attempt's request rewriting: from the decision's start until
//!   the first attempt is on its way (written into the router's request, or its call-out
//!   dispatched);
//! - for each retry or fallback, the gap from the moment the attempt before it was judged
//!   failed (a failed answer, no answer, a judged 2xx) to the moment the next call-out was
//!   dispatched, minus the retry's configured `delay`: that wait is the operator's, not
//!   Switchboard's cost.
//!
//! Sans-IO: the stream hands in the host's microseconds at those moments only, never per
//! body chunk. What the providers spend (their answer, a timeout waited out) is never
//! between these moments.

/// The running sum of one request's own time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overhead {
    /// Microseconds counted so far.
    total_us: u64,
    /// When the open gap began: the decision's start, or the last failure judged since the
    /// last attempt left.
    open_since_us: Option<u64>,
    /// Whether the request's value was recorded (it is recorded once).
    recorded: bool,
}

impl Overhead {
    /// A request whose decision started at `started_us` (`None`: not timed).
    pub fn started(started_us: Option<u64>) -> Overhead {
        Overhead {
            open_since_us: started_us,
            ..Overhead::default()
        }
    }

    /// Whether a gap is open (a host time read would count for something).
    pub fn is_open(&self) -> bool {
        self.open_since_us.is_some()
    }

    /// An attempt was judged failed at `now_us`: the gap to the next attempt starts here (the
    /// last failure judged counts; an abandoned attempt's late answer cannot stretch it).
    pub fn failed(&mut self, now_us: u64) {
        self.open_since_us = Some(now_us);
    }

    /// The next attempt left at `now_us` after a configured wait of `delay_ms`: the open gap,
    /// less that wait, is counted and closed.
    pub fn attempt_left(&mut self, now_us: u64, delay_ms: u64) {
        if let Some(since) = self.open_since_us.take() {
            let waited = delay_ms.saturating_mul(1000);
            self.total_us = self
                .total_us
                .saturating_add(now_us.saturating_sub(since).saturating_sub(waited));
        }
    }

    /// The request's own time, the first time it is asked for at its end; `None` after.
    pub fn take_total(&mut self) -> Option<u64> {
        if self.recorded {
            return None;
        }
        self.recorded = true;
        Some(self.total_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_retries_counts_its_decision_and_first_attempt() {
        let mut o = Overhead::started(Some(1_000));
        o.attempt_left(1_042, 0);
        // A failure with nothing after it (the answer delivered) adds nothing.
        o.failed(9_000);
        assert_eq!(o.take_total(), Some(42));
    }

    #[test]
    fn a_retry_counts_its_gap_without_the_configured_delay() {
        let mut o = Overhead::started(Some(0));
        o.attempt_left(30, 0);
        // Failed at 1 s; the 200 ms delay; dispatched 200.025 ms later.
        o.failed(1_000_000);
        o.attempt_left(1_200_025, 200);
        assert_eq!(o.take_total(), Some(30 + 25));
    }

    #[test]
    fn several_retries_each_count_their_gap() {
        let mut o = Overhead::started(Some(0));
        o.attempt_left(10, 0);
        for (failed, left, delay) in [(5_000, 105_007, 100), (200_000, 300_011, 100)] {
            o.failed(failed);
            o.attempt_left(left, delay);
        }
        // A fallback after them, without a delay.
        o.failed(400_000);
        o.attempt_left(400_013, 0);
        assert_eq!(o.take_total(), Some(10 + 7 + 11 + 13));
    }

    #[test]
    fn a_fallback_after_a_timeout_counts_from_the_timeout_not_the_attempt() {
        let mut o = Overhead::started(Some(0));
        o.attempt_left(20, 0);
        // The attempt left at 20 µs; its fallback timeout fired at 300 ms: that wait was
        // the provider's. The fallback left 9 µs after the timeout was judged.
        o.failed(300_000);
        o.attempt_left(300_009, 0);
        assert_eq!(o.take_total(), Some(29));
    }

    #[test]
    fn the_last_failure_judged_opens_the_gap() {
        let mut o = Overhead::started(None);
        o.failed(100);
        o.failed(5_000); // a later judgement (a refused call-out) before the attempt left
        o.attempt_left(5_004, 0);
        assert_eq!(o.take_total(), Some(4));
    }

    #[test]
    fn a_timer_firing_early_never_makes_the_gap_negative() {
        let mut o = Overhead::started(None);
        o.failed(1_000);
        o.attempt_left(150_000, 200);
        assert_eq!(o.take_total(), Some(0));
    }

    #[test]
    fn recorded_once() {
        let mut o = Overhead::started(Some(0));
        o.attempt_left(5, 0);
        assert_eq!(o.take_total(), Some(5));
        assert_eq!(o.take_total(), None);
    }
}
