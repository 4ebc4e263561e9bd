//! Native twins of `tests/e2e/test_resilience.py`: the same configs and faults, run on the
//! simulated worker of [`super::sim`] with a fake clock instead of a real Envoy. Each twin
//! names its e2e test; where the e2e test measures wall time, the twin asserts the exact
//! simulated time (Envoy adds its tick and scheduling on top).

use super::sim::{Answer, Behaviour, Sim};
use crate::core::fallback::AttemptOutcome;
use crate::core::flight::AttemptKind;
use serde_json::json;
use std::collections::BTreeMap;

/// A catalog model `name` on cluster `name`, as the e2e `model()` helper writes it.
fn model(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut m = json!({"name": name, "cluster": name, "model": format!("{name}-upstream"),
        "visibility": "internal"});
    if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    m
}

fn models(names: &[&str]) -> Vec<serde_json::Value> {
    names.iter().map(|n| model(n, json!({}))).collect()
}

fn vm(kind: &str, targets: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({"name": "vm", "model_types": ["chat"],
        "routing_config": {"type": kind, "load_balance_targets": targets}});
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

fn weighted(targets: serde_json::Value) -> serde_json::Value {
    vm("weight-based-routing", targets, json!({}))
}

fn priority(targets: serde_json::Value) -> serde_json::Value {
    vm("priority-based-routing", targets, json!({}))
}

fn sim(config: serde_json::Value) -> Sim {
    Sim::new(&config.to_string())
}

/// A twin's worker as most e2e tests set one up: a catalog model per target (see [`model`]),
/// each on its own cluster with a mock provider behind it, under one virtual model "vm".
struct Setup {
    config: serde_json::Value,
    providers: Vec<(&'static str, Behaviour)>,
}

impl Setup {
    /// Virtual model `vm` over `targets`, each answering as its behaviour says.
    fn new(vm: serde_json::Value, targets: Vec<(&'static str, Behaviour)>) -> Setup {
        let names: Vec<&str> = targets.iter().map(|(name, _)| *name).collect();
        Setup {
            config: json!({"models": models(&names), "virtual_models": [vm]}),
            providers: targets,
        }
    }

    /// The e2e file's usual pair: every request to `primary` (weight 100), `spare` (weight 0)
    /// reached by fallback only.
    fn fallback_pair(
        primary: (&'static str, Behaviour),
        spare: (&'static str, Behaviour),
    ) -> Setup {
        let vm = weighted(json!([{"target": primary.0, "weight": 100},
            {"target": spare.0, "weight": 0}]));
        Setup::new(vm, vec![primary, spare])
    }

    /// The config's failure window.
    fn window(mut self, failures: u32, window_seconds: u64) -> Setup {
        self.config["failure_window"] =
            json!({"failures": failures, "window_seconds": window_seconds});
        self
    }

    /// Catalog model `name` with `extra` fields (its health policy).
    fn model(mut self, name: &str, extra: serde_json::Value) -> Setup {
        let entries = self.config["models"].as_array_mut().into_iter().flatten();
        for entry in entries.filter(|m| m["name"] == name) {
            *entry = model(name, extra.clone());
        }
        self
    }

    fn sim(self) -> Sim {
        let mut s = sim(self.config);
        for (name, behaviour) in self.providers {
            s.provider(name, behaviour);
        }
        s
    }
}

fn fail(status: u16) -> Behaviour {
    Behaviour {
        fail_status: Some(status),
        ..Behaviour::default()
    }
}

fn stall(ms: u64) -> Behaviour {
    Behaviour {
        stall_ms: ms,
        ..Behaviour::default()
    }
}

fn dropper() -> Behaviour {
    Behaviour {
        drop_before_response: true,
        ..Behaviour::default()
    }
}

fn post(s: &mut Sim) -> Answer {
    s.sleep(1);
    s.chat("vm", false)
}

/// Posts every 20 ms until `name` answers, for up to 5 s after `since`: how long after
/// `since` it did. Every answer meanwhile must be a 200.
fn back_at(s: &mut Sim, name: &str, since: u64) -> Option<u64> {
    while s.now - since < 5000 {
        let r = post(s);
        assert_eq!(r.status, 200);
        if r.resolved() == name {
            return Some(s.now - since);
        }
        s.sleep(20);
    }
    None
}

fn counts<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for i in items {
        *out.entry(i.to_string()).or_default() += 1;
    }
    out
}

/// Twin of test_resilience.py::test_failing_target_is_invisible_to_clients_and_stops_getting_traffic
#[test]
fn failing_target_is_invisible_to_clients_and_stops_getting_traffic() {
    let vm = weighted(json!([{"target": "good", "weight": 50}, {"target": "bad", "weight": 50}]));
    let mut s = Setup::new(vm, vec![("good", Behaviour::default()), ("bad", fail(503))]).sim();
    let results: Vec<Answer> = (0..1000).map(|_| post(&mut s)).collect();
    assert!(
        results.iter().all(|r| r.status == 200),
        "zero client-visible errors"
    );
    assert!(results.iter().all(|r| r.resolved() == "good"));
    assert_eq!(s.received("good").len(), 1000);
    let at_bad = s.received("bad").len();
    // The default window marks it unhealthy after two failures: a last resort from then on.
    assert_eq!(at_bad, 2);
    assert_eq!(
        results.iter().filter(|r| r.attempts() == "2").count(),
        at_bad
    );
    // Envoy's code details are read for the 5xx answers only, the answer headers never.
    let reads = |what| s.asked.iter().filter(|a| **a == what).count();
    assert_eq!((reads("details"), reads("headers")), (at_bad, 0));
    s.clear("bad");
    assert!((0..100).all(|_| post(&mut s).status == 200));
    assert!(s.received("bad").is_empty());
}

/// Twin of test_resilience.py::test_429_with_retry_after_evicts_for_that_long_then_the_target_returns
#[test]
fn a_429_with_retry_after_evicts_for_that_long_then_the_target_returns() {
    let limited = Behaviour {
        retry_after: Some("2"),
        ..fail(429)
    };
    let mut s = Setup::fallback_pair(("limited", limited), ("spare", Behaviour::default())).sim();
    let first = post(&mut s);
    let evicted_at = s.now;
    assert_eq!(
        (first.status, first.resolved(), first.attempts()),
        (200, "spare", "2")
    );
    s.configure("limited", |b| b.fail_status = None);
    let back_after = back_at(&mut s, "limited", evicted_at).expect("the target never came back");
    assert!((2000..2030).contains(&back_after), "{back_after}");
    assert_eq!(
        s.received("limited").len(),
        2,
        "the 429 and the first request after it"
    );
}

/// Twin of test_resilience.py::test_priority_group_spills_to_backup_only_when_both_members_are_evicted
#[test]
fn priority_group_spills_to_backup_only_when_both_members_are_evicted() {
    let evict = json!({"health": {"eviction": {"consecutive_failures": 1, "duration": "30s"}}});
    let vm = priority(
        json!([{"target": "a", "priority": 0}, {"target": "b", "priority": 0},
        {"target": "backup", "priority": 1}]),
    );
    let targets = ["a", "b", "backup"].map(|name| (name, Behaviour::default()));
    let mut s = Setup::new(vm, targets.into())
        .model("a", evict.clone())
        .model("b", evict)
        .window(16, 120)
        .sim();
    let served: Vec<Answer> = (0..40).map(|_| post(&mut s)).collect();
    let served = counts(served.iter().map(Answer::resolved));
    assert_eq!(served.keys().collect::<Vec<_>>(), ["a", "b"], "{served:?}");
    assert!(s.received("backup").is_empty());

    s.configure("a", |b| b.fail_status = Some(503));
    s.clear("a");
    s.clear("b");
    let served: Vec<Answer> = (0..40).map(|_| post(&mut s)).collect();
    // a fails once, is evicted, and that request falls back within the group.
    assert_eq!(
        counts(served.iter().map(Answer::resolved)),
        counts(["b"; 40])
    );
    let seen = |s: &Sim| ["a", "b", "backup"].map(|n| s.received(n).len());
    assert_eq!(seen(&s), [1, 40, 0]);

    s.configure("b", |b| b.fail_status = Some(503));
    s.clear("a");
    s.clear("b");
    let served: Vec<Answer> = (0..40).map(|_| post(&mut s)).collect();
    assert!(served.iter().all(|r| r.status == 200));
    assert_eq!(
        counts(served.iter().map(Answer::resolved)),
        counts(["backup"; 40])
    );
    assert_eq!(seen(&s), [0, 1, 40]);
}

/// Twin of test_resilience.py::test_target_stalling_past_fallback_timeout_is_abandoned
#[test]
fn a_target_stalling_past_fallback_timeout_is_abandoned() {
    let vm = vm(
        "weight-based-routing",
        json!([{"target": "slow", "weight": 100}, {"target": "fast", "weight": 0}]),
        json!({"fallback_timeout_ms": 500}),
    );
    let fast = Behaviour {
        tokens: Some(5),
        ..Behaviour::default()
    };
    let mut s = Setup::new(vm, vec![("slow", stall(10_000)), ("fast", fast)]).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "fast", "2"));
    assert_eq!(r.json()["model"], "fast-upstream");
    assert_eq!(r.elapsed_ms, 500);
    assert!(s.attempts.contains(&(
        "fast".into(),
        AttemptKind::Fallback(AttemptOutcome::FallbackTimeout)
    )));

    // A streaming request that falls back still gets a whole SSE answer.
    s.sleep(1);
    let r = s.chat("vm", true);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "fast", "2"));
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let text: String = String::from_utf8(r.body)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>(),
        ["tok1", "tok2", "tok3", "tok4", "tok5"]
    );
}

