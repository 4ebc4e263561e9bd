//! The commit point and the honest end of a streamed answer, event by event.

use super::*;
use crate::core::fallback::StreamFault;
use crate::core::sse::Dialect;

const ROLE: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
const TOKEN: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
const ERROR: &str =
    "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"code\":\"x\"}}\n\n";
const DONE: &str = "data: [DONE]\n\n";

pub(super) fn streaming(start: &mut Start) {
    start.stream = true;
    start.dialect = Some(Dialect::ChatCompletions);
}

/// A chunk event at `now` with `chunk` as every byte held so far.
pub(super) fn body<'c>(
    m: &mut Machine,
    config: &'c Config,
    chunk: &str,
    end: bool,
) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let mut facts = at(1200);
    facts.chunk = chunk.as_bytes().to_vec();
    let flow = m.on_answer_body(config, end, &mut facts, &mut fx);
    (flow, list(fx))
}

pub(super) fn ok_headers<'c>(m: &mut Machine, config: &'c Config) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let flow = m.on_answer_headers(config, 200, &mut at(1100), &mut fx);
    (flow, list(fx))
}

pub(super) fn records(effects: &[Effect<'_>]) -> Vec<(usize, AttemptOutcome)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record {
                target, outcome, ..
            } => Some((target.0, *outcome)),
            _ => None,
        })
        .collect()
}

fn replaced(effects: &[Effect<'_>]) -> Option<String> {
    effects.iter().find_map(|e| match e {
        Effect::ReplaceBody { with, .. } => Some(String::from_utf8_lossy(with).into_owned()),
        _ => None,
    })
}

fn ends(effects: &[Effect<'_>]) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::EndAnswer { .. }))
}

#[test]
fn a_streamed_answer_is_held_until_its_first_content_event() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    let (flow, effects) = ok_headers(&mut m, &config);
    assert_eq!((flow, effects.len()), (Flow::Hold, 0), "{effects:?}");
    let (flow, effects) = body(&mut m, &config, ROLE, false);
    assert_eq!(
        (flow, effects.len()),
        (Flow::Hold, 0),
        "a role-only chunk is not content"
    );
    let (flow, effects) = body(&mut m, &config, &format!("{ROLE}{TOKEN}"), false);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(
        matches!(effects.last(), Some(Effect::Deliver(_))),
        "{effects:?}"
    );
    // Later chunks are watched but go on untouched.
    let (flow, effects) = body(&mut m, &config, TOKEN, false);
    assert_eq!((flow, effects.len()), (Flow::Continue, 0));
    let (flow, effects) = body(&mut m, &config, DONE, true);
    assert_eq!((flow, effects.len()), (Flow::Continue, 0), "{effects:?}");
}

#[test]
fn an_error_event_before_content_falls_back_like_a_failed_status() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    let (flow, effects) = body(&mut m, &config, &format!("{ROLE}{ERROR}"), false);
    assert_eq!(
        flow,
        Flow::Hold,
        "the failed stream is held, to be replaced"
    );
    let failed = AttemptOutcome::StreamFailed(StreamFault::ErrorEvent);
    assert_eq!(records(&effects), [(0, failed)]);
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(failed))]);
    // What the failed stream still sends stays held.
    assert_eq!(body(&mut m, &config, DONE, true).0, Flow::Hold);
}

#[test]
fn with_nothing_left_an_error_before_content_goes_to_the_client_as_sent() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0], streaming);
    ok_headers(&mut m, &config);
    let (flow, effects) = body(&mut m, &config, &format!("{ROLE}{ERROR}{DONE}"), true);
    assert_eq!(flow, Flow::Continue);
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::Deliver(d) if d.ending.gave_up)));
    assert_eq!(
        replaced(&effects).as_deref(),
        Some(&*format!("{ROLE}{ERROR}")),
        "no [DONE] after the error"
    );
    assert!(ends(&effects));
}

#[test]
fn a_stream_of_only_other_events_commits_at_the_stream_commit_bound() {
    let json = TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "stream_commit": {"max_events": 3},"#,
    );
    let config = config(&json);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    assert_eq!(body(&mut m, &config, &ROLE.repeat(2), false).0, Flow::Hold);
    let (flow, effects) = body(&mut m, &config, &ROLE.repeat(3), false);
    assert_eq!(flow, Flow::Continue);
    assert!(matches!(effects.last(), Some(Effect::Deliver(_))));
}

