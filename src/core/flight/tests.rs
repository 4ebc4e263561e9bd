//! The machine driven event by event with a fake clock: each effect it asks for, in order.

use super::*;
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::health::record::Outcome;
use crate::core::request::inspect;

const TWO: &str = r#"{"models": [
    {"name": "one", "cluster": "c1", "model": "one-up", "authority": "one.example"},
    {"name": "two", "cluster": "c2", "model": "two-up", "authority": "two.example"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
    "type": "weight-based-routing", "load_balance_targets": [
      {"target": "one", "weight": 100}, {"target": "two", "weight": 0}]}}]}"#;

const BODY: &[u8] = br#"{"model":"vm","messages":[{"role":"user","content":"hi"}]}"#;

/// Host facts with a fixed clock; counts what the machine read.
#[derive(Default)]
struct Fake {
    now: u64,
    details: Option<&'static str>,
    headers: Vec<(&'static str, &'static str)>,
    chunk: Vec<u8>,
    /// The answer ends with its headers.
    ends: bool,
    reads: u32,
}

impl AnswerFacts for Fake {
    fn now_ms(&mut self) -> u64 {
        self.reads += 1;
        self.now
    }
    fn code_details(&mut self) -> Option<String> {
        self.reads += 1;
        self.details.map(str::to_string)
    }
    fn headers(&mut self) -> Headers {
        self.reads += 1;
        Headers::from_pairs(self.headers.iter().copied())
    }
    fn chunk(&mut self) -> Chunk {
        self.reads += 1;
        Chunk::new(std::mem::take(&mut self.chunk))
    }
    fn ends_with_headers(&mut self) -> bool {
        self.reads += 1;
        self.ends
    }
}

fn at(now: u64) -> Fake {
    Fake {
        now,
        ..Fake::default()
    }
}

fn config(json: &str) -> Config {
    Config::parse(json.as_bytes()).unwrap()
}

/// A chat request to virtual model 0 over `candidates`, started at t=1000, and the timer its
/// start armed, if any.
fn start_timed(
    config: &Config,
    candidates: &[usize],
    edit: impl FnOnce(&mut Start),
) -> (Machine, Option<(u64, u64)>) {
    let mut start = Start {
        virtual_model: Some(0),
        candidates: candidates.iter().map(|i| ModelId(*i)).collect(),
        pinned: false,
        stream: false,
        sticky: None,
        mint_ids: false,
        anthropic_errors: false,
        conversation: false,
        caller: None,
        dialect: None,
        streams_attempts: false,
        router_path: false,
        include_usage: false,
        evicted_for_ms: None,
    };
    edit(&mut start);
    let replay = Replay {
        endpoint: Endpoint::ChatCompletions,
        body: BODY.to_vec(),
        layout: inspect(BODY).unwrap().layout(false),
        headers: Headers::from_pairs([
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            (":authority", "gateway"),
            ("authorization", "Bearer sk-client"),
        ]),
        stored_path: None,
    };
    let mut fx = Effects::new();
    let m = Machine::start(config, start, replay, 1000, &mut fx);
    let effects = list(fx);
    assert!(
        matches!(
            effects.as_slice(),
            [
                Effect::Attempt(Attempt {
                    kind: AttemptKind::First,
                    number: 1,
                    call: None,
                    ..
                }),
                ..
            ]
        ),
        "{effects:?}"
    );
    let timer = effects.iter().find_map(|e| match e {
        Effect::ArmTimer { due_ms, token } => Some((*due_ms, *token)),
        _ => None,
    });
    (m, timer)
}

fn start_with(config: &Config, candidates: &[usize], edit: impl FnOnce(&mut Start)) -> Machine {
    start_timed(config, candidates, edit).0
}

/// The one timer among `effects`: (due, token).
fn the_timer(effects: &[Effect<'_>]) -> (u64, u64) {
    let timers: Vec<(u64, u64)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArmTimer { due_ms, token } => Some((*due_ms, *token)),
            _ => None,
        })
        .collect();
    assert_eq!(timers.len(), 1, "{effects:?}");
    timers[0]
}

