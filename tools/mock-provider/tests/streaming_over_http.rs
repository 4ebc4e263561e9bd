//! The mock's streams as a client sees them on the wire: the built binary on
//! a loopback port, spoken to in raw HTTP/1.1 so every chunk's bytes and
//! arrival time are visible (hyper writes each body frame as one chunk).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for any byte; a stream that stays silent longer fails the test.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read.
const MAX_BYTES: usize = 1 << 20;

/// A running mock provider, stopped when dropped.
struct Mock {
    child: Child,
    addr: String,
}

impl Mock {
    fn start(flags: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mock-provider"))
            .args(["--port", "0"])
            .args(flags)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start mock-provider");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("read");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self { child, addr }
    }

    fn post(&self, path: &str, body: &str) -> Answer {
        self.post_to(&self.addr, path, "", body)
    }

    /// A POST with `Host: host` and `headers` (each line ending in CRLF).
    fn post_to(&self, host: &str, path: &str, headers: &str, body: &str) -> Answer {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
            body.len()
        );
        let sent = Instant::now();
        stream.write_all(request.as_bytes()).expect("send");
        read_answer(stream, sent)
    }

    fn config(&self, patch: &str) -> String {
        let answer = self.post("/__config", patch);
        assert_eq!(answer.status, 200, "{:?}", answer.body());
        answer.body()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: its head, each chunk with its arrival after the request was
/// sent, and whether the body ended properly (the last, empty chunk).
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    chunks: Vec<(Duration, String)>,
    complete: bool,
}

impl Answer {
    fn body(&self) -> String {
        self.chunks.iter().map(|(_, c)| c.as_str()).collect()
    }

    fn texts(&self) -> Vec<&str> {
        self.chunks.iter().map(|(_, c)| c.as_str()).collect()
    }

    /// When the first chunk containing `needle` arrived.
    fn arrival(&self, needle: &str) -> Duration {
        self.chunks
            .iter()
            .find(|(_, c)| c.contains(needle))
            .unwrap_or_else(|| panic!("no chunk with {needle:?} in {:?}", self.texts()))
            .0
    }
}

/// Reads the head, then the chunked body as it comes (or a `Content-Length` one).
fn read_answer(mut stream: TcpStream, sent: Instant) -> Answer {
    let mut buf = Vec::new();
    let mut chunks = Vec::new();
    let mut head: Option<(String, usize)> = None;
    let mut complete = false;
    let mut read = [0u8; 8192];
    while buf.len() < MAX_BYTES && !complete {
        let n = match stream.read(&mut read) {
            Ok(n) => n,
            // An injected abort may reach the client as a reset.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
            Err(e) => panic!("read failed (stalled?): {e}"),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&read[..n]);
        if head.is_none() {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            buf.drain(..end + 4);
            let length = header(&text, "content-length").map(|v| v.parse().expect("length"));
            head = Some((text, length.unwrap_or(usize::MAX)));
        }
        if let Some((_, length)) = &head {
            if *length != usize::MAX {
                complete = buf.len() >= *length;
                if complete {
                    chunks.push((sent.elapsed(), String::from_utf8_lossy(&buf).into_owned()));
                }
                continue;
            }
        }
        complete = take_chunks(&mut buf, &mut chunks, sent.elapsed());
    }
    let (head, _) = head.expect("a response head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    Answer {
        status,
        head,
        chunks,
        complete,
    }
}

/// Moves every whole chunk out of `buf`; true once the last (empty) chunk came.
fn take_chunks(buf: &mut Vec<u8>, chunks: &mut Vec<(Duration, String)>, at: Duration) -> bool {
    loop {
        let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.trim(), 16).expect("chunk size");
        if size == 0 {
            return true;
        }
        let start = line_end + 2;
        if buf.len() < start + size + 2 {
            return false;
        }
        let data = String::from_utf8_lossy(&buf[start..start + size]).into_owned();
        chunks.push((at, data));
        buf.drain(..start + size + 2);
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim())
    })
}

const CHAT: &str =
    r#"{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn each_event_arrives_on_its_own_and_on_time() {
    let mock = Mock::start(&[
        "--output-tokens",
        "5",
        "--ttft-ms",
        "300",
        "--token-delay-ms",
        "100",
    ]);
    let answer = mock.post("/v1/chat/completions", CHAT);
    assert_eq!(answer.status, 200);
    assert_eq!(
        header(&answer.head, "content-type"),
        Some("text/event-stream")
    );
    assert!(answer.complete);
    // role, 5 tokens, finish, [DONE]: one event per chunk.
    assert_eq!(answer.chunks.len(), 8, "{:?}", answer.texts());
    for text in answer.texts() {
        assert!(
            text.starts_with("data: ") && text.ends_with("\n\n"),
            "{text:?}"
        );
        assert_eq!(text.matches("\n\n").count(), 1, "{text:?}");
    }
    // The opening is not held back until the first token...
    let role = answer.arrival(r#""role":"assistant""#);
    let first = answer.arrival("tok1 ");
    assert!(first >= ms(300), "{first:?}");
    assert!(
        first - role >= ms(150),
        "role at {role:?}, tok1 at {first:?}"
    );
    // ...and each token comes on its own, a token delay after the one before.
    for i in 2..=5 {
        let gap = answer.arrival(&format!("tok{i} ")) - answer.arrival(&format!("tok{} ", i - 1));
        assert!(gap >= ms(90), "tok{i} came {gap:?} after the one before");
    }
}

