//! SLA cutoff for `priority-based-routing` (TrueFoundry virtual models, "SLA cutoff"): a target
//! whose rolling average time to first token or time per output token is over its threshold is
//! unhealthy until the average recovers or its samples age out.

use super::record::HealthRecord;

/// Answers shorter than this give no TPOT sample: their time is dominated by the first token.
pub const MIN_TPOT_TOKENS: u64 = 30;

/// Per-target thresholds (`sla_cutoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlaCutoff {
    /// `time_to_first_token_ms`.
    pub time_to_first_token_ms: Option<u32>,
    /// `time_per_output_token_ms`.
    pub time_per_output_token_ms: Option<u32>,
}

impl SlaCutoff {
    /// Whether either configured average is over its threshold at `now_ms`.
    pub fn breached(&self, record: &HealthRecord, now_ms: u64) -> bool {
        let over = |limit: Option<u32>, avg: Option<f64>| match (limit, avg) {
            (Some(l), Some(a)) => a > f64::from(l),
            _ => false,
        };
        over(self.time_to_first_token_ms, record.ttft.average(now_ms))
            || over(self.time_per_output_token_ms, record.tpot.average(now_ms))
    }
}

/// What one successful answer tells about a target's speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencySample {
    /// Time to first token (streamed answers only).
    pub ttft_ms: Option<u32>,
    /// Time per output token for the SLA cutoff (answers of 30 tokens or more).
    pub sla_tpot_ms: Option<u32>,
    /// Time per output token for latency routing, in microseconds (any answer with output).
    pub tpot_us: Option<u64>,
}

impl LatencySample {
    /// The samples of an answer that took `total_ms`, with its first token after
    /// `first_token_ms` (if seen) and `output_tokens` tokens.
    pub fn of(
        streaming: bool,
        first_token_ms: Option<u64>,
        total_ms: u64,
        output_tokens: u64,
    ) -> Self {
        LatencySample {
            ttft_ms: first_token_ms.and_then(|t| ttft_sample(streaming, t)),
            sla_tpot_ms: tpot_sample(total_ms, output_tokens),
            tpot_us: (output_tokens > 0).then(|| total_ms.saturating_mul(1000) / output_tokens),
        }
    }

    /// Whether there is anything to record.
    pub fn is_empty(&self) -> bool {
        *self == LatencySample::default()
    }

    /// Adds the samples to a record.
    pub fn add_to(&self, record: &mut HealthRecord, now_ms: u64) {
        if let Some(v) = self.ttft_ms {
            record.ttft.add(v, now_ms);
        }
        if let Some(v) = self.sla_tpot_ms {
            record.tpot.add(v, now_ms);
        }
        if let Some(v) = self.tpot_us {
            record.latency.add(v, now_ms);
        }
    }
}

/// A TTFT sample, only from streaming answers.
pub fn ttft_sample(streaming: bool, ttft_ms: u64) -> Option<u32> {
    streaming.then(|| u32::try_from(ttft_ms).unwrap_or(u32::MAX))
}

/// A TPOT sample (total time / output tokens), only from answers of 30 output tokens or more.
pub fn tpot_sample(total_ms: u64, output_tokens: u64) -> Option<u32> {
    (output_tokens >= MIN_TPOT_TOKENS)
        .then(|| u32::try_from(total_ms / output_tokens).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttft_only_from_streaming_and_tpot_only_from_30_tokens() {
        assert_eq!(ttft_sample(false, 500), None);
        assert_eq!(ttft_sample(true, 500), Some(500));
        assert_eq!(tpot_sample(2_900, 29), None);
        assert_eq!(tpot_sample(3_000, 30), Some(100));
        assert_eq!(tpot_sample(3_000, 0), None);
    }

    #[test]
    fn one_answer_feeds_each_average_by_its_own_rule() {
        let short = LatencySample::of(false, Some(100), 1_000, 10);
        assert_eq!(
            short,
            LatencySample {
                ttft_ms: None,
                sla_tpot_ms: None,
                tpot_us: Some(100_000)
            }
        );
        let long = LatencySample::of(true, Some(200), 3_000, 30);
        assert_eq!(
            long,
            LatencySample {
                ttft_ms: Some(200),
                sla_tpot_ms: Some(100),
                tpot_us: Some(100_000)
            }
        );
        assert!(LatencySample::of(true, None, 5, 0).is_empty());
        let mut r = HealthRecord::default();
        long.add_to(&mut r, 60_000);
        assert_eq!(
            (r.ttft.0.len(), r.tpot.0.len(), r.latency.mean(60_000)),
            (1, 1, Some(100_000.0))
        );
    }

    #[test]
    fn breach_needs_three_samples_over_the_threshold_and_recovers() {
        let sla = SlaCutoff {
            time_to_first_token_ms: Some(300),
            time_per_output_token_ms: None,
        };
        let mut r = HealthRecord::default();
        r.ttft.add(900, 0);
        r.ttft.add(900, 1);
        assert!(!sla.breached(&r, 2), "two samples are not enough");
        r.ttft.add(900, 2);
        assert!(sla.breached(&r, 2));
        assert!(!sla.breached(&r, 200_000), "aged out after three minutes");
        for t in 3..13 {
            r.ttft.add(100, t);
        }
        assert!(
            !sla.breached(&r, 13),
            "recovered once fast samples replace the slow ones"
        );
        let tpot = SlaCutoff {
            time_to_first_token_ms: None,
            time_per_output_token_ms: Some(50),
        };
        for t in 0..3 {
            r.tpot.add(60, t);
        }
        assert!(tpot.breached(&r, 3));
    }
}
