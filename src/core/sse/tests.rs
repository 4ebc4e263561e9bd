//! The watcher against each dialect's real event streams, their error events, malformed
//! streams, and the same streams cut at every byte and at random.

use super::*;

/// Chat completion chunks as OpenAI streams them: a role-only first chunk, text, the finish,
/// the usage chunk (`stream_options.include_usage`), `[DONE]`.
const CHAT: &str = concat!(
    r#"data: {"id":"chatcmpl-AX1","object":"chat.completion.chunk","created":1733,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-AX1","object":"chat.completion.chunk","created":1733,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello \"there\"\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-AX1","object":"chat.completion.chunk","created":1733,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-AX1","object":"chat.completion.chunk","created":1733,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// A chat answer that calls a tool: the first chunk names it, the next ones stream arguments.
const CHAT_TOOLS: &str = concat!(
    ": OPENROUTER PROCESSING\n\n",
    r#"data: {"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":"}}]},"logprobs":null,"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// An Anthropic Messages stream ("Streaming Messages"): text, then a tool call.
const MESSAGES: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}"#,
    "\n\nevent: ping\n",
    r#"data: {"type": "ping"}"#,
    "\n\nevent: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}"#,
    "\n\nevent: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\nevent: content_block_start\n",
    r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}"#,
    "\n\nevent: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":1}"#,
    "\n\nevent: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
    "\n\nevent: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

/// A Responses API stream ("Streaming events"): lifecycle, one text item, completion.
const RESPONSES: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c","object":"response","created_at":1741290958,"status":"in_progress","error":null,"incomplete_details":null,"instructions":"You are a helpful assistant.","max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}"#,
    "\n\nevent: response.in_progress\n",
    r#"data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67c","object":"response","created_at":1741290958,"status":"in_progress","error":null,"incomplete_details":null,"output":[],"model":"gpt-4.1-2025-04-14","tools":[],"metadata":{}}}"#,
    "\n\nevent: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_67c","type":"message","status":"in_progress","role":"assistant","content":[]}}"#,
    "\n\nevent: response.content_part.added\n",
    r#"data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_67c","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}"#,
    "\n\nevent: response.output_text.delta\n",
    r#"data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c","output_index":0,"content_index":0,"delta":"Hi"}"#,
    "\n\nevent: response.output_text.done\n",
    r#"data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_67c","output_index":0,"content_index":0,"text":"Hi"}"#,
    "\n\nevent: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"msg_67c","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}}"#,
    "\n\nevent: response.completed\n",
    r#"data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_67c","object":"response","created_at":1741290958,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_67c","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}],"usage":{"input_tokens":37,"output_tokens":11,"total_tokens":48},"tools":[],"metadata":{}}}"#,
    "\n\n",
);

/// A Responses stream that fails before any output: no quota left.
const RESPONSES_FAILED: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_q","object":"response","created_at":1,"status":"in_progress","error":null,"output":[],"model":"gpt-4.1"}}"#,
    "\n\nevent: response.in_progress\n",
    r#"data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_q","object":"response","created_at":1,"status":"in_progress","error":null,"output":[],"model":"gpt-4.1"}}"#,
    "\n\nevent: response.failed\n",
    r#"data: {"type":"response.failed","sequence_number":2,"response":{"id":"resp_q","object":"response","created_at":1,"status":"failed","error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."},"incomplete_details":null,"output":[],"model":"gpt-4.1"}}"#,
    "\n\n",
);

/// Feeds `chunks` in order: each event with its end offset in the whole stream, then what
/// `finish` says, and the watcher.
fn run(dialect: Dialect, chunks: &[&[u8]]) -> (Vec<(Event, usize)>, Option<Event>, Watcher) {
    let mut watcher = Watcher::new(dialect);
    let mut events = Vec::new();
    let mut base = 0;
    for chunk in chunks {
        let mut from = 0;
        // Every event consumes at least its line end: at most one per byte.
        for _ in 0..=chunk.len() {
            let Some((event, end)) = watcher.next(chunk, from) else {
                break;
            };
            assert!(end > from && end <= chunk.len(), "end {end} after {from}");
            events.push((event, base + end));
            from = end;
        }
        base += chunk.len();
    }
    let last = watcher.finish();
    (events, last, watcher)
}

