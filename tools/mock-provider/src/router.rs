//! Request routing: control endpoints under `/__`, recording, failure
//! injection, then the API handlers.

use crate::behaviour::{Behaviour, DropMode};
use crate::generate::Gen;
use crate::record::{self, Record, Recorder};
use crate::respond::{self, Body, Reply};
use crate::strict::{self, Expect, Seen};
use crate::{anthropic, openai};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, RETRY_AFTER};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const PROVIDER_HEADER: HeaderName = HeaderName::from_static("x-mock-provider");

/// Shared server state.
#[derive(Debug, Default)]
pub struct State {
    behaviour: Mutex<Behaviour>,
    recorder: Mutex<Recorder>,
    /// Fixed at start: tests change behaviour at run time, never the provider's identity.
    strict: Option<Expect>,
}

impl State {
    pub fn new(behaviour: Behaviour, max_records: usize, strict: Option<Expect>) -> Self {
        Self {
            behaviour: Mutex::new(behaviour),
            recorder: Mutex::new(Recorder::with_limit(max_records)),
            strict,
        }
    }

    fn behaviour(&self) -> MutexGuard<'_, Behaviour> {
        self.behaviour.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recorder(&self) -> MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
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
enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Responses,
    Messages,
}

impl Endpoint {
    fn from_path(path: &str) -> Option<Self> {
        let path = path.strip_prefix("/v1").unwrap_or(path);
        match path.trim_end_matches('/') {
            "/chat/completions" => Some(Self::ChatCompletions),
            "/completions" => Some(Self::Completions),
            "/embeddings" => Some(Self::Embeddings),
            "/responses" => Some(Self::Responses),
            "/messages" => Some(Self::Messages),
            _ => None,
        }
    }
}

/// The hyper service function.
pub async fn handle(
    state: Arc<State>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Dropped> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let mut resp = if parts.uri.path().starts_with("/__") {
        control(&state, &parts, &body)
    } else {
        api(&state, &conn, &parts, &body).await?
    };
    let name = state.behaviour().name.clone();
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
        (&Method::GET, "/__stats") => ok(&json!({"requests": state.recorder().count()})),
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
        strict::check(expect, &seen)
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
    if parts.method != Method::POST {
        return Ok(respond::error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{} is not allowed on {path}; use POST", parts.method),
            "invalid_request_error",
            "method_not_allowed",
            name,
        ));
    }

    // Failure injection, in the order a client would notice it.
    if cfg.stall_ms > 0 {
        tokio::time::sleep(Duration::from_millis(cfg.stall_ms)).await;
    }
    if cfg.drop == Some(DropMode::BeforeResponse) {
        return Err(Dropped);
    }
    if let Some(status) = cfg.pick_failure() {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = respond::error(
            status,
            &format!("injected failure from {name}"),
            "server_error",
            "injected",
            name,
        );
        if let Some(value) = cfg.retry_after.as_deref() {
            if let Ok(value) = HeaderValue::from_str(value) {
                resp.headers_mut().insert(RETRY_AFTER, value);
            }
        }
        return Ok(resp);
    }

    let request = match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Ok(bad_request("request body must be a JSON object", name)),
        Err(e) => {
            return Ok(bad_request(
                &format!("request body is not valid JSON: {e}"),
                name,
            ))
        }
    };
    if cfg.error_body_on_200 {
        let body = respond::error_body(
            &format!("injected error body from {name}"),
            "server_error",
            "injected",
            name,
        );
        return Ok(respond::json(StatusCode::OK, &body));
    }

    let gen = Gen::new(&cfg, &request);
    let reply = match endpoint {
        Endpoint::ChatCompletions => openai::chat(&gen),
        Endpoint::Completions => openai::completions(&gen),
        Endpoint::Responses => openai::responses(&gen),
        Endpoint::Messages => anthropic::messages(&gen),
        Endpoint::Embeddings => match openai::embeddings(&gen, &request) {
            Ok(reply) => reply,
            Err(msg) => return Ok(bad_request(&msg, name)),
        },
    };
    let cut = cfg.drop == Some(DropMode::MidStream);
    Ok(match reply {
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

fn bad_request(message: &str, name: &str) -> Response<Body> {
    respond::error(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        "invalid_json",
        name,
    )
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
        assert_eq!(Endpoint::from_path("/v1"), None);
        assert_eq!(Endpoint::from_path("/v2/messages"), None);
        assert_eq!(Endpoint::from_path("/healthz"), None);
    }
}
