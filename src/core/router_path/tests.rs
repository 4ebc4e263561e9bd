use super::*;
use crate::core::config::{Config, ModelId, Named};
use crate::core::endpoint::Endpoint;
use crate::core::fallback::{AttemptOutcome, StreamFault};
use crate::core::flight::{AttemptKind, Effect, Replay, Start};
use crate::core::headers::Headers;
use crate::core::request::inspect;
use crate::core::routing::Plan;
use crate::core::sse::Dialect;

/// Two OpenAI-shaped targets with their own credentials, then an Azure one; the first is
/// retried once (Zuplo model load balancing, "Failures and retries").
const CONFIG: &str = r#"{
  "models": [
    {"name": "a", "cluster": "a", "model": "gpt-a", "provider": "openai",
     "authority": "a.example", "headers": {"authorization": "Bearer key-a"}},
    {"name": "b", "cluster": "b", "model": "gpt-b", "provider": "azure",
     "authority": "b.example", "base_path": "/openai/deployments/b",
     "query": {"api-version": "2024-10-21"}, "headers": {"api-key": "key-b"}},
    {"name": "c", "cluster": "c", "model": "gpt-c", "provider": "openai",
     "authority": "c.example", "headers": {"authorization": "Bearer key-c"}}
  ],
  "virtual_models": [
    {"name": "vm", "model_types": ["chat"], "stream_fallbacks": "router", "fallback_timeout_ms": 800,
     "routing_config": {"type": "priority-based-routing", "load_balance_targets": [
        {"target": "a", "priority": 0, "retry_config": {"attempts": 1},
         "fallback_status_codes": [500, 503]},
        {"target": "b", "priority": 1, "retry_config": {"on_status_codes": [429]}},
        {"target": "c", "priority": 2}]}}
  ]
}"#;

const BODY: &[u8] = br#"{"model":"vm","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn config(text: &str) -> Config {
    Config::parse(text.as_bytes()).unwrap()
}

fn id(config: &Config, name: &str) -> ModelId {
    match config.lookup(name) {
        Some(Named::Catalog(id, _)) => id,
        _ => panic!("{name} is not a catalog model"),
    }
}

fn start(config: &Config, stream: bool) -> Start {
    let plan = Plan {
        candidates: ["a", "b", "c"].iter().map(|n| id(config, n)).collect(),
        virtual_model: Some(0),
        sticky: None,
        pinned: false,
    };
    Start::routed(Endpoint::ChatCompletions, plan, stream, false)
}

fn flight(config: &Config) -> RouterFlight {
    let start = start(config, true);
    let plan = plan(config, Endpoint::ChatCompletions, &start).unwrap();
    let client = Replay {
        endpoint: Endpoint::ChatCompletions,
        body: BODY.to_vec(),
        layout: inspect(BODY).unwrap().layout(false),
        headers: Headers::from_pairs([
            (":path", "/v1/chat/completions"),
            (":authority", "gateway.local"),
            ("authorization", "Bearer client"),
            ("x-team", "t1"),
        ]),
        stored_path: None,
    };
    RouterFlight::new(plan, client, Dialect::ChatCompletions, Default::default())
}

/// The outcomes the attempts recorded, in order.
fn recorded(answer: &RouterAnswer) -> Vec<AttemptOutcome> {
    answer
        .log
        .iter()
        .filter_map(|e| match e {
            Effect::Record { outcome, .. } => Some(*outcome),
            _ => None,
        })
        .collect()
}

fn set<'r>(request: &'r AttemptRequest, name: &str) -> Option<&'r str> {
    request
        .set
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_order_is_the_one_a_503_takes_and_only_streams_on_a_router_model_take_it() {
    let c = config(CONFIG);
    let p = plan(&c, Endpoint::ChatCompletions, &start(&c, true)).unwrap();
    let names: Vec<&str> = p
        .targets
        .iter()
        .map(|t| c.models[t.0].name.as_str())
        .collect();
    // a once and its retry, then b (503 is not in its retry codes), then c.
    assert_eq!(names, ["a", "a", "b", "c"]);
    assert_eq!(p.per_try_timeout_ms, Some(800));
    assert!(plan(&c, Endpoint::ChatCompletions, &start(&c, false)).is_none());
    let call_out = CONFIG.replace(r#""stream_fallbacks": "router", "#, "");
    let c = config(&call_out);
    assert!(plan(&c, Endpoint::ChatCompletions, &start(&c, true)).is_none());
}

#[test]
fn the_router_is_told_the_clusters_in_order_and_when_to_retry() {
    let c = config(CONFIG);
    let p = plan(&c, Endpoint::ChatCompletions, &start(&c, true)).unwrap();
    let headers = p.request_headers(&c).unwrap();
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get(ROUTE_HEADER), Some(ROUTE_VALUE));
    assert_eq!(
        get(GROUPS_HEADER),
        Some(
            groups_header(["a--router", "a--router", "b--router", "c--router"].into_iter())
                .as_str()
        )
    );
    assert_eq!(get("x-envoy-max-retries"), Some("3"));
    let retry_on = get("x-envoy-retry-on").unwrap();
    assert!(retry_on.contains("retriable-status-codes") && retry_on.contains("gateway-error"));
    // Every target's retry and fallback codes (defaults included), 503 always.
    let codes: Vec<&str> = get("x-envoy-retriable-status-codes")
        .unwrap()
        .split(',')
        .collect();
    for code in ["429", "500", "503", "401"] {
        assert!(codes.contains(&code), "{code} in {codes:?}");
    }
    assert!(!codes.contains(&"400"));
    assert_eq!(get("x-envoy-upstream-rq-per-try-timeout-ms"), Some("800"));
}