/// Twin of test_resilience.py::test_retry_config_retries_the_same_target_with_its_delay
#[test]
fn retry_config_retries_the_same_target_with_its_delay() {
    let vm = weighted(json!([
        {"target": "flaky", "weight": 100,
         "retry_config": {"attempts": 2, "delay": 150, "on_status_codes": ["503"]}},
        {"target": "spare", "weight": 0}]));
    let targets = vec![("flaky", fail(503)), ("spare", Behaviour::default())];
    let mut s = Setup::new(vm, targets).window(16, 120).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "spare", "4"));
    assert_eq!(s.received("flaky").len(), 3, "one attempt and two retries");
    assert_eq!(s.received("spare").len(), 1);
    assert_eq!(r.elapsed_ms, 300, "two retry delays of 150 ms");
    let models: Vec<&str> = s
        .received("flaky")
        .iter()
        .map(|x| x.body["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["flaky-upstream"; 3]);
    let routed: Vec<bool> = s.received("flaky").iter().map(|x| x.routed).collect();
    assert_eq!(routed, [true, false, false], "the retries are call-outs");
    assert_eq!(s.received("spare")[0].body["model"], "spare-upstream");
}

/// Twin of test_resilience.py::test_fallback_never_goes_to_a_target_that_is_not_a_fallback_candidate
#[test]
fn fallback_never_goes_to_a_target_that_is_not_a_fallback_candidate() {
    let vm = weighted(json!([
        {"target": "primary", "weight": 100},
        {"target": "reserved", "weight": 0, "fallback_candidate": false},
        {"target": "last", "weight": 0}]));
    let targets = vec![
        ("primary", fail(500)),
        ("reserved", Behaviour::default()),
        ("last", Behaviour::default()),
    ];
    let mut s = Setup::new(vm, targets).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved()), (200, "last"));
    let seen = ["primary", "reserved", "last"].map(|n| s.received(n).len());
    assert_eq!(seen, [1, 0, 1]);
}

