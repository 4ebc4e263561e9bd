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

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(Root { mode: Mode::Nothing }));
}}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nothing,
    Buffer,
    Calls,
}

struct Root {
    mode: Mode,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.mode = match self.get_plugin_configuration().as_deref() {
            Some(b"buffer") => Mode::Buffer,
            Some(b"calls") => Mode::Calls,
            _ => Mode::Nothing,
        };
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Noop { mode: self.mode }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Noop {
    mode: Mode,
}

impl Context for Noop {}

impl HttpContext for Noop {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if self.mode == Mode::Calls {
            std::hint::black_box(self.get_http_request_headers_bytes());
        }
        if self.mode != Mode::Nothing && !end_of_stream {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.mode == Mode::Nothing {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        if self.mode == Mode::Calls {
            let body = self.get_http_request_body(0, body_size).unwrap_or_default();
            // An edit of the first byte: Envoy drains and prepends, as a model rewrite does.
            self.set_http_request_body(0, 1, body.get(..1).unwrap_or_default());
            self.set_http_request_header("authorization", Some("Bearer floor"));
            self.set_http_request_header("x-switchboard-cluster", Some("provider"));
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if self.mode == Mode::Calls {
            std::hint::black_box(self.get_http_response_header_bytes(":status"));
            self.set_http_response_header("x-switchboard-resolved-model", Some("floor"));
        }
        Action::Continue
    }
}
