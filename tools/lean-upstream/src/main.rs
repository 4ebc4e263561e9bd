//! `lean-upstream`: the upstream of `make bench`. It answers every request on a listener with
//! the same precomputed bytes, over HTTP/1.1 keep-alive, from one epoll loop on one thread, so
//! that its CPU per request stays well below Envoy's and the benchmark measures Envoy.
//!
//! `lean-upstream chat stream fail` binds one loopback listener per mode on a free port, prints
//! `MODE PORT` for each and then `ready`, and serves until killed (or `--lifetime-s`, default
//! an hour, has passed: no run outlives its benchmark by long). Modes:
//! - `chat`: a fixed OpenAI chat completion (`200`, JSON);
//! - `stream`: a fixed short OpenAI chat completion stream (`200`, SSE, chunked);
//! - `slow-stream`: the same stream, its first content event sent at once and the rest only
//!   after `--hold-ms` (default 2000, at most 60000): streams held open past their commit point,
//!   for the memory an in-flight stream costs;
//! - `fail`: `503` with an OpenAI-shaped error, for the fallback scenario;
//! - `responses-stream`: a fixed short Responses API stream (`200`, SSE, chunked; named
//!   events, the response id `resp_...` that Switchboard's id rewriter replaces).
//!
//! `--answer-kb N` (at most 16384) pads `stream` and `responses-stream` to N KiB of content
//! events, for instructions per KB of a long answer: ~100-byte text deltas, one per SSE event
//! and HTTP chunk as a provider flushes them, until the content events hold N KiB, then the
//! final usage event and the end (`[DONE]`, `response.completed`). Every content event of a
//! padded chat stream is the same bytes ([`padded_content_event`]); the benchmark scripts
//! rebuild them to check every answer whole.
//!
//! The request body is read and discarded as it arrives (content-length or chunked), never kept.

mod http;
mod outbox;

use http::{Parser, Progress};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use outbox::{Answer, Outbox};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The longest a slow stream may be held open: every run stays bounded.
const MAX_HOLD: Duration = Duration::from_secs(60);
/// The slow stream's first part: the head and the events up to its first content.
const SLOW_STREAM_FIRST_EVENTS: usize = 2;
/// The largest `--answer-kb`: 16 MiB answers keep every run bounded in memory and time.
const MAX_ANSWER_KB: usize = 16 * 1024;
/// The text of every padded content delta: 100 bytes, no JSON escapes.
const DELTA_TEXT: &str =
    "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore ";

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

/// The Responses API stream (OpenAI API reference, Responses "Streaming events"): the response
/// created, its message item and text part opened, content deltas (`{deltas}` is replaced by
/// them), then the part, the item and the response done.
const RESPONSES_HEAD: &[&str] = &[
    "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_bench0123456789abcdef\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"in_progress\",\"model\":\"gpt-4o\",\"output\":[],\"usage\":null}}",
    "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_bench0123456789abcdef\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"in_progress\",\"model\":\"gpt-4o\",\"output\":[],\"usage\":null}}",
    "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}",
    "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}",
];

/// A Responses text delta with its sequence number.
fn responses_delta(sequence: usize, text: &str) -> String {
    format!(
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{sequence},\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"delta\":\"{text}\"}}"
    )
}

/// The events after the deltas, from sequence number `first`. The done events name the text
/// briefly rather than repeating it whole: the answer's size is its deltas'.
fn responses_tail(first: usize, output_tokens: usize) -> Vec<String> {
    let text = "(the deltas' text)";
    vec![
        format!("event: response.output_text.done\ndata: {{\"type\":\"response.output_text.done\",\"sequence_number\":{first},\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"text\":\"{text}\"}}"),
        format!("event: response.content_part.done\ndata: {{\"type\":\"response.content_part.done\",\"sequence_number\":{},\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"part\":{{\"type\":\"output_text\",\"text\":\"{text}\",\"annotations\":[]}}}}", first + 1),
        format!("event: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"sequence_number\":{},\"output_index\":0,\"item\":{{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{text}\",\"annotations\":[]}}]}}}}", first + 2),
        format!("event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":{},\"response\":{{\"id\":\"resp_bench0123456789abcdef\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"completed\",\"model\":\"gpt-4o\",\"output\":[{{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{text}\",\"annotations\":[]}}]}}],\"usage\":{{\"input_tokens\":12,\"output_tokens\":{output_tokens},\"total_tokens\":{}}}}}}}", first + 3, 12 + output_tokens),
    ]
}

/// One padded chat content event: a 100-byte delta.
fn padded_content_event() -> String {
    format!(
        r#"data: {{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{{"index":0,"delta":{{"content":"{DELTA_TEXT}"}},"finish_reason":null}}]}}"#
    )
}

/// How many content events of `event_len` bytes (each framed as `EVENT\n\n`) hold `kb` KiB.
fn padded_count(kb: usize, event_len: usize) -> usize {
    (kb * 1024).div_ceil(event_len + 2)
}