/// Twin of test_resilience.py::test_when_every_target_fails_the_last_error_passes_through_with_the_attempt_count
#[test]
fn when_every_target_fails_the_last_error_passes_through_with_the_attempt_count() {
    let mut s = Setup::fallback_pair(("one", fail(503)), ("two", fail(502))).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.attempts(), r.resolved()), (502, "2", "two"));
    assert_eq!(
        r.header("x-mock-provider"),
        Some("two"),
        "the provider's own headers pass through"
    );
    assert_eq!(r.json()["error"]["message"], "injected failure from two");
}

/// Twin of test_resilience.py::test_connection_refused_and_dropped_connections_fall_back
#[test]
fn connection_refused_and_dropped_connections_fall_back() {
    let mut s = sim(json!({"models": models(&["refused", "dropper", "good"]),
        "virtual_models": [priority(json!([{"target": "refused", "priority": 0},
            {"target": "dropper", "priority": 1}, {"target": "good", "priority": 2}]))]}));
    s.refused("refused");
    s.provider("dropper", dropper());
    s.provider("good", Behaviour::default());
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "good", "3"));
    assert_eq!(s.received("good").len(), 1);
    let kinds: Vec<AttemptKind> = s.attempts.iter().map(|(_, k)| *k).collect();
    let dropped = AttemptKind::Fallback(AttemptOutcome::ConnectFailure);
    assert_eq!(kinds, [AttemptKind::First, dropped, dropped]);
}

