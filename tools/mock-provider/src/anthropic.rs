//! Anthropic Messages API answers (`POST /v1/messages`, plain and streamed,
//! and `POST /v1/messages/count_tokens`) and Anthropic's error document.

use crate::fault::{self, Errors, Tokens};
use crate::generate::{estimate_prompt_tokens, new_id, Gen};
use crate::respond::{ApiError, Reply, Step};
use crate::sse;
use crate::tool_turn::{fragments, Turn};
use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// Anthropic's error document: `{"type": "error", "error": {"type", "message"}}`.
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The error `type` Anthropic answers an HTTP status with.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, N the same rough
/// estimate the other APIs report as prompt tokens (at least 1).
pub fn count_tokens(body: &Value) -> Result<Reply, ApiError> {
    for field in ["model", "messages"] {
        if body.get(field).is_none() {
            return Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                body: error_body("invalid_request_error", &format!("{field}: Field required")),
            });
        }
    }
    Ok(Reply::Json {
        body: json!({"input_tokens": estimate_prompt_tokens(body)}),
        delay: Duration::ZERO,
    })
}

/// Characters per streamed `input_json_delta` of a tool call's input.
const INPUT_FRAGMENT: usize = 8;

/// `POST /v1/messages`: text, a tool call, or text quoting tool results.
pub fn messages(g: &Gen, turn: Turn) -> Reply {
    match turn {
        Turn::Text => messages_text(g),
        Turn::Quote(text) => messages_text(&g.with_reply(text)),
        Turn::Call { name, arguments } => messages_tool_use(g, &name, arguments),
    }
}

/// The `message` object with `content` and `stop_reason`.
fn message(g: &Gen, id: &str, content: Value, stop_reason: Value, output_tokens: u64) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": g.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": g.prompt_tokens, "output_tokens": output_tokens},
        "served_by": g.name,
    })
}

/// An event `name` with its `type` (and the mock's `served_by`).
fn event(g: &Gen, name: &str, mut v: Value) -> Bytes {
    v["type"] = Value::from(name);
    v["served_by"] = Value::from(g.name.as_str());
    sse::event(name, &v)
}

fn messages_text(g: &Gen) -> Reply {
    let id = new_id("msg_");
    let message =
        |content, stop_reason, output_tokens| message(g, &id, content, stop_reason, output_tokens);
    if !g.stream {
        return Reply::Json {
            body: message(
                json!([{"type": "text", "text": g.text()}]),
                json!("end_turn"),
                g.output_tokens,
            ),
            delay: g.total_delay(),
        };
    }
    let ev = |name: &str, v: Value| event(g, name, v);
    let start = ev(
        "message_start",
        json!({"message": message(json!([]), Value::Null, 1)}),
    );
    let mut steps = vec![
        Step::now(start.clone()),
        Step::now(ev(
            "content_block_start",
            json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
        )),
    ];
    steps.extend(g.token_steps(|t| {
        ev(
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "text_delta", "text": t}}),
        )
    }));
    steps.push(Step::now(ev("content_block_stop", json!({"index": 0}))));
    steps.push(Step::now(ev(
        "message_delta",
        json!({
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": g.output_tokens},
        }),
    )));
    steps.push(Step::now(ev("message_stop", json!({}))));
    let ping = || ev("ping", json!({}));
    Reply::Stream(break_stream(g, steps, start, ping, g.token_count()))
}

