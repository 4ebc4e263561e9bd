//! Reading an attempt's answer: how it ended, what it means for the target's health, and the
//! provider's "come back in" hint.

use super::Effect;
use crate::core::config::{Config, Model, ModelId, VirtualModel};
use crate::core::fallback::AttemptOutcome;
use crate::core::headers::Headers;
use crate::core::health::failure_class::{classify, FailureClass};
use crate::core::health::record::Outcome;
use crate::core::health::retry_after;
use crate::core::outbound::carries_gateway_credential;

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

/// How a call-out ended: `None` when it got no answer (refused). A call-out whose upstream
/// reset or timed out gets Envoy's own reply (checked with Envoy 1.40: a 503 "upstream connect
/// error or disconnect/reset before headers. reset reason: ...", or a 504 "upstream request
/// timeout", `text/plain`); it is told from a provider's 5xx by the absence of the
/// `x-envoy-upstream-service-time` header Envoy's router adds to every upstream answer.
pub fn call_outcome(answer: Option<&super::CallAnswer>) -> AttemptOutcome {
    let Some(answer) = answer else {
        return AttemptOutcome::ConnectFailure;
    };
    let status = answer
        .headers
        .get_str(":status")
        .and_then(|s| s.parse::<u16>().ok());
    let Some(status) = status else {
        return AttemptOutcome::ConnectFailure;
    };
    let envoys_own = (500..600).contains(&status)
        && answer
            .headers
            .get("x-envoy-upstream-service-time")
            .is_none();
    match &answer.body {
        b if envoys_own && b.starts_with(b"upstream request timeout") => AttemptOutcome::Timeout,
        b if envoys_own
            && (b.starts_with(b"upstream connect error")
                || b.starts_with(b"no healthy upstream")) =>
        {
            AttemptOutcome::ConnectFailure
        }
        _ => AttemptOutcome::Status(status),
    }
}

/// What an attempt's outcome of `class` does to `model`'s health. Statuses the model does not
/// count as failures and that are not successes (a 404, say) change nothing. The provider's
/// "come back in" hint is only read from a 429 (agentgateway virtual models, "Health vs
/// eviction"), and only then is `hint` called.
///
/// A 401 or 403 answered to the client's own credential (`gateway_credential` false: no
/// catalog or override credential was sent) is the client's failure, not the target's: one
/// tenant's bad key never moves another tenant's traffic. So is a quota spent on the client's
/// own key. A spent quota on the gateway's key counts whatever its status (Anthropic answers a
/// 400). A prompt too long for the window, or refused by a content filter, is the request's
/// and never counts.
pub fn health_outcome(
    model: &Model,
    outcome: AttemptOutcome,
    gateway_credential: bool,
    class: FailureClass,
    hint: impl FnOnce() -> Option<u64>,
) -> Option<Outcome> {
    let failed = |hint_ms| Some(Outcome::Failure { hint_ms, class });
    match outcome {
        AttemptOutcome::Status(_)
            if matches!(
                class,
                FailureClass::ContextLength | FailureClass::ContentFilter
            ) =>
        {
            None
        }
        AttemptOutcome::Status(401 | 403) if !gateway_credential => None,
        AttemptOutcome::Status(_) if class == FailureClass::Quota => {
            gateway_credential.then_some(Outcome::Failure {
                hint_ms: None,
                class,
            })
        }
        AttemptOutcome::Status(s) if model.health.is_failure(s) => {
            failed(if s == 429 { hint() } else { None })
        }
        AttemptOutcome::Status(s) if s < 400 => Some(Outcome::Success),
        AttemptOutcome::Status(_) => None,
        AttemptOutcome::ConnectFailure
        | AttemptOutcome::Timeout
        | AttemptOutcome::FallbackTimeout
        | AttemptOutcome::StreamFailed(_) => Some(Outcome::FAILED),
        // `fallback_on`: a refusal changes nothing (it is about the prompt); an empty answer
        // or an error object in a 200 is the target misbehaving.
        AttemptOutcome::Answer(fault) if fault.counts_against_target() => Some(Outcome::FAILED),
        AttemptOutcome::Answer(_) => None,
    }
}

/// The class of an attempt's failed answer at `target` with `body` (the error body held, cut
/// at its bound, or empty): its status, the body, the model's `quota_patterns` and whether the
/// attempt carried the gateway's credential. No answer is [`FailureClass::Other`].
pub fn failure_class(
    config: &Config,
    vm: Option<&VirtualModel>,
    target: ModelId,
    outcome: AttemptOutcome,
    body: &[u8],
) -> FailureClass {
    let (AttemptOutcome::Status(status), Some(model)) = (outcome, config.model(target)) else {
        return FailureClass::Other;
    };
    if status < 400 {
        return FailureClass::Other;
    }
    let gateway_credential = carries_gateway_credential(config, vm, target);
    classify(
        status,
        body,
        &model.health.quota_patterns,
        gateway_credential,
    )
}

