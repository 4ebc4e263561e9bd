//! The two translations end to end, on bodies shaped like the API references' examples.

use super::*;
use serde_json::json;

const CLAUDE: Target<'static> = Target {
    model: "claude-sonnet-4-5-20250929",
    max_output_tokens: None,
    anthropic_cache: false,
};

const GPT: Target<'static> = Target {
    model: "gpt-4o-2024-08-06",
    max_output_tokens: None,
    anthropic_cache: false,
};

fn to_messages(body: Value, target: &Target) -> Result<Value, Untranslatable> {
    let out = chat_to_messages(&serde_json::to_vec(&body).unwrap(), target)?;
    Ok(serde_json::from_slice(&out).unwrap())
}

fn to_chat(body: Value) -> Result<Value, Untranslatable> {
    let out = messages_to_chat(&serde_json::to_vec(&body).unwrap(), &GPT)?;
    Ok(serde_json::from_slice(&out).unwrap())
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get current temperature for a given location.",
        "parameters": {"type": "object",
            "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
            "required": ["location"], "additionalProperties": false},
        "strict": true}})
}

/// The second step of OpenAI's function calling guide: the tool's result goes back.
fn chat_tool_loop() -> Value {
    json!({
        "model": "gpt-4.1",
        "messages": [
            {"role": "developer", "content": "You are a weather bot."},
            {"role": "user", "content": "What's the weather like in Paris today?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_12345xyz", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"}}]},
            {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14°C, light rain"}
        ],
        "tools": [weather_tool()],
        "max_completion_tokens": 500,
        "temperature": 0.2,
        "stream": true,
        "stream_options": {"include_usage": true},
        "user": "user-1234"
    })
}

#[test]
fn a_chat_tool_loop_becomes_messages_with_tool_use_and_tool_result() {
    let out = to_messages(chat_tool_loop(), &CLAUDE).unwrap();
    assert_eq!(
        out,
        json!({
            "model": "claude-sonnet-4-5-20250929",
            "system": "You are a weather bot.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What's the weather like in Paris today?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_12345xyz", "name": "get_weather",
                     "input": {"location": "Paris, France"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_12345xyz", "content": "14°C, light rain"}]}
            ],
            "tools": [{"name": "get_weather",
                "description": "Get current temperature for a given location.",
                "input_schema": {"type": "object",
                    "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
                    "required": ["location"], "additionalProperties": false}}],
            "max_tokens": 500,
            "temperature": 0.2,
            "stream": true,
            "metadata": {"user_id": "user-1234"}
        })
    );
}

#[test]
fn parallel_tool_results_share_one_user_turn_before_the_users_text() {
    let mut body = chat_tool_loop();
    let messages = body["messages"].as_array_mut().unwrap();
    messages[2]["tool_calls"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "call_67890abc", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"location\":\"Bogotá, Colombia\"}"}}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_67890abc", "content": "18°C"}));
    messages.push(json!({"role": "user", "content": "And which is warmer?"}));
    let out = to_messages(body, &CLAUDE).unwrap();
    let last = &out["messages"][2]["content"];
    let kinds: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_result", "tool_result", "text"]);
    assert_eq!(last[1]["tool_use_id"], "call_67890abc");
    assert_eq!(out["messages"].as_array().unwrap().len(), 3);
}

#[test]
fn max_tokens_defaults_to_the_catalog_then_1024_and_is_capped_by_it() {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(
        to_messages(body.clone(), &CLAUDE).unwrap()["max_tokens"],
        1024
    );
    let capped = Target {
        max_output_tokens: Some(8192),
        ..CLAUDE
    };
    assert_eq!(
        to_messages(body.clone(), &capped).unwrap()["max_tokens"],
        8192
    );
    let mut asked = body.clone();
    asked["max_tokens"] = json!(100_000);
    assert_eq!(
        to_messages(asked.clone(), &capped).unwrap()["max_tokens"],
        8192
    );
    // max_completion_tokens is OpenAI's current name: it wins over the deprecated one.
    asked["max_completion_tokens"] = json!(300);
    assert_eq!(to_messages(asked, &capped).unwrap()["max_tokens"], 300);
    let mut zero = body;
    zero["max_tokens"] = json!(0);
    assert_eq!(to_messages(zero, &CLAUDE).unwrap_err().field, "max_tokens");
}

#[test]
fn reasoning_effort_becomes_a_thinking_budget_without_temperature() {
    let body = json!({"model": "o3", "messages": [{"role": "user", "content": "Prove it."}],
        "reasoning_effort": "medium", "max_completion_tokens": 2000, "temperature": 0.5});
    let out = to_messages(body.clone(), &CLAUDE).unwrap();
    assert_eq!(
        out["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    assert_eq!(out["max_tokens"], 6096);
    assert!(out.get("temperature").is_none());
    assert!(out.get("reasoning_effort").is_none());
    let mut top_p = body;
    top_p.as_object_mut().unwrap().remove("temperature");
    top_p["top_p"] = json!(0.5);
    assert_eq!(to_messages(top_p, &CLAUDE).unwrap()["top_p"], 0.95);
}

#[test]
fn thinking_is_left_off_in_a_tool_loop_and_with_a_forced_tool() {
    let mut body = chat_tool_loop();
    body["reasoning_effort"] = json!("high");
    let out = to_messages(body.clone(), &CLAUDE).unwrap();
    assert!(out.get("thinking").is_none(), "{out}");
    assert_eq!(out["temperature"], 0.2);
    let mut forced = json!({"model": "o3", "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [weather_tool()], "tool_choice": "required", "reasoning_effort": "high"});
    assert!(to_messages(forced.clone(), &CLAUDE)
        .unwrap()
        .get("thinking")
        .is_none());
    forced["tool_choice"] = json!("auto");
    assert!(to_messages(forced, &CLAUDE)
        .unwrap()
        .get("thinking")
        .is_some());
}

#[test]
fn fields_without_an_equivalent_are_refused_naming_them() {
    let base = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]});
    let cases = [
        ("n", json!(2)),
        ("logprobs", json!(true)),
        ("top_logprobs", json!(3)),
        ("audio", json!({"voice": "alloy", "format": "wav"})),
        ("modalities", json!(["text", "audio"])),
        ("response_format", json!({"type": "json_object"})),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
        ),
        ("functions", json!([{"name": "f", "parameters": {}}])),
    ];
    for (field, value) in cases {
        let mut body = base.clone();
        body[field] = value;
        let err = to_messages(body, &CLAUDE).unwrap_err();
        assert_eq!(err.field, field, "{err:?}");
    }
}

#[test]
fn fields_anthropic_would_reject_are_dropped() {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi", "name": "ann"}],
        "seed": 7, "frequency_penalty": 0.5, "presence_penalty": 0.1, "logit_bias": {"50256": -100},
        "service_tier": "auto", "store": true, "metadata": {"k": "v"}, "prediction": {"type": "content", "content": "x"},
        "web_search_options": {}, "prompt_cache_key": "k", "verbosity": "low", "n": 1, "logprobs": false,
        "response_format": {"type": "text"}, "modalities": ["text"], "stream_options": {"include_usage": true},
        "some_future_field": 1});
    let out = to_messages(body, &CLAUDE).unwrap();
    let mut keys: Vec<&str> = out
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["max_tokens", "messages", "model"]);
    assert_eq!(
        out["messages"][0],
        json!({"role": "user", "content": [{"type": "text", "text": "Hi"}]})
    );
}

