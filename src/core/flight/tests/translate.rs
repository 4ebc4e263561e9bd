//! Answers of translated attempts, event by event: each reaches the client in the
//! client's API, while the commit point, the honest end and usage read the provider's events.

use super::*;
use crate::core::fallback::StreamFault;
use crate::core::sse::Dialect;
use serde_json::Value;

/// Model 0 serves Anthropic Messages only, model 1 Chat Completions only; the virtual model
/// translates both ways.
const MIXED: &str = r#"{"usage_metrics": true, "models": [
    {"name": "claude", "cluster": "c1", "model": "claude-up", "provider": "anthropic"},
    {"name": "gpt", "cluster": "c2", "model": "gpt-up", "provider": "openai"}],
  "virtual_models": [{"name": "vm", "model_types": ["chat"],
    "translate": ["chat_completions", "messages"], "routing_config": {
    "type": "weight-based-routing", "load_balance_targets": [
      {"target": "claude", "weight": 100}, {"target": "gpt", "weight": 0}]}}]}"#;

const CHAT: &str = r#"{"model":"vm","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const MESSAGES: &str =
    r#"{"model":"vm","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;

/// Anthropic Messages API, "Streaming Messages": the events before the first content, a text
/// delta, and the end.
const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-up\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n";
const DELTA: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n";
const END: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
const OVERLOADED: &str = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

/// Anthropic Messages API, "Messages": a whole answer.
const MESSAGE: &str = r#"{"id":"msg_01Xyz","type":"message","role":"assistant","model":"claude-up","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":6}}"#;
/// Anthropic Messages API, "Errors".
const INVALID: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}"#;

/// A request to `endpoint` of virtual model 0 over `candidates`, started at t=1000 with
/// `body`; and the effects of its start.
fn begin<'c>(
    config: &'c Config,
    endpoint: Endpoint,
    candidates: &[usize],
    body: &str,
    stream: bool,
) -> (Machine, Vec<Effect<'c>>) {
    let body = if stream {
        body.to_owned()
    } else {
        body.replace(r#","stream":true"#, "")
    };
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
        dialect: if stream { Dialect::of(endpoint) } else { None },
        streams_attempts: false,
        router_path: false,
        include_usage: false,
        evicted_for_ms: None,
    };
    let path = match endpoint {
        Endpoint::Messages => "/v1/messages",
        _ => "/v1/chat/completions",
    };
    let replay = Replay {
        endpoint,
        body: body.as_bytes().to_vec(),
        layout: inspect(body.as_bytes()).unwrap().layout(false),
        headers: Headers::from_pairs([(":method", "POST"), (":path", path)]),
        stored_path: None,
    };
    let mut fx = Effects::new();
    let m = Machine::start(config, start, replay, 1000, &mut fx);
    (m, list(fx))
}

fn headers<'c>(m: &mut Machine, config: &'c Config, status: u16) -> (Flow, Vec<Effect<'c>>) {
    let mut fx = Effects::new();
    let mut facts = at(1100);
    facts.details = Some("via_upstream");
    let flow = m.on_answer_headers(config, status, &mut facts, &mut fx);
    (flow, list(fx))
}

/// A body event with `chunk` as every byte in hand.
fn body<'c>(
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

/// The replacement body among `effects`, and the length it replaces.
fn replaced(effects: &[Effect<'_>]) -> Option<(usize, String)> {
    effects.iter().find_map(|e| match e {
        Effect::ReplaceBody { len, with } => {
            Some((*len, String::from_utf8_lossy(with).into_owned()))
        }
        _ => None,
    })
}

fn delivery<'a, 'c>(effects: &'a [Effect<'c>]) -> &'a Delivery<'c> {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Deliver(d) => Some(d),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no delivery: {effects:?}"))
}

fn records(effects: &[Effect<'_>]) -> Vec<(usize, AttemptOutcome)> {
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

/// The JSON of each `data:` line of a chat stream (`[DONE]` as a string).
fn chat_chunks(stream: &str) -> Vec<Value> {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.to_owned())))
        .collect()
}

