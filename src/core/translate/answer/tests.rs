use super::*;
use serde_json::{json, Value};

fn parse(bytes: Option<Vec<u8>>) -> Value {
    let bytes = bytes.unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Anthropic Messages API, "Tool use" overview: the answer that asks for a tool.
const CLAUDE_TOOL_USE: &str = r#"{
      "id": "msg_01Aq9w938a90dw8q",
      "type": "message",
      "model": "claude-opus-4-6",
      "stop_reason": "tool_use",
      "stop_sequence": null,
      "role": "assistant",
      "content": [
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
         "input": {"location": "San Francisco, CA", "unit": "celsius"}}
      ],
      "usage": {"input_tokens": 472, "output_tokens": 89}
    }"#;

/// Anthropic Messages API, "Create a Message", response example with prompt caching.
const CLAUDE_CACHED: &str = r#"{
      "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
      "type": "message",
      "role": "assistant",
      "model": "claude-sonnet-4-5-20250929",
      "content": [{"type": "text", "text": "Hi! My name is Claude."}],
      "stop_reason": "end_turn",
      "stop_sequence": null,
      "usage": {"input_tokens": 2095, "output_tokens": 503,
                "cache_creation_input_tokens": 2051, "cache_read_input_tokens": 4102,
                "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0},
                "service_tier": "standard"}
    }"#;

/// Anthropic, "Extended thinking": a thinking block before the answer's text.
const CLAUDE_THINKING: &str = r#"{
      "id": "msg_01Thk", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
      "content": [
        {"type": "thinking", "thinking": "Let me analyze this step by step...",
         "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
        {"type": "text", "text": "Based on my analysis, "},
        {"type": "text", "text": "the answer is 42."}
      ],
      "stop_reason": "max_tokens", "stop_sequence": null,
      "usage": {"input_tokens": 10, "output_tokens": 1024}
    }"#;

/// OpenAI Chat Completions, "Create chat completion", default example response.
const GPT_TEXT: &str = r#"{
      "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
      "object": "chat.completion",
      "created": 1741569952,
      "model": "gpt-4.1-2025-04-14",
      "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": "Hello! How can I assist you today?",
                    "refusal": null, "annotations": []},
        "logprobs": null,
        "finish_reason": "stop"
      }],
      "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                  "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
      "service_tier": "default"
    }"#;

/// OpenAI Chat Completions, "Create chat completion", functions example response.
const GPT_TOOLS: &str = r#"{
      "id": "chatcmpl-abc123",
      "object": "chat.completion",
      "created": 1699896916,
      "model": "gpt-4o-mini",
      "choices": [{
        "index": 0,
        "message": {
          "role": "assistant",
          "content": null,
          "tool_calls": [{"id": "call_abc123", "type": "function",
            "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}}]
        },
        "logprobs": null,
        "finish_reason": "tool_calls"
      }],
      "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
                "prompt_tokens_details": {"cached_tokens": 64}}
    }"#;

#[test]
fn a_tool_use_answer_becomes_a_chat_completion_with_tool_calls() {
    let chat = parse(messages_answer_to_chat(
        CLAUDE_TOOL_USE.as_bytes(),
        1_700_000_000,
    ));
    assert_eq!(chat["id"], "chatcmpl-01Aq9w938a90dw8q");
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["created"], 1_700_000_000);
    assert_eq!(chat["model"], "claude-opus-4-6");
    let choice = &chat["choices"][0];
    assert_eq!(chat["choices"].as_array().map(Vec::len), Some(1));
    assert_eq!(choice["finish_reason"], "tool_calls");
    let message = &choice["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(
        message["content"],
        "I'll check the current weather in San Francisco for you."
    );
    let call = &message["tool_calls"][0];
    assert_eq!(call["id"], "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    // The arguments are a JSON string holding the input object.
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or(""))
            .unwrap_or_default();
    assert_eq!(
        arguments,
        json!({"location": "San Francisco, CA", "unit": "celsius"})
    );
    assert_eq!(
        chat["usage"],
        json!({"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561,
                   "prompt_tokens_details": {"cached_tokens": 0}})
    );
}