#[test]
fn temperature_above_anthropics_range_is_clamped_and_wins_over_top_p() {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 1.6, "top_p": 0.9});
    let out = to_messages(body.clone(), &CLAUDE).unwrap();
    assert_eq!(out["temperature"], 1.0);
    assert!(out.get("top_p").is_none());
    let mut top_p = body;
    top_p.as_object_mut().unwrap().remove("temperature");
    assert_eq!(to_messages(top_p, &CLAUDE).unwrap()["top_p"], 0.9);
}

#[test]
fn anthropic_cache_marks_the_tools_the_system_and_the_last_user_turn() {
    let cached = Target {
        anthropic_cache: true,
        ..CLAUDE
    };
    let out = to_messages(chat_tool_loop(), &cached).unwrap();
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(
        out["system"],
        json!([{"type": "text", "text": "You are a weather bot.", "cache_control": ephemeral}])
    );
    assert_eq!(out["tools"][0]["cache_control"], ephemeral);
    assert_eq!(out["messages"][2]["content"][0]["cache_control"], ephemeral);
    assert!(out["messages"][0]["content"][0]
        .get("cache_control")
        .is_none());
}

#[test]
fn a_history_with_tool_calls_but_no_tools_lists_them_and_forbids_calls() {
    let mut body = chat_tool_loop();
    body.as_object_mut().unwrap().remove("tools");
    let out = to_messages(body, &CLAUDE).unwrap();
    assert_eq!(out["tools"][0]["name"], "get_weather");
    assert_eq!(out["tool_choice"], json!({"type": "none"}));
}

