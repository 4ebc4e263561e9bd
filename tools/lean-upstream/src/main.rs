//! `lean-upstream`: the upstream of `make bench`. It answers every request on a listener with
//! the same precomputed bytes, over HTTP/1.1 keep-alive, from one epoll loop on one thread, so
//! that its CPU per request stays well below Envoy's and the benchmark measures Envoy.
//!
//! `lean-upstream chat stream fail` binds one loopback listener per mode on a free port, prints
//! `MODE PORT` for each and then `ready`, and serves until killed (or `--lifetime-s`, default
//! an hour, has passed: no run outlives its benchmark by long). Modes:
//! - `chat`: a fixed OpenAI chat completion (`200`, JSON);
//! - `stream`: a fixed short OpenAI chat completion stream (`200`, SSE, chunked);
//! - `fail`: `503` with an OpenAI-shaped error, for the fallback scenario.
//!
//! The request body is read and discarded as it arrives (content-length or chunked), never kept.

mod http;

use http::{Parser, Progress};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const CHAT_BODY: &str = concat!(
    r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o","#,
    r#""choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the bench upstream."},"#,
    r#""finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#
);

const STREAM_EVENTS: &[&str] = &[
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}"#,
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" from the bench upstream."},"finish_reason":null}]}"#,
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#,
    "data: [DONE]",
];

const FAIL_BODY: &str = r#"{"error":{"message":"overloaded (bench upstream)","type":"server_error","code":"unavailable"}}"#;

/// What a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Chat,
    Stream,
    Fail,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "chat" => Some(Mode::Chat),
            "stream" => Some(Mode::Stream),
            "fail" => Some(Mode::Fail),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Chat => "chat",
            Mode::Stream => "stream",
            Mode::Fail => "fail",
        }
    }

    /// The whole response, status line to last byte.
    fn response(self) -> Vec<u8> {
        let fixed = |status: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        match self {
            Mode::Chat => fixed("200 OK", CHAT_BODY),
            Mode::Fail => fixed("503 Service Unavailable", FAIL_BODY),
            Mode::Stream => {
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                     transfer-encoding: chunked\r\n\r\n",
                );
                // One HTTP chunk per SSE event, as a provider flushes them.
                for event in STREAM_EVENTS {
                    let chunk = format!("{event}\n\n");
                    out.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
                }
                out.push_str("0\r\n\r\n");
                out.into_bytes()
            }
        }
    }
}

struct Conn {
    stream: TcpStream,
    response: &'static [u8],
    parser: Parser,
    /// Bytes of responses not yet written.
    out: Vec<u8>,
    close_after_write: bool,
    writable_wanted: bool,
}

fn main() -> ExitCode {
    let mut modes = Vec::new();
    let mut lifetime = Duration::from_secs(3600);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--lifetime-s" {
            match args.next().and_then(|v| v.parse().ok()) {
                Some(s) => lifetime = Duration::from_secs(s),
                None => return usage("--lifetime-s needs a number of seconds"),
            }
        } else if let Some(mode) = Mode::parse(&arg) {
            modes.push(mode);
        } else {
            return usage(&format!("unknown argument `{arg}`"));
        }
    }
    if modes.is_empty() {
        modes.push(Mode::Chat);
    }
    match serve(&modes, lifetime) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lean-upstream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!(
        "lean-upstream: {problem}\nusage: lean-upstream [chat|stream|fail]... [--lifetime-s N]"
    );
    ExitCode::from(2)
}

fn serve(modes: &[Mode], lifetime: Duration) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listeners = Vec::new();
    let mut stdout = io::stdout().lock();
    for (i, mode) in modes.iter().enumerate() {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().map_err(io::Error::other)?)?;
        poll.registry()
            .register(&mut listener, Token(i), Interest::READABLE)?;
        writeln!(stdout, "{} {}", mode.name(), listener.local_addr()?.port())?;
        // Leaked once per listener: the answers live as long as the process.
        let response: &'static [u8] = Box::leak(mode.response().into_boxed_slice());
        listeners.push((listener, response));
    }
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    drop(stdout);

    let first_conn = listeners.len();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + lifetime;
    while Instant::now() < deadline {
        match poll.poll(&mut events, Some(Duration::from_secs(1))) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => other?,
        }
        for event in events.iter() {
            let Token(t) = event.token();
            if let Some((listener, response)) = listeners.get(t) {
                accept(&poll, listener, response, first_conn, &mut conns, &mut free)?;
                continue;
            }
            let slot = t - first_conn;
            let keep = match conns.get_mut(slot).and_then(Option::as_mut) {
                Some(conn) => drive(&poll, conn, Token(t), &mut buf),
                None => continue,
            };
            if !keep {
                if let Some(mut conn) = conns.get_mut(slot).and_then(Option::take) {
                    let _ = poll.registry().deregister(&mut conn.stream);
                }
                free.push(slot);
            }
        }
    }
    Ok(())
}

fn accept(
    poll: &Poll,
    listener: &TcpListener,
    response: &'static [u8],
    first_conn: usize,
    conns: &mut Vec<Option<Conn>>,
    free: &mut Vec<usize>,
) -> io::Result<()> {
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        stream.set_nodelay(true)?;
        let slot = free.pop().unwrap_or_else(|| {
            conns.push(None);
            conns.len() - 1
        });
        poll.registry()
            .register(&mut stream, Token(first_conn + slot), Interest::READABLE)?;
        if let Some(entry) = conns.get_mut(slot) {
            *entry = Some(Conn {
                stream,
                response,
                parser: Parser::default(),
                out: Vec::new(),
                close_after_write: false,
                writable_wanted: false,
            });
        }
    }
}

/// Reads what arrived, answers every complete request, writes what it can. False when the
/// connection is done.
fn drive(poll: &Poll, conn: &mut Conn, token: Token, buf: &mut [u8]) -> bool {
    if !conn.close_after_write {
        loop {
            match conn.stream.read(buf) {
                Ok(0) => return false,
                Ok(n) => {
                    let mut data = buf.get(..n).unwrap_or_default();
                    while !data.is_empty() {
                        match conn.parser.feed(data) {
                            Progress::NeedMore => break,
                            Progress::Done { used, close } => {
                                conn.out.extend_from_slice(conn.response);
                                data = data.get(used..).unwrap_or_default();
                                if close {
                                    conn.close_after_write = true;
                                    break;
                                }
                            }
                            Progress::Bad => return false,
                        }
                    }
                    // A short read emptied the socket: on Linux every later arrival raises a
                    // new edge, so the read that would only say "would block" is skipped.
                    if conn.close_after_write || n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
    while !conn.out.is_empty() {
        match conn.stream.write(&conn.out) {
            Ok(0) => return false,
            Ok(n) => {
                conn.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    if conn.out.is_empty() && conn.close_after_write {
        return false;
    }
    let want = !conn.out.is_empty();
    if want != conn.writable_wanted {
        let interest = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if poll
            .registry()
            .reregister(&mut conn.stream, token, interest)
            .is_err()
        {
            return false;
        }
        conn.writable_wanted = want;
    }
    true
}