#[test]
fn a_line_that_is_not_an_event_after_content_ends_the_stream_in_the_api_shape() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    body(&mut m, &config, TOKEN, false);
    let (flow, effects) = body(
        &mut m,
        &config,
        &format!("{TOKEN}garbage\n\n{TOKEN}"),
        false,
    );
    assert_eq!(flow, Flow::Continue);
    let failed = AttemptOutcome::StreamFailed(StreamFault::Malformed);
    assert_eq!(records(&effects), [(0, failed)]);
    let with = replaced(&effects).unwrap();
    assert!(
        with.starts_with(TOKEN) && with.contains("\"code\":\"stream_malformed\""),
        "{with}"
    );
    assert!(
        !with.contains("garbage") && !with.ends_with(TOKEN),
        "{with}"
    );
    assert!(ends(&effects));
    // Whatever follows is dropped, never a second ending.
    let (_, effects) = body(&mut m, &config, DONE, true);
    assert_eq!(replaced(&effects).as_deref(), Some(""));
    assert!(records(&effects).is_empty());
}

#[test]
fn a_stream_that_ends_without_its_last_event_ends_with_an_error_event() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    let (_, effects) = body(&mut m, &config, TOKEN, true);
    let failed = AttemptOutcome::StreamFailed(StreamFault::Reset);
    assert_eq!(
        records(&effects),
        [(0, AttemptOutcome::Status(200)), (0, failed)]
    );
    assert!(replaced(&effects).unwrap().contains("stream_reset"));
}

#[test]
fn the_fallback_timeout_bounds_a_stream_until_its_first_content_only() {
    let json = TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_timeout_ms": 500,"#,
    );
    let config = config(&json);
    let (mut m, timer) = start_timed(&config, &[0, 1], streaming);
    let (due, token) = timer.unwrap();
    ok_headers(&mut m, &config);
    body(&mut m, &config, ROLE, false);
    // Still no content when the time runs out: the held stream is abandoned.
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    let timeout = AttemptOutcome::FallbackTimeout;
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(timeout))]);
    assert_eq!(
        body(&mut m, &config, TOKEN, false).0,
        Flow::Hold,
        "it no longer goes on"
    );

    // Committed in time: the timer fires for nothing.
    let (mut m, timer) = start_timed(&config, &[0, 1], streaming);
    let (due, token) = timer.unwrap();
    ok_headers(&mut m, &config);
    body(&mut m, &config, TOKEN, false);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    assert!(fx.is_empty());
}

/// A streaming request whose every attempt is a streamed call-out, started at t=1000: the
/// machine and its start's effects.
fn start_streamed(config: &Config) -> (Machine, Vec<Effect<'_>>) {
    let start = Start {
        virtual_model: Some(0),
        candidates: vec![ModelId(0), ModelId(1)],
        pinned: false,
        stream: true,
        sticky: None,
        mint_ids: false,
        anthropic_errors: false,
        conversation: false,
        caller: None,
        dialect: Some(Dialect::ChatCompletions),
        streams_attempts: true,
        router_path: false,
        include_usage: false,
        evicted_for_ms: None,
    };
    let replay = Replay {
        endpoint: Endpoint::ChatCompletions,
        body: BODY.to_vec(),
        layout: inspect(BODY).unwrap().layout(false),
        headers: Headers::from_pairs([(":method", "POST"), (":path", "/v1/chat/completions")]),
        stored_path: None,
    };
    let mut fx = Effects::new();
    let m = Machine::start(config, start, replay, 1000, &mut fx);
    (m, list(fx))
}

#[test]
fn every_streamed_attempt_is_a_call_and_a_reset_before_headers_falls_back() {
    let config = config(TWO);
    let (mut m, effects) = start_streamed(&config);
    let first = the_call(&effects).id;
    assert_eq!(kinds(&effects), [(0, AttemptKind::First)]);
    assert!(m.is_current_call(first) && m.streams_attempts());
    let mut fx = Effects::new();
    m.on_dispatched(first, &mut fx);
    let mut fx = Effects::new();
    m.on_answer_reset(&config, &mut at(1100), &mut fx);
    let effects = list(fx);
    let refused = AttemptOutcome::ConnectFailure;
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(refused))]);
    let second = the_call(&effects).id;
    assert!(
        m.is_current_call(second) && !m.is_current_call(first),
        "the first is abandoned"
    );
    // The fallback streams: its answer goes on at its first content, and the session pins.
    ok_headers(&mut m, &config);
    let (flow, effects) = body(&mut m, &config, TOKEN, false);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(records(&effects), [(1, AttemptOutcome::Status(200))]);
}

