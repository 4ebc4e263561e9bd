//! OpenAI-compatible answers: chat completions, legacy completions and
//! embeddings (the Responses API, with its state, is in `responses`).

use crate::b64;
use crate::fault::{self, Errors, Tokens};
use crate::generate::{new_id, Gen};
use crate::respond::{Reply, Step};
use crate::sse;
use crate::tool_turn::{fragments, Turn};
use bytes::Bytes;
use serde_json::{json, Value};

/// Dimensions of every returned embedding.
pub const EMBEDDING_DIMS: usize = 8;

fn usage(g: &Gen) -> Value {
    json!({
        "prompt_tokens": g.prompt_tokens,
        "completion_tokens": g.output_tokens,
        "total_tokens": g.prompt_tokens + g.output_tokens,
    })
}

/// Characters per streamed fragment of a tool call's arguments.
const ARGUMENT_FRAGMENT: usize = 8;

/// `POST /v1/chat/completions`: text, a tool call, or text quoting tool results.
pub fn chat(g: &Gen, turn: Turn) -> Reply {
    match turn {
        Turn::Text => chat_text(g),
        Turn::Quote(text) => chat_text(&g.with_reply(text)),
        Turn::Call { name, arguments } => chat_tool_call(g, &name, &arguments),
    }
}

fn chat_text(g: &Gen) -> Reply {
    let id = new_id("chatcmpl-");
    if !g.stream {
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "created": g.created,
            "model": g.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": g.text(), "refusal": null},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": usage(g),
            "system_fingerprint": null,
            "served_by": g.name,
        });
        return Reply::Json {
            body,
            delay: g.total_delay(),
        };
    }
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": g.created,
            "model": g.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "served_by": g.name,
        });
        if g.include_usage {
            c["usage"] = Value::Null;
        }
        sse::data(&c)
    };
    let opening = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    let mut steps = vec![Step::now(opening.clone())];
    steps.extend(g.token_steps(|t| chunk(json!({"content": t}), Value::Null)));
    steps.push(Step::now(chunk(json!({}), json!("stop"))));
    if g.include_usage {
        let c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": g.created,
            "model": g.model,
            "choices": [],
            "usage": usage(g),
            "served_by": g.name,
        });
        steps.push(Step::now(sse::data(&c)));
    }
    steps.push(Step::now(sse::done()));
    let tokens = Tokens {
        first: 1,
        count: g.token_count(),
    };
    let errors = Errors {
        failed_opening: || vec![Step::now(opening), Step::now(stream_error(g))],
        error: |_| stream_error(g),
    };
    Reply::Stream(fault::apply(g.fault, steps, tokens, errors))
}

/// A chat completion asking for one tool call (OpenAI Chat Completions, function
/// calling): the message's `tool_calls` with the arguments as a JSON string and
/// `finish_reason: "tool_calls"`. Streamed, the first chunk carries the role and
/// the call's index, id, type and name with empty arguments, the next ones the
/// arguments' fragments under the same index.
fn chat_tool_call(g: &Gen, name: &str, arguments: &Value) -> Reply {
    let id = new_id("chatcmpl-");
    let call_id = new_id("call_");
    let arguments = arguments.to_string();
    let completion = |choice: Value, object: &str| {
        json!({
            "id": id, "object": object, "created": g.created, "model": g.model,
            "choices": [choice], "served_by": g.name,
        })
    };
    if !g.stream {
        let message = json!({
            "role": "assistant", "content": null, "refusal": null,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": arguments}}],
        });
        let choice = json!({"index": 0, "message": message, "logprobs": null,
                            "finish_reason": "tool_calls"});
        let mut body = completion(choice, "chat.completion");
        body["usage"] = usage(g);
        body["system_fingerprint"] = Value::Null;
        return Reply::Json {
            body,
            delay: g.total_delay(),
        };
    }
    let chunk = |delta: Value, finish: Value| {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        let mut c = completion(choice, "chat.completion.chunk");
        if g.include_usage {
            c["usage"] = Value::Null;
        }
        sse::data(&c)
    };
    let opening = chunk(
        json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [{
            "index": 0, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": ""},
        }]}),
        Value::Null,
    );
    let pieces = fragments(&arguments, ARGUMENT_FRAGMENT);
    let count = pieces.len();
    let mut steps = vec![Step::now(opening.clone())];
    steps.extend(g.steps_for(pieces, |piece| {
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            Value::Null,
        )
    }));
    steps.push(Step::now(chunk(json!({}), json!("tool_calls"))));
    if g.include_usage {
        let c = json!({
            "id": id, "object": "chat.completion.chunk", "created": g.created,
            "model": g.model, "choices": [], "usage": usage(g), "served_by": g.name,
        });
        steps.push(Step::now(sse::data(&c)));
    }
    steps.push(Step::now(sse::done()));
    let tokens = Tokens { first: 1, count };
    let errors = Errors {
        failed_opening: || vec![Step::now(opening), Step::now(stream_error(g))],
        error: |_| stream_error(g),
    };
    Reply::Stream(fault::apply(g.fault, steps, tokens, errors))
}