/// Events with their ends moved past a `\n` that follows the `\r` they end at: where a chunk
/// ends between the two, the event ends at the `\r`.
fn past_crlf(bytes: &[u8], events: &[(Event, usize)]) -> Vec<(Event, usize)> {
    let at = |i: usize| bytes.get(i).copied();
    events
        .iter()
        .map(|(e, end)| match (at(end.wrapping_sub(1)), at(*end)) {
            (Some(b'\r'), Some(b'\n')) => (e.clone(), end + 1),
            _ => (e.clone(), *end),
        })
        .collect()
}

/// The events of a stream fed whole.
fn kinds(dialect: Dialect, stream: &str) -> Vec<Event> {
    let (events, last, _) = run(dialect, &[stream.as_bytes()]);
    events.into_iter().map(|(e, _)| e).chain(last).collect()
}

/// `bytes` cut at `cuts` (ascending offsets).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        chunks.push(&bytes[start..cut]);
        start = cut;
    }
    chunks.push(&bytes[start..]);
    chunks
}

fn error(message: &str, kind: &str, code: Option<&str>) -> Event {
    Event::Error(ProviderError {
        message: message.to_string(),
        kind: kind.to_string(),
        code: code.map(str::to_string),
    })
}

use Event::{Content, Final, Malformed, Other};

#[test]
fn a_chat_stream_commits_at_its_first_text_and_ends_at_done() {
    assert_eq!(
        kinds(Dialect::ChatCompletions, CHAT),
        [Other, Content, Other, Other, Final]
    );
    let (_, _, watcher) = run(Dialect::ChatCompletions, &[CHAT.as_bytes()]);
    assert!(watcher.saw_content() && watcher.saw_final());
    assert_eq!(watcher.events(), 5);
    assert_eq!(watcher.bytes(), CHAT.len() as u64);
}

#[test]
fn a_chat_tool_call_is_content_from_the_chunk_that_names_it() {
    assert_eq!(
        kinds(Dialect::ChatCompletions, CHAT_TOOLS),
        [Other, Content, Content, Other, Final]
    );
}

#[test]
fn chat_refusal_reasoning_and_audio_deltas_are_content_and_empty_ones_are_not() {
    let chunk =
        |delta: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
    for delta in [
        r#"{"refusal":"I can't"}"#,
        r#"{"role":"assistant","content":null,"reasoning_content":"Let"}"#,
        r#"{"reasoning":"Hmm"}"#,
        r#"{"audio":{"id":"a1","transcript":"Hi"}}"#,
        r#"{"function_call":{"name":"f","arguments":""}}"#,
    ] {
        assert_eq!(
            kinds(Dialect::ChatCompletions, &chunk(delta)),
            [Content],
            "{delta}"
        );
    }
    for delta in [
        r#"{"role":"assistant","content":""}"#,
        r#"{"content":null,"tool_calls":[],"refusal":null}"#,
        r#"{"tool_calls":[ ]}"#,
        "{}",
    ] {
        assert_eq!(
            kinds(Dialect::ChatCompletions, &chunk(delta)),
            [Other],
            "{delta}"
        );
    }
}

#[test]
fn a_legacy_completion_streams_its_text() {
    let stream = concat!(
        r#"data: {"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":null}],"model":"gpt-3.5-turbo-instruct"}"#,
        "\n\n",
        r#"data: {"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"Once","index":0,"logprobs":null,"finish_reason":null}],"model":"gpt-3.5-turbo-instruct"}"#,
        "\n\ndata: [DONE]\n\n",
    );
    assert_eq!(kinds(Dialect::Completions, stream), [Other, Content, Final]);
}