#[test]
fn each_attempt_is_rewritten_for_its_target_and_none_carries_another_targets_key() {
    let c = config(CONFIG);
    let mut f = flight(&c);
    // The first attempt leaves as the Switchboard filter wrote it.
    let first = f.begin(&c, 1, 0).unwrap();
    assert!(first.set.is_empty() && first.remove.is_empty() && first.body.is_none());
    // The retry at a: a's request again, from the client's.
    let second = f.begin(&c, 2, 0).unwrap();
    assert_eq!(set(&second, "authorization"), Some("Bearer key-a"));
    assert_eq!(set(&second, ":authority"), Some("a.example"));
    let body =
        |r: &AttemptRequest| String::from_utf8_lossy(r.body.as_deref().unwrap()).into_owned();
    assert!(body(&second).contains(r#""model":"gpt-a""#));
    // Attempt 3 goes to b (Azure: api-key): a's authorization goes back to the client's, and
    // b's own key and path are set.
    let third = f.begin(&c, 3, 0).unwrap();
    assert_eq!(set(&third, "api-key"), Some("key-b"));
    assert_ne!(set(&third, "authorization"), Some("Bearer key-a"));
    assert!(set(&third, ":path")
        .unwrap()
        .starts_with("/openai/deployments/b/chat/completions"));
    assert!(body(&third).contains(r#""model":"gpt-b""#));
    assert_eq!(
        set(&third, "content-length"),
        Some(body(&third).len().to_string().as_str())
    );
    // Attempt 4 (c) undoes b's api-key: the client sent none, so it goes.
    let fourth = f.begin(&c, 4, 0).unwrap();
    assert!(fourth.remove.iter().any(|n| n == "api-key"));
    assert_eq!(set(&fourth, "authorization"), Some("Bearer key-c"));
    assert!(f.begin(&c, 5, 0).is_none());
}

#[test]
fn a_stream_failing_before_content_is_a_retried_503_and_its_attempts_are_reported() {
    let c = config(CONFIG);
    let mut f = flight(&c);
    f.begin(&c, 1, 0).unwrap();
    assert!(f.on_status(&c, 1, 503, false).is_none());
    f.begin(&c, 2, 0).unwrap();
    let mut watch = f.on_status(&c, 2, 200, false).unwrap();
    let head = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    assert_eq!(f.on_body(&c, &mut watch, head, false), BodyVerdict::Hold);
    let mut failed = head.to_vec();
    failed.extend_from_slice(b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
    assert_eq!(f.on_body(&c, &mut watch, &failed, false), BodyVerdict::Fail);
    // b does not answer within the per-try timeout (800 ms); c streams.
    f.begin(&c, 3, 1000).unwrap();
    f.begin(&c, 4, 1900).unwrap();
    // The last attempt's answer is the Switchboard filter's to judge: not held.
    assert!(f.on_status(&c, 4, 200, false).is_none());
    let answer = f.take_answered(&c, 0);
    assert_eq!(answer.target, Some(id(&c, "c")));
    assert_eq!((answer.attempts, answer.fallbacks), (4, 2));
    let records = recorded(&answer);
    assert_eq!(
        records,
        [
            AttemptOutcome::Status(503),
            AttemptOutcome::StreamFailed(StreamFault::ErrorEvent),
            AttemptOutcome::FallbackTimeout,
        ]
    );
    let kinds: Vec<AttemptKind> = answer
        .log
        .iter()
        .filter_map(|e| match e {
            Effect::Attempt(a) => Some(a.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            AttemptKind::First,
            AttemptKind::Retry(AttemptOutcome::Status(503)),
            AttemptKind::Fallback(AttemptOutcome::StreamFailed(StreamFault::ErrorEvent)),
            AttemptKind::Fallback(AttemptOutcome::FallbackTimeout),
        ]
    );
}

#[test]
fn content_commits_and_a_status_the_router_does_not_retry_is_not_counted_here() {
    let c = config(CONFIG);
    let mut f = flight(&c);
    f.begin(&c, 1, 0).unwrap();
    let mut watch = f.on_status(&c, 1, 200, false).unwrap();
    let content = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    assert_eq!(f.on_body(&c, &mut watch, content, false), BodyVerdict::Pass);
    let mut f = flight(&c);
    f.begin(&c, 1, 0).unwrap();
    assert!(f.on_status(&c, 1, 400, false).is_none());
    let answer = f.take_answered(&c, 0);
    assert_eq!(answer.target, Some(id(&c, "a")));
    assert!(!answer
        .log
        .iter()
        .any(|e| matches!(e, Effect::Record { .. })));
}

#[test]
fn a_429_the_router_retries_is_held_until_its_body_tells_a_quota_from_a_rate_limit() {
    use crate::core::health::failure_class::FailureClass;
    use crate::core::health::record::Outcome;
    let c = config(CONFIG);
    let quota = br#"{"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"}}"#;
    let class_of = |answer: &RouterAnswer| {
        answer.log.iter().find_map(|e| match e {
            Effect::Record {
                health: Some(Outcome::Failure { class, .. }),
                ..
            } => Some(*class),
            _ => None,
        })
    };
    for (body, class) in [
        (&quota[..], FailureClass::Quota),
        (&b"{}"[..], FailureClass::RateLimit),
    ] {
        let mut f = flight(&c);
        f.begin(&c, 1, 0).unwrap();
        let mut watch = f.on_status(&c, 1, 429, false).expect("held");
        assert_eq!(f.on_body(&c, &mut watch, b"{", false), BodyVerdict::Hold);
        // Let on at its end: the router retries it by its status.
        assert_eq!(f.on_body(&c, &mut watch, body, true), BodyVerdict::Pass);
        f.begin(&c, 2, 10).unwrap();
        f.on_status(&c, 2, 200, true);
        let answer = f.take_answered(&c, 20);
        assert_eq!(recorded(&answer), [AttemptOutcome::Status(429)]);
        assert_eq!(class_of(&answer), Some(class));
    }
}

#[test]
fn an_attempt_with_no_answer_is_a_connection_failure_and_one_cut_while_held_a_reset() {
    let c = config(CONFIG);
    let mut f = flight(&c);
    f.begin(&c, 1, 1000).unwrap(); // refused at once
    f.begin(&c, 2, 1010).unwrap();
    f.on_status(&c, 2, 200, false).unwrap(); // held, then reset before content
    f.begin(&c, 3, 1200).unwrap();
    f.on_status(&c, 3, 200, false).unwrap();
    let answer = f.take_answered(&c, 1300);
    let records = recorded(&answer);
    assert_eq!(
        records,
        [
            AttemptOutcome::ConnectFailure,
            AttemptOutcome::StreamFailed(StreamFault::Reset),
        ]
    );
    // The router's answer is attempt 3's, still held when it came (its commit bound): b's.
    assert_eq!(answer.target, Some(id(&c, "b")));
}

#[test]
fn a_translated_attempt_is_watched_in_its_targets_own_events() {
    // c is Claude: a chat request is translated for it (the default `translate`), and its
    // answer comes as Anthropic events until the Switchboard filter translates it back.
    let text = CONFIG.replace(
        r#"{"name": "c", "cluster": "c", "model": "gpt-c", "provider": "openai",
     "authority": "c.example", "headers": {"authorization": "Bearer key-c"}}"#,
        r#"{"name": "c", "cluster": "c", "model": "claude-c", "provider": "anthropic",
     "authority": "c.example", "headers": {"x-api-key": "key-c"}}"#,
    );
    let c = config(&text);
    let mut f = flight(&c);
    for n in 1..=3 {
        f.begin(&c, n, 0).unwrap();
    }
    let to_claude = f.begin(&c, 4, 0).unwrap();
    assert_eq!(set(&to_claude, ":path"), Some("/v1/messages"));
    // Attempt 4 is the last: pretend one more follows by watching it as attempt 3 would be.
    let mut watch = AttemptWatch::for_test(3, f.dialect_of_for_test(&c, 4));
    let opening = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n";
    assert_eq!(f.on_body(&c, &mut watch, opening, false), BodyVerdict::Hold);
    let mut failed = opening.to_vec();
    failed.extend_from_slice(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n");
    assert_eq!(f.on_body(&c, &mut watch, &failed, false), BodyVerdict::Fail);
    // And its first text delta commits it.
    let mut watch = AttemptWatch::for_test(3, f.dialect_of_for_test(&c, 4));
    let mut content = opening.to_vec();
    content.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n");
    assert_eq!(
        f.on_body(&c, &mut watch, &content, false),
        BodyVerdict::Pass
    );
    assert_eq!(f.dialect_of_for_test(&c, 4), Dialect::Messages);
    assert_eq!(f.dialect_of_for_test(&c, 1), Dialect::ChatCompletions);
}
