//! Zuplo's failure rules (Zuplo model load balancing, "Failures and retries"), event by event
//! with a fake clock: `fail_fast_endpoints`, and how `fallback_timeout_ms` grows, ends and
//! what it covers.

use super::*;

/// Zuplo's import of a two-model list: a 429 retried twice (250 ms, then 500 ms), a 5xx, 408,
/// 425 or an unreachable model moved to the retry model, Responses and Messages failing fast.
const ZUPLO: &str = r#"{"models": [
    {"name": "one", "cluster": "c1", "model": "one-up"},
    {"name": "two", "cluster": "c2", "model": "two-up"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat", "responses"],
    "fallback_timeout_ms": 500, "fail_fast_endpoints": ["responses", "messages"],
    "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
      {"target": "one", "weight": 100, "retry_config": {"attempts": 2, "delay": 250,
        "backoff_multiplier": 2, "on_status_codes": ["429"], "on_connection_failure": false},
       "fallback_status_codes": ["408", "425", "429", "5xx"]},
      {"target": "two", "weight": 0}]}}]}"#;

/// A request on `endpoint` to virtual model 0 over its two targets, started at t=1000, and
/// the effects of its start.
fn begin(config: &Config, endpoint: Endpoint, stream: bool) -> (Machine, Vec<Effect<'_>>) {
    begin_over(config, &[0, 1], endpoint, stream)
}

/// The same over `candidates`.
fn begin_over<'c>(
    config: &'c Config,
    candidates: &[usize],
    endpoint: Endpoint,
    stream: bool,
) -> (Machine, Vec<Effect<'c>>) {
    let start = Start {
        virtual_model: Some(0),
        candidates: candidates.iter().map(|i| ModelId(*i)).collect(),
        pinned: false,
        stream,
        sticky: None,
        mint_ids: false,
        anthropic_errors: endpoint.speaks_anthropic(),
        conversation: false,
        caller: None,
        dialect: None,
        streams_attempts: false,
        router_path: false,
        include_usage: false,
        evicted_for_ms: None,
    };
    let replay = Replay {
        endpoint,
        body: BODY.to_vec(),
        layout: inspect(BODY).unwrap().layout(false),
        headers: Headers::from_pairs([
            (":method", "POST"),
            (":path", endpoint.display_path()),
            (":authority", "gateway"),
        ]),
        stored_path: None,
    };
    let mut fx = Effects::new();
    let m = Machine::start(config, start, replay, 1000, &mut fx);
    (m, list(fx))
}

fn timers(effects: &[Effect<'_>]) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArmTimer { due_ms, .. } => Some(*due_ms),
            _ => None,
        })
        .collect()
}

/// The router's answer headers with `status` at `now`, a provider's own answer.
fn router_answers<'c>(
    m: &mut Machine,
    config: &'c Config,
    status: u16,
    now: u64,
) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let mut facts = at(now);
    facts.details = Some("via_upstream");
    let mut flow = m.on_answer_headers(config, status, &mut facts, &mut fx);
    if flow == Flow::Hold && fx.is_empty() && status >= 400 {
        // Held to be judged by its body (a 429 may be a quota): its error body ends it.
        facts.chunk = br#"{"error":{"code":"rate_limit_exceeded"}}"#.to_vec();
        flow = m.on_answer_body(config, true, &mut facts, &mut fx);
    }
    (flow, list(fx))
}

#[test]
fn on_a_fail_fast_endpoint_a_5xx_goes_to_the_client_instead_of_the_retry_model() {
    let config = config(ZUPLO);
    for endpoint in [Endpoint::Responses, Endpoint::Messages] {
        let (mut m, _) = begin(&config, endpoint, false);
        let (flow, effects) = router_answers(&mut m, &config, 503, 1100);
        assert_eq!(flow, Flow::Continue, "{endpoint:?}");
        assert!(kinds(&effects).is_empty(), "no retry model: {effects:?}");
        let Some(Effect::Deliver(d)) = effects.last() else {
            panic!("{effects:?}")
        };
        assert_eq!(
            d.ending,
            Ending {
                target: Some(ModelId(0)),
                status: 503,
                attempts: 1,
                gave_up: true
            }
        );
    }
    // Chat completions move to the retry model.
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, false);
    let (flow, effects) = router_answers(&mut m, &config, 503, 1100);
    assert_eq!(flow, Flow::Hold);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(503)))]
    );
}