#[test]
fn chat_errors_in_the_stream_are_read_in_each_providers_shape() {
    let openai = r#"data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#;
    let vllm = r#"data: {"error":{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}}"#;
    let bare = r#"data: {"error":"upstream timed out"}"#;
    let named = "event: error\ndata: {\"message\":\"overloaded\",\"code\":\"busy\"}";
    let cases = [
        (
            openai,
            error(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
        ),
        (vllm, error("too long", "BadRequestError", Some("400"))),
        (bare, error("upstream timed out", "error", None)),
        (named, error("overloaded", "error", Some("busy"))),
    ];
    for (event, expected) in cases {
        let stream = format!("{}\n\n", event);
        assert_eq!(
            kinds(Dialect::ChatCompletions, &stream),
            [expected],
            "{event}"
        );
    }
    // `"error": null` is no error.
    let null = "data: {\"error\":null,\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    assert_eq!(kinds(Dialect::ChatCompletions, null), [Content]);
}

#[test]
fn a_messages_stream_commits_at_its_first_delta_and_ends_at_message_stop() {
    assert_eq!(
        kinds(Dialect::Messages, MESSAGES),
        [Other, Other, Other, Content, Content, Other, Content, Content, Other, Other, Final]
    );
}

#[test]
fn a_messages_tool_use_block_start_is_content_but_an_empty_thinking_one_is_not() {
    let start = |block: &str| {
        format!("event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{block}}}\n\n")
    };
    let content = [
        r#"{"type":"tool_use","id":"toolu_1","name":"f","input":{}}"#,
        r#"{"type":"text","text":"Hi"}"#,
        r#"{"type":"redacted_thinking","data":"EmwK"}"#,
    ];
    for block in content {
        assert_eq!(
            kinds(Dialect::Messages, &start(block)),
            [Content],
            "{block}"
        );
    }
    for block in [
        r#"{"type":"thinking","thinking":""}"#,
        r#"{"type":"text","text":""}"#,
    ] {
        assert_eq!(kinds(Dialect::Messages, &start(block)), [Other], "{block}");
    }
}

#[test]
fn a_messages_overload_is_an_error_event() {
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":3,"output_tokens":1}}}"#,
        "\n\nevent: error\n",
        r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        "\n\n",
    );
    assert_eq!(
        kinds(Dialect::Messages, stream),
        [Other, error("Overloaded", "overloaded_error", None)]
    );
}

#[test]
fn the_json_type_is_trusted_over_the_event_name_and_the_name_serves_without_data() {
    let typed = "event: ping\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n";
    assert_eq!(kinds(Dialect::Messages, typed), [Content]);
    let untyped = "event: message_stop\ndata: {}\n\n";
    assert_eq!(kinds(Dialect::Messages, untyped), [Final]);
    assert_eq!(kinds(Dialect::Messages, "event: message_stop\n\n"), [Final]);
    assert_eq!(kinds(Dialect::Messages, "event: ping\n\n"), [Other]);
    let error = kinds(Dialect::Messages, "event: error\n\n");
    assert!(matches!(&error[..], [Event::Error(e)] if e.kind == "error"));
    assert_eq!(
        kinds(Dialect::Responses, "event: response.completed\n\n"),
        [Final]
    );
}

#[test]
fn a_responses_stream_commits_at_its_first_output_item_and_ends_at_completed() {
    assert_eq!(
        kinds(Dialect::Responses, RESPONSES),
        [Other, Other, Content, Content, Content, Content, Content, Final]
    );
}

#[test]
fn responses_function_call_and_reasoning_events_are_content() {
    for kind in [
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.refusal.delta",
        "response.output_text.annotation.added",
    ] {
        let stream = format!("event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":3,\"delta\":\"x\"}}\n\n");
        assert_eq!(kinds(Dialect::Responses, &stream), [Content], "{kind}");
    }
    let keepalive = "event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":4}\n\n";
    assert_eq!(kinds(Dialect::Responses, keepalive), [Other]);
}

#[test]
fn a_responses_failure_before_output_is_an_error_with_its_code() {
    let quota = error(
        "You exceeded your current quota, please check your plan and billing details.",
        "response.failed",
        Some("insufficient_quota"),
    );
    assert_eq!(
        kinds(Dialect::Responses, RESPONSES_FAILED),
        [Other, Other, quota]
    );
    let (_, _, watcher) = run(Dialect::Responses, &[RESPONSES_FAILED.as_bytes()]);
    assert!(!watcher.saw_content() && !watcher.saw_final());
}

#[test]
fn responses_error_events_are_read_nested_or_flat() {
    let nested = "event: error\ndata: {\"type\":\"error\",\"sequence_number\":3,\"error\":{\"type\":\"server_error\",\"code\":\"server_error\",\"message\":\"An error occurred.\",\"param\":null}}\n\n";
    let flat = "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR_SOMETHING\",\"message\":\"Something went wrong\",\"param\":null,\"sequence_number\":1}\n\n";
    assert_eq!(
        kinds(Dialect::Responses, nested),
        [error(
            "An error occurred.",
            "server_error",
            Some("server_error")
        )]
    );
    assert_eq!(
        kinds(Dialect::Responses, flat),
        [error(
            "Something went wrong",
            "error",
            Some("ERR_SOMETHING")
        )]
    );
}

