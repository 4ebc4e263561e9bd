//! The OpenAI Responses API with the conversation state a real provider
//! keeps, so a turn that reaches a provider other than the one holding its
//! state fails the way it would at OpenAI:
//!
//! - `POST /v1/responses` (JSON, or SSE with `"stream": true`) stores the
//!   response unless `"store": false`, and refuses an unknown
//!   `previous_response_id` / `conversation` / `item_reference` (404) and
//!   reasoning `encrypted_content` another process sealed (400);
//! - `GET` / `DELETE /v1/responses/{id}`, `GET .../input_items`,
//!   `POST .../cancel` (background responses only);
//! - `POST /v1/conversations`, `GET` / `DELETE /v1/conversations/{id}`.
//!
//! Error bodies are OpenAI's own, without the mock's `served_by`.

use crate::fault::{self, Errors, StreamFault, Tokens};
use crate::generate::{now_secs, random_id, Gen};
use crate::respond::{ApiError, Reply, Step};
use crate::seal::Sealer;
use crate::sse;
use crate::store::{Cancel, Pending, Store, Stored};
use crate::strict::query_param;
use hyper::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The `include` value that asks for reasoning items' `encrypted_content`.
pub const INCLUDE_ENCRYPTED: &str = "reasoning.encrypted_content";

/// `{"error": {...}}` with type `invalid_request_error`.
fn invalid(status: StatusCode, message: &str, param: Option<&str>, code: Option<&str>) -> ApiError {
    ApiError {
        status,
        body: json!({"error": {
            "message": message, "type": "invalid_request_error", "param": param, "code": code,
        }}),
    }
}

pub fn response_not_found(id: &str) -> ApiError {
    invalid(
        StatusCode::NOT_FOUND,
        &format!("Response with id '{id}' not found."),
        None,
        None,
    )
}

fn previous_not_found(id: &str) -> ApiError {
    invalid(
        StatusCode::NOT_FOUND,
        &format!("Previous response with id '{id}' not found."),
        Some("previous_response_id"),
        Some("previous_response_not_found"),
    )
}

fn conversation_not_found(id: &str) -> ApiError {
    invalid(
        StatusCode::NOT_FOUND,
        &format!("Conversation with id '{id}' not found."),
        Some("conversation"),
        Some("conversation_not_found"),
    )
}

fn item_not_found(id: &str) -> ApiError {
    invalid(
        StatusCode::NOT_FOUND,
        &format!(
            "Item with id '{id}' not found. Items are not persisted when `store` is set to \
             false. Try again with `store` set to true, or remove this item from your input."
        ),
        Some("input"),
        Some("item_not_found"),
    )
}

fn unverified(id: Option<&str>) -> ApiError {
    let message = match id {
        Some(id) => format!("The encrypted content for item {id} could not be verified."),
        None => "The encrypted content could not be verified.".to_owned(),
    };
    invalid(
        StatusCode::BAD_REQUEST,
        &message,
        None,
        Some("invalid_encrypted_content"),
    )
}

fn bad_type(param: &str, expected: &str) -> ApiError {
    invalid(
        StatusCode::BAD_REQUEST,
        &format!("Invalid type for '{param}': expected {expected}."),
        Some(param),
        Some("invalid_type"),
    )
}

/// The common fields of one response, whatever its status.
struct Draft<'a> {
    g: &'a Gen,
    request: &'a Value,
    id: String,
    previous: Option<String>,
    conversation: Option<String>,
    store: bool,
    background: bool,
}

impl Draft<'_> {
    fn object(&self, status: &str, output: Value, usage: Value) -> Value {
        let echo = |field: &str, default: Value| {
            self.request
                .get(field)
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default)
        };
        let mut v = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.g.created,
            "status": status,
            "background": self.background,
            "error": null,
            "incomplete_details": null,
            "instructions": echo("instructions", Value::Null),
            "max_output_tokens": echo("max_output_tokens", Value::Null),
            "model": self.g.model,
            "output": output,
            "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
            "previous_response_id": self.previous,
            "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
            "store": self.store,
            "temperature": echo("temperature", json!(1.0)),
            "text": echo("text", json!({"format": {"type": "text"}})),
            "tool_choice": echo("tool_choice", json!("auto")),
            "tools": echo("tools", json!([])),
            "top_p": echo("top_p", json!(1.0)),
            "truncation": echo("truncation", json!("disabled")),
            "usage": usage,
            "user": echo("user", Value::Null),
            "prompt_cache_key": echo("prompt_cache_key", Value::Null),
            "metadata": echo("metadata", json!({})),
            "served_by": self.g.name,
        });
        if let Some(conversation) = &self.conversation {
            v["conversation"] = json!({"id": conversation});
        }
        v
    }

    /// The response a stream fault failed, with the error `code`.
    fn failed(&self, code: &str) -> Value {
        let mut v = self.object("failed", json!([]), Value::Null);
        v["error"] = json!({"code": code, "message": fault::message(&self.g.name)});
        v
    }
}