/// The chat stream's events: the fixed five, or with `kb` KiB of content events in place of
/// its two content events.
fn chat_events(kb: usize) -> Vec<String> {
    let fixed = |e: &[&str]| e.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if kb == 0 {
        return fixed(STREAM_EVENTS);
    }
    let event = padded_content_event();
    let n = padded_count(kb, event.len());
    let mut events = fixed(&STREAM_EVENTS[..1]);
    events.extend(std::iter::repeat_n(event, n));
    let usage = STREAM_EVENTS[3].replace(
        r#""completion_tokens":7,"total_tokens":19"#,
        &format!(r#""completion_tokens":{n},"total_tokens":{}"#, 12 + n),
    );
    events.push(usage);
    events.push(STREAM_EVENTS[4].to_string());
    events
}

/// The Responses stream's events: two deltas, or `kb` KiB of delta events.
fn responses_events(kb: usize) -> Vec<String> {
    let mut events: Vec<String> = RESPONSES_HEAD.iter().map(|s| s.to_string()).collect();
    let first = events.len();
    let n = if kb == 0 {
        2
    } else {
        padded_count(kb, responses_delta(first, DELTA_TEXT).len())
    };
    for i in 0..n {
        let text = if kb == 0 {
            ["Hello", " from the bench upstream."][i]
        } else {
            DELTA_TEXT
        };
        events.push(responses_delta(first + i, text));
    }
    events.extend(responses_tail(first + n, n));
    events
}

const FAIL_BODY: &str = r#"{"error":{"message":"overloaded (bench upstream)","type":"server_error","code":"unavailable"}}"#;

/// What a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Chat,
    Stream,
    SlowStream,
    Fail,
    ResponsesStream,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "chat" => Some(Mode::Chat),
            "stream" => Some(Mode::Stream),
            "slow-stream" => Some(Mode::SlowStream),
            "fail" => Some(Mode::Fail),
            "responses-stream" => Some(Mode::ResponsesStream),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Chat => "chat",
            Mode::Stream => "stream",
            Mode::SlowStream => "slow-stream",
            Mode::Fail => "fail",
            Mode::ResponsesStream => "responses-stream",
        }
    }

    /// The response, status line to last byte, in two parts: the first is sent at once, the
    /// second (empty but for a slow stream) after the hold. `answer_kb` pads the `stream` and
    /// `responses-stream` answers.
    fn response(self, answer_kb: usize) -> (String, String) {
        let fixed = |status: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        match self {
            Mode::Chat => (fixed("200 OK", CHAT_BODY), String::new()),
            Mode::Fail => (fixed("503 Service Unavailable", FAIL_BODY), String::new()),
            Mode::Stream => (
                format!(
                    "{STREAM_HEAD}{}{LAST_CHUNK}",
                    chunks(&chat_events(answer_kb))
                ),
                String::new(),
            ),
            Mode::ResponsesStream => (
                format!(
                    "{STREAM_HEAD}{}{LAST_CHUNK}",
                    chunks(&responses_events(answer_kb))
                ),
                String::new(),
            ),
            Mode::SlowStream => {
                let (first, rest) = STREAM_EVENTS.split_at(SLOW_STREAM_FIRST_EVENTS);
                (
                    format!("{STREAM_HEAD}{}", chunks(first)),
                    format!("{}{LAST_CHUNK}", chunks(rest)),
                )
            }
        }
    }
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
const LAST_CHUNK: &str = "0\r\n\r\n";

/// One HTTP chunk per SSE event, as a provider flushes them.
fn chunks<S: AsRef<str>>(events: &[S]) -> String {
    events
        .iter()
        .map(|event| {
            let chunk = format!("{}\n\n", event.as_ref());
            format!("{:x}\r\n{chunk}\r\n", chunk.len())
        })
        .collect()
}

/// When held parts of answers fall due, by connection token (the earliest on top).
type Timers = BinaryHeap<Reverse<(Instant, usize)>>;

struct Conn {
    stream: TcpStream,
    answer: Answer,
    parser: Parser,
    outbox: Outbox,
    close_after_write: bool,
    writable_wanted: bool,
}