#[test]
fn responses_incomplete_is_an_error_before_output_and_the_end_after_it() {
    let incomplete = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":9,\"response\":{\"id\":\"resp_1\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"output\":[]}}\n\n";
    let before = kinds(Dialect::Responses, incomplete);
    assert!(
        matches!(&before[..], [Event::Error(e)] if e.kind == "response.incomplete" && e.code.as_deref() == Some("max_output_tokens")),
        "{before:?}"
    );
    let delta = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n";
    let after = kinds(Dialect::Responses, &format!("{delta}{incomplete}"));
    assert_eq!(after, [Content, Final]);
}

#[test]
fn data_that_is_not_a_json_object_is_malformed() {
    for data in [
        "not json",
        "[1,2]",
        "\"text\"",
        "{\"choices\":[{\"delta\":",
        "[DONE] now",
    ] {
        let stream = format!("data: {data}\n\n");
        assert_eq!(
            kinds(Dialect::ChatCompletions, &stream),
            [Malformed],
            "{data}"
        );
    }
    // `[DONE]` is chat's only: elsewhere it is not JSON.
    assert_eq!(kinds(Dialect::Messages, "data: [DONE]\n\n"), [Malformed]);
    assert_eq!(
        kinds(Dialect::Responses, "event: x\ndata: <html>\n\n"),
        [Malformed]
    );
}

#[test]
fn an_unknown_field_is_malformed_at_once_and_its_event_is_skipped() {
    let stream = "data: {\"choices\":[]}\nfoo: bar\ndata: [DONE]\n\ndata: [DONE]\n\n";
    let (events, last, _) = run(Dialect::ChatCompletions, &[stream.as_bytes()]);
    let malformed_at = "data: {\"choices\":[]}\nfoo: bar\n".len();
    assert_eq!(events, [(Malformed, malformed_at), (Final, stream.len())]);
    assert_eq!(last, None);
    // Field names are case-sensitive; a line without a colon is a field with no value.
    assert_eq!(kinds(Dialect::ChatCompletions, "Data: x\n\n"), [Malformed]);
    assert_eq!(kinds(Dialect::ChatCompletions, "data\n\n"), [Other]);
    assert_eq!(
        kinds(Dialect::ChatCompletions, "<!DOCTYPE html>\n"),
        [Malformed]
    );
}

#[test]
fn comments_ids_retries_and_stray_blank_lines_are_framing() {
    let stream = ": keep-alive\n\n\n\nid: 7\nretry: 1000\ndata: [DONE]\n\n\n";
    let (events, last, watcher) = run(Dialect::ChatCompletions, &[stream.as_bytes()]);
    assert_eq!(events, [(Other, 14), (Final, stream.len() - 1)]);
    assert_eq!((last, watcher.events()), (None, 2));
}

#[test]
fn data_lines_join_with_newlines_and_one_space_after_the_colon_is_dropped() {
    let joined = "data: {\"choices\":\ndata:[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    assert_eq!(kinds(Dialect::ChatCompletions, joined), [Content]);
    // Two spaces: the second is part of the value (JSON ignores it).
    assert_eq!(
        kinds(Dialect::ChatCompletions, "data:  [DONE]\n\n"),
        [Final]
    );
    let bom = "\u{feff}data: [DONE]\n\n";
    assert_eq!(kinds(Dialect::ChatCompletions, bom), [Final]);
}

#[test]
fn cr_and_crlf_line_ends_read_like_lf() {
    for stream in [CHAT, CHAT_TOOLS] {
        let expected = kinds(Dialect::ChatCompletions, stream);
        for end in ["\r\n", "\r"] {
            let other = stream.replace('\n', end);
            assert_eq!(kinds(Dialect::ChatCompletions, &other), expected, "{end:?}");
        }
    }
    let expected = kinds(Dialect::Messages, MESSAGES);
    assert_eq!(
        kinds(Dialect::Messages, &MESSAGES.replace('\n', "\r\n")),
        expected
    );
}

