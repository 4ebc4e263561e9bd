//! Native twins of `tests/e2e/test_zuplo_failures.py` (Zuplo model load balancing, "Failures
//! and retries"): the same configs and faults on the simulated worker, with exact simulated
//! times where the e2e test allows for Envoy's tick and scheduling.

use super::*;
use crate::core::endpoint::Endpoint;

/// Zuplo's two targets as its importer writes them (a 429 retried twice, 50 ms then 100 ms
/// here; a 5xx, 408, 425 or no answer moved on; Responses and Messages failing fast).
fn zuplo(first: &str, second: &str, extra: serde_json::Value) -> serde_json::Value {
    let rules = json!({"retry_config": {"attempts": 2, "delay": 50, "backoff_multiplier": 2,
        "on_status_codes": ["429"], "on_connection_failure": false},
        "fallback_status_codes": ["408", "425", "429", "5xx"]});
    let target = |name: &str, weight: u32| {
        let mut t = rules.clone();
        t["target"] = json!(name);
        t["weight"] = json!(weight);
        t
    };
    let mut fields = json!({"max_targets_per_request": 2,
        "fail_fast_endpoints": ["responses", "messages"]});
    if let (Some(f), Some(extra)) = (fields.as_object_mut(), extra.as_object()) {
        f.extend(extra.clone());
    }
    let mut v = vm(
        "weight-based-routing",
        json!([target(first, 100), target(second, 0)]),
        fields,
    );
    v["model_types"] = json!(["chat", "responses"]);
    v
}

fn responses(s: &mut Sim) -> Answer {
    s.sleep(1);
    s.send(
        Endpoint::Responses,
        r#"{"model": "vm", "input": "hello"}"#,
        None,
    )
}

/// Twin of test_zuplo_failures.py::test_fail_fast_endpoints_return_a_5xx_instead_of_moving_to_the_retry_model
#[test]
fn fail_fast_endpoints_return_a_5xx_instead_of_moving_to_the_retry_model() {
    let vm = zuplo("first", "second", json!({}));
    let mut s = Setup::new(
        vm,
        vec![("first", fail(503)), ("second", Behaviour::default())],
    )
    .sim();
    let r = responses(&mut s);
    assert_eq!((r.status, r.resolved()), (503, "first"));
    assert!(s.received("second").is_empty());
    assert_eq!(s.received("first").len(), 1, "no retry either");
    let c = post(&mut s);
    assert_eq!((c.status, c.resolved(), c.attempts()), (200, "second", "2"));
}

/// Twin of test_zuplo_failures.py::test_on_fail_fast_endpoints_a_429_is_retried_twice_then_moves_to_the_retry_model
#[test]
fn on_fail_fast_endpoints_a_429_is_retried_twice_then_moves_to_the_retry_model() {
    let vm = zuplo("first", "second", json!({}));
    let mut s = Setup::new(
        vm,
        vec![("first", fail(429)), ("second", Behaviour::default())],
    )
    .sim();
    let r = responses(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "second", "4"));
    assert_eq!(r.elapsed_ms, 150, "50 ms, then 100 ms");
    assert_eq!(s.received("first").len(), 3);
}

/// Twin of test_zuplo_failures.py::test_on_fail_fast_endpoints_a_slow_model_is_waited_for
#[test]
fn on_fail_fast_endpoints_a_slow_model_is_waited_for() {
    let vm = zuplo("first", "second", json!({"fallback_timeout_ms": 200}));
    let mut s = Setup::new(
        vm,
        vec![("first", stall(900)), ("second", Behaviour::default())],
    )
    .sim();
    let r = responses(&mut s);
    assert_eq!((r.status, r.resolved(), r.elapsed_ms), (200, "first", 900));
    assert!(s.received("second").is_empty());
    let c = post(&mut s);
    assert_eq!((c.resolved(), c.elapsed_ms), ("second", 200));
}

/// Twin of test_zuplo_failures.py::test_fallback_timeout_growth_gives_each_next_target_more_time
#[test]
fn fallback_timeout_growth_gives_each_next_target_more_time() {
    let targets = json!([{"target": "stuck", "priority": 0}, {"target": "slower", "priority": 1},
        {"target": "spare", "priority": 2}]);
    let growing = json!({"fallback_timeout_ms": 400, "fallback_timeout_growth": 2});
    let vm = vm("priority-based-routing", targets, growing);
    let providers = vec![
        ("stuck", stall(5_000)),
        ("slower", stall(600)),
        ("spare", Behaviour::default()),
    ];
    let mut s = Setup::new(vm, providers).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "slower", "2"));
    assert_eq!(
        r.elapsed_ms, 1000,
        "400 ms, then 600 of the 800 it was given"
    );
    assert!(s.received("spare").is_empty());
}

/// Twin of test_zuplo_failures.py::test_with_fail_at_last_the_request_fails_when_the_retry_models_time_runs_out_too
#[test]
fn with_fail_at_last_the_request_fails_when_the_retry_models_time_runs_out_too() {
    let timing = json!({"fallback_timeout_ms": 300, "fallback_timeout_growth": 2,
        "fallback_timeout_at_last": "fail"});
    let vm = zuplo("stuck", "late", timing);
    let mut s = Setup::new(vm, vec![("stuck", stall(5_000)), ("late", stall(1_200))]).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.attempts(), r.elapsed_ms), (504, "2", 900));
    assert_eq!(r.json()["error"]["code"], "fallback_timeout");
    assert_eq!(r.header("x-switchboard-resolved-model"), None);
}

/// Twin of test_zuplo_failures.py::test_a_non_streamed_answer_is_bounded_whole_unless_the_scope_is_answer_start
#[test]
fn a_non_streamed_answer_is_bounded_whole_unless_the_scope_is_answer_start() {
    let early = Behaviour {
        headers_first: true,
        ttft_ms: 1_000,
        ..Behaviour::default()
    };
    for (scope, served, after) in [
        ("whole_answer", "spare", 300),
        ("answer_start", "early", 1000),
    ] {
        let timing = json!({"fallback_timeout_ms": 300, "fallback_timeout_scope": scope});
        let vm = zuplo("early", "spare", timing);
        let providers = vec![("early", early.clone()), ("spare", Behaviour::default())];
        let mut s = Setup::new(vm, providers).sim();
        let r = post(&mut s);
        assert_eq!(
            (r.status, r.resolved(), r.elapsed_ms),
            (200, served, after),
            "{scope}"
        );
        assert_eq!(
            r.json()["model"],
            format!("{served}-upstream"),
            "whole: {scope}"
        );
    }
}
