//! The proxy-wasm adapter: the only code that talks to the host.
//!
//! It moves bytes and time between Envoy and [`crate::core`]: read the path and body, ask the
//! core for a decision, write headers and body back. No routing decision is made here.

mod host;
mod http;
mod metrics;
mod profile;
mod root;
mod router_path;
mod runtime;
mod stream;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|context_id| Box::new(root::Root::new(context_id)));
}}
