//! Switchboard: virtual models for LLM traffic in Envoy, as a proxy-wasm HTTP filter or as a
//! native Envoy dynamic module built from the same core.
//!
//! [`core`] is the routing brain: pure Rust, no host calls, tested natively. Two thin adapters
//! move bytes and time in and out of it: `proxy_wasm` (proxy-wasm, compiled for wasm32) and
//! `native` (Envoy's dynamic modules ABI, compiled for every other target).

pub mod core;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
#[cfg(target_arch = "wasm32")]
pub mod proxy_wasm;
