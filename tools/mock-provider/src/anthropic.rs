//! Anthropic Messages API answers (`POST /v1/messages`), plain and streamed.

use crate::generate::{new_id, Gen};
use crate::respond::{Reply, Step};
use crate::sse;
use serde_json::{json, Value};

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
    let mut steps = vec![
        Step::now(ev(
            "message_start",
            json!({"message": message(json!([]), Value::Null, 1)}),
        )),
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
    Reply::Stream(steps)
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
