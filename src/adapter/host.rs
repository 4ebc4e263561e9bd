//! Thin wrappers over proxy-wasm host calls that never unwrap.
//!
//! The SDK's `Context` helpers unwrap host statuses, and its `get_map_value` unwraps UTF-8: a
//! header with a non-UTF-8 byte would abort the VM. These wrappers use the byte variants and
//! turn a failed call into a log line and a value the caller can handle.

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};

/// A request header as bytes, if present.
pub fn request_header(name: &str) -> Option<Vec<u8>> {
    hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
}

/// Sets (replacing every existing value) a request header.
pub fn set_request_header(name: &str, value: &str) {
    if let Err(status) = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, Some(value)) {
        log::warn!("could not set request header {name}: {status:?}");
    }
}

/// Removes every value of a request header.
pub fn remove_request_header(name: &str) {
    if let Err(status) = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name) {
        log::warn!("could not remove request header {name}: {status:?}");
    }
}

/// Sets a response header.
pub fn set_response_header(name: &str, value: &str) {
    if let Err(status) = hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value)) {
        log::warn!("could not set response header {name}: {status:?}");
    }
}

/// The buffered request body, up to `max` bytes.
pub fn request_body(max: usize) -> Vec<u8> {
    hostcalls::get_buffer(BufferType::HttpRequestBody, 0, max)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Replaces the whole buffered request body (`old_len` bytes) with `body`.
pub fn replace_request_body(old_len: usize, body: &[u8]) -> bool {
    match hostcalls::set_buffer(BufferType::HttpRequestBody, 0, old_len, body) {
        Ok(()) => true,
        Err(status) => {
            log::warn!("could not replace the request body: {status:?}");
            false
        }
    }
}

/// Sends a local JSON reply instead of forwarding the request.
pub fn send_json_reply(status: u16, body: &str) {
    let headers = vec![("content-type", "application/json")];
    if let Err(s) = hostcalls::send_http_response(u32::from(status), headers, Some(body.as_bytes()))
    {
        log::warn!("could not send a {status} reply: {s:?}");
    }
}

/// The plugin configuration bytes.
pub fn plugin_configuration() -> Vec<u8> {
    hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Host time in nanoseconds since the Unix epoch (0 if unavailable).
pub fn now_nanos() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