fn start(config: &Config) -> Machine {
    start_with(config, &[0, 1], |_| {})
}

fn list(mut fx: Effects<'_>) -> Vec<Effect<'_>> {
    fx.take().collect()
}

/// The call of the single attempt among `effects`.
fn the_call<'a, 'c>(effects: &'a [Effect<'c>]) -> &'a Call<'c> {
    let calls: Vec<&Call> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Attempt(Attempt { call: Some(c), .. }) => Some(&**c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{effects:?}");
    calls[0]
}

fn kinds(effects: &[Effect<'_>]) -> Vec<(usize, AttemptKind)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Attempt(a) => Some((a.target.0, a.kind)),
            _ => None,
        })
        .collect()
}

fn answer(status: &str, body: &str) -> CallAnswer {
    CallAnswer {
        headers: Headers::from_pairs([
            (":status", status),
            ("content-type", "application/json"),
            ("content-length", "999"),
            ("x-provider", "p"),
        ]),
        body: body.as_bytes().to_vec(),
    }
}

/// Fails the router's attempt with `status`; returns the effects (the fallback's call).
fn fail_router<'c>(m: &mut Machine, config: &'c Config, status: u16) -> Vec<Effect<'c>> {
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.details = Some("via_upstream");
    assert_eq!(
        m.on_answer_headers(config, status, &mut facts, &mut fx),
        Flow::Hold
    );
    list(fx)
}

#[test]
fn a_plain_2xx_answer_is_delivered_without_reading_the_host_or_allocating() {
    let config = config(TWO);
    let mut m = start(&config);
    let mut fx = Effects::new();
    let mut facts = at(1200);
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut facts, &mut fx),
        Flow::Continue
    );
    assert_eq!(
        facts.reads, 0,
        "no clock, code details or headers for a 2xx"
    );
    assert!(!fx.spilled());
    let effects = list(fx);
    assert_eq!(
        effects,
        [
            Effect::Record {
                target: ModelId(0),
                outcome: AttemptOutcome::Status(200),
                health: Some(Outcome::Success),
            },
            Effect::Deliver(Delivery {
                ending: Ending {
                    target: Some(ModelId(0)),
                    status: 200,
                    attempts: 1,
                    gave_up: false,
                },
                headers: AnswerHeaders {
                    resolved_model: Some(("x-switchboard-resolved-model", "one")),
                    attempts: None,
                    retry_after: None,
                },
                drop_content_length: false,
                hidden: &[],
            }),
        ]
    );
    // The body streams past untouched: not even read.
    let mut fx = Effects::new();
    let mut facts = at(1300);
    assert_eq!(
        m.on_answer_body(&config, true, &mut facts, &mut fx),
        Flow::Continue
    );
    assert_eq!((facts.reads, fx.len()), (0, 0));
    assert!(
        !m.may_try_again(),
        "the client's body is freed once an answer is delivered"
    );
}

#[test]
fn a_failed_answer_is_held_while_the_fallback_replaces_it() {
    let config = config(TWO);
    let mut m = start(&config);
    let effects = fail_router(&mut m, &config, 503);
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::Status(503)))]
    );
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(0),
            health: Some(Outcome::Failure { hint_ms: None, .. }),
            ..
        }
    ));
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_body(&config, true, &mut at(1100), &mut fx),
        Flow::Hold
    );
    assert_eq!(m.on_answer_trailers(&config, &mut fx), Flow::Hold);
    m.on_dispatched(call, &mut fx);
    assert!(fx.is_empty(), "no fallback_timeout_ms: no timer");
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1500, &mut fx);
    let effects = list(fx);
    let Some(Effect::Reply(reply)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(
        reply.ending,
        Ending {
            target: Some(ModelId(1)),
            status: 200,
            attempts: 2,
            gave_up: false
        }
    );
    assert_eq!(
        reply.headers(),
        [
            ("content-type", "application/json"),
            ("x-provider", "p"),
            ("x-switchboard-resolved-model", "two"),
            ("x-switchboard-attempts", "2"),
        ],
        "the call's headers without its framing, then Switchboard's"
    );
    let s = m.summary();
    assert_eq!(
        (s.attempts, s.ending.and_then(|e| e.target)),
        (2, Some(ModelId(1)))
    );
    assert_eq!(
        s.last_switch,
        Some(AttemptKind::Fallback(AttemptOutcome::Status(503)))
    );
}