#[test]
fn on_a_fail_fast_endpoint_an_unreachable_model_fails_the_request() {
    let config = config(ZUPLO);
    let (mut m, _) = begin(&config, Endpoint::Responses, false);
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.details = Some("upstream_reset_before_response_started{connection_failure}");
    assert_eq!(
        m.on_answer_headers(&config, 503, &mut facts, &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    assert!(matches!(effects.last(), Some(Effect::Deliver(d)) if d.ending.gave_up));
}

#[test]
fn on_a_fail_fast_endpoint_a_429_is_retried_twice_then_moves_to_the_retry_model() {
    let config = config(ZUPLO);
    let (mut m, _) = begin(&config, Endpoint::Messages, false);
    let (flow, effects) = router_answers(&mut m, &config, 429, 1100);
    assert_eq!(flow, Flow::Hold);
    let (due, token) = the_timer(&effects);
    assert_eq!(due, 1350, "250 ms");
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let retry = the_call(&list(fx)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, retry, Some(answer("429", "{}")), 1400, &mut fx);
    let (due, token) = the_timer(&list(fx));
    assert_eq!(due, 1900, "then 500 ms");
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let retry = the_call(&list(fx)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, retry, Some(answer("429", "{}")), 1950, &mut fx);
    let effects = list(fx);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(429)))]
    );
    // The retry model is unreachable: a fail-fast endpoint ends there, in Anthropic's shape.
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, None, 2000, &mut fx);
    let effects = list(fx);
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(f.error.status, 503);
    assert!(
        f.error.body.contains(r#""type":"error""#),
        "{}",
        f.error.body
    );
    assert_eq!(m.summary().attempts, 4);
}

#[test]
fn on_a_fail_fast_endpoint_no_fallback_timeout_applies_and_a_slow_model_is_waited_for() {
    let config = config(ZUPLO);
    let (_, effects) = begin(&config, Endpoint::ChatCompletions, false);
    assert_eq!(timers(&effects), [1500]);
    for endpoint in [Endpoint::Responses, Endpoint::Messages] {
        let (mut m, effects) = begin(&config, endpoint, true);
        assert!(timers(&effects).is_empty(), "{endpoint:?}: {effects:?}");
        // Whenever it answers, its answer is the client's.
        let (flow, effects) = router_answers(&mut m, &config, 200, 61_000);
        assert_eq!(flow, Flow::Continue);
        assert!(matches!(effects.last(), Some(Effect::Deliver(d)) if d.ending.status == 200));
    }
}

/// [`TWO`] plus "three", `fallback_timeout_ms` 500, growing by `growth`, with `extra` fields.
fn growing(growth: u32, extra: &str) -> Config {
    config(&three(&TWO.replace(
        r#""model_types": ["chat"],"#,
        &format!(
            r#""model_types": ["chat"], "fallback_timeout_ms": 500,
               "fallback_timeout_growth": {growth}, {extra}"#
        ),
    )))
}