/// The error code of a response an injected stream error failed: before any
/// content, as when the account is out of quota; after some, a server error.
fn failure_code(kind: StreamFault) -> &'static str {
    match kind {
        StreamFault::ErrorBeforeContent => "insufficient_quota",
        _ => "server_error",
    }
}

/// `POST /v1/responses`.
pub fn create(
    g: &Gen,
    request: &Value,
    store: &mut Store,
    sealer: &Sealer,
    now: Instant,
) -> Result<Reply, ApiError> {
    let mut g = g.clone();
    let previous = match request.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => {
            let prev = store.get(id, now).ok_or_else(|| previous_not_found(id))?;
            // The earlier turns count as input, as they do at OpenAI.
            g.prompt_tokens += prev
                .response
                .pointer("/usage/total_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Some(id.clone())
        }
        Some(_) => return Err(bad_type("previous_response_id", "a string")),
    };
    let conversation = match request.get("conversation") {
        None | Some(Value::Null) => None,
        Some(c) => {
            let id = c
                .as_str()
                .or_else(|| c.get("id").and_then(Value::as_str))
                .ok_or_else(|| bad_type("conversation", "a string or an object with an id"))?;
            if store.conversation(id).is_none() {
                return Err(conversation_not_found(id));
            }
            Some(id.to_owned())
        }
    };
    let input = input_items(request.get("input"), store, sealer)?;

    let draft = Draft {
        g: &g,
        request,
        id: random_id("resp_"),
        previous,
        conversation,
        store: request.get("store").and_then(Value::as_bool) != Some(false),
        background: request.get("background").and_then(Value::as_bool) == Some(true),
    };
    let mut output = Vec::new();
    if let Some(item) = reasoning_item(&g, request, sealer) {
        output.push(item);
    }
    let text = g.text();
    output.push(json!({
        "type": "message",
        "id": random_id("msg_"),
        "status": "completed",
        "role": "assistant",
        "content": [output_text(&text)],
    }));
    let usage = json!({
        "input_tokens": g.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": g.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": g.prompt_tokens + g.output_tokens,
    });
    let done = draft.object("completed", Value::Array(output), usage);
    let background = draft.background && !g.stream;
    // A stream that ends in an injected error leaves a failed response behind.
    let failed = g
        .fault
        .filter(|f| g.stream && f.kind.is_error())
        .map(|f| draft.failed(failure_code(f.kind)));

    if draft.store {
        let (response, pending) = if background {
            let pending = Pending {
                due: now + g.total_delay(),
                done: done.clone(),
            };
            let running = draft.object("in_progress", json!([]), Value::Null);
            (running, Some(pending))
        } else {
            (failed.clone().unwrap_or_else(|| done.clone()), None)
        };
        store.insert(Stored {
            response,
            input,
            pending,
        });
    }

    if background {
        return Ok(Reply::Json {
            body: draft.object("queued", json!([]), Value::Null),
            delay: Duration::ZERO,
        });
    }
    if !g.stream {
        return Ok(Reply::Json {
            body: done,
            delay: g.total_delay(),
        });
    }
    Ok(Reply::Stream(stream(&draft, &done, failed)))
}