#[test]
fn the_fallback_call_goes_with_the_targets_own_host_path_model_and_credentials_rules() {
    let config = config(TWO);
    let mut m = start(&config);
    let effects = fail_router(&mut m, &config, 500);
    let request = m
        .call_request(the_call(&effects), &config.header_names)
        .unwrap();
    assert_eq!(request.cluster, "c2");
    let body = String::from_utf8(request.body.to_vec()).unwrap();
    assert_eq!(body, BODY_FOR_TWO);
    let header = |n: &str| {
        request
            .headers
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| *v)
    };
    assert_eq!(header(":authority"), Some("two.example"));
    assert_eq!(header(":path"), Some("/v1/chat/completions"));
    assert_eq!(
        header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(header("authorization"), Some("Bearer sk-client"));
    assert_eq!(request.timeout_ms, config.attempt_timeout_ms);
}

const BODY_FOR_TWO: &str = r#"{"model":"two-up","messages":[{"role":"user","content":"hi"}]}"#;

/// `json` ([`TWO`] or a variant) with a third target, "three" on cluster c3.
fn three(json: &str) -> String {
    json.replace(
        r#"{"target": "two", "weight": 0}"#,
        r#"{"target": "two", "weight": 0}, {"target": "three", "weight": 0}"#,
    )
    .replace(
        r#""authority": "two.example"}"#,
        r#""authority": "two.example"}, {"name": "three", "cluster": "c3", "model": "three-up"}"#,
    )
}

/// `fallback_timeout_ms` of 500 on [`TWO`].
fn with_fallback_timeout() -> Config {
    config(&TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_timeout_ms": 500,"#,
    ))
}

#[test]
fn a_timer_whose_token_went_stale_does_nothing() {
    let config = with_fallback_timeout();
    // Streamed: the answer's start ends its time (see tests/zuplo.rs for a whole answer).
    let (mut m, timer) = start_timed(&config, &[0, 1], |s| s.stream = true);
    let Some((1500, token)) = timer else {
        panic!("the router's attempt is timed: {timer:?}")
    };
    // The answer started before the timeout: the armed timer must no longer fire.
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 200, &mut at(1200), &mut fx);
    let mut fx = Effects::new();
    m.on_timer(&config, token, 1500, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
    assert_eq!(m.summary().attempts, 1);
}

#[test]
fn the_router_attempts_stale_timer_does_not_cut_the_fallback_call_short() {
    let config = config(&three(&TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_timeout_ms": 500,"#,
    )));
    let (mut m, timer) = start_timed(&config, &[0, 1, 2], |_| {});
    let (due, stale) = timer.unwrap();
    assert_eq!(due, 1500);
    // The router's attempt fails at 1100: the fallback call gets its own 500 ms, to 1600.
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_dispatched(call, &mut fx);
    let (due, token) = the_timer(&list(fx));
    assert_eq!(due, 1600);
    assert_ne!(token, stale);
    let mut fx = Effects::new();
    m.on_timer(&config, stale, 1500, &mut fx);
    assert!(fx.is_empty(), "the router's timer is stale: {:?}", list(fx));
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1550, &mut fx);
    assert!(matches!(list(fx).last(), Some(Effect::Reply(r)) if r.ending.status == 200));
}