/// Fires the timer armed by `effects` (the only one) at its due time; the next attempt's
/// call is dispatched, and the due time of the timer it arms is returned with its token.
fn time_out_and_dispatch(m: &mut Machine, config: &Config, effects: &[Effect<'_>]) -> (u64, u64) {
    let (due, token) = the_timer(effects);
    let mut fx = Effects::new();
    m.on_timer(config, token, due, &mut fx);
    let effects = list(fx);
    assert!(
        matches!(
            kinds(&effects).as_slice(),
            [(_, AttemptKind::Fallback(AttemptOutcome::FallbackTimeout))]
        ),
        "{effects:?}"
    );
    let mut fx = Effects::new();
    m.on_dispatched(the_call(&effects).id, &mut fx);
    the_timer(&list(fx))
}

#[test]
fn each_next_target_gets_the_previous_ones_fallback_timeout_times_the_growth() {
    // Zuplo model load balancing, "Failures and retries": the retry model "starts over with
    // twice the time". Without growth every target gets 500 ms: 1500, 2000, 2500.
    let config = growing(2, r#""max_targets_per_request": 3,"#);
    let (mut m, effects) = begin_over(&config, &[0, 1, 2], Endpoint::ChatCompletions, false);
    assert_eq!(timers(&effects), [1500]);
    let (due, token) = time_out_and_dispatch(&mut m, &config, &effects);
    assert_eq!(due, 2500, "the second target: 1000 ms");
    let effects = [Effect::ArmTimer { due_ms: due, token }];
    let (due, _) = time_out_and_dispatch(&mut m, &config, &effects);
    assert_eq!(due, 4500, "the third: 2000 ms");
    // Growth 1, the default: the same time for every target.
    let config = growing(1, "");
    let (mut m, effects) = begin_over(&config, &[0, 1, 2], Endpoint::ChatCompletions, false);
    let (due, _) = time_out_and_dispatch(&mut m, &config, &effects);
    assert_eq!(due, 2000);
}

#[test]
fn the_retry_model_gets_the_grown_time_whatever_moved_the_request_and_keeps_it_on_retries() {
    let config = config(
        &three(TWO)
            .replace(
                r#"{"target": "two", "weight": 0}"#,
                r#"{"target": "two", "weight": 0, "retry_config": {"attempts": 1, "delay": 100}}"#,
            )
            .replace(
                r#""model_types": ["chat"],"#,
                r#""model_types": ["chat"], "fallback_timeout_ms": 500, "fallback_timeout_growth": 2,"#,
            ),
    );
    assert_eq!(config.virtual_models[0].targets.len(), 3);
    let (mut m, _) = begin_over(&config, &[0, 1, 2], Endpoint::ChatCompletions, false);
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_dispatched(call, &mut fx);
    assert_eq!(
        the_timer(&list(fx)).0,
        2100,
        "moved by a 503 at 1100: 1000 ms"
    );
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("503", "{}")), 1200, &mut fx);
    let (due, token) = the_timer(&list(fx));
    assert_eq!(due, 1300, "the retry's delay");
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Retry(AttemptOutcome::Status(503)))]
    );
    let mut fx = Effects::new();
    m.on_dispatched(the_call(&effects).id, &mut fx);
    assert_eq!(
        the_timer(&list(fx)).0,
        2300,
        "a retry keeps its target's 1000 ms"
    );
}

/// [`TWO`] with `fallback_timeout_ms` 500, growth 2 and `fallback_timeout_at_last: "fail"`;
/// `extra` fields added to the virtual model.
fn failing_at_last(extra: &str) -> Config {
    config(&TWO.replace(
        r#""model_types": ["chat"],"#,
        &format!(
            r#""model_types": ["chat"], "fallback_timeout_ms": 500, "fallback_timeout_growth": 2,
               "fallback_timeout_at_last": "fail", {extra}"#
        ),
    ))
}

#[test]
fn with_fail_at_last_the_retry_models_time_running_out_fails_the_request_with_a_504() {
    // Zuplo model load balancing, "Failures and retries": the retry model "starts over with
    // twice the time, and the request fails if that runs out too".
    let config = failing_at_last("");
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let (due, token) = time_out_and_dispatch(&mut m, &config, &effects);
    assert_eq!(due, 2500);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    assert!(kinds(&effects).is_empty(), "{effects:?}");
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(1),
            outcome: AttemptOutcome::FallbackTimeout,
            ..
        }
    ));
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(f.error.status, 504);
    let body: serde_json::Value = serde_json::from_str(&f.error.body).unwrap();
    assert_eq!(body["error"]["code"], "fallback_timeout");
    assert!(f.error.body.contains("`vm`"), "{}", f.error.body);
    assert_eq!(
        f.ending,
        Ending {
            target: None,
            status: 504,
            attempts: 2,
            gave_up: true
        }
    );
    assert!(f.headers().contains(&("x-switchboard-attempts", "2")));
    // Both late answers are ignored: the client has its answer.
    let mut fx = Effects::new();
    m.on_call_answer(
        &config,
        the_call_id(&m),
        Some(answer("200", "{}")),
        2600,
        &mut fx,
    );
    assert!(fx.is_empty(), "{:?}", list(fx));
}

/// The id of the last call-out `m` made (calls are numbered from 1).
fn the_call_id(m: &Machine) -> CallId {
    m.calls
}

#[test]
fn with_fail_at_last_errors_for_the_messages_api_come_in_anthropics_shape() {
    let config = failing_at_last("");
    let (mut m, effects) = begin(&config, Endpoint::Messages, false);
    let (due, token) = time_out_and_dispatch(&mut m, &config, &effects);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let Some(Effect::Fail(f)) = list(fx).pop() else {
        panic!()
    };
    let body: serde_json::Value = serde_json::from_str(&f.error.body).unwrap();
    assert_eq!(
        (f.error.status, &body["type"]),
        (504, &serde_json::json!("error"))
    );
    assert_eq!(body["error"]["type"], "timeout_error");
}

