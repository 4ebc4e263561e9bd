//! Response bodies: whole JSON, timed streams written chunk by chunk, and
//! streams cut short to simulate a dropped connection.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use std::io;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The one body type every handler returns.
pub type Body = BoxBody<Bytes, io::Error>;

/// What an API handler produces before failure injection shapes the output.
#[derive(Debug)]
pub enum Reply {
    /// A JSON document sent after `delay`.
    Json { body: Value, delay: Duration },
    /// An SSE stream; each step is written (and flushed) after its delay.
    Stream(Vec<Step>),
}

/// A refusal in the provider's own error shape (no `served_by`).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
}

impl ApiError {
    pub fn response(&self) -> Response<Body> {
        json(self.status, &self.body)
    }
}

/// One piece of a timed stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub delay: Duration,
    pub bytes: Bytes,
}

impl Step {
    pub fn now(bytes: Bytes) -> Self {
        Self::after(Duration::ZERO, bytes)
    }

    pub fn after(delay: Duration, bytes: Bytes) -> Self {
        Self { delay, bytes }
    }
}

/// Pause before an injected abort, so the bytes already produced get flushed.
const ABORT_GRACE: Duration = Duration::from_millis(50);

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Streams `steps`; with `abort_after = Some(n)` only the first `n` steps are
/// sent and then the body fails, which makes hyper abort the connection.
pub fn timed(steps: Vec<Step>, abort_after: Option<usize>) -> Body {
    let (tx, rx) = mpsc::channel::<io::Result<Frame<Bytes>>>(1);
    tokio::spawn(async move {
        for (i, step) in steps.into_iter().enumerate() {
            if abort_after == Some(i) {
                break;
            }
            if !step.delay.is_zero() {
                tokio::time::sleep(step.delay).await;
            }
            if tx.send(Ok(Frame::data(step.bytes))).await.is_err() {
                return; // client went away
            }
        }
        if abort_after.is_some() {
            tokio::time::sleep(ABORT_GRACE).await;
            let err = io::Error::new(io::ErrorKind::ConnectionAborted, "injected mid-stream drop");
            let _ = tx.send(Err(err)).await;
        }
    });
    StreamBody::new(ReceiverStream::new(rx)).boxed()
}

pub fn json(status: StatusCode, value: &Value) -> Response<Body> {
    with_type(status, "application/json", full(value.to_string()))
}

pub fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    with_type(status, "text/plain; charset=utf-8", full(body))
}

/// JSON whose headers go at once and whose body follows after `delay`, in two parts 20 ms
/// apart (`Content-Length` announces all of it): a server that flushes its headers first.
pub fn json_later(value: &Value, delay: Duration) -> Response<Body> {
    let bytes = Bytes::from(value.to_string());
    let len = bytes.len();
    let (first, rest) = (bytes.slice(..len / 2), bytes.slice(len / 2..));
    let steps = vec![
        Step::after(delay, first),
        Step::after(Duration::from_millis(20), rest),
    ];
    let mut resp = with_type(StatusCode::OK, "application/json", timed(steps, None));
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    resp
}

/// JSON whose body stops halfway (the `Content-Length` announces all of it).
pub fn json_cut(value: &Value) -> Response<Body> {
    let bytes = Bytes::from(value.to_string());
    let len = bytes.len();
    let half = bytes.slice(..len / 2);
    let mut resp = with_type(
        StatusCode::OK,
        "application/json",
        timed(vec![Step::now(half)], Some(1)),
    );
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    resp
}

/// An SSE response; `cut` sends only about the first half of the events.
pub fn sse(steps: Vec<Step>, cut: bool) -> Response<Body> {
    let abort_after = cut.then(|| (steps.len() / 2).max(1));
    let mut resp = with_type(
        StatusCode::OK,
        "text/event-stream",
        timed(steps, abort_after),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The OpenAI-style error document, `{"error": {...}, "served_by": name}`.
pub fn error_body(message: &str, kind: &str, code: &str, name: &str) -> Value {
    json!({
        "error": {"message": message, "type": kind, "param": null, "code": code},
        "served_by": name,
    })
}

pub fn error(
    status: StatusCode,
    message: &str,
    kind: &str,
    code: &str,
    name: &str,
) -> Response<Body> {
    json(status, &error_body(message, kind, code, name))
}

fn with_type(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