/// Starts a streamed request on [`with_fallback_timeout`], lets the router's attempt time out
/// at 1500 and returns the machine, the fallback's call id and the token of the call's own
/// timeout.
fn abandon_router(config: &Config) -> (Machine, CallId, u64) {
    let (mut m, timer) = start_timed(config, &[0, 1], |s| s.stream = true);
    let (_, token) = timer.unwrap();
    let mut fx = Effects::new();
    m.on_timer(config, token, 1500, &mut fx);
    let effects = list(fx);
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(0),
            outcome: AttemptOutcome::FallbackTimeout,
            ..
        }
    ));
    assert_eq!(
        kinds(&effects),
        [(1, AttemptKind::Fallback(AttemptOutcome::FallbackTimeout))]
    );
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_dispatched(call, &mut fx);
    let (due, token) = the_timer(&list(fx));
    assert_eq!(due, 2000, "the call is timed too");
    (m, call, token)
}

#[test]
fn a_late_2xx_from_the_abandoned_router_attempt_is_delivered_and_the_call_ignored() {
    let config = with_fallback_timeout();
    let (mut m, call, token) = abandon_router(&config);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut at(1700), &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(d.ending.target, Some(ModelId(0)));
    assert_eq!(
        d.headers.resolved_model,
        Some(("x-switchboard-resolved-model", "one"))
    );
    assert_eq!(
        d.headers.attempts,
        Some(("x-switchboard-attempts", "2".to_string()))
    );
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1800, &mut fx);
    m.on_timer(&config, token, 2000, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
}

#[test]
fn a_late_failure_from_the_abandoned_router_attempt_is_kept_from_the_client() {
    let config = with_fallback_timeout();
    let (mut m, call, _) = abandon_router(&config);
    let mut fx = Effects::new();
    let mut facts = at(1700);
    assert_eq!(
        m.on_answer_headers(&config, 500, &mut facts, &mut fx),
        Flow::Hold
    );
    assert!(
        fx.is_empty(),
        "already counted as a timeout: {:?}",
        list(fx)
    );
    assert_eq!(
        m.on_answer_body(&config, true, &mut facts, &mut fx),
        Flow::Hold
    );
    assert_eq!(m.on_answer_trailers(&config, &mut fx), Flow::Hold);
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1800, &mut fx);
    assert!(
        matches!(list(fx).last(), Some(Effect::Reply(r)) if r.ending.target == Some(ModelId(1)))
    );
}

#[test]
fn a_fallback_timeout_with_nowhere_left_keeps_waiting_for_the_attempt() {
    let config = with_fallback_timeout();
    let (mut m, call, token) = abandon_router(&config);
    let mut fx = Effects::new();
    m.on_timer(&config, token, 2000, &mut fx);
    assert!(fx.is_empty(), "{:?}", list(fx));
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 2600, &mut fx);
    assert!(matches!(list(fx).last(), Some(Effect::Reply(_))));
}

#[test]
fn a_refused_dispatch_counts_as_a_connection_failure_and_moves_on() {
    let config = config(&three(TWO));
    let mut m = start_with(&config, &[0, 1, 2], |_| {});
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_dispatch_refused(&config, call, 1100, &mut fx);
    let effects = list(fx);
    assert_eq!(
        effects[0],
        Effect::Record {
            target: ModelId(1),
            outcome: AttemptOutcome::ConnectFailure,
            health: Some(Outcome::FAILED),
        }
    );
    assert_eq!(
        kinds(&effects),
        [(2, AttemptKind::Fallback(AttemptOutcome::ConnectFailure))]
    );
    let last = the_call(&effects).id;
    assert_ne!(last, call);
    // Refused again, with nothing left: Switchboard's own 503.
    let mut fx = Effects::new();
    m.on_dispatch_refused(&config, last, 1100, &mut fx);
    let effects = list(fx);
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(f.error.status, 503);
    assert!(
        f.error.body.contains("no_target_available"),
        "{}",
        f.error.body
    );
    assert!(
        f.error.body.contains("No target of `three`"),
        "{}",
        f.error.body
    );
    assert_eq!(
        f.headers(),
        [
            ("content-type", "application/json"),
            ("x-switchboard-attempts", "3")
        ]
    );
    assert_eq!(
        f.ending,
        Ending {
            target: None,
            status: 503,
            attempts: 3,
            gave_up: true
        }
    );
    // A stale refusal changes nothing.
    let mut fx = Effects::new();
    m.on_dispatch_refused(&config, call, 1100, &mut fx);
    assert!(fx.is_empty());
}

