//! `--answer-fault refusal|empty`: a 200 that answers nothing, in each API's own shape,
//! streamed or whole, for a gateway's `fallback_on` to judge.
//!
//! - refusal: chat `finish_reason: "content_filter"` with no content (as Azure OpenAI's
//!   content filter answers); Anthropic `stop_reason: "refusal"` with no content block;
//!   Responses `status: "incomplete"`, `incomplete_details.reason: "content_filter"`.
//! - empty: chat content `""` with `finish_reason: "stop"`; Anthropic one empty text block,
//!   `end_turn`; Responses `completed` with one message whose text is `""`.

use crate::respond::{self, Body, Step};
use crate::sse;
use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};

/// Which 200 that answers nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerFault {
    Refusal,
    Empty,
}

impl AnswerFault {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "refusal" => Ok(AnswerFault::Refusal),
            "empty" => Ok(AnswerFault::Empty),
            other => Err(format!("answer fault {other:?} is not refusal or empty")),
        }
    }
}

/// The API an answer is shaped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Messages,
    Responses,
}

/// The 200 for `api`, streamed when the request asked, naming the mock `name`.
pub fn answer(
    fault: AnswerFault,
    api: Api,
    stream: bool,
    model: &str,
    name: &str,
) -> Response<Body> {
    if stream {
        let steps = events(fault, api, model)
            .into_iter()
            .map(Step::now)
            .collect();
        return respond::sse(steps, false);
    }
    let mut body = whole(fault, api, model);
    body["served_by"] = Value::from(name);
    respond::json(StatusCode::OK, &body)
}

fn whole(fault: AnswerFault, api: Api, model: &str) -> Value {
    let refused = fault == AnswerFault::Refusal;
    match api {
        Api::Chat => json!({
            "id": "chatcmpl-fault", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0,
                "message": {"role": "assistant", "content": if refused { Value::Null } else { json!("") }},
                "finish_reason": if refused { "content_filter" } else { "stop" }}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
        }),
        Api::Messages => json!({
            "id": "msg_fault", "type": "message", "role": "assistant", "model": model,
            "content": if refused { json!([]) } else { json!([{"type": "text", "text": ""}]) },
            "stop_reason": if refused { "refusal" } else { "end_turn" }, "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 0},
        }),
        Api::Responses => response(fault, model),
    }
}

fn response(fault: AnswerFault, model: &str) -> Value {
    let refused = fault == AnswerFault::Refusal;
    json!({
        "id": "resp_fault", "object": "response", "created_at": 0, "model": model,
        "status": if refused { "incomplete" } else { "completed" },
        "incomplete_details": if refused { json!({"reason": "content_filter"}) } else { Value::Null },
        "error": null,
        "output": if refused { json!([]) } else { json!([{"type": "message", "id": "msg_fault",
            "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "", "annotations": []}]}]) },
        "usage": {"input_tokens": 1, "output_tokens": 0, "total_tokens": 1},
    })
}

fn events(fault: AnswerFault, api: Api, model: &str) -> Vec<Bytes> {
    let refused = fault == AnswerFault::Refusal;
    match api {
        Api::Chat => {
            let chunk = |delta: Value, finish: Value| {
                sse::data(
                    &json!({"id": "chatcmpl-fault", "object": "chat.completion.chunk",
                    "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
                )
            };
            let finish = if refused { "content_filter" } else { "stop" };
            vec![
                chunk(json!({"role": "assistant"}), Value::Null),
                chunk(json!({}), json!(finish)),
                sse::done(),
            ]
        }
        Api::Messages => vec![
            sse::event(
                "message_start",
                &json!({"type": "message_start", "message": {
                "id": "msg_fault", "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 1, "output_tokens": 0}}}),
            ),
            sse::event(
                "message_delta",
                &json!({"type": "message_delta",
                "delta": {"stop_reason": if refused { "refusal" } else { "end_turn" }, "stop_sequence": null},
                "usage": {"output_tokens": 0}}),
            ),
            sse::event("message_stop", &json!({"type": "message_stop"})),
        ],
        Api::Responses => {
            let mut created = response(fault, model);
            created["status"] = json!("in_progress");
            created["incomplete_details"] = Value::Null;
            created["output"] = json!([]);
            let last = if refused {
                "response.incomplete"
            } else {
                "response.completed"
            };
            vec![
                sse::event(
                    "response.created",
                    &json!({"type": "response.created",
                    "sequence_number": 0, "response": created}),
                ),
                sse::event(
                    last,
                    &json!({"type": last, "sequence_number": 1,
                    "response": response(fault, model)}),
                ),
            ]
        }
    }
}
