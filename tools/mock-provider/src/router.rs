//! Request routing: control endpoints under `/__`, recording, failure
//! injection, then the API handlers.

use crate::answer_fault;
use crate::behaviour::{Behaviour, DropMode};
use crate::fault::StreamFault;
use crate::generate::{wants_stream, Gen};
use crate::record::{self, Record, Recorder};
use crate::respond::{self, ApiError, Body, Reply};
use crate::seal::Sealer;
use crate::store::Store;
use crate::strict::{self, Expect, Seen};
use crate::{anthropic, openai, responses, tool_turn, validate};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, RETRY_AFTER};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const PROVIDER_HEADER: HeaderName = HeaderName::from_static("x-mock-provider");

/// Shared server state.
#[derive(Debug, Default)]
pub struct State {
    behaviour: Mutex<Behaviour>,
    recorder: Mutex<Recorder>,
    /// Fixed at start: tests change behaviour at run time, never the provider's identity.
    strict: Option<Expect>,
    /// Stored responses and conversations (Responses API state).
    store: Mutex<Store>,
    /// This process's key for reasoning `encrypted_content`.
    sealer: Sealer,
}

impl State {
    pub fn new(behaviour: Behaviour, max_records: usize, strict: Option<Expect>) -> Self {
        Self {
            behaviour: Mutex::new(behaviour),
            recorder: Mutex::new(Recorder::with_limit(max_records)),
            strict,
            store: Mutex::new(Store::default()),
            sealer: Sealer::new(),
        }
    }

    fn behaviour(&self) -> MutexGuard<'_, Behaviour> {
        self.behaviour.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recorder(&self) -> MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the connection tells about each request on it.
#[derive(Clone, Debug, Default)]
pub struct Conn {
    pub tls: bool,
    /// The server name of the TLS handshake.
    pub sni: Option<String>,
}

/// Returned to hyper to close the connection without an answer.
#[derive(Debug)]
pub struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped on purpose")
    }
}

impl std::error::Error for Dropped {}