#[test]
fn cut_after_content_aborts_after_n_tokens_events() {
    let mock = Mock::start(&["--output-tokens", "6"]);
    let shown = mock.config(r#"{"stream_fault": "cut-after-content", "fault_after_tokens": 2}"#);
    assert!(
        shown.contains(r#""stream_fault":"cut-after-content""#),
        "{shown}"
    );
    assert!(shown.contains(r#""fault_after_tokens":2"#), "{shown}");
    let answer = mock.post("/chat/completions", CHAT);
    assert_eq!(answer.status, 200);
    assert!(!answer.complete, "the body must not end properly");
    let texts = answer.texts();
    assert_eq!(texts.len(), 3, "role, tok1, tok2: {texts:?}");
    assert!(texts[1].contains("tok1 ") && texts[2].contains("tok2 "));
}

#[test]
fn stall_after_content_pauses_after_n_tokens_not_before_the_answer() {
    let mock = Mock::start(&[
        "--stream-fault",
        "stall-after-content",
        "--fault-after-tokens",
        "1",
        "--stall-ms",
        "600",
        "--output-tokens",
        "3",
    ]);
    let answer = mock.post("/v1/chat/completions", CHAT);
    assert!(answer.complete && answer.body().ends_with("data: [DONE]\n\n"));
    let first = answer.arrival("tok1 ");
    let gap = answer.arrival("tok2 ") - first;
    assert!(gap >= ms(600), "tok2 came {gap:?} after tok1");
    assert!(first < ms(450), "the start was stalled: tok1 at {first:?}");
}

#[test]
fn error_before_content_on_messages_and_on_an_azure_deployment() {
    let anthropic = Mock::start(&["--stream-fault", "error-before-content"]);
    let request = r#"{"model": "c", "max_tokens": 9, "stream": true, "messages": []}"#;
    let answer = anthropic.post("/v1/messages", request);
    assert_eq!(answer.status, 200);
    assert_eq!(
        header(&answer.head, "content-type"),
        Some("text/event-stream")
    );
    assert!(answer.complete);
    let texts = answer.texts();
    assert!(texts[0].starts_with("event: message_start\n"), "{texts:?}");
    assert!(texts[1].starts_with("event: ping\n"), "{texts:?}");
    assert_eq!(
        texts[2..],
        ["event: error\ndata: {\"error\":{\"message\":\"injected stream error from mock\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"]
    );

    let azure = Mock::start(&[
        "--stream-fault=error_before_content",
        "--strict",
        "azure",
        "--host-name",
        "res.example",
        "--deployment",
        "d",
        "--api-version",
        "2024-10-21",
        "--api-key",
        "k",
    ]);
    // Strict mode checks the Host and the key; the deployment path maps to chat completions.
    let path = "/openai/deployments/d/chat/completions?api-version=2024-10-21";
    let answer = azure.post_to("res.example", path, "api-key: k\r\n", CHAT);
    assert_eq!(answer.status, 200, "{:?}", answer.body());
    let texts = answer.texts();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts[0].contains(r#""delta":{"content":"","role":"assistant"}"#));
    assert_eq!(
        texts[1],
        "data: {\"error\":{\"code\":\"injected\",\"message\":\"injected stream error from mock\",\"type\":\"server_error\"}}\n\n"
    );
}

#[test]
fn garbage_after_content_on_responses_then_the_rest() {
    let mock = Mock::start(&[
        "--stream-fault",
        "garbage-after-content",
        "--output-tokens",
        "3",
    ]);
    let request = r#"{"model": "m", "input": "hi", "stream": true}"#;
    let answer = mock.post("/v1/responses", request);
    assert!(answer.complete);
    let texts = answer.texts();
    let garbage = texts
        .iter()
        .position(|t| *t == "this is not an event\n\n")
        .expect("the garbage line");
    let deltas_before = texts[..garbage]
        .iter()
        .filter(|t| t.starts_with("event: response.output_text.delta\n"))
        .count();
    assert_eq!(deltas_before, 2);
    assert!(texts[garbage + 1].contains(r#""delta":"tok3 ""#));
    assert!(texts
        .last()
        .unwrap()
        .starts_with("event: response.completed\n"));
    // Not streamed: the fault is ignored.
    let plain = mock.post("/v1/responses", r#"{"model": "m", "input": "hi"}"#);
    assert!(plain.body().contains(r#""status":"completed""#));
    assert!(!plain.body().contains("not an event"));
}