/// The error OpenAI sends inside a chat completions stream (no `choices`, and no
/// `[DONE]` after it); the SDKs raise it as an `APIError`.
fn stream_error(g: &Gen) -> Bytes {
    sse::data(&json!({"error": {
        "message": fault::message(&g.name), "type": "server_error", "code": "injected",
    }}))
}

/// `POST /v1/completions`.
pub fn completions(g: &Gen) -> Reply {
    let id = new_id("cmpl-");
    let chunk = |text: &str, finish: Value, usage: Option<Value>| {
        let mut c = json!({
            "id": id,
            "object": "text_completion",
            "created": g.created,
            "model": g.model,
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
            "served_by": g.name,
        });
        if let Some(u) = usage {
            c["usage"] = u;
        }
        c
    };
    if !g.stream {
        return Reply::Json {
            body: chunk(&g.text(), json!("stop"), Some(usage(g))),
            delay: g.total_delay(),
        };
    }
    let mut steps: Vec<Step> = g
        .token_steps(|t| sse::data(&chunk(t, Value::Null, None)))
        .collect();
    steps.push(Step::now(sse::data(&chunk("", json!("stop"), None))));
    if g.include_usage {
        let mut c = chunk("", Value::Null, Some(usage(g)));
        c["choices"] = json!([]);
        steps.push(Step::now(sse::data(&c)));
    }
    steps.push(Step::now(sse::done()));
    Reply::Stream(steps)
}