/// The streamed answer: OpenAI's events for `done`, or a stream fault's
/// (`failed` is the response an injected error leaves).
fn stream(draft: &Draft, done: &Value, failed: Option<Value>) -> Vec<Step> {
    let g = draft.g;
    let start = draft.object("in_progress", json!([]), Value::Null);
    let tokens: Vec<String> = g.tokens().collect();
    let events = events(&start, done, &tokens);
    // Content starts at the first text delta (or, with none, where they would be).
    let first = events
        .iter()
        .position(|(name, _)| name.starts_with("response.output_text."))
        .unwrap_or(events.len());
    let tokens = Tokens {
        first,
        count: tokens.len(),
    };
    let steps = stream_steps(g, events);
    let errors = Errors {
        failed_opening: || {
            let failed = failed
                .unwrap_or_else(|| draft.failed(failure_code(StreamFault::ErrorBeforeContent)));
            let opening = vec![
                ("response.created", json!({"response": start})),
                ("response.in_progress", json!({"response": start})),
                ("response.failed", json!({"response": failed})),
            ];
            stream_steps(g, numbered(opening))
        },
        error: |sent| {
            sse::event(
                "error",
                &json!({"type": "error", "code": "server_error",
                    "message": fault::message(&g.name), "param": null, "sequence_number": sent}),
            )
        },
    };
    fault::apply(g.fault, steps, tokens, errors)
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// With `include: ["reasoning.encrypted_content"]`, a reasoning item carrying
/// content only this process verifies; with just a `reasoning` object, one
/// without it (stored, so referable by id).
fn reasoning_item(g: &Gen, request: &Value, sealer: &Sealer) -> Option<Value> {
    let encrypted = request
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|include| include.iter().any(|v| v == INCLUDE_ENCRYPTED));
    if !encrypted && !request.get("reasoning").is_some_and(Value::is_object) {
        return None;
    }
    let mut item = json!({"type": "reasoning", "id": random_id("rs_"), "summary": []});
    if encrypted {
        item["encrypted_content"] = Value::from(sealer.seal(&g.name, now_secs()));
    }
    Some(item)
}

/// The request's `input` as items with ids, checked against what this
/// provider holds.
fn input_items(
    input: Option<&Value>,
    store: &Store,
    sealer: &Sealer,
) -> Result<Vec<Value>, ApiError> {
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![message_item(
            "user",
            json!([{"type": "input_text", "text": text}]),
            None,
        )]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| input_item(i, item, store, sealer))
            .collect(),
        Some(_) => Err(bad_type("input", "a string or an array of input items")),
    }
}

fn message_item(role: &str, content: Value, id: Option<&str>) -> Value {
    json!({
        "type": "message",
        "id": id.map_or_else(|| random_id("msg_"), str::to_owned),
        "status": "completed",
        "role": role,
        "content": content,
    })
}

fn input_item(i: usize, item: &Value, store: &Store, sealer: &Sealer) -> Result<Value, ApiError> {
    let Value::Object(map) = item else {
        return Err(bad_type(&format!("input[{i}]"), "an object"));
    };
    let str_field = |name: &str| map.get(name).and_then(Value::as_str);
    let kind = str_field("type").unwrap_or(if map.contains_key("role") {
        "message"
    } else {
        ""
    });
    match kind {
        "item_reference" => {
            let id = str_field("id").unwrap_or_default();
            store.item(id).cloned().ok_or_else(|| item_not_found(id))
        }
        "reasoning" => match map.get("encrypted_content") {
            Some(Value::String(token)) if sealer.verify(token) => Ok(item.clone()),
            Some(Value::String(_)) => Err(unverified(str_field("id"))),
            // Without its content, a reasoning item is a reference to a stored one.
            _ => {
                let id = str_field("id").unwrap_or_default();
                store
                    .item(id)
                    .map(|_| item.clone())
                    .ok_or_else(|| item_not_found(id))
            }
        },
        "message" => {
            let role = str_field("role").unwrap_or("user");
            let content = match map.get("content") {
                Some(Value::String(text)) => {
                    let part = if role == "assistant" {
                        output_text(text)
                    } else {
                        json!({"type": "input_text", "text": text})
                    };
                    json!([part])
                }
                Some(parts) => parts.clone(),
                None => json!([]),
            };
            Ok(message_item(role, content, str_field("id")))
        }
        other => {
            let mut item = map.clone();
            if !item.contains_key("id") {
                let prefix = match other {
                    "function_call" => "fc_",
                    "function_call_output" => "fco_",
                    _ => "item_",
                };
                item.insert("id".into(), Value::from(random_id(prefix)));
            }
            Ok(Value::Object(item))
        }
    }
}