#[test]
fn a_crlf_split_between_chunks_is_one_line_end() {
    let stream = b"data: [DONE]\r\n\r\ndata: {\"choices\":[]}\r\n\r\n";
    for cut in [13, 14, 15, 16] {
        let (events, last, _) = run(Dialect::ChatCompletions, &split(stream, &[cut]));
        // Cut between the blank line's `\r` and `\n`, the event ends at the `\r` (it is not
        // held for the next chunk); that `\n` is then skipped as the rest of the line end.
        let end = if cut == 15 { 15 } else { 16 };
        assert_eq!(
            events,
            [(Final, end), (Other, stream.len())],
            "cut at {cut}"
        );
        assert_eq!(last, None);
    }
}

#[test]
fn an_event_split_across_chunks_ends_in_the_chunk_that_completes_it() {
    let first = b"data: [DONE]\n\ndata: {\"choices\":[{\"delta\":";
    let second = b"{\"content\":\"x\"}}]}\n\nevent: y";
    let mut watcher = Watcher::new(Dialect::ChatCompletions);
    assert_eq!(watcher.next(first, 0), Some((Final, 14)));
    assert_eq!(watcher.next(first, 14), None);
    assert_eq!(watcher.next(second, 0), Some((Content, 20)));
    assert_eq!(watcher.next(second, 20), None);
    assert_eq!(watcher.bytes(), (first.len() + second.len()) as u64);
    assert_eq!(watcher.finish(), Some(Other));
    assert_eq!(watcher.finish(), None);
}

#[test]
fn an_event_whole_in_its_chunk_is_not_copied() {
    for (dialect, stream) in [
        (Dialect::ChatCompletions, CHAT),
        (Dialect::Messages, MESSAGES),
        (Dialect::Responses, RESPONSES),
    ] {
        let (_, _, watcher) = run(dialect, &[stream.as_bytes()]);
        assert_eq!(watcher.carried_capacity(), 0, "{dialect:?}");
    }
}

#[test]
fn finish_reads_a_last_event_that_lacks_only_its_blank_line() {
    let finish = |stream: &str| run(Dialect::ChatCompletions, &[stream.as_bytes()]).1;
    assert_eq!(finish("data: [DONE]\n"), Some(Final));
    assert_eq!(finish("data: [DONE]"), Some(Final));
    assert_eq!(finish("data: [DONE]\r"), Some(Final));
    assert_eq!(
        finish("data: {\"choices\":[{\"delta\":{\"content\":\"Hel"),
        Some(Malformed)
    );
    assert_eq!(finish("data: [DO"), Some(Malformed));
    assert_eq!(finish("data: [DONE]\n\n"), None);
    assert_eq!(finish(""), None);
    assert_eq!(finish("\n"), None);
    let messages = run(
        Dialect::Messages,
        &[b"event: message_stop\ndata: {\"type\":\"message_stop\"}"],
    )
    .1;
    assert_eq!(messages, Some(Final));
}

#[test]
fn a_line_over_the_bound_is_dropped_and_its_event_read_by_name() {
    let big = "x".repeat(MAX_LINE + 10);
    // Chat events have no name: an oversized one is malformed.
    let chat = format!("data: {{\"a\":\"{big}\"}}\n\ndata: [DONE]\n\n");
    // A Responses completion that large is still the end.
    let responses = format!("event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"output\":\"{big}\"}}}}\n\n");
    let failed = format!("event: response.failed\ndata: {{\"x\":\"{big}\"}}\n\n");
    let start = format!("event: content_block_start\ndata: {{\"x\":\"{big}\"}}\n\n");
    let cases = [
        (Dialect::ChatCompletions, chat, vec![Malformed, Final]),
        (Dialect::Responses, responses, vec![Final]),
        (Dialect::Messages, start, vec![Content]),
    ];
    for (dialect, stream, expected) in cases {
        assert_eq!(kinds(dialect, &stream), expected, "{dialect:?} whole");
        // Fed in 64 KiB chunks, the watcher keeps at most the bound.
        let cuts: Vec<usize> = (1..stream.len() / 65536).map(|i| i * 65536).collect();
        let (events, last, watcher) = run(dialect, &split(stream.as_bytes(), &cuts));
        let events: Vec<Event> = events.into_iter().map(|(e, _)| e).chain(last).collect();
        assert_eq!(events, expected, "{dialect:?} in chunks");
        assert!(watcher.carried_capacity() <= 64 << 10);
    }
    let failed = kinds(Dialect::Responses, &failed);
    assert!(matches!(&failed[..], [Event::Error(e)] if e.kind == "response.failed"));
}