/// The `event:` names of a Messages stream.
fn event_names(stream: &str) -> Vec<&str> {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn an_anthropic_stream_reaches_a_chat_client_as_chunks_its_commit_point_read_in_anthropics_events()
{
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0, 1], CHAT, true);
    assert_eq!(headers(&mut m, &config, 200).0, Flow::Hold);
    let (flow, effects) = body(&mut m, &config, START, false);
    assert_eq!(
        (flow, effects.len()),
        (Flow::Hold, 0),
        "message_start, an empty block and ping are not content"
    );
    let held = format!("{START}{DELTA}");
    let (flow, effects) = body(&mut m, &config, &held, false);
    assert_eq!(flow, Flow::Continue, "the text delta commits: {effects:?}");
    assert_eq!(records(&effects), [(0, AttemptOutcome::Status(200))]);
    assert!(delivery(&effects).drop_content_length);
    let (len, with) = replaced(&effects).expect("translated");
    assert_eq!(len, held.len(), "every byte held is replaced");
    assert!(!with.contains("event:"), "{with}");
    let chunks = chat_chunks(&with);
    assert_eq!(chunks.len(), 2, "{with}");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["id"], "chatcmpl-01Abc");
    assert_eq!(chunks[0]["model"], "claude-up");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "Hello");

    // The rest, as it arrives: the finish reason, the usage chunk asked for, [DONE].
    let (flow, effects) = body(&mut m, &config, END, true);
    assert_eq!(flow, Flow::Continue);
    let (len, with) = replaced(&effects).expect("translated");
    assert_eq!(len, END.len());
    let chunks = chat_chunks(&with);
    assert_eq!(chunks[0]["choices"][0]["finish_reason"], "stop", "{with}");
    let usage = chunks.iter().find(|c| !c["usage"].is_null()).expect(&with);
    assert_eq!(
        (
            &usage["usage"]["prompt_tokens"],
            &usage["usage"]["completion_tokens"]
        ),
        (&json("9"), &json("5"))
    );
    assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())));
    // Usage read from the provider's own events, before translation.
    let tokens = effects.iter().find_map(|e| match e {
        Effect::Samples { target, tokens, .. } => Some((target.0, *tokens)),
        _ => None,
    });
    assert_eq!(
        tokens,
        Some((
            0,
            Tokens {
                prompt: Some(9),
                completion: Some(5)
            }
        ))
    );
}

#[test]
fn an_anthropic_error_event_before_content_falls_back_to_the_next_target() {
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0, 1], CHAT, true);
    headers(&mut m, &config, 200);
    let (flow, effects) = body(&mut m, &config, &format!("{START}{OVERLOADED}"), false);
    assert_eq!(flow, Flow::Hold, "held, to be replaced: {effects:?}");
    let failed = AttemptOutcome::StreamFailed(StreamFault::ErrorEvent);
    assert_eq!(records(&effects), [(0, failed)]);
    assert_eq!(kinds(&effects), [(1, AttemptKind::Fallback(failed))]);
}

#[test]
fn a_cut_anthropic_stream_ends_with_an_error_chunk_in_the_clients_shape() {
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0], CHAT, true);
    headers(&mut m, &config, 200);
    body(&mut m, &config, &format!("{START}{DELTA}"), false);
    // The stream ends without message_stop: the honest end (an Anthropic `event: error`)
    // goes through the translation like the rest.
    let (_, effects) = body(&mut m, &config, "", true);
    let reset = AttemptOutcome::StreamFailed(StreamFault::Reset);
    assert_eq!(records(&effects), [(0, reset)]);
    let (_, with) = replaced(&effects).expect("the honest end");
    assert!(!with.contains("event:"), "{with}");
    let chunks = chat_chunks(&with);
    assert_eq!(chunks.len(), 1, "{with}");
    assert!(
        chunks[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("claude")),
        "{with}"
    );
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::EndAnswer { .. })));
}

#[test]
fn a_whole_anthropic_answer_is_held_to_its_end_and_becomes_a_chat_completion() {
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0, 1], CHAT, false);
    let (flow, effects) = headers(&mut m, &config, 200);
    assert_eq!(flow, Flow::Continue);
    let d = delivery(&effects);
    assert!(d.drop_content_length, "the length changes");
    let (half, rest) = MESSAGE.split_at(40);
    assert_eq!(body(&mut m, &config, half, false), (Flow::Hold, vec![]));
    let (flow, effects) = body(&mut m, &config, &format!("{half}{rest}"), true);
    assert_eq!(flow, Flow::Continue);
    let (len, with) = replaced(&effects).expect("translated");
    assert_eq!(len, MESSAGE.len());
    let answer = json(&with);
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["id"], "chatcmpl-01Xyz");
    assert_eq!(answer["created"], 1, "the attempt's start, in seconds");
    assert_eq!(answer["choices"][0]["message"]["content"], "Hello!");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["usage"]["prompt_tokens"], 12);
}