fn main() -> ExitCode {
    let mut modes = Vec::new();
    let mut lifetime = Duration::from_secs(3600);
    let mut hold = Duration::from_secs(2);
    let mut answer_kb = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--lifetime-s" {
            match args.next().and_then(|v| v.parse().ok()) {
                Some(s) => lifetime = Duration::from_secs(s),
                None => return usage("--lifetime-s needs a number of seconds"),
            }
        } else if arg == "--hold-ms" {
            match args
                .next()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
            {
                Some(ms) if ms <= MAX_HOLD => hold = ms,
                _ => return usage("--hold-ms needs a number of milliseconds up to 60000"),
            }
        } else if arg == "--answer-kb" {
            match args.next().and_then(|v| v.parse().ok()) {
                Some(kb) if kb <= MAX_ANSWER_KB => answer_kb = kb,
                _ => return usage("--answer-kb needs a number of KiB up to 16384"),
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
    match serve(&modes, lifetime, hold, answer_kb) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lean-upstream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!(
        "lean-upstream: {problem}\nusage: lean-upstream [chat|stream|slow-stream|fail|responses-stream]... \
         [--lifetime-s N] [--hold-ms N] [--answer-kb N]"
    );
    ExitCode::from(2)
}

fn serve(modes: &[Mode], lifetime: Duration, hold: Duration, answer_kb: usize) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listeners = Vec::new();
    let mut stdout = io::stdout().lock();
    for (i, mode) in modes.iter().enumerate() {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().map_err(io::Error::other)?)?;
        poll.registry()
            .register(&mut listener, Token(i), Interest::READABLE)?;
        writeln!(stdout, "{} {}", mode.name(), listener.local_addr()?.port())?;
        // Leaked once per listener: the answers live as long as the process.
        let (first, rest) = mode.response(answer_kb);
        let leak = |s: String| -> &'static [u8] { Box::leak(s.into_bytes().into_boxed_slice()) };
        let answer = Answer {
            first: leak(first),
            rest: leak(rest),
            hold,
        };
        listeners.push((listener, answer));
    }
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    drop(stdout);

    let first_conn = listeners.len();
    let mut conns = Conns {
        slots: Vec::new(),
        free: Vec::new(),
        first: first_conn,
    };
    let mut timers = Timers::new();
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + lifetime;
    while Instant::now() < deadline {
        match poll.poll(&mut events, Some(next_wait(&timers))) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => other?,
        }
        for event in events.iter() {
            let token = event.token();
            if let Some((listener, answer)) = listeners.get(token.0) {
                accept(&poll, listener, *answer, &mut conns)?;
                continue;
            }
            conns.drive(&poll, token, &mut buf, &mut timers, None);
        }
        // Held parts that fell due go out (a slow stream's rest).
        let now = Instant::now();
        while let Some(&Reverse((due, token))) = timers.peek() {
            if due > now {
                break;
            }
            timers.pop();
            conns.drive(&poll, Token(token), &mut buf, &mut timers, Some(now));
        }
    }
    Ok(())
}

/// How long the loop may wait for an event: until the next held part falls due, at most 1 s
/// (the lifetime is checked between waits).
fn next_wait(timers: &Timers) -> Duration {
    let idle = Duration::from_secs(1);
    timers.peek().map_or(idle, |&Reverse((due, _))| {
        due.saturating_duration_since(Instant::now()).min(idle)
    })
}

/// The open connections, by token (after the listeners' tokens).
struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    first: usize,
}

impl Conns {
    /// Drives one connection (after releasing its parts due at `release`, if given), and
    /// forgets it when it is done.
    fn drive(
        &mut self,
        poll: &Poll,
        token: Token,
        buf: &mut [u8],
        timers: &mut Timers,
        release: Option<Instant>,
    ) {
        let Some(slot) = token.0.checked_sub(self.first) else {
            return;
        };
        let keep = match self.slots.get_mut(slot).and_then(Option::as_mut) {
            Some(conn) => {
                if let Some(now) = release {
                    conn.outbox.release(now);
                }
                drive(poll, conn, token, buf, timers)
            }
            None => return,
        };
        if !keep {
            if let Some(mut conn) = self.slots.get_mut(slot).and_then(Option::take) {
                let _ = poll.registry().deregister(&mut conn.stream);
            }
            self.free.push(slot);
        }
    }
}

fn accept(
    poll: &Poll,
    listener: &TcpListener,
    answer: Answer,
    conns: &mut Conns,
) -> io::Result<()> {
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        stream.set_nodelay(true)?;
        let slot = conns.free.pop().unwrap_or_else(|| {
            conns.slots.push(None);
            conns.slots.len() - 1
        });
        poll.registry()
            .register(&mut stream, Token(conns.first + slot), Interest::READABLE)?;
        if let Some(entry) = conns.slots.get_mut(slot) {
            *entry = Some(Conn {
                stream,
                answer,
                parser: Parser::default(),
                outbox: Outbox::default(),
                close_after_write: false,
                writable_wanted: false,
            });
        }
    }
}

/// Reads what arrived, answers every complete request, writes what it can. False when the
/// connection is done.
fn drive(poll: &Poll, conn: &mut Conn, token: Token, buf: &mut [u8], timers: &mut Timers) -> bool {
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
                                if let Some(due) = conn.outbox.answer(conn.answer, Instant::now()) {
                                    timers.push(Reverse((due, token.0)));
                                }
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
    if !flush(conn) {
        return false;
    }
    if conn.outbox.is_empty() && conn.close_after_write {
        return false;
    }
    let want = !conn.outbox.out.is_empty();
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

/// Writes what the socket takes. False when the connection broke.
fn flush(conn: &mut Conn) -> bool {
    while !conn.outbox.out.is_empty() {
        match conn.stream.write(&conn.outbox.out) {
            Ok(0) => return false,
            Ok(n) => {
                conn.outbox.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    true
}