/// The record of an attempt at `target` (a target of `vm`, or a catalog model called
/// directly) that ended with `outcome` of `class`: what it does to the target's health, told
/// by whether the attempt carried the gateway's credential ([`health_outcome`]). `None` for a
/// target not in the catalog. The machine's attempts and the router path's all record
/// through it.
pub fn attempt_record(
    config: &Config,
    vm: Option<&VirtualModel>,
    target: ModelId,
    (outcome, class): (AttemptOutcome, FailureClass),
    hint: impl FnOnce() -> Option<u64>,
) -> Option<Effect<'static>> {
    let model = config.model(target)?;
    let gateway_credential = carries_gateway_credential(config, vm, target);
    Some(Effect::Record {
        target,
        outcome,
        health: health_outcome(model, outcome, gateway_credential, class, hint),
    })
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

    fn answer(headers: &[(&str, &str)], body: &str) -> super::super::CallAnswer {
        super::super::CallAnswer {
            headers: Headers::from_pairs(headers.iter().copied()),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_call_without_a_status_got_no_answer() {
        assert_eq!(call_outcome(None), AttemptOutcome::ConnectFailure);
        let a = answer(&[(":status", "429")], "");
        assert_eq!(call_outcome(Some(&a)), AttemptOutcome::Status(429));
        let a = answer(&[(":status", "x")], "");
        assert_eq!(call_outcome(Some(&a)), AttemptOutcome::ConnectFailure);
    }

    #[test]
    fn envoys_own_reply_to_a_call_is_no_answer_and_a_providers_5xx_is_its_status() {
        // As Envoy 1.40 answers a call-out whose upstream reset before answering.
        let plain = [(":status", "503"), ("content-type", "text/plain")];
        let reset = "upstream connect error or disconnect/reset before headers. reset reason: connection termination";
        assert_eq!(
            call_outcome(Some(&answer(&plain, reset))),
            AttemptOutcome::ConnectFailure
        );
        let timeout = [(":status", "504"), ("content-type", "text/plain")];
        assert_eq!(
            call_outcome(Some(&answer(&timeout, "upstream request timeout"))),
            AttemptOutcome::Timeout
        );
        // A provider's 503, even with the same words, came through Envoy's router.
        let upstream = [(":status", "503"), ("x-envoy-upstream-service-time", "3")];
        assert_eq!(
            call_outcome(Some(&answer(&upstream, reset))),
            AttemptOutcome::Status(503)
        );
        assert_eq!(
            call_outcome(Some(&answer(&plain, "{\"error\":{}}"))),
            AttemptOutcome::Status(503)
        );
    }

    #[test]
    fn a_401_to_the_clients_own_key_is_not_the_targets_failure() {
        let config = crate::core::config::Config::parse(
            br#"{"models": [{"name": "m", "cluster": "c", "model": "m"}]}"#,
        )
        .unwrap();
        let model = &config.models[0];
        for status in [401, 403] {
            let outcome = AttemptOutcome::Status(status);
            let other = FailureClass::Other;
            assert_eq!(health_outcome(model, outcome, false, other, || None), None);
            assert_eq!(
                health_outcome(model, outcome, true, other, || None),
                Some(Outcome::FAILED)
            );
        }
        // Whoever's key it was, a 5xx is the target's.
        let failed = health_outcome(
            model,
            AttemptOutcome::Status(503),
            false,
            FailureClass::Other,
            || None,
        );
        assert_eq!(failed, Some(Outcome::FAILED));
    }

    #[test]
    fn a_quota_counts_on_the_gateways_key_whatever_its_status_and_a_refused_prompt_never() {
        let config = crate::core::config::Config::parse(
            br#"{"models": [{"name": "m", "cluster": "c", "model": "m"}]}"#,
        )
        .unwrap();
        let model = &config.models[0];
        let quota = FailureClass::Quota;
        let hint = || -> Option<u64> { unreachable!("a quota's hint is not read") };
        assert_eq!(
            health_outcome(model, AttemptOutcome::Status(400), true, quota, hint),
            Some(Outcome::Failure {
                hint_ms: None,
                class: quota
            })
        );
        let status = AttemptOutcome::Status(429);
        assert_eq!(health_outcome(model, status, false, quota, || None), None);
        // Even where a 400 counts, a refused prompt does not.
        let strict = crate::core::config::Config::parse(
            br#"{"models": [{"name": "m", "cluster": "c", "model": "m",
                 "health": {"unhealthy_status_codes": [400]}}]}"#,
        )
        .unwrap();
        let strict = &strict.models[0];
        let bad = AttemptOutcome::Status(400);
        for class in [FailureClass::ContextLength, FailureClass::ContentFilter] {
            assert_eq!(health_outcome(strict, bad, true, class, || None), None);
        }
        let other = health_outcome(strict, bad, true, FailureClass::Other, || None);
        assert_eq!(other, Some(Outcome::FAILED));
        let limited = health_outcome(model, status, true, FailureClass::RateLimit, || Some(9));
        assert_eq!(
            limited,
            Some(Outcome::Failure {
                hint_ms: Some(9),
                class: FailureClass::RateLimit
            })
        );
    }
}