/// Twin of test_resilience.py::test_hostile_upstreams_never_break_the_vm
#[test]
fn hostile_upstreams_never_break_the_vm() {
    let one = |name: &str, t: serde_json::Value| {
        let mut v = weighted(t);
        v["name"] = json!(name);
        v
    };
    let mut s = sim(
        json!({"models": models(&["liar", "cutter", "stormy", "good"]),
        "virtual_models": [
            one("liar-vm", json!([{"target": "liar", "weight": 100}])),
            one("cutter-vm", json!([{"target": "cutter", "weight": 100}])),
            one("stormy-vm", json!([{"target": "stormy", "weight": 50}, {"target": "good", "weight": 50}]))]}),
    );
    s.provider(
        "liar",
        Behaviour {
            error_body_on_200: true,
            ..Behaviour::default()
        },
    );
    s.provider(
        "cutter",
        Behaviour {
            cut_mid_stream: true,
            tokens: Some(6),
            token_delay_ms: 20,
            ..Behaviour::default()
        },
    );
    s.provider("stormy", fail(429));
    s.provider("good", Behaviour::default());

    let r = s.chat("liar-vm", false);
    assert_eq!(r.status, 200);
    assert!(
        r.json().get("error").is_some(),
        "a 200 is delivered as the provider sent it"
    );

    let r = s.chat("cutter-vm", true);
    assert_eq!(r.status, 200, "the stream started");
    assert!(!r.body.is_empty());
    assert!(
        r.cut,
        "a stream dropped mid-way reaches the client as cut, not as a clean end"
    );
    assert!(!String::from_utf8_lossy(&r.body).contains("[DONE]"));

    let storm: Vec<u16> = (0..200)
        .map(|_| {
            s.sleep(1);
            s.chat("stormy-vm", false).status
        })
        .collect();
    assert!(storm.iter().all(|st| *st == 200));
    assert!(
        s.received("stormy").len() <= 20,
        "{}",
        s.received("stormy").len()
    );
    for _ in 0..40 {
        s.sleep(1);
        assert_eq!(s.chat("stormy-vm", false).status, 200);
    }
    assert!(s.received("good").len() >= 240);
}

/// Twin of test_resilience.py::test_sla_cutoff_on_time_to_first_token_moves_a_slow_target_behind
#[test]
fn sla_cutoff_on_time_to_first_token_moves_a_slow_target_behind() {
    let mut s = sim(json!({"models": models(&["slow", "fast"]),
        "virtual_models": [priority(json!([
            {"target": "slow", "priority": 0, "sla_cutoff": {"time_to_first_token_ms": 150}},
            {"target": "fast", "priority": 1}]))]}));
    s.provider(
        "slow",
        Behaviour {
            ttft_ms: 300,
            tokens: Some(3),
            ..Behaviour::default()
        },
    );
    s.provider(
        "fast",
        Behaviour {
            tokens: Some(3),
            ..Behaviour::default()
        },
    );
    let mut served_by = |stream: bool| {
        s.sleep(1);
        s.chat("vm", stream).resolved().to_string()
    };
    // Non-streaming answers give no TTFT sample; three slow streaming ones breach the SLA.
    assert_eq!(
        (0..3).map(|_| served_by(false)).collect::<Vec<_>>(),
        ["slow"; 3]
    );
    assert_eq!(
        (0..3).map(|_| served_by(true)).collect::<Vec<_>>(),
        ["slow"; 3]
    );
    assert_eq!(
        (0..5).map(|_| served_by(true)).collect::<Vec<_>>(),
        ["fast"; 5]
    );
    assert_eq!(s.record_of("slow").ttft.0.len(), 3);
}