/// The streamed events of a response, in OpenAI's order, each with its
/// `type` and `sequence_number`: `start` is the response while in progress,
/// `done` the finished one; `tokens` are the text deltas of its message.
pub fn events(start: &Value, done: &Value, tokens: &[String]) -> Vec<(&'static str, Value)> {
    let mut out = vec![
        ("response.created", json!({"response": start})),
        ("response.in_progress", json!({"response": start})),
    ];
    let items = done.get("output").and_then(Value::as_array);
    for (index, item) in items.into_iter().flatten().enumerate() {
        if item["type"] != "message" {
            out.push((
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            out.push((
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ));
            continue;
        }
        let mut opening = item.clone();
        opening["status"] = json!("in_progress");
        opening["content"] = json!([]);
        out.push((
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        ));
        let at = |extra: Value| {
            let mut v = json!({"item_id": item["id"], "output_index": index, "content_index": 0});
            if let (Some(dst), Value::Object(src)) = (v.as_object_mut(), extra) {
                dst.extend(src);
            }
            v
        };
        let part = &item["content"][0];
        out.push((
            "response.content_part.added",
            at(json!({"part": output_text("")})),
        ));
        for token in tokens {
            out.push((
                "response.output_text.delta",
                at(json!({"delta": token, "logprobs": []})),
            ));
        }
        out.push((
            "response.output_text.done",
            at(json!({"text": part["text"], "logprobs": []})),
        ));
        out.push(("response.content_part.done", at(json!({"part": part}))));
        out.push((
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
    }
    out.push(("response.completed", json!({"response": done})));
    numbered(out)
}

/// Gives each event its `type` and its `sequence_number` (its index).
fn numbered(mut events: Vec<(&'static str, Value)>) -> Vec<(&'static str, Value)> {
    for (n, (name, v)) in events.iter_mut().enumerate() {
        v["type"] = Value::from(*name);
        v["sequence_number"] = Value::from(n);
    }
    events
}

/// Frames the events as SSE; the first text delta waits the time to first
/// token, each later one the token delay.
fn stream_steps(g: &Gen, events: Vec<(&'static str, Value)>) -> Vec<Step> {
    let mut deltas = 0;
    events
        .into_iter()
        .map(|(name, mut v)| {
            v["served_by"] = Value::from(g.name.as_str());
            let bytes = sse::event(name, &v);
            if name != "response.output_text.delta" {
                return Step::now(bytes);
            }
            deltas += 1;
            Step::after(if deltas == 1 { g.ttft } else { g.token_delay }, bytes)
        })
        .collect()
}

fn json_now(body: Value) -> Reply {
    Reply::Json {
        body,
        delay: Duration::ZERO,
    }
}

/// `GET /v1/responses/{id}`.
pub fn retrieve(store: &mut Store, id: &str, now: Instant) -> Result<Reply, ApiError> {
    let stored = store.get(id, now).ok_or_else(|| response_not_found(id))?;
    Ok(json_now(stored.response.clone()))
}

/// `DELETE /v1/responses/{id}`.
pub fn delete(store: &mut Store, id: &str) -> Result<Reply, ApiError> {
    store.remove(id).ok_or_else(|| response_not_found(id))?;
    Ok(json_now(
        json!({"id": id, "object": "response.deleted", "deleted": true}),
    ))
}

/// `POST /v1/responses/{id}/cancel`.
pub fn cancel(store: &mut Store, id: &str, now: Instant) -> Result<Reply, ApiError> {
    match store.cancel(id, now) {
        Cancel::Done(response) => Ok(json_now(response)),
        Cancel::Unknown => Err(response_not_found(id)),
        Cancel::NotBackground => Err(invalid(
            StatusCode::BAD_REQUEST,
            "Cannot cancel a response that was not created with background=true.",
            None,
            None,
        )),
    }
}

/// `GET /v1/responses/{id}/input_items` with `limit` (1..=100, 20), `order`
/// (`desc` by default, as OpenAI's) and `after` (an item id).
pub fn input_items_list(
    store: &mut Store,
    id: &str,
    query: Option<&str>,
    now: Instant,
) -> Result<Reply, ApiError> {
    let stored = store.get(id, now).ok_or_else(|| response_not_found(id))?;
    let mut items: Vec<&Value> = stored.input.iter().collect();
    match query_param(query, "order") {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => {
            return Err(invalid(
                StatusCode::BAD_REQUEST,
                &format!("Invalid value: '{other}'. Supported values are: 'asc' and 'desc'."),
                Some("order"),
                Some("invalid_value"),
            ))
        }
    }
    if let Some(after) = query_param(query, "after") {
        let at = items.iter().position(|item| item["id"] == after);
        items = at.map_or_else(Vec::new, |at| items.split_off(at + 1));
    }
    let limit = match query_param(query, "limit").map(str::parse::<usize>) {
        None => 20,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => {
            return Err(invalid(
                StatusCode::BAD_REQUEST,
                "Invalid 'limit': integer must be between 1 and 100.",
                Some("limit"),
                Some("integer_out_of_range"),
            ))
        }
    };
    let has_more = items.len() > limit;
    items.truncate(limit);
    let id_of = |item: Option<&&Value>| item.map_or(Value::Null, |item| item["id"].clone());
    Ok(json_now(json!({
        "object": "list",
        "data": items,
        "first_id": id_of(items.first()),
        "last_id": id_of(items.last()),
        "has_more": has_more,
    })))
}

/// `POST /v1/conversations`.
pub fn create_conversation(store: &mut Store, request: &Value) -> Reply {
    let conversation = json!({
        "id": random_id("conv_"),
        "object": "conversation",
        "created_at": now_secs(),
        "metadata": request.get("metadata").filter(|m| m.is_object()).cloned().unwrap_or_else(|| json!({})),
    });
    store.add_conversation(conversation.clone());
    json_now(conversation)
}

fn conversation_missing(id: &str) -> ApiError {
    invalid(
        StatusCode::NOT_FOUND,
        &format!("Conversation with id '{id}' not found."),
        None,
        None,
    )
}

/// `GET /v1/conversations/{id}`.
pub fn retrieve_conversation(store: &Store, id: &str) -> Result<Reply, ApiError> {
    let conversation = store
        .conversation(id)
        .ok_or_else(|| conversation_missing(id))?;
    Ok(json_now(conversation.clone()))
}

/// `DELETE /v1/conversations/{id}`.
pub fn delete_conversation(store: &mut Store, id: &str) -> Result<Reply, ApiError> {
    store
        .remove_conversation(id)
        .ok_or_else(|| conversation_missing(id))?;
    Ok(json_now(
        json!({"id": id, "object": "conversation.deleted", "deleted": true}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::Behaviour;

    struct Mock {
        store: Store,
        sealer: Sealer,
        behaviour: Behaviour,
        now: Instant,
    }

    impl Mock {
        fn new() -> Self {
            Self {
                store: Store::default(),
                sealer: Sealer::new(),
                behaviour: Behaviour {
                    output_tokens: 2,
                    ..Behaviour::default()
                },
                now: Instant::now(),
            }
        }

        fn create(&mut self, request: Value) -> Result<Value, ApiError> {
            let g = Gen::new(&self.behaviour, &request);
            match create(&g, &request, &mut self.store, &self.sealer, self.now)? {
                Reply::Json { body, .. } => Ok(body),
                Reply::Stream(_) => panic!("expected json"),
            }
        }

        fn retrieve(&mut self, id: &str) -> Result<Value, ApiError> {
            retrieve(&mut self.store, id, self.now).map(body)
        }
    }

    fn body(reply: Reply) -> Value {
        match reply {
            Reply::Json { body, .. } => body,
            Reply::Stream(_) => panic!("expected json"),
        }
    }

    fn id(v: &Value) -> &str {
        v["id"].as_str().unwrap()
    }

    #[test]
    fn event_sequence_of_a_reasoning_response() {
        let start = json!({"id": "resp_1", "status": "in_progress", "output": []});
        let done = json!({"id": "resp_1", "status": "completed", "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [output_text("a b ")]},
        ]});
        let tokens = ["a ".to_owned(), "b ".to_owned()];
        let events = events(&start, &done, &tokens);
        let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (n, (name, v)) in events.iter().enumerate() {
            assert_eq!(
                (v["type"].as_str(), v["sequence_number"].as_u64()),
                (Some(*name), Some(n as u64))
            );
        }
        assert_eq!(events[2].1["item"]["id"], "rs_1");
        assert_eq!(events[4].1["item"]["status"], "in_progress");
        assert_eq!(events[4].1["output_index"], 1);
        assert_eq!(events[6].1["item_id"], "msg_1");
        assert_eq!(events[7].1["delta"], "b ");
        assert_eq!(events[8].1["text"], "a b ");
        assert_eq!(events[11].1["response"], done);
        assert_eq!(events[0].1["response"], start);
    }

    #[test]
    fn the_response_echoes_metadata_user_and_prompt_cache_key_as_openai_does() {
        let mut m = Mock::new();
        let mut request = json!({"model": "m", "input": "hi", "metadata": {"id": "resp_abc123"},
            "user": "resp_abc123", "prompt_cache_key": "resp_abc123"});
        let r = m.create(request.clone()).unwrap();
        let plain = m.create(json!({"model": "m", "input": "hi"})).unwrap();
        let defaults = [json!({}), Value::Null, Value::Null];
        for (field, default) in ["metadata", "user", "prompt_cache_key"]
            .iter()
            .zip(defaults)
        {
            assert_eq!(r[field], request[field], "{field}");
            assert_eq!(plain[field], default, "{field}");
        }
        // Streamed: in every event that carries the response.
        request["stream"] = json!(true);
        let g = Gen::new(&m.behaviour, &request);
        let Ok(Reply::Stream(steps)) = create(&g, &request, &mut m.store, &m.sealer, m.now) else {
            panic!("expected a stream");
        };
        let carrying = steps
            .iter()
            .map(|s| String::from_utf8_lossy(&s.bytes).into_owned())
            .filter(|text| text.contains(r#""response":{"#))
            .inspect(|text| assert!(text.contains(r#""prompt_cache_key":"resp_abc123""#)))
            .count();
        assert_eq!(carrying, 3, "created, in_progress, completed");
    }

    #[test]
    fn stream_timing_and_framing() {
        let b = Behaviour {
            output_tokens: 3,
            ttft_ms: 100,
            token_delay_ms: 10,
            ..Behaviour::default()
        };
        let request = json!({"model": "m", "input": "hi", "stream": true});
        let g = Gen::new(&b, &request);
        let mut store = Store::default();
        let Ok(Reply::Stream(steps)) =
            create(&g, &request, &mut store, &Sealer::new(), Instant::now())
        else {
            panic!("expected a stream");
        };
        let delays: Vec<u64> = steps.iter().map(|s| s.delay.as_millis() as u64).collect();
        assert_eq!(delays, [0, 0, 0, 0, 100, 10, 10, 0, 0, 0, 0]);
        let text = String::from_utf8_lossy(&steps[10].bytes).into_owned();
        assert!(
            text.starts_with("event: response.completed\ndata: {"),
            "{text}"
        );
        assert_eq!(store.len(), 1, "a streamed response is stored too");
    }

    /// The streamed events (name, data) under `kind` after 1 token, and the stored response.
    fn faulted(kind: &str) -> (Vec<(String, Value)>, Value) {
        let mut m = Mock::new();
        m.behaviour.stream_fault = Some(StreamFault::parse(kind).unwrap());
        m.behaviour.fault_after_tokens = 1;
        let request = json!({"model": "m", "input": "hi", "stream": true});
        let g = Gen::new(&m.behaviour, &request);
        let Ok(Reply::Stream(steps)) = create(&g, &request, &mut m.store, &m.sealer, m.now) else {
            panic!("expected a stream");
        };
        // Every step but garbage-after-content's line is an event.
        let events: Vec<(String, Value)> = steps
            .iter()
            .map(|s| String::from_utf8_lossy(&s.bytes).into_owned())
            .filter(|text| text != "this is not an event\n\n")
            .map(|text| {
                let (head, data) = text.split_once('\n').unwrap();
                let name = head.strip_prefix("event: ").unwrap().to_owned();
                let data = data.strip_prefix("data: ").unwrap().trim_end();
                (name, serde_json::from_str(data).unwrap())
            })
            .collect();
        let id = events[0].1["response"]["id"].as_str().unwrap().to_owned();
        let stored = m.retrieve(&id).unwrap();
        (events, stored)
    }

    #[test]
    fn stream_error_before_content_fails_the_response() {
        let (events, stored) = faulted("error-before-content");
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.failed"
            ]
        );
        let failed = &events[2].1;
        assert_eq!(
            (&failed["type"], &failed["sequence_number"]),
            (&json!("response.failed"), &json!(2))
        );
        let response = &failed["response"];
        assert_eq!(
            (&response["status"], &response["output"]),
            (&json!("failed"), &json!([]))
        );
        assert_eq!(
            response["error"],
            json!({"code": "insufficient_quota", "message": "injected stream error from mock"})
        );
        assert_eq!(response["id"], events[0].1["response"]["id"]);
        assert_eq!(&stored, response, "the failed response is what is stored");
    }

    #[test]
    fn stream_error_after_content_is_openais_error_event() {
        let (events, stored) = faulted("error-after-content");
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "error"
            ]
        );
        assert_eq!(
            events[5].1,
            json!({"type": "error", "code": "server_error",
                "message": "injected stream error from mock", "param": null, "sequence_number": 5})
        );
        assert_eq!(
            (&stored["status"], &stored["error"]["code"]),
            (&json!("failed"), &json!("server_error"))
        );
        let (events, stored) = faulted("garbage-after-content");
        assert_eq!(stored["status"], "completed", "other faults store it whole");
        assert_eq!(events.last().unwrap().0, "response.completed");
    }

    #[test]
    fn stored_chain_and_openai_not_found_bodies() {
        let mut m = Mock::new();
        let first = m
            .create(json!({"model": "m", "input": "hello there"}))
            .unwrap();
        assert!(id(&first).starts_with("resp_") && id(&first).len() >= 5 + 24);
        assert_eq!(
            (&first["object"], &first["status"], &first["store"]),
            (&json!("response"), &json!("completed"), &json!(true))
        );
        assert_eq!(first["previous_response_id"], Value::Null);
        assert!(first["output"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with("msg_"));
        assert_eq!(m.retrieve(id(&first)).unwrap(), first);

        let second = m
            .create(json!({"model": "m", "input": "and?", "previous_response_id": id(&first)}))
            .unwrap();
        assert_eq!(second["previous_response_id"], first["id"]);
        assert!(
            second["usage"]["input_tokens"].as_u64() > first["usage"]["total_tokens"].as_u64(),
            "earlier turns count as input"
        );

        let err = m
            .create(json!({"model": "m", "input": "x", "previous_response_id": "resp_x"}))
            .unwrap_err();
        assert_eq!(err.status, StatusCode::NOT_FOUND);
        assert_eq!(
            err.body,
            json!({"error": {"message": "Previous response with id 'resp_x' not found.",
                "type": "invalid_request_error", "param": "previous_response_id",
                "code": "previous_response_not_found"}})
        );
        let err = m.retrieve("resp_x").unwrap_err();
        assert_eq!(
            (err.status, err.body),
            (
                StatusCode::NOT_FOUND,
                json!({"error": {"message": "Response with id 'resp_x' not found.",
                    "type": "invalid_request_error", "param": null, "code": null}})
            )
        );

        let deleted = body(delete(&mut m.store, id(&first)).unwrap());
        assert_eq!(
            deleted,
            json!({"id": id(&first), "object": "response.deleted", "deleted": true})
        );
        assert!(m.retrieve(id(&first)).is_err());
        assert_eq!(
            delete(&mut m.store, id(&first)).unwrap_err().status,
            StatusCode::NOT_FOUND
        );

        let unstored = m
            .create(json!({"model": "m", "input": "x", "store": false}))
            .unwrap();
        assert_eq!(unstored["store"], false);
        assert!(m.retrieve(id(&unstored)).is_err());
    }

    #[test]
    fn encrypted_reasoning_is_only_accepted_where_it_was_sealed() {
        let mut a = Mock::new();
        let mut b = Mock::new();
        let request = json!({"model": "m", "input": "think", "store": false,
            "include": [INCLUDE_ENCRYPTED]});
        let r = a.create(request).unwrap();
        let reasoning = &r["output"][0];
        assert_eq!(reasoning["type"], "reasoning");
        assert!(id(reasoning).starts_with("rs_"));
        assert_eq!(reasoning["summary"], json!([]));
        assert!(reasoning["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("gAAAAA"));
        assert_eq!(r["output"][1]["type"], "message");

        let replay = json!({"model": "m", "store": false, "input": [
            {"role": "user", "content": "think"}, reasoning, r["output"][1],
            {"role": "user", "content": "more"},
        ]});
        assert!(a.create(replay.clone()).is_ok());
        let err = b.create(replay).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            err.body,
            json!({"error": {"message": format!("The encrypted content for item {} could not be verified.", id(reasoning)),
                "type": "invalid_request_error", "param": null, "code": "invalid_encrypted_content"}})
        );

        // Without include there is no reasoning item unless reasoning was asked for.
        let plain = a.create(json!({"model": "m", "input": "x"})).unwrap();
        assert_eq!(plain["output"].as_array().unwrap().len(), 1);
        let stored = a
            .create(json!({"model": "m", "input": "x", "reasoning": {"effort": "low"}}))
            .unwrap();
        let rs = &stored["output"][0];
        assert!(rs.get("encrypted_content").is_none());
        // A reasoning item without content refers to a stored one, by id.
        let by_id =
            json!({"model": "m", "input": [{"type": "reasoning", "id": id(rs), "summary": []}]});
        assert!(a.create(by_id.clone()).is_ok());
        let err = b.create(by_id).unwrap_err();
        assert_eq!(
            (err.status, &err.body["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("item_not_found"))
        );
    }

    #[test]
    fn item_references_and_input_items() {
        let mut m = Mock::new();
        let first = m
            .create(json!({"model": "m", "input": [
                {"role": "system", "content": "be brief"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ]}))
            .unwrap();
        let list = |m: &mut Mock, q: Option<&str>| {
            input_items_list(&mut m.store, id(&first), q, m.now).map(body)
        };
        let all = list(&mut m, Some("order=asc")).unwrap();
        let data = all["data"].as_array().unwrap();
        assert_eq!(data.len(), 3);
        assert_eq!(
            data[0]["content"],
            json!([{"type": "input_text", "text": "be brief"}])
        );
        assert!(id(&data[0]).starts_with("msg_") && id(&data[2]).starts_with("fco_"));
        assert_eq!(
            (&all["object"], &all["has_more"]),
            (&json!("list"), &json!(false))
        );
        assert_eq!(
            (&all["first_id"], &all["last_id"]),
            (&data[0]["id"], &data[2]["id"])
        );

        let desc = list(&mut m, None).unwrap();
        assert_eq!(desc["first_id"], data[2]["id"], "newest first by default");
        let page = list(
            &mut m,
            Some(&format!("order=asc&limit=1&after={}", id(&data[0]))),
        )
        .unwrap();
        assert_eq!(
            (&page["data"][0]["id"], &page["has_more"]),
            (&data[1]["id"], &json!(true))
        );
        assert_eq!(
            list(&mut m, Some("limit=0")).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            input_items_list(&mut m.store, "resp_x", None, m.now)
                .unwrap_err()
                .status,
            StatusCode::NOT_FOUND
        );

        let msg = first["output"][0].clone();
        let with_ref = json!({"model": "m", "input": [{"type": "item_reference", "id": id(&msg)}]});
        let second = m.create(with_ref).unwrap();
        let items = body(input_items_list(&mut m.store, id(&second), None, m.now).unwrap());
        assert_eq!(
            items["data"][0], msg,
            "the reference resolves to the stored item"
        );
        let err = m
            .create(json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_x"}]}))
            .unwrap_err();
        assert_eq!(err.status, StatusCode::NOT_FOUND);
        assert_eq!(err.body["error"]["param"], "input");
        assert!(err.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Item with id 'msg_x' not found."));
    }

    #[test]
    fn conversations_must_be_known() {
        let mut m = Mock::new();
        let err = m
            .create(json!({"model": "m", "input": "x", "conversation": "conv_x"}))
            .unwrap_err();
        assert_eq!(
            (err.status, &err.body["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("conversation_not_found"))
        );
        let conv = body(create_conversation(&mut m.store, &json!({})));
        assert!(id(&conv).starts_with("conv_"));
        assert_eq!(conv["object"], "conversation");
        for reference in [json!(id(&conv)), json!({"id": id(&conv)})] {
            let r = m
                .create(json!({"model": "m", "input": "x", "conversation": reference}))
                .unwrap();
            assert_eq!(r["conversation"], json!({"id": id(&conv)}));
        }
        assert_eq!(
            body(retrieve_conversation(&m.store, id(&conv)).unwrap()),
            conv
        );
        assert_eq!(
            body(delete_conversation(&mut m.store, id(&conv)).unwrap())["deleted"],
            true
        );
        assert!(retrieve_conversation(&m.store, id(&conv)).is_err());
    }

    #[test]
    fn background_responses_can_be_cancelled() {
        let mut m = Mock::new();
        m.behaviour.ttft_ms = 60_000;
        let queued = m
            .create(json!({"model": "m", "input": "x", "background": true}))
            .unwrap();
        assert_eq!(
            (&queued["status"], &queued["background"]),
            (&json!("queued"), &json!(true))
        );
        assert_eq!(m.retrieve(id(&queued)).unwrap()["status"], "in_progress");
        let cancelled = body(cancel(&mut m.store, id(&queued), m.now).unwrap());
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(m.retrieve(id(&queued)).unwrap()["status"], "cancelled");

        m.behaviour.ttft_ms = 0;
        let quick = m
            .create(json!({"model": "m", "input": "x", "background": true}))
            .unwrap();
        let done = m.retrieve(id(&quick)).unwrap();
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["type"], "message");

        let normal = m.create(json!({"model": "m", "input": "x"})).unwrap();
        let err = cancel(&mut m.store, id(&normal), m.now).unwrap_err();
        assert_eq!(
            (err.status, err.body),
            (
                StatusCode::BAD_REQUEST,
                json!({"error": {"message": "Cannot cancel a response that was not created with background=true.",
                    "type": "invalid_request_error", "param": null, "code": null}})
            )
        );
        assert_eq!(
            cancel(&mut m.store, "resp_x", m.now).unwrap_err().status,
            StatusCode::NOT_FOUND
        );
    }
}