#[test]
fn the_prompt_counts_cache_writes_and_reads_and_the_reads_are_cached_tokens() {
    let chat = parse(messages_answer_to_chat(CLAUDE_CACHED.as_bytes(), 1));
    assert_eq!(
        chat["choices"][0]["message"]["content"],
        "Hi! My name is Claude."
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    assert!(chat["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(chat["usage"]["prompt_tokens"], 2095 + 2051 + 4102);
    assert_eq!(chat["usage"]["completion_tokens"], 503);
    assert_eq!(chat["usage"]["total_tokens"], 2095 + 2051 + 4102 + 503);
    assert_eq!(
        chat["usage"]["prompt_tokens_details"]["cached_tokens"],
        4102
    );
}

#[test]
fn thinking_is_dropped_and_text_blocks_are_joined() {
    let chat = parse(messages_answer_to_chat(CLAUDE_THINKING.as_bytes(), 1));
    let message = &chat["choices"][0]["message"];
    assert_eq!(
        message["content"],
        "Based on my analysis, the answer is 42."
    );
    assert!(!chat.to_string().contains("analyze this step"));
    assert_eq!(chat["choices"][0]["finish_reason"], "length");
}

#[test]
fn an_answer_without_text_has_null_content() {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
            "content":[{"type":"tool_use","id":"toolu_1","name":"now","input":{}}],
            "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}"#;
    let chat = parse(messages_answer_to_chat(body, 1));
    assert_eq!(chat["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
}

#[test]
fn every_stop_reason_has_its_finish_reason() {
    for (stop, finish) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("model_context_window_exceeded", "length"),
    ] {
        let body = format!(
            r#"{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],
                "stop_reason":"{stop}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        );
        let chat = parse(messages_answer_to_chat(body.as_bytes(), 1));
        assert_eq!(chat["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

#[test]
fn a_body_that_is_no_message_gives_none() {
    for body in [
        &b"not json"[..],
        br#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
        br#"[1,2]"#,
        br#"{"type":"message","content":"a string"}"#,
        b"",
    ] {
        assert_eq!(messages_answer_to_chat(body, 1), None);
    }
}

#[test]
fn a_chat_completion_becomes_a_message() {
    let message = parse(chat_answer_to_messages(GPT_TEXT.as_bytes()));
    assert_eq!(
        message,
        json!({
            "id": "msg_B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            "type": "message",
            "role": "assistant",
            "model": "gpt-4.1-2025-04-14",
            "content": [{"type": "text", "text": "Hello! How can I assist you today?"}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": 19, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 10}
        })
    );
}

#[test]
fn tool_calls_become_tool_use_blocks_with_parsed_input() {
    let message = parse(chat_answer_to_messages(GPT_TOOLS.as_bytes()));
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(
        message["content"],
        json!([{"type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
                    "input": {"location": "Boston, MA"}}])
    );
    // Anthropic's input_tokens leaves out the cache reads, which are counted apart.
    assert_eq!(message["usage"]["input_tokens"], 82 - 64);
    assert_eq!(message["usage"]["cache_read_input_tokens"], 64);
    assert_eq!(message["usage"]["output_tokens"], 17);
}

#[test]
fn arguments_that_are_no_json_object_become_an_empty_input() {
    for arguments in ["", "{\\\"city\\\": \\\"Par", "[1]", "null"] {
        let body = format!(
            r#"{{"id":"chatcmpl-1","model":"m","choices":[{{"index":0,"finish_reason":"tool_calls",
                "message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1",
                "type":"function","function":{{"name":"f","arguments":"{arguments}"}}}}]}}}}]}}"#
        );
        let message = parse(chat_answer_to_messages(body.as_bytes()));
        assert_eq!(message["content"][0]["input"], json!({}), "{arguments}");
        // No usage reported: zeros rather than a failed answer.
        assert_eq!(message["usage"]["output_tokens"], 0);
    }
}

#[test]
fn a_refusal_is_kept_as_text_and_content_filter_is_a_refusal() {
    let body =
        br#"{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"finish_reason":"content_filter",
            "message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}]}"#;
    let message = parse(chat_answer_to_messages(body));
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "I can't help with that."}])
    );
    assert_eq!(message["stop_reason"], "refusal");
}

#[test]
fn every_finish_reason_has_its_stop_reason() {
    for (finish, stop) in [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "refusal"),
    ] {
        assert_eq!(stop_reason(finish), stop);
    }
}

#[test]
fn a_body_that_is_no_chat_completion_gives_none() {
    for body in [
        &b"{}"[..],
        br#"{"choices":[]}"#,
        br#"{"choices":[{"index":1,"message":{"content":"x"}}]}"#,
        br#"{"error":{"message":"x"}}"#,
        b"\xff",
    ] {
        assert_eq!(chat_answer_to_messages(body), None);
    }
}

#[test]
fn an_anthropic_error_becomes_openais_shape() {
    // Anthropic Messages API, "Errors", error shapes.
    let body = br#"{"type":"error","error":{"type":"not_found_error",
            "message":"The requested resource could not be found."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
    assert_eq!(
        parse(error_to_openai(body)),
        json!({"error": {"message": "The requested resource could not be found.",
                             "type": "not_found_error", "param": null, "code": null}})
    );
    assert_eq!(error_to_openai(br#"{"error":"x"}"#), None);
    assert_eq!(error_to_openai(b"<html>"), None);
}

#[test]
fn an_openai_error_becomes_anthropics_shape_typed_by_status() {
    // OpenAI answers a bad key with 401 and type invalid_request_error.
    let body = br#"{"error":{"message":"Incorrect API key provided: sk-abc.","type":"invalid_request_error",
            "param":null,"code":"invalid_api_key"}}"#;
    assert_eq!(
        parse(error_to_anthropic(body, 401)),
        json!({"type": "error", "error": {"type": "authentication_error",
                   "message": "Incorrect API key provided: sk-abc."}})
    );
    for (status, kind) in [
        (400, "invalid_request_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ] {
        let error = parse(error_to_anthropic(
            br#"{"error":{"message":"m","type":"x"}}"#,
            status,
        ));
        assert_eq!(error["error"]["type"], kind, "{status}");
    }
}

#[test]
fn other_statuses_go_by_openai_type_or_code_then_by_class() {
    let typed =
        |body: &[u8], status| parse(error_to_anthropic(body, status))["error"]["type"].clone();
    assert_eq!(
        typed(br#"{"error":{"message":"m","type":"server_error"}}"#, 502),
        "api_error"
    );
    assert_eq!(
        typed(
            br#"{"error":{"message":"m","type":"requests","code":"rate_limit_exceeded"}}"#,
            200
        ),
        "rate_limit_error"
    );
    assert_eq!(
        typed(br#"{"error":{"message":"m","type":"odd"}}"#, 422),
        "invalid_request_error"
    );
    assert_eq!(typed(br#"{"error":{"message":"m"}}"#, 502), "api_error");
    // vLLM's flat error object, its code the status number.
    let vllm = br#"{"object":"error","message":"maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}"#;
    let error = parse(error_to_anthropic(vllm, 400));
    assert_eq!(
        error["error"]["message"],
        "maximum context length is 4096 tokens"
    );
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error_to_anthropic(br#"{"message":"no error"}"#, 500), None);
}
