//! Switchboard: virtual models for LLM traffic in Envoy, as a proxy-wasm HTTP filter.
//!
//! [`core`] is the routing brain: pure Rust, no proxy-wasm calls, tested natively.
//! [`adapter`] is the thin proxy-wasm layer that moves bytes and time in and out of it.

pub mod adapter;
pub mod core;