#[test]
fn a_pinned_conversations_origin_that_is_down_gets_a_409_not_a_fallback() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], |s| {
        s.pinned = true;
        s.conversation = true;
    });
    let effects = fail_router(&mut m, &config, 503);
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(f.error.status, 409);
    assert!(
        f.error.body.contains("conversation_origin_unavailable"),
        "{}",
        f.error.body
    );
    assert!(f.error.body.contains("`one`"), "{}", f.error.body);
    assert!(kinds(&effects).is_empty(), "no fallback for a conversation");
    // A client error from the origin is its own answer, not an outage.
    let mut m = start_with(&config, &[0, 1], |s| {
        s.pinned = true;
        s.conversation = true;
    });
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 400, &mut at(1100), &mut fx),
        Flow::Continue
    );
    assert!(matches!(list(fx).last(), Some(Effect::Deliver(_))));
}

#[test]
fn errors_switchboard_makes_for_the_messages_api_are_in_anthropics_shape() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], |s| s.anthropic_errors = true);
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, None, 1200, &mut fx);
    let effects = list(fx);
    let Some(Effect::Fail(f)) = effects.last() else {
        panic!("{effects:?}")
    };
    let body: serde_json::Value = serde_json::from_str(&f.error.body).unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
}

#[test]
fn a_retry_waits_its_delay_then_calls_the_same_target_again() {
    let config = config(&TWO.replace(
        r#"{"target": "one", "weight": 100}"#,
        r#"{"target": "one", "weight": 100, "retry_config": {"attempts": 1, "delay": 150}}"#,
    ));
    let mut m = start(&config);
    let effects = fail_router(&mut m, &config, 503);
    assert!(
        kinds(&effects).is_empty(),
        "nothing is dispatched before the delay"
    );
    let (due, token) = the_timer(&effects);
    assert_eq!(due, 1250);
    let mut fx = Effects::new();
    m.on_timer(&config, token, 1250, &mut fx);
    let effects = list(fx);
    assert_eq!(
        kinds(&effects),
        [(0, AttemptKind::Retry(AttemptOutcome::Status(503)))]
    );
    let request = m
        .call_request(the_call(&effects), &config.header_names)
        .unwrap();
    assert_eq!(request.cluster, "c1");
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1400, &mut fx);
    let Some(Effect::Reply(r)) = list(fx).pop() else {
        panic!()
    };
    assert_eq!(
        r.ending,
        Ending {
            target: Some(ModelId(0)),
            status: 200,
            attempts: 2,
            gave_up: false
        }
    );
}

#[test]
fn giving_up_passes_the_last_upstream_error_through_with_the_attempts_header() {
    let config = config(TWO);
    let mut m = start(&config);
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    let body = r#"{"error":{"message":"injected failure from two"}}"#;
    m.on_call_answer(&config, call, Some(answer("502", body)), 1300, &mut fx);
    let effects = list(fx);
    assert!(matches!(
        effects[0],
        Effect::Record {
            target: ModelId(1),
            outcome: AttemptOutcome::Status(502),
            ..
        }
    ));
    let Some(Effect::Reply(r)) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(
        r.ending,
        Ending {
            target: Some(ModelId(1)),
            status: 502,
            attempts: 2,
            gave_up: true
        }
    );
    assert_eq!(r.body, body.as_bytes());
    assert!(r.headers().contains(&("x-provider", "p")));
    assert!(r.headers().contains(&("x-switchboard-attempts", "2")));
    // Through the router with nothing to fall back to: delivered, with the count.
    let config = self::config(&TWO.replace(r#", {"target": "two", "weight": 0}"#, ""));
    let mut m = start_with(&config, &[0], |_| {});
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 503, &mut at(1100), &mut fx),
        Flow::Continue
    );
    let Some(Effect::Deliver(d)) = list(fx).pop() else {
        panic!()
    };
    assert_eq!(
        d.headers.attempts,
        Some(("x-switchboard-attempts", "1".to_string()))
    );
    assert!(d.ending.gave_up);
}

