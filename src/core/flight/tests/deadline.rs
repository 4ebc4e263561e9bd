//! `request_deadline_ms` and `fallback_if_failed_within_ms`, event by event.

use super::commit::{body, ok_headers, records, streaming};
use super::*;
use crate::core::flight::deadline::DEADLINE;

/// [`TWO`] (or a variant) with `fields` added to its virtual model.
fn with(json: &str, fields: &str) -> Config {
    config(&json.replace(
        r#""model_types": ["chat"],"#,
        &format!(r#""model_types": ["chat"], {fields},"#),
    ))
}

/// The deadline timer fires at `now`.
fn deadline<'c>(m: &mut Machine, config: &'c Config, now: u64) -> Vec<Effect<'c>> {
    let mut fx = Effects::new();
    m.on_timer(config, DEADLINE, now, &mut fx);
    list(fx)
}

/// The error Switchboard made, parsed, with its status.
fn failure(effects: &[Effect<'_>]) -> (u16, serde_json::Value) {
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    (f.error.status, serde_json::from_str(&f.error.body).unwrap())
}

/// Fails the router's attempt with a 503 whose whole body arrives at 1100.
fn fail_router_whole<'c>(m: &mut Machine, config: &'c Config, body: &str) -> Vec<Effect<'c>> {
    let effects = fail_router(m, config, 503);
    let mut facts = at(1100);
    facts.chunk = body.as_bytes().to_vec();
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_body(config, true, &mut facts, &mut fx),
        Flow::Hold
    );
    effects
}

