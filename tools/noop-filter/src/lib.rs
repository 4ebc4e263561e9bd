//! A proxy-wasm HTTP filter that implements nothing. `make bench` runs it beside Switchboard to
//! measure what any Wasm filter costs in Envoy (the V8 calls for every callback), so the
//! benchmark can report what Switchboard adds on top of that floor.
//!
//! Its plugin configuration picks a floor:
//! - `buffer`: hold the request headers until the whole body has arrived, then let the request
//!   go unchanged: the floor of any filter that must read the body before routing.
//! - `calls`: also make the host calls a body-routing filter cannot avoid, with no logic
//!   between them: read the headers and the body, edit the body without changing its length
//!   (as Switchboard's rewrite of a longer virtual name does), set a credential and the
//!   cluster, read the answer's status and add one header to it.
//! - `calls:LIST`: hold the body as `buffer` does and make only the calls LIST names (comma
//!   separated, any order; empty is `buffer`): `headers`, `body-read`, `body-set` (needs
//!   `body-read`: it writes back the body's first byte), `credential`, `cluster`, `status`,
//!   `response-header`. `scripts/instructions.py` adds them one at a time to price each call.
//!   Three more, not in `calls`, price what Switchboard does beyond it: `clock` (read the
//!   host's time once, in the body callback), `counters` (add 1 to two counters there, as
//!   Switchboard counts a routed request) and `remove-absent` (remove three response headers
//!   the answer does not have: the default `account_headers.response`).

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, MetricType};

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(Root {
        mode: Mode::Nothing,
        counters: [0; 2],
    }));
}}

/// Which host calls a stream makes; all false is `buffer`.
#[derive(Clone, Copy, Default)]
struct Calls {
    headers: bool,
    body_read: bool,
    body_set: bool,
    credential: bool,
    cluster: bool,
    status: bool,
    response_header: bool,
    clock: bool,
    counters: bool,
    remove_absent: bool,
}

impl Calls {
    const ALL: Calls = Calls {
        headers: true,
        body_read: true,
        body_set: true,
        credential: true,
        cluster: true,
        status: true,
        response_header: true,
        clock: false,
        counters: false,
        remove_absent: false,
    };

    /// `headers,body-read,...`; None for a name it does not know, or `body-set` alone.
    fn parse(list: &str) -> Option<Calls> {
        let mut calls = Calls::default();
        for name in list.split(',').filter(|n| !n.is_empty()) {
            let flag = match name {
                "headers" => &mut calls.headers,
                "body-read" => &mut calls.body_read,
                "body-set" => &mut calls.body_set,
                "credential" => &mut calls.credential,
                "cluster" => &mut calls.cluster,
                "status" => &mut calls.status,
                "response-header" => &mut calls.response_header,
                "clock" => &mut calls.clock,
                "counters" => &mut calls.counters,
                "remove-absent" => &mut calls.remove_absent,
                _ => return None,
            };
            *flag = true;
        }
        (!calls.body_set || calls.body_read).then_some(calls)
    }
}

/// Response headers the lean upstream never sends (Switchboard's default
/// `account_headers.response`, which it removes from every answer on the gateway's key).
const ABSENT: [&str; 3] = [
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
];

#[derive(Clone, Copy)]
enum Mode {
    Nothing,
    /// Hold the request until its body is in, making these calls.
    Hold(Calls),
}

struct Root {
    mode: Mode,
    /// The two counters `counters` adds to.
    counters: [u32; 2],
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let config = self.get_plugin_configuration().unwrap_or_default();
        self.mode = match std::str::from_utf8(&config).unwrap_or_default() {
            "buffer" => Mode::Hold(Calls::default()),
            "calls" => Mode::Hold(Calls::ALL),
            other => match other.strip_prefix("calls:") {
                // A list it cannot read fails the configuration, rather than measure less.
                Some(list) => match Calls::parse(list) {
                    Some(calls) => Mode::Hold(calls),
                    None => return false,
                },
                None => Mode::Nothing,
            },
        };
        if matches!(self.mode, Mode::Hold(calls) if calls.counters) {
            for (id, name) in self
                .counters
                .iter_mut()
                .zip(["noop_floor_a", "noop_floor_b"])
            {
                match hostcalls::define_metric(MetricType::Counter, name) {
                    Ok(defined) => *id = defined,
                    Err(_) => return false,
                }
            }
        }
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Noop {
            mode: self.mode,
            counters: self.counters,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Noop {
    mode: Mode,
    counters: [u32; 2],
}

impl Context for Noop {}

impl HttpContext for Noop {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Mode::Hold(calls) = self.mode else {
            return Action::Continue;
        };
        if calls.headers {
            std::hint::black_box(self.get_http_request_headers_bytes());
        }
        if end_of_stream {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Mode::Hold(calls) = self.mode else {
            return Action::Continue;
        };
        if !end_of_stream {
            return Action::Pause;
        }
        if calls.clock {
            std::hint::black_box(self.get_current_time());
        }
        if calls.counters {
            for id in self.counters {
                let _ = hostcalls::increment_metric(id, 1);
            }
        }
        if calls.body_read {
            let body = self.get_http_request_body(0, body_size).unwrap_or_default();
            if calls.body_set {
                // An edit of the first byte: Envoy drains and prepends, as a model rewrite does.
                self.set_http_request_body(0, 1, body.get(..1).unwrap_or_default());
            }
        }
        if calls.credential {
            self.set_http_request_header("authorization", Some("Bearer floor"));
        }
        if calls.cluster {
            self.set_http_request_header("x-switchboard-cluster", Some("provider"));
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Mode::Hold(calls) = self.mode else {
            return Action::Continue;
        };
        if calls.status {
            std::hint::black_box(self.get_http_response_header_bytes(":status"));
        }
        if calls.remove_absent {
            for name in ABSENT {
                self.set_http_response_header(name, None);
            }
        }
        if calls.response_header {
            self.set_http_response_header("x-switchboard-resolved-model", Some("floor"));
        }
        Action::Continue
    }
}
