//! The stream machine's orchestration against a fake host that records every call: the steps
//! of the request phase and of a forwarded request, in the order a host sees them. (The
//! simulator's twins, in `twins.rs`, run whole requests against mock providers.)

use super::*;
use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::flight::{CallAnswer, CallRequest, Chunk, Effect};
use crate::core::plugin::Plugin;
use crate::core::report::Write;
use crate::core::request::Edits;
use crate::core::routing::pins::PinClock;
use crate::core::routing::HealthInput;
use crate::core::routing::{LocalState, RoutingState};

/// What the fake host was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Remove(String),
    Set(String, String),
    EditBody(String),
    ClearRoute,
    Resume,
    Reply(u16, String),
    Dispatch(String, String),
    Timer(u64),
    SetAnswer(String, String),
    RemoveAnswer(String),
}

/// A host with a fixed clock, a request body and a router answer to give when asked.
#[derive(Default)]
struct Fake {
    now: u64,
    body: Vec<u8>,
    status: u16,
    answer: Vec<u8>,
    calls: Vec<Call>,
    state: LocalState,
    dispatched: u64,
}

impl Host for Fake {
    fn now_ms(&mut self) -> u64 {
        self.now
    }
    fn now_us(&mut self) -> u64 {
        self.now * 1000
    }
    fn request_body(&mut self) -> Vec<u8> {
        self.body.clone()
    }
    fn with_routing<T>(
        &mut self,
        _: &Plugin,
        now_ms: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState) -> T,
    ) -> T {
        let health = HealthInput {
            now_ms,
            ..HealthInput::NONE
        };
        decide(&health, &self.state)
    }
    fn remove_request_header(&mut self, name: &str) {
        self.calls.push(Call::Remove(name.into()));
    }
    fn set_request_header(&mut self, name: &str, value: &str) {
        self.calls.push(Call::Set(name.into(), value.into()));
    }
    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool {
        let edited = edits.apply(body).unwrap_or_default();
        self.calls
            .push(Call::EditBody(String::from_utf8_lossy(&edited).into()));
        true
    }
    fn clear_route_cache(&mut self) {
        self.calls.push(Call::ClearRoute);
    }
    fn resume_request(&mut self) {
        self.calls.push(Call::Resume);
    }
    fn reply(&mut self, status: u16, _: &[(&str, &str)], body: &[u8]) {
        self.calls
            .push(Call::Reply(status, String::from_utf8_lossy(body).into()));
    }
    fn dispatch(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        let path = call.headers.iter().find(|(k, _)| *k == ":path");
        let path = path.map_or("", |(_, v)| *v);
        self.calls
            .push(Call::Dispatch(call.cluster.into(), path.into()));
        self.dispatched += 1;
        Some(self.dispatched)
    }
    fn arm_timer(&mut self, due_ms: u64, _: u64) {
        self.calls.push(Call::Timer(due_ms));
    }
    fn write_metric(&mut self, _: u32, _: Write) {}
    fn write_field(&mut self, _: &'static str, _: Value<'_>) {}
    fn record_health(&mut self, _: &Config, _: &Effect<'_>) -> Option<ModelId> {
        None
    }
    fn pin(&mut self, _: &str, _: u64, _: u64, _: &str, _: PinClock) {}
    fn answer_status(&mut self) -> u16 {
        self.status
    }
    fn answer_code_details(&mut self) -> Option<String> {
        Some("via_upstream".into())
    }
    fn answer_headers(&mut self) -> Headers {
        Headers::default()
    }
    fn answer_body(&mut self) -> Chunk {
        Chunk::new(self.answer.clone())
    }
    fn set_response_header(&mut self, name: &str, value: &str) {
        self.calls.push(Call::SetAnswer(name.into(), value.into()));
    }
    fn remove_response_header(&mut self, name: &str) {
        self.calls.push(Call::RemoveAnswer(name.into()));
    }
    fn replace_answer_body(&mut self, _: Vec<u8>) {}
}

