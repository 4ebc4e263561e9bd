use super::framer::MAX_NAME;
use super::*;
use serde_json::{json, Value};

/// Anthropic Messages API, "Streaming Messages", basic streaming request.
const CLAUDE_TEXT: &str = r#"event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

"#;

/// Anthropic Messages API, "Streaming Messages", streaming request with tool use.
const CLAUDE_TOOL: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-opus-4-6","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check the weather for San Francisco, CA:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" Francisc"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"o, CA\", \"unit\": \"fah"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"renheit\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01Vx2GMfAaQ3NjAqXRkQQMfk","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"timezone\": \"America/Los_Angeles\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

/// Anthropic, "Extended thinking", streaming with thinking; the newer `message_delta`
/// repeats the cumulative input and cache counts.
const CLAUDE_THINKING: &str = r#"event: message_start
data: {"type": "message_start", "message": {"id": "msg_01Thk", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n1071 = 2 \u00d7 462 + 147"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: content_block_start
data: {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "The greatest common divisor (GCD) of 1071 and 462 is **21**."}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 1}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2048, "output_tokens": 187}}

event: message_stop
data: {"type": "message_stop"}

"#;

/// Anthropic Messages API, "Streaming Messages", error events: an overload mid-stream.
const CLAUDE_ERROR: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01Err","type":"message","role":"assistant","model":"claude-opus-4-6","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Once upon"}}

event: error
data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

"#;

/// OpenAI Chat Completions, "The chat completion chunk object" and streaming with
/// `stream_options.include_usage`.
const GPT_TEXT: &str = r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"#;

/// OpenAI, "Function calling", streaming: two parallel calls, their arguments in
/// fragments; Azure OpenAI's leading prompt-filter chunk (no id, model or choices) first.
const GPT_TOOLS: &str = r#"data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"index":0,"id":"call_TMbEoYn9q0ZKtoxav5LpD9Ts","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":null,"type":null,"function":{"name":null,"arguments":"{\""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"city\":\""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Tokyo\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Xh2r8kQpL0bW3nYf5sVdT7mC","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":\"Tokyo\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-CECIiMMWyfACuKUYWEyYSazcnvRVo","object":"chat.completion.chunk","created":1757499912,"model":"gpt-5-mini-2025-08-07","choices":[],"usage":{"prompt_tokens":140,"completion_tokens":90,"total_tokens":230,"prompt_tokens_details":{"cached_tokens":128}}}

data: [DONE]

"#;

/// An OpenAI error mid-stream: a `data:` line whose JSON has `error`, and no `[DONE]`.
const GPT_ERROR: &str = r#"data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Once"},"finish_reason":null}]}

data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}

"#;

const CREATED: u64 = 1_700_000_000;

/// The fixture fed in pieces cut at `cuts`, then finished.
fn to_chat(fixture: &[u8], include_usage: bool, cuts: &[usize]) -> Vec<u8> {
    let mut translator = MessagesToChat::new("", CREATED, include_usage);
    let mut out = Vec::new();
    for piece in pieces(fixture, cuts) {
        translator.push(piece, &mut out);
    }
    translator.finish(&mut out);
    out
}

fn to_messages(fixture: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut translator = ChatToMessages::new("");
    let mut out = Vec::new();
    for piece in pieces(fixture, cuts) {
        translator.push(piece, &mut out);
    }
    translator.finish(&mut out);
    out
}

fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut from = 0;
    let mut pieces = Vec::new();
    for &cut in cuts {
        pieces.push(bytes.get(from..cut).unwrap_or_default());
        from = cut;
    }
    pieces.push(bytes.get(from..).unwrap_or_default());
    pieces
}

fn text(out: &[u8]) -> &str {
    std::str::from_utf8(out).unwrap_or_default()
}

/// The `data:` of each chunk written, `[DONE]` as a string.
fn chunks(out: &[u8]) -> Vec<Value> {
    let events = text(out).split_terminator("\n\n");
    events
        .map(|event| {
            let data = event.strip_prefix("data: ").unwrap_or("<no data>");
            serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()))
        })
        .collect()
}