#[test]
fn a_streamed_answer_idle_past_its_timeout_ends_with_an_error_event() {
    let json = TWO.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "stream_idle_timeout_ms": 500,"#,
    );
    let config = config(&json);
    let (mut m, _) = start_streamed(&config);
    let (_, effects) = ok_headers(&mut m, &config);
    let (due, token) = the_timer(&effects);
    assert_eq!(due, 1600, "armed from the headers' arrival");
    let (flow, _) = body(&mut m, &config, TOKEN, false); // at 1200: the stream commits
    assert_eq!(flow, Flow::Continue);
    // The timer finds the stream active since: armed again from its last chunk.
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    let (due, token) = the_timer(&effects);
    assert_eq!(due, 1700);
    let mut fx = Effects::new();
    m.on_timer(&config, token, due, &mut fx);
    let effects = list(fx);
    let idle = AttemptOutcome::StreamFailed(StreamFault::Idle);
    assert_eq!(records(&effects), [(0, idle)]);
    let tail = effects.iter().find_map(|e| match e {
        Effect::EndAnswer { tail } => Some(String::from_utf8_lossy(tail).into_owned()),
        _ => None,
    });
    assert!(
        tail.is_some_and(|t| t.contains("stream_idle")),
        "{effects:?}"
    );
}

#[test]
fn a_first_content_event_split_across_chunks_commits_once_and_is_not_read_again() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    let half = TOKEN.len() / 2;
    let first = format!("{ROLE}{}", &TOKEN[..half]);
    assert_eq!(body(&mut m, &config, &first, false).0, Flow::Hold);
    let (flow, effects) = body(&mut m, &config, &format!("{ROLE}{TOKEN}"), false);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(
        replaced(&effects).is_none() && !ends(&effects),
        "{effects:?}"
    );
    let (_, effects) = body(&mut m, &config, DONE, true);
    assert!(effects.is_empty(), "{effects:?}");
}

#[test]
fn an_error_event_after_content_ends_the_stream_as_the_provider_sent_it() {
    let config = config(TWO);
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    body(&mut m, &config, TOKEN, false);
    // Past the commit point content is not read, failures still are.
    let (flow, effects) = body(&mut m, &config, &format!("{TOKEN}{ERROR}{DONE}"), false);
    assert_eq!(flow, Flow::Continue);
    let failed = AttemptOutcome::StreamFailed(StreamFault::ErrorEvent);
    assert_eq!(records(&effects), [(0, failed)]);
    assert_eq!(
        replaced(&effects).as_deref(),
        Some(&*format!("{TOKEN}{ERROR}"))
    );
    assert!(ends(&effects));
}

#[test]
fn a_stream_the_router_reset_counts_against_its_target_when_the_request_is_logged() {
    let config = config(TWO);
    let reset = AttemptOutcome::StreamFailed(StreamFault::Reset);
    let logged = |m: &mut Machine, details: &'static str| {
        let mut fx = Effects::new();
        let mut facts = at(1300);
        facts.details = Some(details);
        m.on_logged(&config, &mut facts, &mut fx);
        records(&list(fx))
    };
    // After its first content, and before it.
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    body(&mut m, &config, TOKEN, false);
    assert_eq!(
        logged(&mut m, "downstream_remote_disconnect"),
        [],
        "a client that left"
    );
    assert_eq!(
        logged(
            &mut m,
            "upstream_reset_after_response_started{remote_reset}"
        ),
        [(0, reset)]
    );
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    assert_eq!(
        logged(
            &mut m,
            "upstream_reset_after_response_started{remote_reset}"
        ),
        [(0, reset)]
    );
    // A stream that ended well is not counted again.
    let mut m = start_with(&config, &[0, 1], streaming);
    ok_headers(&mut m, &config);
    body(&mut m, &config, &format!("{TOKEN}{DONE}"), true);
    assert_eq!(
        logged(
            &mut m,
            "upstream_reset_after_response_started{remote_reset}"
        ),
        []
    );
}

#[test]
fn a_streamed_429_held_for_its_body_and_cut_is_judged_by_its_status() {
    let config = config(TWO);
    let (mut m, effects) = start_streamed(&config);
    let first = the_call(&effects).id;
    let mut fx = Effects::new();
    m.on_dispatched(first, &mut fx);
    let mut fx = Effects::new();
    assert_eq!(
        m.on_answer_headers(&config, 429, &mut at(1100), &mut fx),
        Flow::Hold
    );
    assert!(fx.is_empty(), "held until its body ends");
    m.on_answer_reset(&config, &mut at(1150), &mut fx);
    let effects = list(fx);
    let limited = AttemptOutcome::Status(429);
    assert_eq!(records(&effects), [(0, limited)]);
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(limited))]);
}