#[test]
fn a_body_that_is_not_a_json_object_is_refused() {
    assert_eq!(chat_to_messages(b"[1]", &CLAUDE).unwrap_err().field, "body");
    assert_eq!(
        chat_to_messages(b"{\"model\":", &CLAUDE).unwrap_err().field,
        "body"
    );
    assert_eq!(messages_to_chat(b"null", &GPT).unwrap_err().field, "body");
    let no_messages = br#"{"model":"gpt-4o"}"#;
    assert_eq!(
        chat_to_messages(no_messages, &CLAUDE).unwrap_err().field,
        "messages"
    );
}

#[test]
fn wants_usage_reads_stream_options_include_usage() {
    assert!(wants_usage(
        br#"{"stream":true,"stream_options":{"include_usage":true}}"#
    ));
    assert!(!wants_usage(
        br#"{"stream":true,"stream_options":{"include_usage":false}}"#
    ));
    assert!(!wants_usage(br#"{"stream":true}"#));
    assert!(!wants_usage(br#"{"stream_options":null}"#));
    assert!(!wants_usage(b"not json"));
}

/// Anthropic's tool use guide: the weather tool, called and answered.
fn messages_tool_loop() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "get_weather", "description": "Get the current weather in a given location",
            "input_schema": {"type": "object",
                "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
                "required": ["location"]},
            "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call get_weather.", "signature": "EqQBCgIYAhIM"},
                {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"}]}
        ],
        "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "top_k": 5,
        "metadata": {"user_id": "13803d75-b4b5-4c3e-b2a2-6f21399b021b"}
    })
}