const CONFIG: &str = r#"{
  "models": [
    {"name": "a", "cluster": "ca", "model": "a-up", "authority": "a.example",
     "headers": {"authorization": "Bearer gateway-a"}},
    {"name": "b", "cluster": "cb", "model": "b-up", "authority": "b.example"},
    {"name": "judge", "cluster": "cj", "model": "judge-up"}],
  "virtual_models": [
    {"name": "vm", "model_types": ["chat"], "routing_config": {
      "type": "priority-based-routing", "load_balance_targets": [
        {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}},
    {"name": "auto", "model_types": ["chat"], "routing_config": {
      "type": "complexity-based-routing", "complexity": {"classifier_model": "judge"},
      "load_balance_targets": [{"target": "a", "tier": "simple"}, {"target": "b", "tier": "complex"}]}}]
}"#;

fn config() -> Plugin {
    Plugin::new(Config::parse(CONFIG.as_bytes()).unwrap())
}

fn chat_headers(extra: &[(&str, &str)]) -> Headers {
    let mut pairs = vec![
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("authorization", "Bearer client"),
    ];
    pairs.extend_from_slice(extra);
    Headers::from_pairs(pairs)
}

fn host(body: &str) -> Fake {
    Fake {
        now: 1_000,
        body: body.as_bytes().to_vec(),
        ..Fake::default()
    }
}

const CHAT: &str = r#"{"model":"vm","messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn an_llm_request_is_held_until_its_body_then_written_for_its_target_cluster_last() {
    let c = config();
    let mut h = host(CHAT);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    assert_eq!(
        s.on_request_headers(&c, &mut h, chat_headers(&[]), false),
        Verdict::Stop
    );
    assert_eq!(s.on_request_body(&c, &mut h, 10, false), Verdict::Stop);
    assert!(
        h.calls.is_empty(),
        "nothing is written before the body is in"
    );
    assert_eq!(
        s.on_request_body(&c, &mut h, CHAT.len(), true),
        Verdict::Continue
    );
    assert!(s.forwarded());
    let body = r#"{"model":"a-up","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        h.calls,
        [
            Call::EditBody(body.into()),
            Call::Set("content-length".into(), body.len().to_string()),
            Call::Set(":authority".into(), "a.example".into()),
            Call::Set("authorization".into(), "Bearer gateway-a".into()),
            Call::Set("x-switchboard-cluster".into(), "ca".into()),
            Call::ClearRoute,
        ]
    );
}

#[test]
fn a_client_cluster_header_goes_before_anything_else_and_a_bad_body_gets_a_400() {
    let c = config();
    let mut h = host(r#"{"model": "vm", "model": "b"}"#);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    let headers = chat_headers(&[("x-switchboard-cluster", "admin")]);
    s.on_request_headers(&c, &mut h, headers, false);
    assert_eq!(
        h.calls,
        [
            Call::Remove("x-switchboard-cluster".into()),
            Call::ClearRoute
        ]
    );
    h.calls.clear();
    assert_eq!(s.on_request_body(&c, &mut h, 30, true), Verdict::Stop);
    assert!(
        matches!(&h.calls[..], [Call::Reply(400, body)] if body.contains("invalid_json")),
        "{:?}",
        h.calls
    );
    assert!(!s.forwarded());
}

#[test]
fn errors_on_the_messages_api_are_in_anthropics_shape() {
    let c = config();
    let mut h = host(r#"{"model":"nobody","max_tokens":1,"messages":[]}"#);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    let headers = Headers::from_pairs([(":method", "POST"), (":path", "/v1/messages")]);
    s.on_request_headers(&c, &mut h, headers, false);
    s.on_request_body(&c, &mut h, 40, true);
    let [Call::Reply(404, body)] = &h.calls[..] else {
        panic!("{:?}", h.calls)
    };
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("not_found_error"))
    );
}

