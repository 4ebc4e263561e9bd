//! The native adapter: Switchboard as an Envoy dynamic module (`libswitchboard.so`), the same
//! core as the proxy-wasm filter without a Wasm VM in between.
//!
//! Envoy loads the library into its own process and calls the hooks in [`hooks`] on its worker
//! threads; the callbacks it offers back are resolved once, in `envoy_dynamic_module_on_program_init`
//! ([`ffi::Api`]). As in the Wasm build, this layer only moves bytes and time between Envoy and
//! [`crate::core`]: state shared by the workers (health records, session pins) is ordinary
//! synchronised memory here, since every worker is a thread of one process ([`store`]).

mod after;
mod envoy;
mod ffi;
mod filter;
mod forward;
mod hooks;
mod host;
mod logger;
mod metrics;
mod plugin;
mod store;
mod timer;

use std::sync::OnceLock;

/// Envoy's callbacks, resolved when the module is loaded.
static API: OnceLock<ffi::Api> = OnceLock::new();

/// The callbacks, once the module is loaded (always, in a hook).
fn api() -> Option<&'static ffi::Api> {
    API.get()
}

/// Milliseconds since the Unix epoch (Envoy's `get_current_time` in the Wasm build is this
/// wall clock too).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Microseconds on the wall clock, for timing a decision.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