/// `POST /v1/embeddings`; `Err` is a client error message.
pub fn embeddings(g: &Gen, body: &Value) -> Result<Reply, String> {
    let inputs = embedding_inputs(body.get("input"))?;
    let base64 = match body.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => return Err(format!("unsupported encoding_format {other:?}")),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let vector = embed(input);
            let embedding = if base64 {
                Value::from(base64_f32(&vector))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(Reply::Json {
        body: json!({
            "object": "list",
            "data": data,
            "model": g.model,
            "usage": {"prompt_tokens": g.prompt_tokens, "total_tokens": g.prompt_tokens},
            "served_by": g.name,
        }),
        delay: g.ttft,
    })
}

/// The inputs to embed, each as canonical JSON text: a string, an array of
/// strings, a token array, or an array of token arrays.
fn embedding_inputs(input: Option<&Value>) -> Result<Vec<String>, String> {
    match input {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => {
            if items.iter().all(Value::is_number) {
                Ok(vec![Value::Array(items.clone()).to_string()])
            } else if items.iter().all(|v| v.is_string() || v.is_array()) {
                Ok(items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect())
            } else {
                Err("input must be a string, an array of strings or token arrays".into())
            }
        }
        _ => Err("input must be a non-empty string or array".into()),
    }
}

/// A deterministic unit vector derived from the text (FNV-1a + xorshift).
pub fn embed(text: &str) -> Vec<f32> {
    let mut state = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut raw = Vec::with_capacity(EMBEDDING_DIMS);
    for _ in 0..EMBEDDING_DIMS {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Top 24 bits -> [-1, 1).
        raw.push(((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0);
    }
    let norm = raw
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    raw.into_iter().map(|x| x / norm).collect()
}

/// Base64 (standard alphabet, padded) of the little-endian `f32` bytes, as
/// the OpenAI API returns for `encoding_format: "base64"`.
pub fn base64_f32(values: &[f32]) -> String {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    b64::encode(&bytes, b64::STANDARD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::Behaviour;

    fn gen(body: Value) -> Gen {
        let b = Behaviour {
            output_tokens: 2,
            ..Behaviour::default()
        };
        Gen::new(&b, &body)
    }

    fn stream_text(reply: Reply) -> String {
        match reply {
            Reply::Stream(steps) => steps
                .iter()
                .map(|s| String::from_utf8_lossy(&s.bytes).into_owned())
                .collect(),
            Reply::Json { .. } => panic!("expected a stream"),
        }
    }

    #[test]
    fn chat_stream_shape() {
        let s = stream_text(chat_text(&gen(json!({
            "model": "x", "stream": true, "stream_options": {"include_usage": true}
        }))));
        let events: Vec<Value> = s
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(events.len(), 5, "role + 2 tokens + finish + usage");
        assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(events[1]["choices"][0]["delta"]["content"], "tok1 ");
        assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[4]["choices"], json!([]));
        assert_eq!(events[4]["usage"]["completion_tokens"], 2);
        assert!(s.ends_with("data: [DONE]\n\n"));
        assert!(events
            .iter()
            .all(|e| e["served_by"] == "mock" && e["model"] == "x"));
    }

    fn faulted(kind: &str, after: u64, body: Value) -> Reply {
        let b = Behaviour {
            output_tokens: 4,
            stream_fault: Some(crate::fault::StreamFault::parse(kind).unwrap()),
            fault_after_tokens: after,
            ..Behaviour::default()
        };
        chat_text(&Gen::new(&b, &body))
    }

    fn data_events(s: &str) -> Vec<Value> {
        s.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    const ERROR: &str = "data: {\"error\":{\"code\":\"injected\",\"message\":\"injected stream error from mock\",\"type\":\"server_error\"}}\n\n";

    #[test]
    fn chat_stream_error_before_content_is_the_role_chunk_then_the_error() {
        let streamed = json!({"model": "x", "stream": true});
        let s = stream_text(faulted("error-before-content", 2, streamed));
        let (role, error) = s.split_once("\n\n").unwrap();
        let role: Value = serde_json::from_str(role.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            role["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(error, ERROR, "the error, and nothing after it");
    }

    #[test]
    fn chat_stream_error_after_content_sends_n_tokens_first() {
        let s = stream_text(faulted(
            "error_after_content",
            3,
            json!({"model": "x", "stream": true}),
        ));
        assert!(s.ends_with(ERROR) && !s.contains("[DONE]"));
        let events = data_events(&s);
        let contents: Vec<&str> = events[1..4]
            .iter()
            .map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["tok1 ", "tok2 ", "tok3 "]);
        assert_eq!(events.len(), 5, "role, 3 tokens, error");
    }

    #[test]
    fn chat_stream_garbage_and_faults_leave_plain_answers_alone() {
        let s = stream_text(faulted(
            "garbage-after-content",
            1,
            json!({"model": "x", "stream": true}),
        ));
        let garbage = s.find("this is not an event\n\n").unwrap();
        assert!(s[..garbage].contains("tok1 ") && !s[..garbage].contains("tok2 "));
        assert!(s.ends_with("data: [DONE]\n\n"));
        let Reply::Json { body, .. } = faulted("cut-after-content", 1, json!({"model": "x"}))
        else {
            panic!("expected json");
        };
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "tok1 tok2 tok3 tok4 "
        );
        let Reply::Stream(steps) = completions(&Gen::new(
            &Behaviour {
                stream_fault: Some(crate::fault::StreamFault::CutAfterContent),
                ..Behaviour::default()
            },
            &json!({"model": "x", "stream": true}),
        )) else {
            panic!("expected a stream");
        };
        assert!(
            steps.iter().all(|s| !s.abort),
            "legacy completions are not broken"
        );
    }

    #[test]
    fn chat_json_caps_tokens() {
        let Reply::Json { body, .. } = chat_text(&gen(json!({"model": "m", "max_tokens": 1})))
        else {
            panic!("expected json");
        };
        assert_eq!(body["choices"][0]["message"]["content"], "tok1 ");
        assert_eq!(body["usage"]["completion_tokens"], 1);
        assert_eq!(body["model"], "m");
    }

    #[test]
    fn base64_matches_reference() {
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[]), "");
    }

    #[test]
    fn embeddings_per_input() {
        assert_eq!(embedding_inputs(Some(&json!("a"))).unwrap().len(), 1);
        assert_eq!(embedding_inputs(Some(&json!(["a", "b"]))).unwrap().len(), 2);
        assert_eq!(embedding_inputs(Some(&json!([1, 2, 3]))).unwrap().len(), 1);
        assert_eq!(embedding_inputs(Some(&json!([[1], [2]]))).unwrap().len(), 2);
        assert!(embedding_inputs(None).is_err());
        assert!(embedding_inputs(Some(&json!([]))).is_err());
        let v = embed("hello");
        assert_eq!(v.len(), EMBEDDING_DIMS);
        assert_eq!(v, embed("hello"));
        let norm: f32 = v.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4);
    }

    fn call() -> Turn {
        Turn::Call {
            name: "get_weather".into(),
            arguments: json!({"location": "x", "units": "celsius"}),
        }
    }

    #[test]
    fn tool_call_answer() {
        let Reply::Json { body, .. } = chat(&gen(json!({"model": "gpt-4.1"})), call()) else {
            panic!("expected json");
        };
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        let [call] = choice["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .as_slice()
        else {
            panic!("one call expected");
        };
        assert!(call["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"location": "x", "units": "celsius"}));
    }

    #[test]
    fn tool_call_stream() {
        let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}});
        let s = stream_text(chat(&gen(body), call()));
        assert!(s.ends_with("data: [DONE]\n\n"));
        let events = data_events(s.trim_end_matches("data: [DONE]\n\n"));
        let opening = &events[0]["choices"][0]["delta"];
        assert_eq!(opening["role"], "assistant");
        let first = &opening["tool_calls"][0];
        assert_eq!(
            (first["index"].clone(), first["type"].clone()),
            (json!(0), json!("function"))
        );
        assert_eq!(
            first["function"],
            json!({"name": "get_weather", "arguments": ""})
        );
        let id = first["id"].as_str().unwrap();
        assert!(id.starts_with("call_"));
        let fragments: Vec<&Value> = events[1..]
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["tool_calls"].get(0))
            .collect();
        assert!(fragments.len() > 1, "the arguments come in fragments");
        assert!(fragments
            .iter()
            .all(|f| f["index"] == 0 && f.get("id").is_none()));
        let arguments: String = fragments
            .iter()
            .map(|f| f["function"]["arguments"].as_str().unwrap())
            .collect();
        let arguments: Value = serde_json::from_str(&arguments).unwrap();
        assert_eq!(arguments, json!({"location": "x", "units": "celsius"}));
        let finish = &events[events.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(events[events.len() - 1]["usage"]["completion_tokens"], 2);
    }

    #[test]
    fn quoted_tool_result_is_the_answer_text() {
        let turn = Turn::Quote("The tool said: 14".into());
        let Reply::Json { body, .. } = chat(&gen(json!({"model": "m"})), turn) else {
            panic!("expected json");
        };
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "The tool said: 14"
        );
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
    }
}