#[test]
fn a_request_that_never_moved_keeps_waiting_even_with_fail_at_last() {
    // One target with a retry configured: its time is kept, but there is no retry model to
    // have run out of time (Zuplo sets "no retry model and no timeout" then).
    let config = config(
        &TWO.replace(r#", {"target": "two", "weight": 0}"#, "")
            .replace(
                r#"{"target": "one", "weight": 100}"#,
                r#"{"target": "one", "weight": 100, "retry_config": {"attempts": 1}}"#,
            )
            .replace(
                r#""model_types": ["chat"],"#,
                r#""model_types": ["chat"], "fallback_timeout_ms": 500,
                   "fallback_timeout_at_last": "fail","#,
            ),
    );
    let (mut m, effects) = begin_over(&config, &[0], Endpoint::ChatCompletions, true);
    let (due, token) = the_timer(&effects);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
    let (flow, effects) = router_answers(&mut m, &config, 200, 9000);
    assert_eq!(flow, Flow::Continue);
    assert!(matches!(effects.last(), Some(Effect::Deliver(d)) if d.ending.status == 200));
}

#[test]
fn by_default_the_retry_model_is_waited_for_when_its_time_runs_out() {
    let config = config(&TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_timeout_ms": 500, "fallback_timeout_growth": 2,"#,
    ));
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let (due, token) = time_out_and_dispatch(&mut m, &config, &effects);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
    let mut fx = Effects::new();
    m.on_call_answer(
        &config,
        the_call_id(&m),
        Some(answer("200", "{}")),
        9000,
        &mut fx,
    );
    assert!(matches!(list(fx).last(), Some(Effect::Reply(r)) if r.ending.status == 200));
}

/// A chunk of the router's answer body at `now`: `chunk` is every byte held so far, as the
/// adapters give it.
fn router_body<'c>(
    m: &mut Machine,
    config: &'c Config,
    chunk: &str,
    end: bool,
    now: u64,
) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let mut facts = at(now);
    facts.chunk = chunk.as_bytes().to_vec();
    let flow = m.on_answer_body(config, end, &mut facts, &mut fx);
    (flow, list(fx))
}

/// [`TWO`] with `fallback_timeout_ms` 500 and `fields`.
fn timed(fields: &str) -> Config {
    config(&TWO.replace(
        r#""model_types": ["chat"],"#,
        &format!(r#""model_types": ["chat"], "fallback_timeout_ms": 500, {fields}"#),
    ))
}

#[test]
fn a_non_streamed_answer_is_held_whole_and_its_time_runs_until_its_end() {
    // Zuplo model load balancing, "Failures and retries": "A request that doesn't stream gets
    // its response only when the model finishes, so ... fallbackTimeoutSeconds limits the
    // whole response". Its headers at 1100 neither end the time nor go to the client.
    let config = timed("");
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let token = the_timer(&effects).1;
    let (flow, effects) = router_answers(&mut m, &config, 200, 1100);
    assert_eq!(flow, Flow::Hold);
    assert!(
        effects.is_empty(),
        "nothing recorded or delivered yet: {effects:?}"
    );
    let (flow, effects) = router_body(&mut m, &config, "{\"id\":", false, 1200);
    assert_eq!((flow, effects.len()), (Flow::Hold, 0));
    let (flow, effects) = router_body(&mut m, &config, "{\"id\":\"x\"}", true, 1300);
    assert_eq!(flow, Flow::Continue, "whole before its time: it goes on");
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(0),
            outcome: AttemptOutcome::Status(200),
            ..
        }
    ));
    assert!(matches!(effects.last(), Some(Effect::Deliver(d)) if d.ending.status == 200));
    let mut fx = Effects::new();
    m.on_timer(&config, token, 1500, &mut fx);
    assert!(fx.is_empty(), "its time ended with it: {:?}", list(fx));
}

#[test]
fn a_non_streamed_answer_still_coming_when_its_time_runs_out_is_left_for_the_retry_model() {
    let config = timed("");
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let (due, token) = the_timer(&effects);
    router_answers(&mut m, &config, 200, 1100);
    router_body(&mut m, &config, "{\"id\":", false, 1200);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(0),
            outcome: AttemptOutcome::FallbackTimeout,
            ..
        }
    ));
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1700, &mut fx);
    let effects = list(fx);
    assert!(
        matches!(effects.last(), Some(Effect::Reply(r)) if r.ending.target == Some(ModelId(1))),
        "{effects:?}"
    );
    // The abandoned answer ends later: it stays held, the client has the retry model's.
    let (flow, effects) = router_body(&mut m, &config, "{\"id\":\"x\"}", true, 1800);
    assert_eq!((flow, effects.len()), (Flow::Hold, 0));
}