#[test]
fn an_anthropic_error_reaches_a_chat_client_in_openais_shape_with_its_status() {
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0], CHAT, true);
    let (flow, effects) = headers(&mut m, &config, 400);
    assert_eq!(flow, Flow::Continue);
    let d = delivery(&effects);
    assert_eq!(d.ending.status, 400);
    assert!(d.drop_content_length);
    assert_eq!(body(&mut m, &config, INVALID, false).0, Flow::Hold);
    let (_, effects) = body(&mut m, &config, INVALID, true);
    let (_, with) = replaced(&effects).expect("translated");
    let error = json(&with);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["message"], "max_tokens: field required");
    assert!(error.get("type").is_none(), "{with}");
}

#[test]
fn an_untranslated_answer_is_let_through_untouched() {
    let config = config(MIXED);
    // Model 1 serves Chat Completions itself.
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[1], CHAT, false);
    let (flow, effects) = headers(&mut m, &config, 400);
    assert_eq!(flow, Flow::Continue);
    assert!(!delivery(&effects).drop_content_length);
    assert_eq!(body(&mut m, &config, "{}", false), (Flow::Continue, vec![]));
}

/// The call-out's answer among `effects`: status and body.
fn reply_of(effects: &[Effect<'_>]) -> (u16, String, Vec<(String, String)>) {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Reply(r) => Some((
                r.ending.status,
                String::from_utf8_lossy(&r.body).into_owned(),
                r.headers()
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply: {effects:?}"))
}

#[test]
fn a_call_out_fallbacks_whole_answer_is_translated() {
    let config = config(MIXED);
    // The router's attempt goes to gpt (native), which fails; claude answers the fallback.
    for (stream, answer_body) in [
        (false, MESSAGE.to_owned()),
        (true, format!("{START}{DELTA}{END}")),
    ] {
        let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[1, 0], CHAT, stream);
        let effects = fail_router(&mut m, &config, 503);
        let call = the_call(&effects).id;
        let mut fx = Effects::new();
        m.on_call_answer(
            &config,
            call,
            Some(answer("200", &answer_body)),
            1300,
            &mut fx,
        );
        let (status, body, headers) = reply_of(&list(fx));
        assert_eq!(status, 200);
        assert!(
            headers.contains(&("content-type".into(), "application/json".into())),
            "the call's content type stays: {headers:?}"
        );
        if stream {
            let chunks = chat_chunks(&body);
            assert_eq!(
                chunks[1]["choices"][0]["delta"]["content"], "Hello",
                "{body}"
            );
            assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())));
        } else {
            let answer = json(&body);
            assert_eq!(answer["object"], "chat.completion");
            assert_eq!(answer["choices"][0]["message"]["content"], "Hello!");
        }
    }
    // Its error, in the client's shape with its status.
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[1, 0], CHAT, false);
    let call = the_call(&fail_router(&mut m, &config, 503)).id;
    let mut fx = Effects::new();
    m.on_call_answer(&config, call, Some(answer("400", INVALID)), 1300, &mut fx);
    let (status, body, _) = reply_of(&list(fx));
    assert_eq!(status, 400);
    assert_eq!(json(&body)["error"]["type"], "invalid_request_error");
}

/// OpenAI Chat Completions streaming: a role chunk, a token, the finish and [DONE].
const GPT_ROLE: &str = "data: {\"id\":\"chatcmpl-9zQ\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-up\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
const GPT_TOKEN: &str = "data: {\"id\":\"chatcmpl-9zQ\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
const GPT_END: &str = "data: {\"id\":\"chatcmpl-9zQ\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-up\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"chatcmpl-9zQ\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-up\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\ndata: [DONE]\n\n";