/// Twin of test_resilience.py::test_sla_cutoff_on_time_per_output_token
#[test]
fn sla_cutoff_on_time_per_output_token() {
    let cutoff = |target: &str| {
        json!([
        {"target": target, "priority": 0, "sla_cutoff": {"time_per_output_token_ms": 5}},
        {"target": "backup", "priority": 1}])
    };
    let mut short = priority(cutoff("short"));
    short["name"] = json!("vm-short");
    let mut s = sim(json!({"models": models(&["sluggish", "short", "backup"]),
        "virtual_models": [priority(cutoff("sluggish")), short]}));
    // 40 tokens at 10 ms each: about 10 ms per output token, over a 5 ms cutoff.
    s.provider(
        "sluggish",
        Behaviour {
            token_delay_ms: 10,
            tokens: Some(40),
            ..Behaviour::default()
        },
    );
    s.provider(
        "short",
        Behaviour {
            token_delay_ms: 10,
            tokens: Some(10),
            ..Behaviour::default()
        },
    );
    s.provider("backup", Behaviour::default());
    let first: Vec<String> = (0..3)
        .map(|_| post(&mut s).resolved().to_string())
        .collect();
    let after: Vec<String> = (0..3)
        .map(|_| post(&mut s).resolved().to_string())
        .collect();
    // Answers under 30 output tokens give no TPOT sample, however slow per token.
    let shorts: Vec<String> = (0..5)
        .map(|_| s.chat("vm-short", false).resolved().to_string())
        .collect();
    assert_eq!(first, ["sluggish"; 3]);
    assert_eq!(after, ["backup"; 3]);
    assert_eq!(shorts, ["short"; 5]);
}

/// Twin of test_resilience.py::test_unhealthy_target_recovers_once_its_failures_age_out
#[test]
fn an_unhealthy_target_recovers_once_its_failures_age_out() {
    let mut s = Setup::fallback_pair(("flaky", fail(500)), ("steady", Behaviour::default()))
        .window(2, 2)
        .sim();
    let unhealthy_at = s.now;
    assert_eq!(
        [
            post(&mut s).resolved().to_string(),
            post(&mut s).resolved().to_string()
        ],
        ["steady", "steady"]
    );
    s.configure("flaky", |b| b.fail_status = None);
    assert_eq!(post(&mut s).resolved(), "steady", "unhealthy: last resort");
    let back_after = back_at(&mut s, "flaky", unhealthy_at).expect("never recovered");
    assert!((2000..2030).contains(&back_after), "{back_after}");
    assert_eq!(
        s.received("flaky").len(),
        3,
        "two failures, then nothing until the window let it back"
    );
}

/// Twin of test_resilience.py::test_repeated_evictions_back_off
#[test]
fn repeated_evictions_back_off() {
    let evict = json!({"health": {"eviction": {"consecutive_failures": 1, "duration": "500ms"}}});
    let mut s = Setup::fallback_pair(("broken", fail(503)), ("spare", Behaviour::default()))
        .model("broken", evict)
        .window(16, 1)
        .sim();
    let start = s.now;
    let mut arrivals = Vec::new();
    while s.now - start < 4000 {
        let seen = s.received("broken").len();
        assert_eq!(post(&mut s).status, 200);
        if s.received("broken").len() > seen {
            arrivals.push(s.now - start);
        }
        s.sleep(10);
    }
    let gaps: Vec<u64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    // Evicted 0.5 s, then 1 s, then 2 s: each failure after a return doubles the time out.
    assert!(gaps.len() >= 2, "{arrivals:?}");
    assert!(
        (500..515).contains(&gaps[0]) && (1000..1015).contains(&gaps[1]),
        "{gaps:?}"
    );
}