#[test]
fn an_abandoned_non_streamed_answer_that_ends_first_is_delivered_and_the_call_ignored() {
    let config = timed("");
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let (due, token) = the_timer(&effects);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let call = the_call(&list(fx)).id;
    // Headers after it was abandoned: held whole too, then it ends before the call answers.
    let (flow, effects) = router_answers(&mut m, &config, 200, 1600);
    assert_eq!((flow, effects.len()), (Flow::Hold, 0));
    let (flow, effects) = router_body(&mut m, &config, "{}", true, 1650);
    assert_eq!(flow, Flow::Continue);
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!((d.ending.target, d.ending.attempts), (Some(ModelId(0)), 2));
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1700, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
}

#[test]
fn with_answer_start_a_non_streamed_answer_goes_on_at_its_headers() {
    let config = timed(r#""fallback_timeout_scope": "answer_start","#);
    let (mut m, effects) = begin(&config, Endpoint::ChatCompletions, false);
    let token = the_timer(&effects).1;
    let (flow, effects) = router_answers(&mut m, &config, 200, 1100);
    assert_eq!(flow, Flow::Continue);
    assert!(matches!(effects.last(), Some(Effect::Deliver(_))));
    let mut fx = Effects::new();
    m.on_timer(&config, token, 1500, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
}

#[test]
fn a_streamed_answer_or_one_without_a_body_goes_on_at_its_headers_whatever_the_scope() {
    // Zuplo: "The timeout ends when the response starts, so it doesn't cut off a long
    // streaming response".
    let config = timed("");
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, true);
    let (flow, _) = router_answers(&mut m, &config, 200, 1100);
    assert_eq!(flow, Flow::Continue);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, false);
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.ends = true;
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut facts, &mut fx),
        Flow::Continue,
        "nothing more would come to end it"
    );
    // A failed answer is held as before, whatever the scope.
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, false);
    assert_eq!(router_answers(&mut m, &config, 503, 1100).0, Flow::Hold);
}

#[test]
fn trailers_end_an_answer_held_whole() {
    let config = timed("");
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, false);
    router_answers(&mut m, &config, 200, 1100);
    assert_eq!(
        router_body(&mut m, &config, "{}", false, 1200).0,
        Flow::Hold
    );
    let mut fx = Effects::new();
    assert_eq!(m.on_answer_trailers(&config, &mut fx), Flow::Continue);
    assert!(matches!(list(fx).last(), Some(Effect::Deliver(_))));
}

#[test]
fn a_responses_answer_held_whole_gets_its_ids_minted_at_its_end() {
    let config = timed("");
    let start = Start {
        mint_ids: true,
        ..Start::routed(
            Endpoint::Responses,
            crate::core::routing::Plan {
                candidates: vec![ModelId(0), ModelId(1)],
                virtual_model: Some(0),
                sticky: None,
                pinned: false,
            },
            false,
            false,
        )
    };
    let replay = Replay {
        endpoint: Endpoint::Responses,
        body: BODY.to_vec(),
        layout: inspect(BODY).unwrap().layout(false),
        headers: Headers::from_pairs([(":method", "POST"), (":path", "/v1/responses")]),
        stored_path: None,
    };
    let mut fx = Effects::new();
    let mut m = Machine::start(&config, start, replay, 1000, &mut fx);
    router_answers(&mut m, &config, 200, 1100);
    let half = r#"{"id":"resp_12"#;
    assert_eq!(
        router_body(&mut m, &config, half, false, 1200).0,
        Flow::Hold
    );
    let whole = r#"{"id":"resp_123","object":"response","output":[]}"#;
    let (flow, effects) = router_body(&mut m, &config, whole, true, 1300);
    assert_eq!(flow, Flow::Continue);
    let replaced = effects.iter().find_map(|e| match e {
        Effect::ReplaceBody { len, with } => Some((*len, String::from_utf8_lossy(with))),
        _ => None,
    });
    let Some((len, with)) = replaced else {
        panic!("{effects:?}")
    };
    assert_eq!(len, whole.len(), "the whole body held is replaced");
    assert!(with.starts_with(r#"{"id":"resp_sb1-"#), "{with}");
    assert!(
        matches!(effects.iter().find(|e| matches!(e, Effect::Deliver(_))),
        Some(Effect::Deliver(d)) if d.drop_content_length)
    );
}