#[test]
fn the_deadline_is_armed_from_the_moment_the_request_is_routed() {
    let config = with(TWO, r#""request_deadline_ms": 700"#);
    let (_, timer) = start_timed(&config, &[0, 1], |_| {});
    assert_eq!(timer, Some((1700, DEADLINE)));
    let (_, timer) = start_timed(&self::config(TWO), &[0, 1], |_| {});
    assert_eq!(timer, None, "no deadline: no timer");
}

#[test]
fn before_any_answer_the_deadline_abandons_the_attempt_with_a_504_deadline_exceeded() {
    let config = with(TWO, r#""request_deadline_ms": 700"#);
    let mut m = start(&config);
    let effects = deadline(&mut m, &config, 1700);
    assert_eq!(records(&effects), [(0, AttemptOutcome::FallbackTimeout)]);
    assert!(kinds(&effects).is_empty(), "no fallback after the deadline");
    let (status, body) = failure(&effects);
    assert_eq!(status, 504);
    assert_eq!(body["error"]["code"], "deadline_exceeded");
    // A late answer from the abandoned attempt changes nothing.
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 200, &mut at(1800), &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
}

#[test]
fn on_the_messages_api_the_deadlines_504_is_anthropics_timeout_error() {
    let config = with(TWO, r#""request_deadline_ms": 700"#);
    let mut m = start_with(&config, &[0, 1], |s| s.anthropic_errors = true);
    let (status, body) = failure(&deadline(&mut m, &config, 1700));
    assert_eq!(status, 504);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "timeout_error");
}

#[test]
fn at_the_deadline_during_a_call_out_the_held_failed_answer_goes_to_the_client() {
    let config = with(TWO, r#""request_deadline_ms": 500"#);
    let mut m = start(&config);
    let held = r#"{"error":{"message":"one is down"}}"#;
    let call = the_call(&fail_router_whole(&mut m, &config, held)).id;
    let effects = deadline(&mut m, &config, 1500);
    assert_eq!(records(&effects), [(1, AttemptOutcome::FallbackTimeout)]);
    let Some(Effect::Reply(r)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(r.body, held.as_bytes());
    assert_eq!(
        r.ending,
        Ending {
            target: Some(ModelId(0)),
            status: 503,
            attempts: 2,
            gave_up: true
        }
    );
    // The abandoned call's late answer is ignored.
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1600, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
}

#[test]
fn a_held_failed_answer_whose_body_has_not_ended_is_not_sent_half_the_client_gets_a_504() {
    let config = with(TWO, r#""request_deadline_ms": 500"#);
    let mut m = start(&config);
    fail_router(&mut m, &config, 503);
    assert_eq!(failure(&deadline(&mut m, &config, 1500)).0, 504);
}

#[test]
fn at_the_deadline_the_last_call_outs_failed_answer_goes_to_the_client() {
    let config = with(&three(TWO), r#""request_deadline_ms": 500"#);
    let mut m = start_with(&config, &[0, 1, 2], |_| {});
    let call = the_call(&fail_router_whole(&mut m, &config, "{}")).id;
    let mut fx = Effects::new();
    let two = r#"{"error":{"message":"two is down"}}"#;
    m.on_call_answer(&config, call, Some(answer("502", two)), 1300, &mut fx);
    assert_eq!(
        kinds(&list(fx)),
        [(2, AttemptKind::Fallback(AttemptOutcome::Status(502)))]
    );
    let effects = deadline(&mut m, &config, 1500);
    assert_eq!(records(&effects), [(2, AttemptOutcome::FallbackTimeout)]);
    let Some(Effect::Reply(r)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!((r.ending.target, r.ending.status), (Some(ModelId(1)), 502));
    assert_eq!(r.body, two.as_bytes());
}

#[test]
fn a_retry_whose_delay_would_end_past_the_deadline_does_not_start() {
    let retry =
        r#"{"target": "one", "weight": 100, "retry_config": {"attempts": 1, "delay": 600}}"#;
    let json = TWO
        .replace(r#"{"target": "one", "weight": 100}"#, retry)
        .replace(r#", {"target": "two", "weight": 0}"#, "");
    // The router's 503 at 1100: a retry at 1700 would start past the deadline at 1500.
    let config = with(&json, r#""request_deadline_ms": 500"#);
    let mut m = start_with(&config, &[0], |_| {});
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 503, &mut at(1100), &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert!(d.ending.gave_up);
    assert_eq!(d.ending.attempts, 1, "the retry not made is not counted");
    // With room for the delay, the retry waits; the deadline during the wait ends it.
    let config = with(&json, r#""request_deadline_ms": 800"#);
    let mut m = start_with(&config, &[0], |_| {});
    let held = fail_router_whole(&mut m, &config, "{}");
    assert_eq!(the_timer(&held).0, 1700);
    let effects = deadline(&mut m, &config, 1800);
    assert!(records(&effects).is_empty(), "no attempt was in flight");
    assert!(matches!(effects.last(), Some(Effect::Reply(r)) if r.ending.status == 503));
}

#[test]
fn a_failure_after_the_deadline_starts_no_other_attempt() {
    let config = with(&three(TWO), r#""request_deadline_ms": 500"#);
    let mut m = start_with(&config, &[0, 1, 2], |_| {});
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    // The call's failure arrives before the deadline's timer does.
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("502", "{}")), 1500, &mut fx);
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    assert!(
        matches!(effects.last(), Some(Effect::Reply(r)) if r.ending.gave_up && r.ending.status == 502)
    );
}

#[test]
fn a_stream_held_before_its_commit_point_is_committed_at_the_deadline() {
    let config = with(
        TWO,
        r#""request_deadline_ms": 500, "fallback_timeout_ms": 450"#,
    );
    let (mut m, _) = start_timed(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    let effects = deadline(&mut m, &config, 1500);
    assert!(effects.is_empty(), "not abandoned: {effects:?}");
    // Its next chunk goes on, though it holds no content yet, and the request is done.
    let (flow, effects) = body(&mut m, &config, "data: {}\n\n", false);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(
        matches!(effects.last(), Some(Effect::Deliver(_))),
        "{effects:?}"
    );
}

#[test]
fn a_stream_already_sent_is_never_cut_by_the_deadline() {
    let config = with(TWO, r#""request_deadline_ms": 500"#);
    let mut m = start_with(&config, &[0, 1], |s| s.stream = true);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut at(1100), &mut fx),
        Flow::Continue
    );
    assert!(deadline(&mut m, &config, 1500).is_empty());
}

#[test]
fn a_failure_slower_than_fallback_if_failed_within_ms_is_returned_a_faster_one_falls_back() {
    let config = with(TWO, r#""fallback_if_failed_within_ms": 200"#);
    // Failed 100 ms after it was routed: the fallback is made.
    let mut m = start(&config);
    let effects = fail_router(&mut m, &config, 503);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(503)))]
    );
    // Failed 300 ms after: the failure is the client's answer.
    let mut m = start(&config);
    let mut fx = Effects::new();
    let mut facts = at(1300);
    facts.details = Some("via_upstream");
    assert_eq!(
        m.on_answer_headers(&config, 503, &mut facts, &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(
        (d.ending.status, d.ending.gave_up, d.ending.attempts),
        (503, true, 1)
    );
}

#[test]
fn a_call_out_is_timed_from_its_own_start_and_no_answer_at_all_gets_the_503() {
    let config = with(&three(TWO), r#""fallback_if_failed_within_ms": 200"#);
    let mut m = start_with(&config, &[0, 1, 2], |_| {});
    let call = the_call(&fail_router(&mut m, &config, 503)).id; // the call starts at 1100
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, None, 1350, &mut fx);
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    let (status, body) = failure(&effects);
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "no_target_available");
}

#[test]
fn an_attempt_the_fallback_timeout_abandons_still_moves_on_whatever_its_time() {
    let config = with(
        TWO,
        r#""fallback_timeout_ms": 500, "fallback_if_failed_within_ms": 200"#,
    );
    let (mut m, timer) = start_timed(&config, &[0, 1], |s| s.stream = true);
    let (due, token) = timer.unwrap();
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    assert_eq!(
        kinds(&list(fx)),
        [(1, AttemptKind::Fallback(AttemptOutcome::FallbackTimeout))]
    );
}

#[test]
fn budget_fields_are_validated_with_their_field_paths() {
    let error = |fields: &str| {
        let json = TWO.replace(
            r#""model_types": ["chat"],"#,
            &format!(r#""model_types": ["chat"], {fields},"#),
        );
        Config::parse(json.as_bytes()).unwrap_err().to_string()
    };
    assert_eq!(
        error(r#""request_deadline_ms": 0"#),
        "virtual_models[0].request_deadline_ms: must be greater than 0"
    );
    assert!(error(r#""fallback_if_failed_within_ms": 3600001"#)
        .starts_with("virtual_models[0].fallback_if_failed_within_ms:"));
    assert!(error(r#""request_deadline_ms": "1s""#)
        .starts_with("virtual_models[0].request_deadline_ms:"));
    assert!(
        error(r#""request_deadline_ms": 500, "fallback_if_failed_within_ms": 500"#).starts_with(
            "virtual_models[0].fallback_if_failed_within_ms: must be less than request_deadline_ms"
        )
    );
    let vm = &with(
        TWO,
        r#""request_deadline_ms": 500, "fallback_if_failed_within_ms": 200"#,
    )
    .virtual_models[0];
    assert_eq!(
        vm.budget,
        Budget {
            deadline_ms: Some(500),
            failed_within_ms: Some(200)
        }
    );
}

#[test]
fn the_router_path_declines_a_virtual_model_with_a_budget() {
    let json = r#"{"models": [{"name": "one", "cluster": "c1", "model": "one-up"},
        {"name": "two", "cluster": "c2", "model": "two-up"}],
      "virtual_models": [{"name": "vm", "model_types": ["chat"], "stream_fallbacks": "router",
        FIELDS "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
          {"target": "one", "weight": 100}, {"target": "two", "weight": 0}]}}]}"#;
    let plan_of = |fields: &str| {
        let config = config(&json.replace("FIELDS", fields));
        let mut start = Start::stored(0, ModelId(0), false);
        start.candidates = vec![ModelId(0), ModelId(1)];
        start.pinned = false;
        start.stream = true;
        start.dialect = Some(crate::core::sse::Dialect::ChatCompletions);
        crate::core::router_path::plan(&config, Endpoint::ChatCompletions, &start)
    };
    assert!(plan_of("").is_some());
    assert!(plan_of(r#""request_deadline_ms": 900,"#).is_none());
    assert!(plan_of(r#""fallback_if_failed_within_ms": 900,"#).is_none());
}