/// Twin of test_resilience.py::test_a_503_with_retry_after_does_not_evict_only_a_429_does
#[test]
fn a_503_with_retry_after_does_not_evict_only_a_429_does() {
    let busy = Behaviour {
        retry_after: Some("30"),
        ..fail(503)
    };
    let mut s = Setup::fallback_pair(("busy", busy), ("spare", Behaviour::default()))
        .window(16, 120)
        .sim();
    assert_eq!(post(&mut s).resolved(), "spare");
    s.configure("busy", |b| b.fail_status = None);
    assert_eq!(post(&mut s).resolved(), "busy", "not evicted for 30 s");
}

/// Twin of test_resilience.py::test_a_late_good_answer_from_an_abandoned_target_is_still_delivered
#[test]
fn a_late_good_answer_from_an_abandoned_target_is_still_delivered() {
    let vm = vm(
        "weight-based-routing",
        json!([{"target": "late", "weight": 100}, {"target": "stuck", "weight": 0}]),
        json!({"fallback_timeout_ms": 200}),
    );
    let mut s = Setup::new(vm, vec![("late", stall(700)), ("stuck", stall(5000))]).sim();
    let r = post(&mut s);
    // Abandoned at 200 ms for a fallback that stalls longer; the first answer, at 700 ms, wins.
    assert_eq!((r.status, r.resolved()), (200, "late"));
    assert_eq!(r.json()["model"], "late-upstream");
    assert_eq!(r.elapsed_ms, 700);
    assert_eq!(s.received("stuck").len(), 1);
}

/// Twin of test_resilience.py::test_a_client_leaving_during_a_fallback_leaves_the_vm_serving
#[test]
fn a_client_leaving_during_a_fallback_leaves_the_vm_serving() {
    let mut s = Setup::fallback_pair(("down", fail(500)), ("slow", stall(1500))).sim();
    let body =
        json!({"model": "vm", "messages": [{"role": "user", "content": "hello"}]}).to_string();
    for _ in 0..5 {
        s.sleep(1);
        let r = s.send(
            crate::core::endpoint::Endpoint::ChatCompletions,
            &body,
            Some(300),
        );
        assert!(r.timed_out, "the client gives up: {r:?}");
    }
    s.configure("slow", |b| b.stall_ms = 0);
    s.sleep(1600);
    let replies: Vec<Answer> = (0..20).map(|_| post(&mut s)).collect();
    assert!(replies
        .iter()
        .all(|r| r.status == 200 && r.resolved() == "slow"));
}

/// Twin of test_resilience.py::test_narrowed_fallback_status_codes_return_a_retry_code_to_the_client
#[test]
fn narrowed_fallback_status_codes_return_a_retry_code_to_the_client() {
    let vm = weighted(json!([
        {"target": "down", "weight": 100, "fallback_status_codes": ["429"]},
        {"target": "spare", "weight": 0}]));
    let mut s = Setup::new(
        vm,
        vec![("down", fail(500)), ("spare", Behaviour::default())],
    )
    .sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved()), (500, "down"));
    assert_eq!(
        [s.received("down").len(), s.received("spare").len()],
        [1, 0]
    );
}

/// Twin of test_resilience.py::test_a_dropped_connection_is_retried_when_retries_are_configured
#[test]
fn a_dropped_connection_is_retried_when_retries_are_configured() {
    let vm = priority(json!([
        {"target": "dropper", "priority": 0, "retry_config": {"attempts": 1, "delay": 50}},
        {"target": "good", "priority": 1}]));
    let targets = vec![("dropper", dropper()), ("good", Behaviour::default())];
    let mut s = Setup::new(vm, targets).window(16, 120).sim();
    let r = post(&mut s);
    assert_eq!(
        (r.status, r.resolved(), r.attempts()),
        (200, "good", "3"),
        "first try, one retry, fallback"
    );
    assert_eq!(s.received("dropper").len(), 2);
    assert_eq!(s.received("good").len(), 1);
    assert_eq!(r.elapsed_ms, 50, "the retry waited its delay");
}