#[test]
fn a_chat_stream_reaches_a_messages_client_as_anthropic_events() {
    let config = config(MIXED);
    let (mut m, _) = begin(&config, Endpoint::Messages, &[1], MESSAGES, true);
    assert_eq!(headers(&mut m, &config, 200).0, Flow::Hold);
    assert_eq!(
        body(&mut m, &config, GPT_ROLE, false).0,
        Flow::Hold,
        "a role chunk is not content: read as Chat Completions"
    );
    let held = format!("{GPT_ROLE}{GPT_TOKEN}");
    let (flow, effects) = body(&mut m, &config, &held, false);
    assert_eq!(flow, Flow::Continue);
    assert!(delivery(&effects).drop_content_length);
    let (_, with) = replaced(&effects).expect("translated");
    assert_eq!(
        event_names(&with),
        [
            "message_start",
            "content_block_start",
            "content_block_delta"
        ],
        "{with}"
    );
    assert!(with.contains("\"id\":\"msg_9zQ\""), "{with}");
    let (_, effects) = body(&mut m, &config, GPT_END, true);
    let (_, with) = replaced(&effects).expect("translated");
    assert_eq!(
        event_names(&with),
        ["content_block_stop", "message_delta", "message_stop"],
        "{with}"
    );
    assert!(with.contains("\"stop_reason\":\"end_turn\""), "{with}");

    // Not streamed: the chat.completion becomes a message; an error, Anthropic's shape.
    let completion = r#"{"id":"chatcmpl-9zQ","object":"chat.completion","created":1,"model":"gpt-up","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#;
    let (mut m, _) = begin(&config, Endpoint::Messages, &[1], MESSAGES, false);
    headers(&mut m, &config, 200);
    let (_, effects) = body(&mut m, &config, completion, true);
    let message = json(&replaced(&effects).expect("translated").1);
    assert_eq!(
        (&message["type"], &message["stop_reason"]),
        (&json(r#""message""#), &json(r#""max_tokens""#))
    );
    assert_eq!(message["content"][0]["text"], "Hi");
    let (mut m, _) = begin(&config, Endpoint::Messages, &[1], MESSAGES, false);
    headers(&mut m, &config, 429);
    let limited = r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    let (_, effects) = body(&mut m, &config, limited, true);
    let error = json(&replaced(&effects).expect("translated").1);
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "rate_limit_error");
}

#[test]
fn a_streamed_call_out_or_a_router_path_answer_reads_in_its_own_targets_dialect() {
    let config = config(MIXED);
    // Every attempt a streamed call-out: gpt first (native), reset; claude's stream follows.
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[1, 0], CHAT, true);
    let mut fx = Effects::new();
    let start = Start {
        virtual_model: Some(0),
        candidates: vec![ModelId(1), ModelId(0)],
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
        body: CHAT.as_bytes().to_vec(),
        layout: inspect(CHAT.as_bytes()).unwrap().layout(false),
        headers: Headers::from_pairs([(":method", "POST"), (":path", "/v1/chat/completions")]),
        stored_path: None,
    };
    let mut streamed = Machine::start(&config, start, replay, 1000, &mut fx);
    let mut fx = Effects::new();
    streamed.on_answer_reset(&config, &mut at(1100), &mut fx);
    assert_eq!(
        kinds(&list(fx)),
        [(0, AttemptKind::Fallback(AttemptOutcome::ConnectFailure))]
    );
    // The router path: its answer came from claude after gpt's attempt.
    m.router_answered(&config, Some(ModelId(0)), (2, 1), None);
    for m in [&mut streamed, &mut m] {
        assert_eq!(headers(m, &config, 200).0, Flow::Hold);
        assert_eq!(body(m, &config, START, false).0, Flow::Hold);
        let (flow, effects) = body(m, &config, &format!("{START}{DELTA}"), false);
        assert_eq!(flow, Flow::Continue, "{effects:?}");
        let chunks = chat_chunks(&replaced(&effects).expect("translated").1);
        assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "Hello");
    }
}

#[test]
fn a_stream_gets_the_usage_chunk_only_if_asked_and_a_whole_answer_held_for_its_time_is_translated()
{
    let config = config(MIXED);
    let plain = CHAT.replace(r#","stream_options":{"include_usage":true}"#, "");
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0], &plain, true);
    headers(&mut m, &config, 200);
    body(&mut m, &config, &format!("{START}{DELTA}"), false);
    let (_, effects) = body(&mut m, &config, END, true);
    let (_, with) = replaced(&effects).expect("translated");
    assert!(
        chat_chunks(&with)
            .iter()
            .all(|c| c.get("usage").is_none_or(Value::is_null)),
        "{with}"
    );

    // `fallback_timeout_ms` covers the whole answer: held by the machine, then translated.
    let timed = MIXED.replace(
        r#""model_types": ["chat"],"#,
        r#""model_types": ["chat"], "fallback_timeout_ms": 5000,"#,
    );
    let config = super::config(&timed);
    let (mut m, _) = begin(&config, Endpoint::ChatCompletions, &[0, 1], CHAT, false);
    assert_eq!(headers(&mut m, &config, 200), (Flow::Hold, vec![]));
    assert_eq!(body(&mut m, &config, MESSAGE, false), (Flow::Hold, vec![]));
    let (flow, effects) = body(&mut m, &config, MESSAGE, true);
    assert_eq!(flow, Flow::Continue);
    assert!(delivery(&effects).drop_content_length);
    let answer = json(&replaced(&effects).expect("translated").1);
    assert_eq!(answer["object"], "chat.completion");
}
