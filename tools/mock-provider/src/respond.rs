//! Response bodies: whole JSON, timed streams written chunk by chunk, and
//! streams cut short to simulate a dropped connection.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

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
    /// Instead of writing, abort the connection here (the steps before are flushed first).
    pub abort: bool,
}

impl Step {
    pub fn now(bytes: Bytes) -> Self {
        Self::after(Duration::ZERO, bytes)
    }

    pub fn after(delay: Duration, bytes: Bytes) -> Self {
        Self {
            delay,
            bytes,
            abort: false,
        }
    }

    /// An injected abort at this point of the stream.
    pub fn abort() -> Self {
        Self {
            delay: Duration::ZERO,
            bytes: Bytes::new(),
            abort: true,
        }
    }
}

/// Pause before an injected abort, so the bytes already produced get flushed.
const ABORT_GRACE: Duration = Duration::from_millis(50);

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Streams `steps`, each written and flushed on its own after its delay; with
/// `abort_after = Some(n)` only the first `n` steps are sent and then the body
/// fails, which makes hyper abort the connection (as does a `Step::abort`).
pub fn timed(steps: Vec<Step>, abort_after: Option<usize>) -> Body {
    let (tx, rx) = mpsc::channel::<io::Result<Frame<Bytes>>>(1);
    tokio::spawn(async move {
        let mut abort = abort_after.is_some();
        for (i, step) in steps.into_iter().enumerate() {
            if abort_after == Some(i) {
                break;
            }
            if step.abort {
                abort = true;
                break;
            }
            if !step.delay.is_zero() {
                tokio::time::sleep(step.delay).await;
            }
            if tx.send(Ok(Frame::data(step.bytes))).await.is_err() {
                return; // client went away
            }
        }
        if abort {
            tokio::time::sleep(ABORT_GRACE).await;
            let err = io::Error::new(io::ErrorKind::ConnectionAborted, "injected mid-stream drop");
            let _ = tx.send(Err(err)).await;
        }
    });
    OneWritePerFrame {
        rx,
        just_sent: false,
    }
    .boxed()
}

/// A body that answers `Pending` (and wakes itself at once) after each frame.
/// hyper's HTTP/1 writer buffers every frame a body has ready and flushes when
/// the body is pending, so this makes each frame (one SSE event) its own write,
/// even when several are ready together.
struct OneWritePerFrame {
    rx: mpsc::Receiver<io::Result<Frame<Bytes>>>,
    just_sent: bool,
}

impl hyper::body::Body for OneWritePerFrame {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        if std::mem::take(&mut self.just_sent) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = std::task::ready!(self.rx.poll_recv(cx));
        self.just_sent = next.is_some();
        Poll::Ready(next)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    #[derive(Default)]
    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Even with every frame ready at once, the body pauses (and asks to be
    /// polled again) after each, so hyper flushes each frame on its own.
    #[test]
    fn a_body_pauses_after_each_frame() {
        let (tx, rx) = mpsc::channel(4);
        for part in ["a", "b"] {
            tx.try_send(Ok(Frame::data(Bytes::from(part)))).unwrap();
        }
        drop(tx);
        let wakes = Arc::new(CountWakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut body = OneWritePerFrame {
            rx,
            just_sent: false,
        };
        let mut polls = Vec::new();
        for _ in 0..6 {
            let poll = Pin::new(&mut body).poll_frame(&mut cx);
            polls.push(match poll {
                Poll::Pending => "pending".to_owned(),
                Poll::Ready(None) => "end".to_owned(),
                Poll::Ready(Some(frame)) => {
                    let data = frame.unwrap().into_data().unwrap();
                    String::from_utf8_lossy(&data).into_owned()
                }
            });
            if polls.last().is_some_and(|p| p == "end") {
                break;
            }
        }
        assert_eq!(polls, ["a", "pending", "b", "pending", "end"]);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 2, "woken at each pause");
    }
}