/// A message asking for one tool call (Anthropic Messages API, tool use): a
/// `tool_use` block and `stop_reason: "tool_use"`. Streamed (Anthropic,
/// streaming messages), the block starts with an empty `input`, which
/// `input_json_delta` events then give as `partial_json` fragments.
fn messages_tool_use(g: &Gen, name: &str, input: Value) -> Reply {
    let id = new_id("msg_");
    let tool_use_id = new_id("toolu_");
    let stop = json!("tool_use");
    if !g.stream {
        let block = json!([{"type": "tool_use", "id": tool_use_id, "name": name, "input": input}]);
        return Reply::Json {
            body: message(g, &id, block, stop, g.output_tokens),
            delay: g.total_delay(),
        };
    }
    let ev = |name: &str, v: Value| event(g, name, v);
    let start = ev(
        "message_start",
        json!({"message": message(g, &id, json!([]), Value::Null, 1)}),
    );
    let block = json!({"type": "tool_use", "id": tool_use_id, "name": name, "input": {}});
    let mut steps = vec![
        Step::now(start.clone()),
        Step::now(ev(
            "content_block_start",
            json!({"index": 0, "content_block": block}),
        )),
    ];
    let pieces = fragments(&input.to_string(), INPUT_FRAGMENT);
    let count = pieces.len();
    steps.extend(g.steps_for(pieces, |piece| {
        ev(
            "content_block_delta",
            json!({"index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}),
        )
    }));
    steps.push(Step::now(ev("content_block_stop", json!({"index": 0}))));
    steps.push(Step::now(ev(
        "message_delta",
        json!({
            "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": g.output_tokens},
        }),
    )));
    steps.push(Step::now(ev("message_stop", json!({}))));
    let ping = || ev("ping", json!({}));
    Reply::Stream(break_stream(g, steps, start, ping, count))
}

/// `steps` as a stream fault leaves them. Anthropic's ping comes before any
/// content; its errors arrive as an `error` event, after which nothing more is sent.
fn break_stream(
    g: &Gen,
    steps: Vec<Step>,
    start: Bytes,
    ping: impl FnOnce() -> Bytes,
    count: usize,
) -> Vec<Step> {
    let tokens = Tokens { first: 2, count };
    let error = || {
        sse::event(
            "error",
            &error_body("overloaded_error", &fault::message(&g.name)),
        )
    };
    let errors = Errors {
        failed_opening: || vec![Step::now(start), Step::now(ping()), Step::now(error())],
        error: |_| error(),
    };
    fault::apply(g.fault, steps, tokens, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::Behaviour;

    #[test]
    fn stream_event_sequence() {
        let b = Behaviour {
            output_tokens: 2,
            ..Behaviour::default()
        };
        let g = Gen::new(
            &b,
            &json!({"model": "claude-x", "max_tokens": 10, "stream": true}),
        );
        let Reply::Stream(steps) = messages_text(&g) else {
            panic!("expected a stream");
        };
        let names: Vec<String> = steps
            .iter()
            .map(|s| {
                let text = String::from_utf8_lossy(&s.bytes).into_owned();
                let (head, rest) = text.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(rest.strip_prefix("data: ").unwrap().trim_end()).unwrap();
                let name = head.strip_prefix("event: ").unwrap().to_owned();
                assert_eq!(data["type"], name.as_str());
                name
            })
            .collect();
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
    }

    /// The streamed event names and the last event's bytes under `kind`.
    fn faulted(kind: &str) -> (Vec<String>, String) {
        let b = Behaviour {
            output_tokens: 4,
            stream_fault: Some(crate::fault::StreamFault::parse(kind).unwrap()),
            fault_after_tokens: 3,
            ..Behaviour::default()
        };
        let g = Gen::new(&b, &json!({"model": "c", "max_tokens": 10, "stream": true}));
        let Reply::Stream(steps) = messages_text(&g) else {
            panic!("expected a stream");
        };
        let texts: Vec<String> = steps
            .iter()
            .map(|s| String::from_utf8_lossy(&s.bytes).into_owned())
            .collect();
        let names = texts
            .iter()
            .map(|t| t.lines().next().unwrap_or_default().to_owned())
            .collect();
        (names, texts.last().cloned().unwrap_or_default())
    }

    const ERROR: &str = "event: error\ndata: {\"error\":{\"message\":\"injected stream error from mock\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n";

    #[test]
    fn stream_errors_before_and_after_content() {
        let (names, last) = faulted("error-before-content");
        assert_eq!(
            names,
            ["event: message_start", "event: ping", "event: error"]
        );
        assert_eq!(last, ERROR);
        let (names, last) = faulted("error-after-content");
        assert_eq!(
            names,
            [
                "event: message_start",
                "event: content_block_start",
                "event: content_block_delta",
                "event: content_block_delta",
                "event: content_block_delta",
                "event: error"
            ]
        );
        assert_eq!(last, ERROR);
    }

    #[test]
    fn counts_tokens_or_names_the_missing_field() {
        let body = json!({"model": "c", "messages": [{"role": "user", "content": "12345678"}]});
        let Ok(Reply::Json { body, .. }) = count_tokens(&body) else {
            panic!("expected json");
        };
        assert_eq!(body, json!({"input_tokens": 3}));
        let err = count_tokens(&json!({"model": "c"})).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            err.body,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: Field required"}})
        );
        assert_eq!(error_type(529), "overloaded_error");
        assert_eq!(error_type(503), "api_error");
        assert_eq!(error_type(422), "invalid_request_error");
    }

    #[test]
    fn plain_message() {
        let g = Gen::new(
            &Behaviour::default(),
            &json!({"model": "c", "max_tokens": 3}),
        );
        let Reply::Json { body, .. } = messages_text(&g) else {
            panic!("expected json");
        };
        assert_eq!(body["content"][0]["text"], "tok1 tok2 tok3 ");
        assert_eq!(body["usage"]["output_tokens"], 3);
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["model"], "c");
    }

    #[test]
    fn tool_use_message_and_stream() {
        let call = || Turn::Call {
            name: "get_weather".into(),
            arguments: json!({"location": "x"}),
        };
        let b = Behaviour::default();
        let plain = Gen::new(&b, &json!({"model": "claude", "max_tokens": 100}));
        let Reply::Json { body, .. } = messages(&plain, call()) else {
            panic!("expected json");
        };
        assert_eq!(body["stop_reason"], "tool_use");
        let [block] = body["content"].as_array().unwrap().as_slice() else {
            panic!("one block expected");
        };
        assert_eq!(block["type"], "tool_use");
        assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
        assert_eq!(
            (&block["name"], &block["input"]),
            (&json!("get_weather"), &json!({"location": "x"}))
        );

        let streamed = Gen::new(
            &b,
            &json!({"model": "claude", "max_tokens": 100, "stream": true}),
        );
        let Reply::Stream(steps) = messages(&streamed, call()) else {
            panic!("expected a stream");
        };
        let events: Vec<(String, Value)> = steps
            .iter()
            .map(|s| {
                let text = String::from_utf8_lossy(&s.bytes).into_owned();
                let (head, rest) = text.split_once('\n').unwrap();
                let data = rest.strip_prefix("data: ").unwrap().trim_end();
                (
                    head.strip_prefix("event: ").unwrap().to_owned(),
                    serde_json::from_str(data).unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"));
        assert_eq!(
            names[names.len() - 3..],
            ["content_block_stop", "message_delta", "message_stop"]
        );
        let start = &events[1].1;
        assert_eq!(start["content_block"]["type"], "tool_use");
        assert_eq!(start["content_block"]["input"], json!({}));
        let partial: String = events
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .map(|(_, e)| {
                assert_eq!(e["delta"]["type"], "input_json_delta");
                e["delta"]["partial_json"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&partial).unwrap(),
            json!({"location": "x"})
        );
        assert!(
            names
                .iter()
                .filter(|n| **n == "content_block_delta")
                .count()
                > 1
        );
        assert_eq!(
            events[events.len() - 2].1["delta"]["stop_reason"],
            "tool_use"
        );
    }

    #[test]
    fn quoted_tool_result_is_the_answer_text() {
        let g = Gen::new(
            &Behaviour::default(),
            &json!({"model": "c", "max_tokens": 3}),
        );
        let Reply::Json { body, .. } =
            messages(&g, Turn::Quote("The tool said: 15 degrees".into()))
        else {
            panic!("expected json");
        };
        assert_eq!(
            body["content"],
            json!([{"type": "text", "text": "The tool said: 15 degrees"}])
        );
        assert_eq!(body["stop_reason"], "end_turn");
    }
}