#[test]
fn the_classifier_is_asked_first_its_tier_decides_and_the_request_resumes() {
    let c = config();
    let body = r#"{"model":"auto","messages":[{"role":"user","content":"hi"}]}"#;
    let mut h = host(body);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    s.on_request_headers(&c, &mut h, chat_headers(&[]), false);
    assert_eq!(
        s.on_request_body(&c, &mut h, body.len(), true),
        Verdict::Stop
    );
    assert_eq!(
        h.calls,
        [Call::Dispatch("cj".into(), "/v1/chat/completions".into())]
    );
    h.calls.clear();
    // The greeting is simple by the heuristic; the classifier says complex, and wins.
    let answer = CallAnswer {
        headers: Headers::from_pairs([(":status", "200")]),
        body: br#"{"choices":[{"message":{"content":"complex"}}]}"#.to_vec(),
    };
    assert!(s.on_call_done(&c, &mut h, 1, Some(answer)));
    assert!(s.forwarded());
    assert!(h
        .calls
        .contains(&Call::Set("x-switchboard-cluster".into(), "cb".into())));
    assert_eq!(h.calls.last(), Some(&Call::Resume), "resumed once written");
}

#[test]
fn a_failed_answer_is_held_and_replaced_by_the_next_targets_call_out() {
    let c = config();
    let mut h = host(CHAT);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    s.on_request_headers(&c, &mut h, chat_headers(&[]), false);
    s.on_request_body(&c, &mut h, CHAT.len(), true);
    h.calls.clear();
    h.status = 503;
    assert_eq!(s.on_response_headers(&c, &mut h, false), Verdict::Stop);
    h.answer = br#"{"error":{"message":"down"}}"#.to_vec();
    assert_eq!(s.on_response_body(&c, &mut h, true), Verdict::Stop);
    assert_eq!(
        h.calls,
        [Call::Dispatch("cb".into(), "/v1/chat/completions".into())]
    );
    h.calls.clear();
    let answer = CallAnswer {
        headers: Headers::from_pairs([(":status", "200"), ("content-type", "application/json")]),
        body: br#"{"choices":[]}"#.to_vec(),
    };
    assert!(s.on_call_done(&c, &mut h, 1, Some(answer)));
    assert!(
        matches!(&h.calls[..], [Call::Reply(200, body)] if body == r#"{"choices":[]}"#),
        "{:?}",
        h.calls
    );
    // A late answer to a call the stream no longer waits for is not its.
    assert!(!s.on_call_done(&c, &mut h, 1, None));
}

#[test]
fn a_good_answer_goes_on_with_the_resolved_model_header() {
    let c = config();
    let mut h = host(CHAT);
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    s.on_request_headers(&c, &mut h, chat_headers(&[]), false);
    s.on_request_body(&c, &mut h, CHAT.len(), true);
    h.calls.clear();
    h.status = 200;
    assert_eq!(s.on_response_headers(&c, &mut h, false), Verdict::Continue);
    assert!(h.calls.contains(&Call::SetAnswer(
        "x-switchboard-resolved-model".into(),
        "a".into()
    )));
    assert_eq!(s.on_response_body(&c, &mut h, true), Verdict::Continue);
    assert!(s.on_destroyed().is_some());
}

#[test]
fn a_request_that_is_not_for_switchboard_passes_untouched() {
    let c = config();
    let mut h = host("");
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    let headers = Headers::from_pairs([(":method", "GET"), (":path", "/healthz")]);
    assert_eq!(
        s.on_request_headers(&c, &mut h, headers, true),
        Verdict::Continue
    );
    assert_eq!(s.on_response_headers(&c, &mut h, true), Verdict::Continue);
    assert!(h.calls.is_empty());
    assert!(s.on_destroyed().is_none());
    // A client's cluster header goes from a request let through too.
    let mut s = Stream::new(fastrand::Rng::with_seed(1));
    let headers = Headers::from_pairs([
        (":method", "GET"),
        (":path", "/healthz"),
        ("x-switchboard-cluster", "admin"),
    ]);
    assert_eq!(
        s.on_request_headers(&c, &mut h, headers, true),
        Verdict::Continue
    );
    assert_eq!(
        h.calls,
        [
            Call::Remove("x-switchboard-cluster".into()),
            Call::ClearRoute
        ]
    );
}
