//! A probe for Envoy's upstream HTTP filter chain: logs what each router attempt carries and
//! rewrites it per attempt, so one run shows whether a proxy-wasm filter there can do
//! Switchboard's per-target rewrite (authority, path, credential, body).

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(ProbeRoot { downstream: false }) });
}}

thread_local! { static SHARED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) }; }

struct ProbeRoot {
    downstream: bool,
}
impl Context for ProbeRoot {}
impl RootContext for ProbeRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        // "downstream": the probe sits before the router and only sets per-request retry headers.
        self.downstream =
            self.get_plugin_configuration().as_deref() == Some(b"downstream".as_slice());
        true
    }
    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        if self.downstream {
            return Some(Box::new(RetryHeaders));
        }
        Some(Box::new(Probe {
            context_id,
            attempt: String::new(),
            rewrite_body: false,
            holding: false,
        }))
    }
    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Probe {
    context_id: u32,
    attempt: String,
    rewrite_body: bool,
    holding: bool,
}

impl Context for Probe {}

impl HttpContext for Probe {
    fn on_http_request_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        SHARED.with(|c| { c.set(c.get() + 1); log::info!("probe upstream shared counter={}", c.get()); });
        self.attempt = self
            .get_http_request_header("x-envoy-attempt-count")
            .unwrap_or_else(|| "none".into());
        let headers: Vec<String> = self
            .get_http_request_headers()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        // Which property names the attempt's cluster in an upstream filter: try the known ones.
        let cluster = ["cluster_name", "xds.cluster_name", "upstream.cluster_name"]
            .iter()
            .map(|p| {
                let path: Vec<&str> = p.split('.').collect();
                let v = self
                    .get_property(path)
                    .map(|b| String::from_utf8_lossy(&b).into_owned());
                format!("{p}={}", v.unwrap_or_else(|| "?".into()))
            })
            .collect::<Vec<_>>()
            .join(",");
        let upstream = self
            .get_property(vec!["upstream", "address"])
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|| "?".into());
        log::info!(
            "probe ctx={} upstream.address={}",
            self.context_id,
            upstream
        );
        log::info!(
            "probe ctx={} attempt={} cluster={} eos={} headers=[{}]",
            self.context_id,
            self.attempt,
            cluster,
            end_of_stream,
            headers.join(" ")
        );
        // Per-attempt rewrite, as Switchboard would do for each candidate target.
        self.set_http_request_header(
            ":authority",
            Some(&format!("target-{}.example", self.attempt)),
        );
        self.set_http_request_header(
            ":path",
            Some(&format!("/v1/chat/completions?attempt={}", self.attempt)),
        );
        self.set_http_request_header(
            "authorization",
            Some(&format!("Bearer key-for-attempt-{}", self.attempt)),
        );
        self.set_http_request_header("x-probe-cluster", Some(&cluster.replace(',', " ")));
        // q5: name the next attempt's cluster in the cluster header (x-probe-next: a,b,c by attempt).
        if let Some(next) = self.get_http_request_header("x-probe-next") {
            let n: usize = self.attempt.parse().unwrap_or(1);
            if let Some(c) = next.split(',').nth(n) {
                self.set_http_request_header("x-switchboard-cluster", Some(c));
            }
        }
        self.rewrite_body = !end_of_stream;
        if self.rewrite_body {
            // The body changes length; Envoy's codec then frames it itself.
            self.set_http_request_header("content-length", None);
            return Action::Continue;
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.rewrite_body {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause; // buffer the whole body, then rewrite it once
        }
        let old = self.get_http_request_body(0, body_size).unwrap_or_default();
        log::info!(
            "probe ctx={} attempt={} body_in={}",
            self.context_id,
            self.attempt,
            String::from_utf8_lossy(&old)
        );
        let old = String::from_utf8_lossy(&old);
        let new = old.replacen(
            "\"model\":\"virtual\"",
            &format!("\"model\":\"model-for-attempt-{}\"", self.attempt),
            1,
        );
        self.set_http_request_body(0, body_size, new.as_bytes());
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _n: usize, eos: bool) -> Action {
        let status = self.get_http_response_header(":status").unwrap_or_default();
        log::info!(
            "probe ctx={} attempt={} response status={}",
            self.context_id,
            self.attempt,
            status
        );
        self.set_http_response_header("x-probe-attempt", Some(&self.attempt.clone()));
        if status == "200" && !eos {
            // The commit point: the router has not seen this 200 yet, so it can still retry.
            self.holding = true;
            return Action::Pause;
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.holding {
            return Action::Continue;
        }
        let seen = self
            .get_http_response_body(0, body_size)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&seen);
        if text.contains("tok") {
            log::info!(
                "probe ctx={} attempt={} first content: commit",
                self.context_id,
                self.attempt
            );
            self.holding = false;
            return Action::Continue;
        }
        if text.contains("\"error\"") || end_of_stream {
            // An error before content: turn the held 200 into a 503 so the router retries.
            log::info!(
                "probe ctx={} attempt={} error before content: 200 -> 503",
                self.context_id,
                self.attempt
            );
            self.set_http_response_header(":status", Some("503"));
            self.holding = false;
            return Action::Continue;
        }
        Action::Pause
    }
}

/// Downstream mode: what a filter before the router can tell the router per request.
struct RetryHeaders;
impl Context for RetryHeaders {}
impl HttpContext for RetryHeaders {
    fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
        if let Some(n) = self.get_http_request_header("x-probe-retries") {
            self.set_http_request_header("x-envoy-max-retries", Some(&n));
            self.set_http_request_header("x-envoy-retry-on", Some("retriable-status-codes"));
            self.set_http_request_header("x-envoy-retriable-status-codes", Some("503"));
            log::info!("probe downstream set x-envoy-max-retries={n} retry-on=retriable-status-codes codes=503");
        }
        // Issue 27, order check: the .wasm itself sets the groups header that header_to_metadata
        // (after it) reads, and the per-try timeout.
        if let Some(g) = self.get_http_request_header("x-probe-groups-src") {
            self.set_http_request_header("x-sb-groups", Some(&g));
            self.set_http_request_header("x-probe-groups-src", None);
        }
        if let Some(t) = self.get_http_request_header("x-probe-per-try") {
            self.set_http_request_header("x-envoy-upstream-rq-per-try-timeout-ms", Some(&t));
        }
        SHARED.with(|c| { c.set(c.get() + 1); log::info!("probe downstream shared counter={}", c.get()); });
        if let Some(c) = self.get_http_request_header("x-probe-cluster-pick") {
            // Envoy clears the route cache when a Wasm filter changes a request header.
            self.set_http_request_header("x-switchboard-cluster", Some(&c));
        }
        Action::Continue
    }
}