/// Twin of test_resilience.py::test_a_fallback_that_does_not_answer_within_fallback_timeout_is_abandoned_too
#[test]
fn a_fallback_that_does_not_answer_within_fallback_timeout_is_abandoned_too() {
    let vm = vm(
        "priority-based-routing",
        json!([{"target": "down", "priority": 0}, {"target": "stalled", "priority": 1},
               {"target": "fast", "priority": 2}]),
        json!({"fallback_timeout_ms": 300}),
    );
    let targets = vec![
        ("down", fail(500)),
        ("stalled", stall(2000)),
        ("fast", Behaviour::default()),
    ];
    let mut s = Setup::new(vm, targets).sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "fast", "3"));
    assert_eq!(s.received("stalled").len(), 1);
    assert_eq!(r.elapsed_ms, 300);
    // The abandoned call's answer arrives later with nobody waiting; the worker keeps serving.
    s.sleep(2000);
    s.configure("stalled", |b| b.stall_ms = 0);
    assert!((0..5).all(|_| post(&mut s).status == 200));
}

mod zuplo;

/// Each request's `overhead_us` values (test_overhead.py): the simulated clock moves 1 µs per
/// read within a millisecond, so Switchboard's own steps show as a few µs each.
fn overheads(s: &Sim) -> Vec<u64> {
    let name = "switchboard.overhead_us.vm.vm";
    let values = s.metrics.iter().filter(|(n, _)| n == name);
    values
        .map(|(_, w)| match w {
            crate::core::report::Write::Record(v) => *v,
            crate::core::report::Write::Add(_) => u64::MAX,
        })
        .collect()
}

/// Twin of test_overhead.py's retry test: a 503, the 200 ms delay, a 503 again, then the
/// fallback. Each request records once: its first attempt's 2 µs (the decision's reads), and
/// 1 µs per gap; the delay is not in it.
#[test]
fn overhead_leaves_out_the_retry_delay_and_is_recorded_once_per_request() {
    let retry = json!({"attempts": 1, "delay": 200, "on_status_codes": [503]});
    let vm = priority(
        json!([{"target": "a", "priority": 0, "retry_config": retry},
        {"target": "b", "priority": 1}]),
    );
    let mut setup = Setup::new(vm, vec![("a", fail(503)), ("b", Behaviour::default())]);
    setup.config["failure_window"] = json!({"failures": 0});
    setup.config["request_histograms"] = json!(true);
    let mut s = setup.sim();
    for _ in 0..3 {
        let r = post(&mut s);
        assert_eq!((r.status, r.attempts()), (200, "3"));
        assert!(r.elapsed_ms >= 200, "the delay was waited");
    }
    assert_eq!(overheads(&s), [2 + 1 + 1; 3]);
}

/// A fallback after `fallback_timeout_ms`: the 300 ms waited for the stalled target are the
/// provider's; the gap counts from the timeout.
#[test]
fn overhead_of_a_fallback_after_a_timeout_counts_from_the_timeout() {
    let vm = vm(
        "priority-based-routing",
        json!([{"target": "a", "priority": 0}, {"target": "b", "priority": 1}]),
        json!({"fallback_timeout_ms": 300}),
    );
    let mut setup = Setup::new(vm, vec![("a", stall(2000)), ("b", Behaviour::default())]);
    setup.config["request_histograms"] = json!(true);
    let mut s = setup.sim();
    let r = post(&mut s);
    assert_eq!((r.status, r.resolved(), r.attempts()), (200, "b", "2"));
    assert!(r.elapsed_ms >= 300);
    assert_eq!(overheads(&s), [2 + 1]);
}

/// Without `request_histograms` nothing is timed or recorded.
#[test]
fn overhead_is_not_recorded_without_request_histograms() {
    let vm = priority(json!([{"target": "a", "priority": 0}]));
    let mut s = Setup::new(vm, vec![("a", Behaviour::default())]).sim();
    assert_eq!(post(&mut s).status, 200);
    assert!(overheads(&s).is_empty());
}