/// The API endpoints, matched with or without the `/v1` prefix (strict mode
/// has already checked the provider's own prefix and passes the bare operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint<'a> {
    ChatCompletions,
    Completions,
    Embeddings,
    Responses,
    /// `/responses/{id}`: GET or DELETE.
    Response(&'a str),
    ResponseInputItems(&'a str),
    ResponseCancel(&'a str),
    Conversations,
    /// `/conversations/{id}`: GET or DELETE.
    Conversation(&'a str),
    Messages,
    CountTokens,
}

/// What an endpoint does with the request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyUse {
    /// A JSON object is required.
    Json,
    /// A JSON object if there is a body at all.
    OptionalJson,
    Ignored,
}

impl<'a> Endpoint<'a> {
    fn from_path(path: &'a str) -> Option<Self> {
        let path = path.strip_prefix("/v1").unwrap_or(path);
        let path = path.trim_end_matches('/');
        let fixed = match path {
            "/chat/completions" => Some(Self::ChatCompletions),
            "/completions" => Some(Self::Completions),
            "/embeddings" => Some(Self::Embeddings),
            "/responses" => Some(Self::Responses),
            "/conversations" => Some(Self::Conversations),
            "/messages" => Some(Self::Messages),
            "/messages/count_tokens" => Some(Self::CountTokens),
            _ => None,
        };
        if fixed.is_some() {
            return fixed;
        }
        let id = |s: &'a str| (!s.is_empty() && !s.contains('/')).then_some(s);
        if let Some(rest) = path.strip_prefix("/responses/") {
            if let Some(r) = rest.strip_suffix("/input_items").and_then(id) {
                return Some(Self::ResponseInputItems(r));
            }
            if let Some(r) = rest.strip_suffix("/cancel").and_then(id) {
                return Some(Self::ResponseCancel(r));
            }
            return id(rest).map(Self::Response);
        }
        path.strip_prefix("/conversations/")
            .and_then(id)
            .map(Self::Conversation)
    }

    fn methods(self) -> &'static [&'static str] {
        match self {
            Self::Response(_) | Self::Conversation(_) => &["GET", "DELETE"],
            Self::ResponseInputItems(_) => &["GET"],
            _ => &["POST"],
        }
    }

    fn body_use(self, method: &Method) -> BodyUse {
        match self {
            _ if method != Method::POST => BodyUse::Ignored,
            Self::ResponseCancel(_) => BodyUse::Ignored,
            Self::Conversations => BodyUse::OptionalJson,
            _ => BodyUse::Json,
        }
    }

    /// Anthropic endpoints answer the mock's own errors in Anthropic's shape.
    fn anthropic(self) -> bool {
        matches!(self, Self::Messages | Self::CountTokens)
    }

    /// The endpoints whose streamed answers a stream fault breaks.
    fn takes_stream_faults(self) -> bool {
        matches!(
            self,
            Self::ChatCompletions | Self::Responses | Self::Messages
        )
    }
}

/// `stall-after-content` moves `stall_ms` from the start of the answers it
/// breaks to after their first tokens; every other answer still starts late.
fn stalls_at_start(cfg: &Behaviour, endpoint: Endpoint<'_>, body: &Bytes) -> bool {
    let stalls_later = cfg.stream_fault == Some(StreamFault::StallAfterContent)
        && endpoint.takes_stream_faults()
        && serde_json::from_slice::<Value>(body).is_ok_and(|v| wants_stream(&v));
    cfg.stall_ms > 0 && !stalls_later
}

/// The hyper service function.
pub async fn handle(
    state: Arc<State>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Dropped> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let control_call = parts.uri.path().starts_with("/__");
    let mut resp = if control_call {
        control(&state, &parts, &body)
    } else {
        api(&state, &conn, &parts, &body).await?
    };
    let name = state.behaviour().name.clone();
    if let Some(expect) = state.strict.as_ref().filter(|_| !control_call) {
        strict::account_headers(expect, &name, resp.headers_mut());
    }
    if let Ok(value) = HeaderValue::from_str(&name) {
        resp.headers_mut().insert(PROVIDER_HEADER, value);
    }
    Ok(resp)
}

/// `/__config`, `/__requests`, `/__stats`.
fn control(state: &State, parts: &Parts, body: &Bytes) -> Response<Body> {
    let name = state.behaviour().name.clone();
    let ok = |v: &Value| respond::json(StatusCode::OK, v);
    match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/__config") => ok(&json!(*state.behaviour())),
        (&Method::POST, "/__config") => {
            let patch = if body.iter().all(u8::is_ascii_whitespace) {
                Ok(Value::Object(Default::default()))
            } else {
                serde_json::from_slice::<Value>(body)
            };
            let result = match patch {
                Ok(Value::Object(map)) => state.behaviour().apply_patch(&map),
                _ => Err("config must be a JSON object".to_owned()),
            };
            match result {
                Ok(()) => ok(&json!(*state.behaviour())),
                Err(msg) => respond::error(
                    StatusCode::BAD_REQUEST,
                    &msg,
                    "invalid_request_error",
                    "invalid_config",
                    &name,
                ),
            }
        }
        (&Method::GET, "/__requests") => {
            let text = serde_json::to_string(state.recorder().records()).unwrap_or_default();
            let mut resp = Response::new(respond::full(text));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        (&Method::DELETE, "/__requests") => ok(&json!({"cleared": state.recorder().clear()})),
        (&Method::GET, "/__stats") => {
            let requests = state.recorder().count();
            ok(&json!({"requests": requests, "stored_responses": state.store().len()}))
        }
        (method, path) => respond::error(
            StatusCode::NOT_FOUND,
            &format!("no control endpoint {method} {path}"),
            "invalid_request_error",
            "not_found",
            &name,
        ),
    }
}

/// Applies the strict checks, records the request (refused or not), then
/// answers it as an API call.
async fn api(
    state: &State,
    conn: &Conn,
    parts: &Parts,
    body: &Bytes,
) -> Result<Response<Body>, Dropped> {
    let path = parts.uri.path();
    let checked = state.strict.as_ref().map(|expect| {
        let seen = Seen {
            tls: conn.tls,
            sni: conn.sni.as_deref(),
            authority: record::authority(parts),
            method: parts.method.as_str(),
            path,
            query: parts.uri.query(),
            headers: &parts.headers,
        };
        strict::check(expect, &seen).and_then(|operation| {
            if parts.method == Method::POST {
                validate::check(&expect.kind, operation, &parts.headers, body)?;
            }
            Ok(operation)
        })
    });
    let (operation, refusal) = match checked {
        None => (path, None),
        Some(Ok(operation)) => (operation, None),
        Some(Err(refusal)) => (path, Some(refusal)),
    };
    {
        let mut recorder = state.recorder();
        if recorder.keeps_records() {
            let mut record = Record::new(parts, body, conn);
            record.strict_status = refusal.as_ref().map(|r| r.status.as_u16());
            recorder.push(record);
        } else {
            recorder.count_only();
        }
    }
    if let Some(refusal) = refusal {
        return Ok(respond::json(refusal.status, &refusal.body));
    }
    let cfg = state.behaviour().clone();
    let name = cfg.name.as_str();

    let Some(endpoint) = Endpoint::from_path(operation) else {
        if path == "/healthz" && matches!(parts.method, Method::GET | Method::HEAD) {
            return Ok(respond::text(StatusCode::OK, "ok"));
        }
        return Ok(respond::error(
            StatusCode::NOT_FOUND,
            &format!("no route for {} {path}", parts.method),
            "invalid_request_error",
            "not_found",
            name,
        ));
    };
    let own_error = |status: StatusCode, message: &str, kind: &str, code: &str| {
        if endpoint.anthropic() {
            let mut body = anthropic::error_body(anthropic::error_type(status.as_u16()), message);
            body["served_by"] = Value::from(name);
            respond::json(status, &body)
        } else {
            respond::error(status, message, kind, code, name)
        }
    };
    let methods = endpoint.methods();
    if !methods.contains(&parts.method.as_str()) {
        return Ok(own_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!(
                "{} is not allowed on {path}; use {}",
                parts.method,
                methods.join(" or ")
            ),
            "invalid_request_error",
            "method_not_allowed",
        ));
    }

    // Failure injection, in the order a client would notice it.
    if stalls_at_start(&cfg, endpoint, body) {
        tokio::time::sleep(Duration::from_millis(cfg.stall_ms)).await;
    }
    if cfg.drop == Some(DropMode::BeforeResponse) {
        return Err(Dropped);
    }
    if let Some(status) = cfg.pick_failure() {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = match cfg.fail_body {
            Some(b) => respond::json(status, &b.body()),
            None => own_error(
                status,
                &format!("injected failure from {name}"),
                "server_error",
                "injected",
            ),
        };
        if let Some(value) = cfg.retry_after.as_deref() {
            if let Ok(value) = HeaderValue::from_str(value) {
                resp.headers_mut().insert(RETRY_AFTER, value);
            }
        }
        return Ok(resp);
    }

    let body_use = endpoint.body_use(&parts.method);
    let empty = body.iter().all(u8::is_ascii_whitespace);
    let request = if body_use == BodyUse::Ignored || (body_use == BodyUse::OptionalJson && empty) {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Ok(own_error(
                    StatusCode::BAD_REQUEST,
                    "request body must be a JSON object",
                    "invalid_request_error",
                    "invalid_json",
                ))
            }
            Err(e) => {
                return Ok(own_error(
                    StatusCode::BAD_REQUEST,
                    &format!("request body is not valid JSON: {e}"),
                    "invalid_request_error",
                    "invalid_json",
                ))
            }
        }
    };
    if cfg.error_body_on_200 {
        let body = if endpoint.anthropic() {
            let mut body =
                anthropic::error_body("api_error", &format!("injected error body from {name}"));
            body["served_by"] = Value::from(name);
            body
        } else {
            respond::error_body(
                &format!("injected error body from {name}"),
                "server_error",
                "injected",
                name,
            )
        };
        return Ok(respond::json(StatusCode::OK, &body));
    }
    if let Some(fault) = cfg.answer_fault {
        let api = match endpoint {
            Endpoint::ChatCompletions => Some(answer_fault::Api::Chat),
            Endpoint::Messages => Some(answer_fault::Api::Messages),
            Endpoint::Responses => Some(answer_fault::Api::Responses),
            _ => None,
        };
        if let Some(api) = api {
            let model = request
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("mock");
            let stream = crate::generate::wants_stream(&request);
            return Ok(answer_fault::answer(fault, api, stream, model, name));
        }
    }

    let gen = Gen::new(&cfg, &request);
    let reply = match dispatch(
        state,
        endpoint,
        &parts.method,
        parts.uri.query(),
        &gen,
        &request,
    ) {
        Ok(reply) => reply,
        Err(refusal) => return Ok(refusal.response()),
    };
    let cut = cfg.drop == Some(DropMode::MidStream);
    Ok(match reply {
        Reply::Json { body, delay } if cfg.headers_first && !cut => {
            respond::json_later(&body, delay)
        }
        Reply::Json { body, delay } => {
            tokio::time::sleep(delay).await;
            if cut {
                respond::json_cut(&body)
            } else {
                respond::json(StatusCode::OK, &body)
            }
        }
        Reply::Stream(steps) => respond::sse(steps, cut),
    })
}