#[test]
fn data_lines_joined_over_the_bound_are_dropped() {
    let line = format!("data: {}\n", " ".repeat(MAX_DATA / 2));
    let stream = format!("{line}{line}{line}data: [DONE]\n\n");
    assert_eq!(kinds(Dialect::ChatCompletions, &stream), [Malformed]);
    let messages = format!("event: message_stop\n{line}{line}{line}\n");
    assert_eq!(kinds(Dialect::Messages, &messages), [Final]);
}

/// Every stream of the tests above, with its dialect.
fn corpus() -> Vec<(Dialect, String)> {
    let chat_all = format!("{CHAT}: ping\r\n\r\n{CHAT_TOOLS}data: {{\"error\":{{\"message\":\"m\"}}}}\rfoo\n\ndata: [DO");
    vec![
        (Dialect::ChatCompletions, CHAT.to_string()),
        (Dialect::ChatCompletions, CHAT.replace('\n', "\r\n")),
        (Dialect::ChatCompletions, CHAT_TOOLS.replace('\n', "\r")),
        (Dialect::ChatCompletions, chat_all),
        (
            Dialect::Messages,
            format!("\u{feff}{MESSAGES}event: message_stop\n"),
        ),
        (Dialect::Messages, MESSAGES.replace('\n', "\r\n")),
        (Dialect::Responses, format!("{RESPONSES_FAILED}{RESPONSES}")),
        (Dialect::Responses, RESPONSES.replace("\n\n", "\r\n\r\n")),
    ]
}

#[test]
fn a_stream_cut_at_any_byte_yields_the_events_it_yields_whole() {
    for (dialect, stream) in corpus() {
        let bytes = stream.as_bytes();
        let whole = run(dialect, &[bytes]);
        assert!(whole.0.len() >= 3);
        for cut in 0..=bytes.len() {
            let (events, last, watcher) = run(dialect, &split(bytes, &[cut]));
            let events = past_crlf(bytes, &events);
            assert_eq!(
                (&events, &last),
                (&whole.0, &whole.1),
                "{dialect:?} cut at {cut}"
            );
            assert_eq!(watcher.bytes(), bytes.len() as u64);
            assert_eq!(watcher.events(), whole.2.events());
        }
        let every: Vec<usize> = (1..bytes.len()).collect();
        let (events, last, _) = run(dialect, &split(bytes, &every));
        let events = past_crlf(bytes, &events);
        assert_eq!(
            (&events, &last),
            (&whole.0, &whole.1),
            "{dialect:?} byte by byte"
        );
    }
}

#[test]
fn a_stream_cut_at_random_yields_the_events_it_yields_whole() {
    let mut rng = fastrand::Rng::with_seed(0x55e);
    for (dialect, stream) in corpus() {
        let bytes = stream.as_bytes();
        let whole = run(dialect, &[bytes]);
        for _ in 0..300 {
            let mut cuts: Vec<usize> = (0..rng.usize(1..12))
                .map(|_| rng.usize(0..=bytes.len()))
                .collect();
            cuts.sort_unstable();
            let (events, last, _) = run(dialect, &split(bytes, &cuts));
            let events = past_crlf(bytes, &events);
            assert_eq!(
                (&events, &last),
                (&whole.0, &whole.1),
                "{dialect:?} cuts {cuts:?}"
            );
        }
    }
}

#[test]
fn each_terminal_event_reads_back_as_an_error_of_its_dialect() {
    let message = "the stream from model \"gpt-4o\" was cut:\nthe upstream reset it";
    let cases = [
        (
            Dialect::ChatCompletions,
            "server_error",
            Some("stream_reset"),
        ),
        (Dialect::Completions, "server_error", Some("stream_reset")),
        (Dialect::Messages, "api_error", None),
        (Dialect::Responses, "response.failed", Some("server_error")),
    ];
    for (dialect, kind, code) in cases {
        let bytes = terminal_event(dialect, message, "stream_reset");
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.ends_with("\n\n") && !text.contains("[DONE]"), "{text}");
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let json: serde_json::Value = serde_json::from_str(data).unwrap();
        assert!(json.is_object());
        // After content, as it is used.
        let mut watcher = Watcher::new(dialect);
        let content = match dialect {
            Dialect::ChatCompletions => {
                CHAT_TOOLS.split("\n\n").nth(1).unwrap().to_string() + "\n\n"
            }
            Dialect::Completions => "data: {\"choices\":[{\"text\":\"a\"}]}\n\n".to_string(),
            Dialect::Messages => {
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n"
                    .to_string()
            }
            Dialect::Responses => "data: {\"type\":\"response.output_text.delta\"}\n\n".to_string(),
        };
        assert_eq!(
            watcher.next(content.as_bytes(), 0).map(|e| e.0),
            Some(Content)
        );
        let read = watcher.next(&bytes, 0);
        assert_eq!(
            read,
            Some((error(message, kind, code), bytes.len())),
            "{dialect:?}"
        );
        assert_eq!(watcher.finish(), None);
    }
}

