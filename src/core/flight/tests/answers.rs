//! `fallback_on`: a 2xx answer judged whole (or a stream before its first content), then
//! delivered or replaced by the next attempt's.

use super::commit::records;
use super::*;
use crate::core::answer_faults::AnswerFault;
use crate::core::sse::Dialect;

const REFUSAL: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}"#;
const EMPTY: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}"#;
const ERROR: &str = r#"{"error":{"message":"upstream broke","type":"server_error"}}"#;
const GOOD: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;

fn judging() -> Config {
    config(&TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_on": ["content_filter", "empty", "error_body"],"#,
    ))
}

/// The router's 200 answer whose whole body is `body`: (headers' flow, body's flow, effects).
fn router_answers<'c>(
    m: &mut Machine,
    config: &'c Config,
    body: &str,
) -> (Flow, Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let head = m.on_answer_headers(config, 200, &mut at(1100), &mut fx);
    let mut facts = at(1200);
    facts.chunk = body.as_bytes().to_vec();
    let end = m.on_answer_body(config, true, &mut facts, &mut fx);
    (head, end, list(fx))
}

fn health_of(effects: &[Effect<'_>]) -> Vec<Option<Outcome>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record { health, .. } => Some(*health),
            _ => None,
        })
        .collect()
}

#[test]
fn a_refusal_in_a_200_is_held_judged_and_replaced_by_the_next_targets_answer() {
    let config = judging();
    let mut m = start(&config);
    let (head, end, effects) = router_answers(&mut m, &config, REFUSAL);
    assert_eq!((head, end), (Flow::Hold, Flow::Hold), "{effects:?}");
    let refused = AttemptOutcome::Answer(AnswerFault::ContentFilter);
    assert_eq!(records(&effects), [(0, refused)]);
    assert_eq!(
        health_of(&effects),
        [None],
        "a refusal is not the target's failure"
    );
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(refused))]);
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", GOOD)), 1500, &mut fx);
    let effects = list(fx);
    let reply = effects.iter().find_map(|e| match e {
        Effect::Reply(r) => Some(r),
        _ => None,
    });
    let reply = reply.expect("the fallback's answer replaces the refusal");
    assert_eq!(reply.body, GOOD.as_bytes());
    assert_eq!(reply.ending.target, Some(ModelId(1)));
}

#[test]
fn an_error_object_or_an_empty_answer_in_a_200_counts_against_the_target() {
    for (body, fault) in [(ERROR, AnswerFault::ErrorBody), (EMPTY, AnswerFault::Empty)] {
        let config = judging();
        let mut m = start(&config);
        let (_, end, effects) = router_answers(&mut m, &config, body);
        assert_eq!(end, Flow::Hold);
        assert_eq!(records(&effects), [(0, AttemptOutcome::Answer(fault))]);
        assert_eq!(health_of(&effects), [Some(Outcome::FAILED)]);
        assert_eq!(
            kinds(&effects),
            [(1, AttemptKind::Fallback(AttemptOutcome::Answer(fault)))]
        );
    }
}

#[test]
fn a_good_answer_held_to_be_judged_goes_on_whole_and_counts_as_a_success() {
    let config = judging();
    let mut m = start(&config);
    let (head, end, effects) = router_answers(&mut m, &config, GOOD);
    assert_eq!((head, end), (Flow::Hold, Flow::Continue));
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(
        matches!(effects.last(), Some(Effect::Deliver(_))),
        "{effects:?}"
    );
}

#[test]
fn a_call_outs_answer_is_judged_and_the_last_one_goes_to_the_client_as_it_is() {
    let config = judging();
    let mut m = start(&config);
    let effects = fail_router(&mut m, &config, 503);
    let call = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("200", EMPTY)), 1500, &mut fx);
    let effects = list(fx);
    assert_eq!(
        records(&effects),
        [(1, AttemptOutcome::Answer(AnswerFault::Empty))]
    );
    let reply = effects.iter().find_map(|e| match e {
        Effect::Reply(r) => Some(r),
        _ => None,
    });
    let reply = reply.expect("nothing left to try: the empty answer as it is");
    assert_eq!((reply.ending.status, reply.ending.gave_up), (200, true));
    assert_eq!(reply.body, EMPTY.as_bytes());
}

#[test]
fn an_answer_past_the_bound_goes_on_unjudged() {
    let config = judging();
    let mut m = start(&config);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut at(1100), &mut fx),
        Flow::Hold
    );
    let mut facts = at(1200);
    facts.chunk = vec![b' '; super::super::whole::MAX_JUDGED + 1];
    assert_eq!(
        m.on_answer_body(&config, false, &mut facts, &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(effects.iter().any(|e| matches!(e, Effect::Deliver(_))));
}

#[test]
fn without_fallback_on_a_refusal_streams_past_unread_as_before() {
    let config = config(TWO);
    let mut m = start(&config);
    let mut fx = Effects::new();
    let mut facts = at(1100);
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut facts, &mut fx),
        Flow::Continue
    );
    let mut body = at(1200);
    body.chunk = REFUSAL.as_bytes().to_vec();
    assert_eq!(
        m.on_answer_body(&config, true, &mut body, &mut fx),
        Flow::Continue
    );
    assert_eq!(
        (facts.reads, body.reads),
        (0, 0),
        "nothing held, nothing read"
    );
    assert_eq!(records(&list(fx)), [(0, AttemptOutcome::Status(200))]);
}

fn streaming(start: &mut Start) {
    start.stream = true;
    start.dialect = Some(Dialect::ChatCompletions);
}

const ROLE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
const FILTERED: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n";
const DONE: &str = "data: [DONE]\n\n";

#[test]
fn a_stream_refused_before_its_first_content_falls_back() {
    let config = judging();
    let mut m = start_with(&config, &[0, 1], streaming);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut at(1100), &mut fx),
        Flow::Hold
    );
    let mut facts = at(1200);
    facts.chunk = format!("{ROLE}{FILTERED}{DONE}").into_bytes();
    assert_eq!(
        m.on_answer_body(&config, true, &mut facts, &mut fx),
        Flow::Hold
    );
    let effects = list(fx);
    let refused = AttemptOutcome::Answer(AnswerFault::ContentFilter);
    assert_eq!(records(&effects), [(0, refused)]);
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(refused))]);
}

#[test]
fn a_refused_stream_with_nowhere_left_goes_to_the_client_as_it_is() {
    let config = judging();
    let mut m = start_with(&config, &[0], streaming);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 200, &mut at(1100), &mut fx),
        Flow::Hold
    );
    let mut facts = at(1200);
    facts.chunk = format!("{ROLE}{FILTERED}{DONE}").into_bytes();
    assert_eq!(
        m.on_answer_body(&config, true, &mut facts, &mut fx),
        Flow::Continue
    );
    let effects = list(fx);
    let refused = AttemptOutcome::Answer(AnswerFault::ContentFilter);
    assert_eq!(records(&effects), [(0, refused)]);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Deliver(_))),
        "{effects:?}"
    );
}
