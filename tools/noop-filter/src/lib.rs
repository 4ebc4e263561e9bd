//! A proxy-wasm HTTP filter that implements nothing. `make bench` runs it beside Switchboard to
//! measure what any Wasm filter costs in Envoy (the V8 calls for every callback), so the
//! benchmark can report what Switchboard adds on top of that floor.
//!
//! With the plugin configuration `buffer`, it also holds the request headers until the whole
//! body has arrived and then lets the request go unchanged: the floor of any filter that must
//! read the body before routing, as Switchboard must.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(Root { buffer: false }));
}}

struct Root {
    buffer: bool,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.buffer = self.get_plugin_configuration().as_deref() == Some(b"buffer");
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Noop {
            buffer: self.buffer,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Noop {
    buffer: bool,
}

impl Context for Noop {}

impl HttpContext for Noop {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if self.buffer && !end_of_stream {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    fn on_http_request_body(&mut self, _body_size: usize, end_of_stream: bool) -> Action {
        if self.buffer && !end_of_stream {
            Action::Pause
        } else {
            Action::Continue
        }
    }
}