#[test]
fn terminal_events_have_the_sdk_shapes() {
    let chat = terminal_event(Dialect::ChatCompletions, "cut", "stream_idle");
    assert_eq!(
        chat,
        br#"data: {"error":{"message":"cut","type":"server_error","param":null,"code":"stream_idle"}}"#
            .iter()
            .chain(b"\n\n")
            .copied()
            .collect::<Vec<u8>>()
    );
    let messages = terminal_event(Dialect::Messages, "cut", "stream_idle");
    assert_eq!(
        messages,
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"cut\"}}\n\n"
    );
    let responses =
        String::from_utf8(terminal_event(Dialect::Responses, "cut", "stream_idle")).unwrap();
    let data = responses
        .strip_prefix("event: response.failed\ndata: ")
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(data.trim_end()).unwrap();
    let response = &json["response"];
    // The keys the openai SDK's `Response` model requires.
    for key in [
        "id",
        "created_at",
        "model",
        "object",
        "output",
        "parallel_tool_calls",
        "tool_choice",
        "tools",
    ] {
        assert!(!response[key].is_null(), "{key}");
    }
    assert_eq!(response["error"]["code"], "server_error");
    assert_eq!(response["status"], "failed");
}

#[test]
fn only_the_streamed_token_apis_are_watched() {
    use crate::core::endpoint::Endpoint;
    assert_eq!(
        Dialect::of(Endpoint::ChatCompletions),
        Some(Dialect::ChatCompletions)
    );
    assert_eq!(
        Dialect::of(Endpoint::Completions),
        Some(Dialect::Completions)
    );
    assert_eq!(Dialect::of(Endpoint::Responses), Some(Dialect::Responses));
    assert_eq!(Dialect::of(Endpoint::Messages), Some(Dialect::Messages));
    for endpoint in [
        Endpoint::Embeddings,
        Endpoint::CountTokens,
        Endpoint::Speech,
        Endpoint::Rerank,
    ] {
        assert_eq!(Dialect::of(endpoint), None, "{endpoint:?}");
    }
}

#[test]
fn a_watchers_terminal_event_continues_its_responses_stream() {
    // Cut after the first delta (sequence number 4).
    let cut = RESPONSES.find("event: response.output_text.done").unwrap();
    let (_, _, watcher) = run(Dialect::Responses, &[&RESPONSES.as_bytes()[..cut]]);
    assert_eq!(
        (watcher.response_id(), watcher.sequence_number()),
        (Some("resp_67c"), Some(4))
    );
    let bytes = watcher.terminal_event("cut", "stream_reset");
    let text = String::from_utf8(bytes.clone()).unwrap();
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    let json: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(json["response"]["id"], "resp_67c");
    assert_eq!(json["sequence_number"], 5);
    let mut reader = Watcher::new(Dialect::Responses);
    let read = reader.next(&bytes, 0).map(|(e, _)| e);
    assert_eq!(
        read,
        Some(error("cut", "response.failed", Some("server_error")))
    );
    // Other dialects have nothing to continue.
    let (_, _, chat) = run(Dialect::Messages, &[MESSAGES.as_bytes()]);
    assert_eq!(chat.response_id(), None);
    assert_eq!(
        chat.terminal_event("cut", "stream_idle"),
        terminal_event(Dialect::Messages, "cut", "stream_idle")
    );
}

mod after_commit;