#[test]
fn envoys_own_503_for_an_unreachable_target_names_no_target_that_answered() {
    let config = config(&TWO.replace(r#", {"target": "two", "weight": 0}"#, ""));
    let mut m = start_with(&config, &[0], |_| {});
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.details = Some("upstream_reset_before_response_started{connection_failure}");
    assert_eq!(
        m.on_answer_headers(&config, 503, &mut facts, &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    assert!(matches!(
        effects[0],
        Effect::Record {
            outcome: AttemptOutcome::ConnectFailure,
            ..
        }
    ));
    let Some(Effect::Deliver(d)) = effects.last() else {
        panic!()
    };
    assert_eq!((d.ending.target, d.headers.resolved_model), (None, None));
}

#[test]
fn when_every_target_was_evicted_a_final_503_without_its_own_retry_after_carries_the_time_left() {
    let config = config(TWO);
    let delivered = |status: u16, headers: Vec<(&'static str, &'static str)>| {
        let mut m = start_with(&config, &[0], |s| s.evicted_for_ms = Some(2_500));
        let mut fx = Effects::new();
        let mut facts = at(1100);
        facts.headers = headers;
        m.on_answer_headers(&config, status, &mut facts, &mut fx);
        list(fx).into_iter().find_map(|e| match e {
            Effect::Deliver(d) => Some(d.headers.retry_after),
            _ => None,
        })
    };
    // 2.5 s left, rounded up to whole seconds.
    assert_eq!(delivered(503, vec![]), Some(Some("3".to_string())));
    assert_eq!(
        delivered(503, vec![("retry-after", "30")]),
        Some(None),
        "the provider's own"
    );
    assert_eq!(delivered(200, vec![]), Some(None), "only a 429 or 503");
    // Not every target evicted: nothing added.
    let mut m = start_with(&config, &[0], |_| {});
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 503, &mut at(1100), &mut fx);
    let headers = list(fx).into_iter().find_map(|e| match e {
        Effect::Deliver(d) => Some(d.headers.retry_after),
        _ => None,
    });
    assert_eq!(headers, Some(None));
}

#[test]
fn a_429s_retry_after_is_read_only_for_a_429() {
    let config = config(TWO);
    let mut m = start(&config);
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.headers = vec![("retry-after", "2")];
    m.on_answer_headers(&config, 429, &mut facts, &mut fx);
    assert!(
        fx.is_empty(),
        "held until its body tells a quota from a rate limit"
    );
    m.on_answer_body(&config, true, &mut facts, &mut fx);
    assert!(matches!(
        list(fx)[0],
        Effect::Record {
            health: Some(Outcome::Failure {
                hint_ms: Some(2000),
                ..
            }),
            ..
        }
    ));
    let mut m = start(&config);
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.headers = vec![("retry-after", "2")];
    m.on_answer_headers(&config, 503, &mut facts, &mut fx);
    assert!(matches!(
        list(fx)[0],
        Effect::Record {
            health: Some(Outcome::Failure { hint_ms: None, .. }),
            ..
        }
    ));
}

#[test]
fn a_status_that_is_neither_success_nor_failure_records_nothing_in_health() {
    let config = config(TWO);
    let mut m = start(&config);
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 422, &mut at(1100), &mut fx);
    assert!(matches!(
        list(fx)[0],
        Effect::Record {
            outcome: AttemptOutcome::Status(422),
            health: None,
            ..
        }
    ));
}

const PRIORITY: &str = r#"{"models": [
    {"name": "one", "cluster": "c1", "model": "one-up"},
    {"name": "two", "cluster": "c2", "model": "two-up"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
    "type": "priority-based-routing", "load_balance_targets": [
      {"target": "one", "priority": 0}, {"target": "two", "priority": 1}]}}]}"#;

