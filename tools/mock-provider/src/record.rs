//! Recording of received API requests for `/__requests` and `/__stats`.

use crate::router::Conn;
use hyper::header::HOST;
use hyper::http::request::Parts;
use hyper::Version;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::VecDeque;

/// How many records are kept; older ones are discarded first.
pub const MAX_RECORDS: usize = 10_000;

/// One received request as the tests see it.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub method: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Lowercase header name -> value; repeated headers joined with ", ".
    pub headers: Map<String, Value>,
    /// The body as lossy UTF-8.
    pub body: String,
    pub body_len: usize,
    /// The HTTP/2 `:authority` or the HTTP/1.1 `Host` header.
    pub authority: Option<String>,
    /// The TLS server name the client sent (null without TLS or SNI).
    pub sni: Option<String>,
    pub tls: bool,
    /// `HTTP/1.1` or `HTTP/2`.
    pub http_version: &'static str,
    /// The status a `--strict` check refused the request with.
    pub strict_status: Option<u16>,
}

/// The request's authority: HTTP/2's `:authority` (hyper puts it in the
/// URI), else the `Host` header.
pub fn authority(parts: &Parts) -> Option<&str> {
    match parts.uri.authority() {
        Some(a) => Some(a.as_str()),
        None => parts.headers.get(HOST).and_then(|v| v.to_str().ok()),
    }
}

fn version_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "unknown",
    }
}

impl Record {
    pub fn new(parts: &Parts, body: &[u8], conn: &Conn) -> Self {
        let mut headers = Map::new();
        for (name, value) in &parts.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            match headers.get_mut(name.as_str()) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
                }
            }
        }
        Self {
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers,
            body: String::from_utf8_lossy(body).into_owned(),
            body_len: body.len(),
            authority: authority(parts).map(str::to_owned),
            sni: conn.sni.clone(),
            tls: conn.tls,
            http_version: version_name(parts.version),
            strict_status: None,
        }
    }
}

/// The bounded log plus a counter of every request since the last clear.
#[derive(Debug)]
pub struct Recorder {
    records: VecDeque<Record>,
    count: u64,
    limit: usize,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::with_limit(MAX_RECORDS)
    }
}

impl Recorder {
    /// Keeps at most `limit` records (0: only count requests, as benchmarks need).
    pub fn with_limit(limit: usize) -> Self {
        Self {
            records: VecDeque::new(),
            count: 0,
            limit,
        }
    }

    /// Whether requests are kept (a caller may skip building the record otherwise).
    pub fn keeps_records(&self) -> bool {
        self.limit > 0
    }

    pub fn push(&mut self, record: Record) {
        self.count += 1;
        if self.limit == 0 {
            return;
        }
        if self.records.len() >= self.limit {
            self.records.pop_front();
        }
        self.records.push_back(record);
    }

    /// Counts a request without keeping it.
    pub fn count_only(&mut self) {
        self.count += 1;
    }

    pub fn records(&self) -> &VecDeque<Record> {
        &self.records
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Forgets all records and resets the counter; returns how many were kept.
    pub fn clear(&mut self) -> usize {
        let n = self.records.len();
        self.records.clear();
        self.count = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_repeated_headers_and_bounds_log() {
        let req = hyper::Request::builder()
            .method("POST")
            .uri("/v1/x?a=1")
            .header("X-Tag", "a")
            .header("x-tag", "b")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let r = Record::new(&parts, b"hi\xff", &Conn::default());
        assert_eq!(r.headers["x-tag"], "a, b");
        assert_eq!(r.path, "/v1/x");
        assert_eq!(r.query.as_deref(), Some("a=1"));
        assert_eq!(r.body_len, 3);
        assert_eq!(r.body, "hi\u{fffd}");
        assert_eq!((r.authority.as_deref(), r.tls), (None, false));
        assert_eq!(r.http_version, "HTTP/1.1");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (&v["sni"], &v["strict_status"]),
            (&Value::Null, &Value::Null)
        );

        let mut rec = Recorder::default();
        for _ in 0..MAX_RECORDS + 5 {
            rec.push(r.clone());
        }
        assert_eq!(rec.records().len(), MAX_RECORDS);
        assert_eq!(rec.count(), (MAX_RECORDS + 5) as u64);
        assert_eq!(rec.clear(), MAX_RECORDS);
        let mut counting = Recorder::with_limit(0);
        counting.count_only();
        assert_eq!((counting.records().len(), counting.count()), (0, 1));
        assert_eq!(rec.count(), 0);
    }

    #[test]
    fn authority_and_connection() {
        let h1 = hyper::Request::builder()
            .uri("/v1/chat/completions")
            .header("host", "api.openai.com")
            .body(())
            .unwrap();
        let (parts, ()) = h1.into_parts();
        assert_eq!(authority(&parts), Some("api.openai.com"));

        // HTTP/2 carries :authority in the URI, and it wins over a Host header.
        let h2 = hyper::Request::builder()
            .uri("https://api.anthropic.com/v1/messages")
            .version(Version::HTTP_2)
            .header("host", "other")
            .body(())
            .unwrap();
        let (parts, ()) = h2.into_parts();
        let conn = Conn {
            tls: true,
            sni: Some("api.anthropic.com".into()),
        };
        let r = Record::new(&parts, b"", &conn);
        assert_eq!(r.authority.as_deref(), Some("api.anthropic.com"));
        assert_eq!(r.path, "/v1/messages");
        assert_eq!((r.tls, r.sni.as_deref()), (true, Some("api.anthropic.com")));
        assert_eq!(r.http_version, "HTTP/2");
    }
}