#[test]
fn a_messages_tool_loop_becomes_chat_with_tool_calls_and_a_tool_message() {
    let out = to_chat(messages_tool_loop()).unwrap();
    assert_eq!(
        out,
        json!({
            "model": "gpt-4o-2024-08-06",
            "messages": [
                {"role": "system", "content": "You are a weather bot."},
                {"role": "user", "content": "What's the weather like in San Francisco?"},
                {"role": "assistant", "content": "I'll check the current weather in San Francisco for you.",
                 "tool_calls": [{"id": "toolu_01A09q90qw90lq917835lq9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Get the current weather in a given location",
                "parameters": {"type": "object",
                    "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
                    "required": ["location"]}}}],
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "max_tokens": 1024,
            "user": "13803d75-b4b5-4c3e-b2a2-6f21399b021b",
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn images_and_tool_errors_map_to_chat_parts() {
    let out = to_chat(json!({"model": "claude", "max_tokens": 64, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/ant.jpg"}},
            {"type": "text", "text": "Compare these."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "zoom", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true,
            "content": [{"type": "text", "text": "zoom failed"}]}]}
    ]}))
    .unwrap();
    let parts = &out["messages"][0]["content"];
    assert_eq!(
        parts[0]["image_url"]["url"],
        "data:image/jpeg;base64,/9j/4AAQ"
    );
    assert_eq!(parts[1]["image_url"]["url"], "https://example.com/ant.jpg");
    assert_eq!(out["messages"][1]["content"], Value::Null);
    assert_eq!(out["messages"][2]["content"], "Error: zoom failed");
}

#[test]
fn each_messages_tool_choice_has_its_chat_form() {
    for (choice, expected) in [
        (json!({"type": "any"}), json!("required")),
        (json!({"type": "none"}), json!("none")),
        (
            json!({"type": "tool", "name": "get_weather"}),
            json!({"type": "function", "function": {"name": "get_weather"}}),
        ),
    ] {
        let mut body = messages_tool_loop();
        body["tool_choice"] = choice;
        let out = to_chat(body).unwrap();
        assert_eq!(out["tool_choice"], expected);
        assert!(out.get("parallel_tool_calls").is_none());
    }
}

#[test]
fn what_chat_completions_cannot_carry_is_refused_naming_it() {
    let mut orphan = messages_tool_loop();
    orphan["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_other");
    assert_eq!(to_chat(orphan).unwrap_err().field, "messages[2].content[0]");
    let mut unanswered = messages_tool_loop();
    unanswered["messages"][2] = json!({"role": "user", "content": "never mind"});
    assert_eq!(
        to_chat(unanswered).unwrap_err().field,
        "messages[1].content"
    );
    let mut server_tool = messages_tool_loop();
    server_tool["tools"] =
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]);
    assert_eq!(to_chat(server_tool).unwrap_err().field, "tools[0]");
    let mut stops = messages_tool_loop();
    stops["stop_sequences"] = json!(["a", "b", "c", "d", "e"]);
    assert_eq!(to_chat(stops).unwrap_err().field, "stop_sequences");
    let mut doc = messages_tool_loop();
    doc["messages"][0]["content"] = json!([{"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}]);
    assert_eq!(to_chat(doc).unwrap_err().field, "messages[0].content[0]");
    let mut mcp = messages_tool_loop();
    mcp["mcp_servers"] = json!([{"type": "url", "url": "https://example.com/sse", "name": "x"}]);
    assert_eq!(to_chat(mcp).unwrap_err().field, "mcp_servers");
}

#[test]
fn structured_output_becomes_a_json_schema_response_format() {
    let mut body = messages_tool_loop();
    let schema =
        json!({"type": "object", "properties": {"t": {"type": "number"}}, "required": ["t"]});
    body["output_config"] = json!({"format": {"type": "json_schema", "schema": schema}});
    let out = to_chat(body).unwrap();
    assert_eq!(
        out["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}})
    );
}

#[test]
fn a_request_that_does_not_stream_asks_no_usage_chunk() {
    let mut body = messages_tool_loop();
    body["stream"] = json!(false);
    let out = to_chat(body).unwrap();
    assert!(out.get("stream").is_none() && out.get("stream_options").is_none());
}

#[test]
fn no_input_makes_either_translation_panic() {
    let bodies: [&[u8]; 8] = [
        b"",
        b"{}",
        br#"{"messages":{}}"#,
        br#"{"messages":[1,"x",null,[]]}"#,
        br#"{"messages":[{"role":"user","content":[{"type":"image_url"},{"type":"text","text":5}]}]}"#,
        br#"{"messages":[{"role":"assistant","tool_calls":[{"function":null}]}]}"#,
        br#"{"messages":[{"role":"user","content":[{"type":"tool_result"},{"type":"image","source":{}}]}],"tools":[{}]}"#,
        br#"{"messages":[{"role":"user","content":"x"}],"stop":[null],"tool_choice":{"type":"function"},"tools":[{"type":"function","function":{"name":"f"}}]}"#,
    ];
    for body in bodies {
        let _ = chat_to_messages(body, &CLAUDE);
        let _ = messages_to_chat(body, &GPT);
        let _ = wants_usage(body);
    }
}
