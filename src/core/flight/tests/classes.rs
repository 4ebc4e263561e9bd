//! Failure classes in the machine: a failed answer whose class needs its body is held until
//! the body ends, then judged (`judge.rs`); a quota or a refused gateway key moves on at once,
//! a context-length 400 moves on when `fallback_on` asks, without counting.

use super::*;
use crate::core::health::failure_class::{FailureClass, MAX_JUDGED_BODY};

/// Two targets with the gateway's key on the first; 429 retried twice, then a fallback.
const KEYED: &str = r#"{"models": [
    {"name": "one", "cluster": "c1", "model": "one-up",
     "headers": {"authorization": "Bearer sk-gateway"}},
    {"name": "two", "cluster": "c2", "model": "two-up"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat"], "fallback_on": ["context_length"],
    "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
      {"target": "one", "weight": 100, "retry_config": {"attempts": 2, "delay": 0,
        "on_status_codes": ["429"]}, "fallback_status_codes": ["429", "5xx"]},
      {"target": "two", "weight": 0}]}}]}"#;

const QUOTA: &str = r#"{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
const RATE: &str = r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#;
const TOO_LONG: &str = r#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;

/// The router's failed answer: its headers, then its whole body. Effects of both.
fn router_fails<'c>(
    m: &mut Machine,
    config: &'c Config,
    status: u16,
    body: &[u8],
) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.details = Some("via_upstream");
    assert_eq!(
        m.on_answer_headers(config, status, &mut facts, &mut fx),
        Flow::Hold
    );
    assert!(fx.is_empty(), "nothing decided before the body");
    facts.chunk = body.to_vec();
    let flow = m.on_answer_body(config, true, &mut facts, &mut fx);
    (flow, list(fx))
}

fn health<'a>(effects: &'a [Effect<'_>]) -> Option<&'a Outcome> {
    effects.iter().find_map(|e| match e {
        Effect::Record { health, .. } => health.as_ref(),
        _ => None,
    })
}

#[test]
fn a_quota_429_falls_back_at_once_and_is_recorded_as_a_quota() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let (flow, effects) = router_fails(&mut m, &config, 429, QUOTA.as_bytes());
    assert_eq!(flow, Flow::Hold);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(429)))],
        "no retry of a spent quota"
    );
    assert_eq!(
        health(&effects),
        Some(&Outcome::Failure {
            hint_ms: None,
            class: FailureClass::Quota
        })
    );
}

#[test]
fn a_rate_limited_429_is_retried_as_configured() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let (_, effects) = router_fails(&mut m, &config, 429, RATE.as_bytes());
    assert_eq!(
        kinds(&effects),
        [(0, AttemptKind::Retry(AttemptOutcome::Status(429)))]
    );
    assert!(matches!(
        health(&effects),
        Some(Outcome::Failure {
            class: FailureClass::RateLimit,
            ..
        })
    ));
}

#[test]
fn a_body_past_the_bound_is_judged_by_its_status() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let mut fx = Effects::new();
    let mut facts = at(1100);
    m.on_answer_headers(&config, 429, &mut facts, &mut fx);
    let mut big = QUOTA.as_bytes().to_vec();
    big.resize(MAX_JUDGED_BODY + 1, b' ');
    facts.chunk = big;
    // Not its end yet: judged now, as a rate limit (the quota words are not read).
    assert_eq!(
        m.on_answer_body(&config, false, &mut facts, &mut fx),
        Flow::Hold
    );
    assert_eq!(
        kinds(&list(fx)),
        [(0, AttemptKind::Retry(AttemptOutcome::Status(429)))]
    );
}

#[test]
fn a_401_to_the_gateways_key_moves_on_at_once_and_one_to_the_clients_key_goes_on() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let (_, effects) = router_fails(&mut m, &config, 401, b"{}");
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(401)))]
    );
    assert!(matches!(
        health(&effects),
        Some(Outcome::Failure {
            class: FailureClass::Credential,
            ..
        })
    ));
    // Target two carries the client's own key: its 401 is decided at its headers (not held
    // for its body) and does not count.
    let mut m = start_with(&config, &[1, 0], |_| {});
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 401, &mut at(1100), &mut fx);
    let effects = list(fx);
    assert!(!effects.is_empty());
    assert_eq!(health(&effects), None);
}

#[test]
fn a_context_length_400_falls_back_without_counting_when_fallback_on_asks() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let (_, effects) = router_fails(&mut m, &config, 400, TOO_LONG.as_bytes());
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(400)))]
    );
    assert_eq!(
        health(&effects),
        None,
        "the prompt's fault, not the target's"
    );
    // Without `fallback_on`, the 400 is the client's answer.
    let plain = config_without_fallback_on();
    let mut m = start_with(&plain, &[0, 1], |_| {});
    let (flow, effects) = router_fails(&mut m, &plain, 400, TOO_LONG.as_bytes());
    assert_eq!(flow, Flow::Continue);
    assert!(kinds(&effects).is_empty());
    assert!(matches!(effects.last(), Some(Effect::Deliver(_))));
}

fn config_without_fallback_on() -> Config {
    config(&KEYED.replace(r#""fallback_on": ["context_length"],"#, ""))
}

#[test]
fn a_quota_in_a_call_outs_answer_moves_on_too() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[1, 0], |_| {});
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 503, &mut at(1100), &mut fx);
    let call = the_call(&list(fx)).id;
    let mut fx = Effects::new();
    // Target one's call-out answers a spent quota: no retry there, and nowhere left to go.
    m.on_call_answer(&config, call, Some(answer("429", QUOTA)), 1200, &mut fx);
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    assert!(matches!(
        health(&effects),
        Some(Outcome::Failure {
            class: FailureClass::Quota,
            ..
        })
    ));
    assert!(matches!(effects.last(), Some(Effect::Reply(_))));
}

#[test]
fn a_held_failure_that_ends_with_trailers_is_judged_by_its_status() {
    let config = config(KEYED);
    let mut m = start_with(&config, &[0, 1], |_| {});
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 429, &mut at(1100), &mut fx),
        Flow::Hold
    );
    assert_eq!(m.on_answer_trailers(&config, &mut fx), Flow::Hold);
    let effects = list(fx);
    assert_eq!(
        kinds(&effects),
        [(0, AttemptKind::Retry(AttemptOutcome::Status(429)))],
        "a rate limit, retried as configured"
    );
}

#[test]
fn a_held_failure_with_nothing_left_to_try_goes_on_whole_after_its_judgement() {
    let config = config(KEYED);
    // Only the keyed target: the quota is recorded, and its answer goes to the client as it is.
    let mut m = start_with(&config, &[0], |_| {});
    let (flow, effects) = router_fails(&mut m, &config, 429, QUOTA.as_bytes());
    assert_eq!(flow, Flow::Continue);
    assert!(kinds(&effects).is_empty());
    assert!(matches!(
        health(&effects),
        Some(Outcome::Failure {
            class: FailureClass::Quota,
            ..
        })
    ));
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(d.ending.status, 429);
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::ReplaceBody { .. })),
        "the provider's body goes on untouched"
    );
}