/// One random chat event: mostly plain, sometimes each thing that ends a run.
fn event(rng: &mut fastrand::Rng, out: &mut Vec<u8>) {
    let text_len = rng.usize(0..200);
    let words: [&[u8]; 9] = [
        b"lorem ",
        b"sorry ",
        b"an error ",
        b"rr",
        b"\\\"x\\\" ",
        b"r",
        b"\\n",
        b"",
        b"ok ",
    ];
    let mut text = Vec::new();
    while text.len() < text_len {
        text.extend_from_slice(words[rng.usize(..words.len())]);
    }
    let value = [
        b"{\"choices\":[{\"delta\":{\"content\":\"".as_slice(),
        &text,
        b"\"}}]}",
    ]
    .concat();
    let (head, tail): (&[u8], &[u8]) = match rng.u8(..40) {
        0 => (b"data: [DONE]", b"\n\n"),
        1 => (b"event: x", b"\n"),
        2 => (b": keep-alive", b"\n\n"),
        3 => (b"data: {\"error\":{\"message\":\"m\"}}", b"\n\n"),
        4 => (b"data: {\"e\":\"\r\"}", b"\n\n"),
        5 => (b"data: ", b"\r\n\r\n"),
        6 => (b"data: ", b"\ndata: {}\n\n"),
        7 => (b"data: ", b"\n"),
        n if n % 2 == 0 => (b"data: ", b"\n\n"),
        _ => (b"data:", b"\n\n"),
    };
    out.extend_from_slice(head);
    if head.starts_with(b"data:") && head.len() <= b"data: ".len() {
        out.extend_from_slice(&value);
    }
    out.extend_from_slice(tail);
}

/// The run read by blocks passes the events the per-event reading passes and ends where it
/// ends, from every event start of random chat streams and cut at random ends.
#[test]
fn a_run_read_by_blocks_is_the_run_read_by_events() {
    let mut rng = fastrand::Rng::with_seed(5);
    let mut compared = 0;
    for _ in 0..3_000 {
        let mut stream = Vec::new();
        let mut starts = Vec::new();
        for _ in 0..rng.usize(1..30) {
            starts.push(stream.len());
            event(&mut rng, &mut stream);
        }
        stream.truncate(rng.usize(stream.len() / 2..=stream.len()));
        for &pos in starts.iter().filter(|&&p| p <= stream.len()) {
            let by_blocks = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, pos);
            let by_events = Watcher::new(Dialect::ChatCompletions).chat_events(&stream, pos);
            assert_eq!(
                (by_blocks.0, by_blocks.1),
                by_events,
                "from {pos}: {}",
                String::from_utf8_lossy(&stream)
            );
            compared += 1;
        }
    }
    assert!(compared > 10_000, "{compared}");
}

/// A long run of plain events is read by the blocks (where the platform has the kernel),
/// and stopped before an `"error"` or a `\r` far into it.
#[test]
fn a_long_run_stops_before_an_error_or_a_carriage_return() {
    let plain = b"data: {\"choices\":[{\"delta\":{\"content\":\"sorry, no error here\"}}]}\n\n";
    for stop in [
        &b"data: {\"error\":{\"message\":\"m\"}}\n\n"[..],
        b"data: {\"a\":\"\r\"}\n\n",
    ] {
        let mut stream = plain.repeat(40);
        let before = stream.len();
        stream.extend_from_slice(stop);
        stream.extend_from_slice(&plain.repeat(10));
        let (at, passed, _) = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, 0);
        assert_eq!((at, passed), (before, 40));
        let (at, passed, ended) = chat_run::blocks(&stream, 0);
        if at != 0 {
            assert!(
                ended && passed == 40 && at == before,
                "{at} {passed} {ended}"
            );
        }
    }
}

/// An event whose `data:` line is longer than `MAX_LINE` ends the run, as the per-event
/// reading ends it (the framing drops such a line's bytes).
#[test]
fn a_line_over_the_bound_ends_the_run() {
    let plain = b"data: {\"choices\":[]}\n\n";
    let mut stream = plain.repeat(3);
    let long_at = stream.len();
    stream.extend_from_slice(b"data: {\"c\":\"");
    stream.resize(long_at + MAX_LINE + 1, b'a');
    stream.extend_from_slice(b"\"}\n\n");
    stream.extend_from_slice(&plain.repeat(3));
    let run = Watcher::new(Dialect::ChatCompletions).chat_run(&stream, 0);
    assert_eq!((run.0, run.1), (long_at, 3));
}
