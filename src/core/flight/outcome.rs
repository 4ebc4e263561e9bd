//! Reading an attempt's answer: how it ended, what it means for the target's health, and the
//! provider's "come back in" hint.

use crate::core::config::Model;
use crate::core::fallback::AttemptOutcome;
use crate::core::headers::Headers;
use crate::core::health::record::Outcome;
use crate::core::health::retry_after;

/// How the router's attempt ended: Envoy's own 5xx replies, told apart by the response code
/// details (`response.code_details`), mean no answer came. `details` is read only for a 5xx.
pub fn router_outcome(status: u16, details: impl FnOnce() -> Option<String>) -> AttemptOutcome {
    if !(500..600).contains(&status) {
        return AttemptOutcome::Status(status);
    }
    match details().as_deref() {
        Some(d) if d.starts_with("upstream_reset_before_response_started") => {
            AttemptOutcome::ConnectFailure
        }
        Some("no_healthy_upstream" | "cluster_not_found") => AttemptOutcome::ConnectFailure,
        Some("upstream_response_timeout" | "upstream_per_try_timeout") => AttemptOutcome::Timeout,
        _ => AttemptOutcome::Status(status),
    }
}

/// How a call-out ended: `None` when it got no answer (reset, refused, its timeout).
pub fn call_outcome(answer: Option<&Headers>) -> AttemptOutcome {
    let status = answer
        .and_then(|h| h.get_str(":status"))
        .and_then(|s| s.parse::<u16>().ok());
    status.map_or(AttemptOutcome::ConnectFailure, AttemptOutcome::Status)
}

/// What an attempt's outcome does to `model`'s health. Statuses the model does not count as
/// failures and that are not successes (a 404, say) change nothing. The provider's "come back
/// in" hint is only read from a 429 (agentgateway seed), and only then is `hint` called.
pub fn health_outcome(
    model: &Model,
    outcome: AttemptOutcome,
    hint: impl FnOnce() -> Option<u64>,
) -> Option<Outcome> {
    match outcome {
        AttemptOutcome::Status(s) if model.health.is_failure(s) => Some(Outcome::Failure {
            hint_ms: if s == 429 { hint() } else { None },
        }),
        AttemptOutcome::Status(s) if s < 400 => Some(Outcome::Success),
        AttemptOutcome::Status(_) => None,
        AttemptOutcome::ConnectFailure
        | AttemptOutcome::Timeout
        | AttemptOutcome::FallbackTimeout => Some(Outcome::Failure { hint_ms: None }),
    }
}

/// The provider's "come back in" hint from a failed answer's headers.
pub fn hint_ms(headers: &Headers, now_ms: u64) -> Option<u64> {
    let names: Vec<&str> = headers.text_pairs().map(|(k, _)| k).collect();
    retry_after::hint_ms(|n| headers.get_str(n), &names, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoys_own_replies_for_no_answer_are_told_apart_by_their_code_details() {
        let with = |d: &'static str| move || Some(d.to_string());
        assert_eq!(
            router_outcome(
                503,
                with("upstream_reset_before_response_started{connection_failure}")
            ),
            AttemptOutcome::ConnectFailure
        );
        assert_eq!(
            router_outcome(503, with("no_healthy_upstream")),
            AttemptOutcome::ConnectFailure
        );
        assert_eq!(
            router_outcome(504, with("upstream_response_timeout")),
            AttemptOutcome::Timeout
        );
        assert_eq!(
            router_outcome(503, with("via_upstream")),
            AttemptOutcome::Status(503),
            "a provider's own 503"
        );
        let never = || -> Option<String> { unreachable!("details read for a 2xx") };
        assert_eq!(router_outcome(200, never), AttemptOutcome::Status(200));
    }

    #[test]
    fn a_call_without_a_status_got_no_answer() {
        assert_eq!(call_outcome(None), AttemptOutcome::ConnectFailure);
        let h = Headers::from_pairs([(":status", "429")]);
        assert_eq!(call_outcome(Some(&h)), AttemptOutcome::Status(429));
        let h = Headers::from_pairs([(":status", "x")]);
        assert_eq!(call_outcome(Some(&h)), AttemptOutcome::ConnectFailure);
    }
}