#[test]
fn a_streamed_answer_gives_time_to_first_token_and_per_token_samples_at_its_end() {
    let config = config(PRIORITY);
    let mut m = start_with(&config, &[0, 1], |s| s.stream = true);
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 200, &mut at(1050), &mut fx);
    let chunk = |now, text: &str| Fake {
        now,
        chunk: text.as_bytes().to_vec(),
        ..Fake::default()
    };
    let mut fx = Effects::new();
    m.on_answer_body(
        &config,
        false,
        &mut chunk(1060, r#"data: {"delta":{"role":"assistant","content":""}}"#),
        &mut fx,
    );
    m.on_answer_body(
        &config,
        false,
        &mut chunk(1300, r#"data: {"delta":{"content":"tok1 "}}"#),
        &mut fx,
    );
    m.on_answer_body(
        &config,
        false,
        &mut chunk(1400, r#"data: {"delta":{"content":"tok2 "}}"#),
        &mut fx,
    );
    assert!(fx.is_empty());
    m.on_answer_body(&config, true, &mut chunk(1500, "data: [DONE]"), &mut fx);
    let effects = list(fx);
    let [Effect::Samples {
        target,
        sample,
        now_ms,
        tokens,
        for_routing: true,
    }] = effects.as_slice()
    else {
        panic!("{effects:?}")
    };
    assert_eq!((*target, *now_ms), (ModelId(0), 1500));
    assert_eq!(
        sample.ttft_ms,
        Some(300),
        "to the first content, not the role-only chunk"
    );
    assert_eq!(sample.tpot_us, Some(250_000), "500 ms over 2 tokens");
    assert_eq!(*tokens, Tokens::default(), "no usage reported");
}

#[test]
fn every_successful_answer_reports_its_usage_for_the_metrics_but_feeds_health_only_when_routing_uses_it(
) {
    // Weighted routing uses no latency: the samples go to the metrics only, when the config
    // asks for them (without `usage_metrics` the body is not read: see the plain 2xx test).
    let config = config(
        r#"{"models": [{"name": "one", "cluster": "c1", "model": "one-up"}], "usage_metrics": true,
          "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "one", "weight": 100}]}}]}"#,
    );
    let mut m = start_with(&config, &[0], |_| {});
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 200, &mut at(1050), &mut fx);
    let mut fx = Effects::new();
    let body = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}}"#;
    let mut end = Fake {
        now: 1100,
        chunk: body.as_bytes().to_vec(),
        ..Fake::default()
    };
    m.on_answer_body(&config, true, &mut end, &mut fx);
    let effects = list(fx);
    let [Effect::Samples {
        target: ModelId(0),
        sample,
        tokens,
        for_routing: false,
        ..
    }] = effects.as_slice()
    else {
        panic!("{effects:?}")
    };
    let reported = Tokens {
        prompt: Some(12),
        completion: Some(5),
    };
    assert_eq!(*tokens, reported);
    assert_eq!(sample.tpot_us, Some(20_000), "100 ms over 5 tokens");
    assert_eq!(sample.ttft_ms, None, "not streamed");
}

