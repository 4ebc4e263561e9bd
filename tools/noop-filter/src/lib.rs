//! A proxy-wasm HTTP filter that implements nothing. `make bench` runs it beside Switchboard to
//! measure what any Wasm filter costs in Envoy (the V8 calls for every callback), so the
//! benchmark can report what Switchboard adds on top of that floor.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(Noop));
}}

struct Noop;

impl Context for Noop {}

impl RootContext for Noop {
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Noop))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

impl HttpContext for Noop {}