/// The (`event:` name, data) of each event written.
fn events(out: &[u8]) -> Vec<(String, Value)> {
    let events = text(out).split_terminator("\n\n");
    events
        .map(|event| {
            let (name, data) = event.split_once("\ndata: ").unwrap_or(("", event));
            let name = name.strip_prefix("event: ").unwrap_or("<no name>");
            (
                name.to_owned(),
                serde_json::from_str(data).unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// A tool call as assembled: index, id, name, arguments.
type Call = (u64, String, String, String);

/// What an OpenAI client assembles from the chunks: content, tool calls
/// (index, id, name, arguments) and the finish reason.
fn assemble(chunks: &[Value]) -> (String, Vec<Call>, String) {
    let (mut content, mut calls, mut finish) = (String::new(), Vec::new(), String::new());
    for chunk in chunks {
        let delta = &chunk["choices"][0]["delta"];
        content.push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(u64::MAX);
            let name = call["function"]["name"].as_str();
            if let (Some(id), Some(name)) = (call["id"].as_str(), name) {
                calls.push((index, id.to_owned(), name.to_owned(), String::new()));
            }
            let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
            if let Some(slot) = calls.iter_mut().find(|c| c.0 == index) {
                slot.3.push_str(arguments);
            }
        }
        if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
            finish = reason.to_owned();
        }
    }
    (content, calls, finish)
}

#[test]
fn a_text_stream_becomes_chunks_role_first_and_done_last() {
    let chunks = chunks(&to_chat(CLAUDE_TEXT.as_bytes(), false, &[]));
    // role, "Hello", "!", finish, [DONE]: the ping and the block events give no chunk.
    assert_eq!(chunks.len(), 5, "{chunks:?}");
    let first = &chunks[0];
    assert_eq!(first["id"], "chatcmpl-1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY");
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["created"], CREATED);
    assert_eq!(first["model"], "claude-opus-4-6");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(first.get("usage").is_none());
    assert_eq!(
        chunks[1]["choices"][0]["delta"],
        json!({"content": "Hello"})
    );
    assert_eq!(chunks[2]["choices"][0]["delta"], json!({"content": "!"}));
    assert_eq!(chunks[3]["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[4], "[DONE]");
}

#[test]
fn include_usage_adds_the_usage_chunk_and_null_usage_elsewhere() {
    let chunks = chunks(&to_chat(CLAUDE_TEXT.as_bytes(), true, &[]));
    assert_eq!(chunks.len(), 6);
    for chunk in chunks.get(..4).unwrap_or_default() {
        assert_eq!(chunk["usage"], Value::Null);
        assert!(chunk.get("usage").is_some());
    }
    assert_eq!(chunks[4]["choices"], json!([]));
    assert_eq!(
        chunks[4]["usage"],
        json!({"prompt_tokens": 25, "completion_tokens": 15, "total_tokens": 40,
                   "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(chunks[5], "[DONE]");
}

#[test]
fn tool_use_blocks_become_tool_calls_counted_from_zero() {
    let chunks = chunks(&to_chat(CLAUDE_TOOL.as_bytes(), false, &[]));
    let (content, calls, finish) = assemble(&chunks);
    assert_eq!(
        content,
        "Okay, let's check the weather for San Francisco, CA:"
    );
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 2);
    let (index, id, name, arguments) = &calls[0];
    assert_eq!(
        (*index, id.as_str(), name.as_str()),
        (0, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
    );
    let arguments: Value = serde_json::from_str(arguments).unwrap_or_default();
    assert_eq!(
        arguments,
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
    let (index, _, name, arguments) = &calls[1];
    assert_eq!((*index, name.as_str()), (1, "get_time"));
    assert_eq!(arguments, r#"{"timezone": "America/Los_Angeles"}"#);
    // The tool call's first chunk: id, type, name, empty arguments, as OpenAI streams it.
    let start = chunks
        .iter()
        .find(|c| c["choices"][0]["delta"]["tool_calls"].is_array());
    assert_eq!(
        start.map(|c| c["choices"][0]["delta"]["tool_calls"][0].clone()),
        Some(
            json!({"index": 0, "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "type": "function",
                        "function": {"name": "get_weather", "arguments": ""}})
        )
    );
    // No chunk for the empty partial_json.
    let empty = chunks.iter().filter(|c| {
        c["choices"][0]["delta"]["tool_calls"][0]["function"] == json!({"arguments": ""})
    });
    assert_eq!(empty.count(), 0);
}

#[test]
fn thinking_is_dropped_and_usage_counts_the_cache() {
    let out = to_chat(CLAUDE_THINKING.as_bytes(), true, &[]);
    assert!(!text(&out).contains("GCD of 1071"));
    assert!(!text(&out).contains("EqQBCg"));
    let chunks = chunks(&out);
    let (content, calls, finish) = assemble(&chunks);
    assert_eq!(
        content,
        "The greatest common divisor (GCD) of 1071 and 462 is **21**."
    );
    assert!(calls.is_empty());
    assert_eq!(finish, "stop");
    let usage = chunks.iter().rev().find(|c| c["usage"].is_object());
    assert_eq!(
        usage.map(|c| c["usage"].clone()),
        Some(
            json!({"prompt_tokens": 12 + 300 + 2048, "completion_tokens": 187,
                        "total_tokens": 12 + 300 + 2048 + 187,
                        "prompt_tokens_details": {"cached_tokens": 2048}})
        )
    );
}

#[test]
fn every_stop_reason_reaches_the_finish_chunk() {
    for (stop, finish) in [
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("stop_sequence", "stop"),
    ] {
        let fixture = CLAUDE_TEXT.replace("\"end_turn\"", &format!("\"{stop}\""));
        let (_, _, reason) = assemble(&chunks(&to_chat(fixture.as_bytes(), false, &[])));
        assert_eq!(reason, finish, "{stop}");
    }
}

#[test]
fn an_error_event_becomes_openais_error_and_no_done() {
    let mut translator = MessagesToChat::new("chatcmpl-given", CREATED, true);
    let mut out = Vec::new();
    translator.push(CLAUDE_ERROR.as_bytes(), &mut out);
    translator.push(
        b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        &mut out,
    );
    translator.finish(&mut out);
    let chunks = chunks(&out);
    assert_eq!(chunks[0]["id"], "chatcmpl-given");
    assert_eq!(assemble(&chunks).0, "Once upon");
    assert_eq!(
        chunks.last(),
        Some(
            &json!({"error": {"message": "Overloaded", "type": "overloaded_error",
                                   "param": null, "code": null}})
        )
    );
    assert!(!text(&out).contains("[DONE]"));
}

#[test]
fn a_text_stream_becomes_messages_events() {
    let events = events(&to_messages(GPT_TEXT.as_bytes(), &[]));
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }
    assert_eq!(
        events[0].1["message"],
        json!({"id": "msg_123", "type": "message", "role": "assistant", "content": [],
                   "model": "gpt-4o-mini", "stop_reason": null, "stop_sequence": null,
                   "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 0}})
    );
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(
        events[2].1["delta"],
        json!({"type": "text_delta", "text": "Hello"})
    );
    assert_eq!(events[3].1["index"], 0);
    assert_eq!(events[4].1["index"], 0);
    assert_eq!(
        events[5].1,
        json!({"type": "message_delta",
                   "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": {"input_tokens": 9, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 12}})
    );
}

#[test]
fn tool_calls_become_tool_use_blocks_one_per_call() {
    let events = events(&to_messages(GPT_TOOLS.as_bytes(), &[]));
    // Azure's leading chunk started nothing: the model is the answer's.
    assert_eq!(events[0].1["message"]["model"], "gpt-5-mini-2025-08-07");
    assert_eq!(
        events[0].1["message"]["id"],
        "msg_CECIiMMWyfACuKUYWEyYSazcnvRVo"
    );
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(
        starts,
        [
            &json!({"type": "content_block_start", "index": 0, "content_block":
                        {"type": "tool_use", "id": "call_TMbEoYn9q0ZKtoxav5LpD9Ts", "name": "get_weather", "input": {}}}),
            &json!({"type": "content_block_start", "index": 1, "content_block":
                        {"type": "tool_use", "id": "call_Xh2r8kQpL0bW3nYf5sVdT7mC", "name": "get_time", "input": {}}}),
        ]
    );
    let partial = |index: u64| -> String {
        let deltas = events
            .iter()
            .filter(|(n, d)| n == "content_block_delta" && d["index"] == index);
        deltas
            .map(|(_, d)| {
                d["delta"]["partial_json"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(partial(0), r#"{"city":"Tokyo"}"#);
    assert_eq!(partial(1), r#"{"city":"Tokyo"}"#);
    // Block 0 stops before block 1 starts.
    let order: Vec<(String, Value)> = events
        .iter()
        .filter(|(n, _)| n.starts_with("content_block_st"))
        .map(|(n, d)| (n.clone(), d["index"].clone()))
        .collect();
    assert_eq!(
        order,
        [
            ("content_block_start".to_owned(), json!(0)),
            ("content_block_stop".to_owned(), json!(0)),
            ("content_block_start".to_owned(), json!(1)),
            ("content_block_stop".to_owned(), json!(1)),
        ]
    );
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "message_delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0]["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        deltas[0]["usage"],
        json!({"input_tokens": 12, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 128, "output_tokens": 90})
    );
    assert_eq!(events.last().map(|(n, _)| n.as_str()), Some("message_stop"));
}

#[test]
fn without_a_usage_chunk_message_delta_comes_at_done_once() {
    let fixture: String = GPT_TEXT
        .split_inclusive("\n\n")
        .filter(|e| !e.contains("\"usage\":{"))
        .collect();
    let events = events(&to_messages(fixture.as_bytes(), &[]));
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "message_delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0]["delta"]["stop_reason"], "end_turn");
    assert_eq!(deltas[0]["usage"]["output_tokens"], 0);
    let tail: Vec<&str> = events
        .iter()
        .rev()
        .take(2)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(tail, ["message_stop", "message_delta"]);
}

#[test]
fn text_then_a_tool_call_are_two_blocks() {
    let fixture = r#"data: {"id":"chatcmpl-7","model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me look."},"finish_reason":null}]}

data: {"id":"chatcmpl-7","model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-7","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}

data: [DONE]

"#;
    let events = events(&to_messages(fixture.as_bytes(), &[]));
    let blocks: Vec<(String, Value, Value)> = events
        .iter()
        .filter(|(n, _)| n.starts_with("content_block"))
        .map(|(n, d)| {
            (
                n.clone(),
                d["index"].clone(),
                d["content_block"]["type"].clone(),
            )
        })
        .collect();
    assert_eq!(
        blocks,
        [
            ("content_block_start".to_owned(), json!(0), json!("text")),
            ("content_block_delta".to_owned(), json!(0), Value::Null),
            ("content_block_stop".to_owned(), json!(0), Value::Null),
            (
                "content_block_start".to_owned(),
                json!(1),
                json!("tool_use")
            ),
            ("content_block_delta".to_owned(), json!(1), Value::Null),
            ("content_block_stop".to_owned(), json!(1), Value::Null),
        ]
    );
    let delta = events.iter().find(|(n, _)| n == "message_delta");
    assert_eq!(
        delta.map(|(_, d)| d["delta"]["stop_reason"].clone()),
        Some(json!("max_tokens"))
    );
}

#[test]
fn an_openai_error_becomes_an_error_event_and_ends_the_stream() {
    let mut translator = ChatToMessages::new("msg_given");
    let mut out = Vec::new();
    translator.push(GPT_ERROR.as_bytes(), &mut out);
    translator.push(b"data: [DONE]\n\n", &mut out);
    translator.finish(&mut out);
    let events = events(&out);
    assert_eq!(events[0].1["message"]["id"], "msg_given");
    assert_eq!(
        events.last(),
        Some(&(
            "error".to_owned(),
            json!({"type": "error", "error": {"type": "api_error",
                       "message": "The server had an error while processing your request. Sorry about that!"}})
        ))
    );
    assert!(!events.iter().any(|(n, _)| n == "message_stop"));
}

/// SSE allows an event's data over several `data:` lines, joined by line ends.
fn multiline(fixture: &str) -> String {
    fixture
        .replace(",\"", ",\ndata: \"")
        .replace("data: {", "data:{\ndata: ")
}

/// Every fixture, with each line ending SSE allows, cut at every offset and at every
/// byte, translates as it does whole.
fn assert_splits_read_alike(fixtures: &[&str], run: fn(&[u8], &[usize]) -> Vec<u8>) {
    for fixture in fixtures {
        let whole = run(fixture.as_bytes(), &[]);
        let crlf = fixture.replace('\n', "\r\n");
        let cr = fixture.replace('\n', "\r");
        let variants = [
            (fixture.as_bytes(), true),
            (crlf.as_bytes(), true),
            (cr.as_bytes(), false),
        ];
        for (bytes, every_offset) in variants {
            assert!(run(bytes, &[]) == whole, "line ends of {}", text(bytes));
            // A lone CR ends a line as LF does: cut at every byte below, not at every offset.
            for cut in (0..=bytes.len()).filter(|_| every_offset) {
                assert!(
                    run(bytes, &[cut]) == whole,
                    "cut at {cut} of {}",
                    text(bytes)
                );
            }
            let every: Vec<usize> = (1..bytes.len()).collect();
            assert!(run(bytes, &every) == whole, "bytes of {}", text(bytes));
        }
    }
}

#[test]
fn any_split_of_a_messages_stream_gives_the_same_chunks() {
    let lines = multiline(CLAUDE_TOOL);
    let run = |bytes: &[u8], cuts: &[usize]| to_chat(bytes, true, cuts);
    assert_eq!(run(lines.as_bytes(), &[]), run(CLAUDE_TOOL.as_bytes(), &[]));
    let fixtures = [
        CLAUDE_TEXT,
        CLAUDE_TOOL,
        CLAUDE_THINKING,
        CLAUDE_ERROR,
        &lines,
    ];
    assert_splits_read_alike(&fixtures, run);
}

#[test]
fn any_split_of_a_chat_stream_gives_the_same_events() {
    let lines = multiline(GPT_TOOLS);
    assert_eq!(
        to_messages(lines.as_bytes(), &[]),
        to_messages(GPT_TOOLS.as_bytes(), &[])
    );
    assert_splits_read_alike(&[GPT_TEXT, GPT_ERROR, &lines], to_messages);
}

#[test]
fn a_last_event_without_its_blank_line_is_read_at_finish() {
    for fixture in [CLAUDE_TEXT, GPT_TEXT] {
        let cut = fixture.trim_end_matches('\n');
        assert_eq!(
            to_chat(cut.as_bytes(), true, &[]),
            to_chat(fixture.as_bytes(), true, &[])
        );
        assert_eq!(
            to_messages(cut.as_bytes(), &[]),
            to_messages(fixture.as_bytes(), &[])
        );
    }
}

#[test]
fn a_cut_stream_is_not_made_whole() {
    let cut = CLAUDE_TEXT
        .split("event: message_delta")
        .next()
        .unwrap_or_default();
    let out = to_chat(cut.as_bytes(), true, &[]);
    assert!(!text(&out).contains("[DONE]"));
    assert!(!text(&out).contains("finish_reason\":\"stop"));
    let cut = GPT_TEXT.split("data: [DONE]").next().unwrap_or_default();
    let out = to_messages(cut.as_bytes(), &[]);
    assert!(!text(&out).contains("message_stop"));
}

#[test]
fn a_line_over_the_bound_ends_the_stream_with_an_error() {
    let piece = vec![b'a'; 64 << 10];
    let mut chat = MessagesToChat::new("", CREATED, false);
    let mut messages = ChatToMessages::new("");
    let (mut to_chat_out, mut to_messages_out) = (Vec::new(), Vec::new());
    chat.push(b"data: ", &mut to_chat_out);
    messages.push(b"data: ", &mut to_messages_out);
    for _ in 0..20 {
        chat.push(&piece, &mut to_chat_out);
        messages.push(&piece, &mut to_messages_out);
    }
    chat.push(b"\n\n", &mut to_chat_out);
    chat.finish(&mut to_chat_out);
    messages.finish(&mut to_messages_out);
    assert_eq!(
        chunks(&to_chat_out),
        [
            json!({"error": {"message": OVERSIZED, "type": "api_error", "param": null, "code": null}})
        ]
    );
    assert_eq!(
        events(&to_messages_out),
        [(
            "error".to_owned(),
            json!({"type": "error", "error": {"type": "api_error", "message": OVERSIZED}})
        )]
    );
    // Nothing was kept past the bound.
    assert!(chat.framer.line.len() <= MAX_CARRY);
}

#[test]
fn a_long_event_name_is_not_kept() {
    let mut translator = MessagesToChat::new("", CREATED, false);
    let mut out = Vec::new();
    let name = [b"event: ".as_slice(), &[b'e'; 500 << 10], b"\n"].concat();
    translator.push(&name, &mut out);
    assert!(translator.framer.name.len() <= MAX_NAME);
    // Its event still reads by the JSON's type.
    translator.push(
        CLAUDE_TEXT
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .as_bytes(),
        &mut out,
    );
    assert_eq!(chunks(&out).last(), Some(&json!("[DONE]")));
}

#[test]
fn data_lines_over_the_bound_end_the_stream_too() {
    // Many short data lines of one event, never a blank line.
    let mut translator = ChatToMessages::new("");
    let mut out = Vec::new();
    let line = [b"data: ".as_slice(), &[b'x'; 1000], b"\n"].concat();
    for _ in 0..1100 {
        translator.push(&line, &mut out);
    }
    assert_eq!(events(&out).len(), 1);
    assert_eq!(events(&out)[0].0, "error");
    assert!(translator.framer.data.len() <= MAX_CARRY);
}

#[test]
fn data_that_is_no_json_ends_the_stream_with_an_error() {
    let out = to_chat(
        b"event: message_start\ndata: {\"type\": \"message_st\n\n",
        false,
        &[],
    );
    assert_eq!(chunks(&out)[0]["error"]["message"], NOT_JSON);
    let out = to_messages(b"data: <html>\n\n", &[]);
    assert_eq!(events(&out)[0].1["error"]["message"], NOT_JSON);
}

#[test]
fn comments_unknown_fields_empty_data_and_a_byte_order_mark_are_skipped() {
    let fixture =
        format!("\u{feff}: OPENROUTER PROCESSING\nid: 7\nretry: 100\n\ndata:\n\n{GPT_TEXT}");
    assert_eq!(
        to_messages(fixture.as_bytes(), &[]),
        to_messages(GPT_TEXT.as_bytes(), &[])
    );
    let unknown =
        "event: content_block_future\ndata: {\"type\": \"content_block_future\", \"index\": 0}\n\n";
    let fixture =
        CLAUDE_TEXT.replacen("event: ping", &format!("{unknown}data: \n\nevent: ping"), 1);
    assert_eq!(
        to_chat(fixture.as_bytes(), true, &[]),
        to_chat(CLAUDE_TEXT.as_bytes(), true, &[])
    );
}