/// The endpoint's answer, or its refusal in the provider's own shape. The
/// store is locked only here, never across an await.
fn dispatch(
    state: &State,
    endpoint: Endpoint<'_>,
    method: &Method,
    query: Option<&str>,
    gen: &Gen,
    request: &Value,
) -> Result<Reply, ApiError> {
    let now = Instant::now();
    let name = gen.name.as_str();
    match endpoint {
        Endpoint::ChatCompletions => Ok(openai::chat(gen, tool_turn::openai(request))),
        Endpoint::Completions => Ok(openai::completions(gen)),
        Endpoint::Messages => Ok(anthropic::messages(gen, tool_turn::anthropic(request))),
        Endpoint::CountTokens => anthropic::count_tokens(request),
        Endpoint::Embeddings => openai::embeddings(gen, request).map_err(|msg| ApiError {
            status: StatusCode::BAD_REQUEST,
            body: respond::error_body(&msg, "invalid_request_error", "invalid_json", name),
        }),
        Endpoint::Responses => {
            responses::create(gen, request, &mut state.store(), &state.sealer, now)
        }
        Endpoint::Response(id) if method == Method::DELETE => {
            responses::delete(&mut state.store(), id)
        }
        Endpoint::Response(id) => responses::retrieve(&mut state.store(), id, now),
        Endpoint::ResponseInputItems(id) => {
            responses::input_items_list(&mut state.store(), id, query, now)
        }
        Endpoint::ResponseCancel(id) => responses::cancel(&mut state.store(), id, now),
        Endpoint::Conversations => Ok(responses::create_conversation(&mut state.store(), request)),
        Endpoint::Conversation(id) if method == Method::DELETE => {
            responses::delete_conversation(&mut state.store(), id)
        }
        Endpoint::Conversation(id) => responses::retrieve_conversation(&state.store(), id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_with_and_without_v1() {
        assert_eq!(
            Endpoint::from_path("/v1/chat/completions"),
            Some(Endpoint::ChatCompletions)
        );
        assert_eq!(
            Endpoint::from_path("/chat/completions"),
            Some(Endpoint::ChatCompletions)
        );
        assert_eq!(
            Endpoint::from_path("/v1/messages"),
            Some(Endpoint::Messages)
        );
        assert_eq!(
            Endpoint::from_path("/v1/completions"),
            Some(Endpoint::Completions)
        );
        assert_eq!(
            Endpoint::from_path("/v1/embeddings"),
            Some(Endpoint::Embeddings)
        );
        assert_eq!(Endpoint::from_path("/responses"), Some(Endpoint::Responses));
        assert_eq!(
            Endpoint::from_path("/v1/messages/count_tokens"),
            Some(Endpoint::CountTokens)
        );
        assert_eq!(Endpoint::from_path("/v1"), None);
        assert_eq!(Endpoint::from_path("/v2/messages"), None);
        assert_eq!(Endpoint::from_path("/healthz"), None);
    }

    #[test]
    fn stall_after_content_moves_the_stall_of_the_streams_it_breaks_only() {
        let cfg = |stream_fault| Behaviour {
            stall_ms: 100,
            stream_fault,
            ..Behaviour::default()
        };
        let streamed = Bytes::from_static(br#"{"model": "m", "stream": true}"#);
        let plain = Bytes::from_static(br#"{"model": "m"}"#);
        let later = cfg(Some(StreamFault::StallAfterContent));
        for endpoint in [
            Endpoint::ChatCompletions,
            Endpoint::Responses,
            Endpoint::Messages,
        ] {
            assert!(
                !stalls_at_start(&later, endpoint, &streamed),
                "{endpoint:?}"
            );
            assert!(stalls_at_start(&later, endpoint, &plain), "{endpoint:?}");
        }
        assert!(stalls_at_start(&later, Endpoint::Completions, &streamed));
        let cut = cfg(Some(StreamFault::CutAfterContent));
        assert!(stalls_at_start(&cut, Endpoint::ChatCompletions, &streamed));
        assert!(stalls_at_start(
            &cfg(None),
            Endpoint::ChatCompletions,
            &streamed
        ));
        let no_stall = Behaviour::default();
        assert!(!stalls_at_start(
            &no_stall,
            Endpoint::ChatCompletions,
            &plain
        ));
    }

    #[test]
    fn endpoints_with_ids() {
        assert_eq!(
            Endpoint::from_path("/v1/responses/resp_1"),
            Some(Endpoint::Response("resp_1"))
        );
        assert_eq!(
            Endpoint::from_path("/v1/responses/resp_1/input_items"),
            Some(Endpoint::ResponseInputItems("resp_1"))
        );
        assert_eq!(
            Endpoint::from_path("/responses/resp_1/cancel/"),
            Some(Endpoint::ResponseCancel("resp_1"))
        );
        assert_eq!(
            Endpoint::from_path("/v1/conversations/conv_1"),
            Some(Endpoint::Conversation("conv_1"))
        );
        assert_eq!(
            Endpoint::from_path("/v1/conversations"),
            Some(Endpoint::Conversations)
        );
        for bad in [
            "/v1/responses/a/b",
            "/v1/responses//cancel",
            "/v1/responses/a/other",
            "/v1/conversations/a/items",
        ] {
            assert_eq!(Endpoint::from_path(bad), None, "{bad}");
        }
        assert_eq!(Endpoint::Response("x").methods(), ["GET", "DELETE"]);
        assert_eq!(Endpoint::ResponseCancel("x").methods(), ["POST"]);
        assert_eq!(
            Endpoint::ResponseCancel("x").body_use(&Method::POST),
            BodyUse::Ignored
        );
        assert_eq!(Endpoint::Responses.body_use(&Method::POST), BodyUse::Json);
    }
}
