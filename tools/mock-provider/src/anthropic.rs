//! Anthropic Messages API answers (`POST /v1/messages`, plain and streamed,
//! and `POST /v1/messages/count_tokens`) and Anthropic's error document.

use crate::fault::{self, Errors, Tokens};
use crate::generate::{estimate_prompt_tokens, new_id, Gen};
use crate::respond::{ApiError, Reply, Step};
use crate::sse;
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

/// `POST /v1/messages`.
pub fn messages(g: &Gen) -> Reply {
    let id = new_id("msg_");
    let message = |content: Value, stop_reason: Value, output_tokens: u64| {
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
    };
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
    let ev = |name: &str, mut v: Value| {
        v["type"] = Value::from(name);
        v["served_by"] = Value::from(g.name.as_str());
        sse::event(name, &v)
    };
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
    Reply::Stream(break_stream(g, steps, start, ping))
}

/// `steps` as a stream fault leaves them. Anthropic's ping comes before any
/// content; its errors arrive as an `error` event, after which nothing more is sent.
fn break_stream(
    g: &Gen,
    steps: Vec<Step>,
    start: Bytes,
    ping: impl FnOnce() -> Bytes,
) -> Vec<Step> {
    let tokens = Tokens {
        first: 2,
        count: g.token_count(),
    };
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
        let Reply::Stream(steps) = messages(&g) else {
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
        let Reply::Stream(steps) = messages(&g) else {
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
        let Reply::Json { body, .. } = messages(&g) else {
            panic!("expected json");
        };
        assert_eq!(body["content"][0]["text"], "tok1 tok2 tok3 ");
        assert_eq!(body["usage"]["output_tokens"], 3);
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["model"], "c");
    }
}