#[test]
fn a_fallbacks_whole_answer_gives_a_per_token_sample_from_its_usage() {
    let config = config(PRIORITY);
    let mut m = start(&config);
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_call_answer(
        &config,
        call,
        Some(answer("200", r#"{"usage":{"completion_tokens":4}}"#)),
        1500,
        &mut fx,
    );
    let effects = list(fx);
    assert!(effects.iter().any(|e| matches!(e,
        Effect::Samples { target: ModelId(1), sample, .. } if sample.ttft_ms.is_none() && sample.tpot_us == Some(100_000))),
        "400 ms from the call's dispatch over 4 tokens: {effects:?}");
}

#[test]
fn a_sticky_session_is_pinned_where_a_fallback_answered() {
    let config = config(TWO);
    let session = crate::core::routing::sticky::Session {
        hash: 42,
        window: 7,
        home: None,
    };
    let mut m = start_with(&config, &[0, 1], |s| s.sticky = Some(session));
    let call = the_call(&fail_router(&mut m, &config, 500)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1300, &mut fx);
    let effects = list(fx);
    assert!(
        effects.contains(&Effect::Pin {
            virtual_model: "vm",
            session: 42,
            window: 7,
            target: "two",
            idle_ms: None,
        }),
        "{effects:?}"
    );
    // Not when the fallback failed too.
    let mut m = start_with(&config, &[0, 1], |s| s.sticky = Some(session));
    let call = the_call(&fail_router(&mut m, &config, 500)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("500", "{}")), 1300, &mut fx);
    assert!(!list(fx).iter().any(|e| matches!(e, Effect::Pin { .. })));
}

#[test]
fn a_session_health_sent_away_from_its_home_moves_once_and_one_at_home_does_not() {
    let config = config(TWO);
    // Home is `two` (health put `one` first): the answer from `one` pins the session there.
    let moved = crate::core::routing::sticky::Session {
        hash: 42,
        window: 7,
        home: Some(ModelId(1)),
    };
    let pins = |session| {
        let mut m = start_with(&config, &[0, 1], |s| s.sticky = Some(session));
        let mut fx = Effects::new();
        m.on_answer_headers(&config, 200, &mut at(1200), &mut fx);
        list(fx)
            .into_iter()
            .filter_map(|e| match e {
                Effect::Pin { target, .. } => Some(target),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(pins(moved), ["one"]);
    // At home: no pin, no write.
    let home = crate::core::routing::sticky::Session {
        home: Some(ModelId(0)),
        ..moved
    };
    assert!(pins(home).is_empty());
}

#[test]
fn a_stream_that_went_away_ignores_late_answers_and_timers() {
    let config = with_fallback_timeout();
    let (mut m, call, token) = abandon_router(&config);
    let summary = m.on_destroyed();
    assert_eq!((summary.attempts, summary.ending), (2, None));
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", "{}")), 1800, &mut fx);
    m.on_timer(&config, token, 2000, &mut fx);
    assert!(fx.is_empty());
}

const RESPONSES: &str = r#"{"models": [{"name": "one", "cluster": "c1", "model": "one-up"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat", "responses"], "routing_config": {
    "type": "weight-based-routing", "load_balance_targets": [{"target": "one", "weight": 100}]}}]}"#;

#[test]
fn a_responses_answer_gets_minted_ids_as_it_streams_and_loses_its_content_length() {
    let config = config(RESPONSES);
    let mut m = start_with(&config, &[0], |s| s.mint_ids = true);
    let mut fx = Effects::new();
    m.on_answer_headers(&config, 200, &mut at(1100), &mut fx);
    let Some(Effect::Deliver(d)) = list(fx).pop() else {
        panic!()
    };
    assert!(d.drop_content_length);
    let body = br#"{"id":"resp_abc123","object":"response"}"#;
    let mut facts = Fake {
        chunk: body.to_vec(),
        ..at(1200)
    };
    let mut fx = Effects::new();
    m.on_answer_body(&config, true, &mut facts, &mut fx);
    let effects = list(fx);
    let [Effect::ReplaceBody { len, with }] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert_eq!(*len, body.len());
    let text = String::from_utf8(with.clone()).unwrap();
    assert!(text.contains(crate::core::responses::id::PREFIX), "{text}");
    assert!(!text.contains("resp_abc123"), "{text}");
}

#[test]
fn effects_past_the_inline_room_keep_their_order() {
    let mut fx = Effects::new();
    for token in 0..7 {
        fx.push(Effect::ArmTimer {
            due_ms: token,
            token,
        });
    }
    assert!(fx.spilled());
    assert_eq!(fx.len(), 7);
    let tokens: Vec<u64> = fx
        .take()
        .map(|e| match e {
            Effect::ArmTimer { token, .. } => token,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(tokens, [0, 1, 2, 3, 4, 5, 6]);
    assert!(fx.is_empty());
}

mod answers;
mod classes;
mod commit;
mod deadline;
mod translate;
mod zuplo;
