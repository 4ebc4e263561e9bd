//! Thin wrappers over proxy-wasm host calls that hand back plain values.
//!
//! Reads use the SDK's byte variants: its `get_map_value` unwraps UTF-8, so a header with a
//! non-UTF-8 byte would abort the VM. The SDK still panics when the host returns a status it
//! does not expect; every call here is made only in a phase where Envoy answers `Ok` (headers
//! are written while they are paused or before they are sent, the body is edited only while
//! Envoy holds all of it).

use super::profile;
use crate::core::request::{Edits, ENVOY_SLICE};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, MetricType, Status};
use std::time::Duration;

pub use crate::core::headers::Headers;

#[link(wasm_import_module = "env")]
extern "C" {
    /// The ABI call behind the SDK's `set_property`, which panics on any status but `Ok` (a
    /// panic aborts the VM) and allocates the path; a one-part path is the key itself.
    fn proxy_set_property(
        path_data: *const u8,
        path_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> Status;

    /// The ABI call behind the SDK's `get_map_bytes`, which splits the result into a `String`
    /// and a `Vec` per header; [`Headers`] reads the host's buffer as it is.
    fn proxy_get_header_map_pairs(
        map_type: MapType,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> Status;
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    /// WASI's random source; Envoy fills it from BoringSSL's `RAND_bytes`.
    fn random_get(buf: *mut u8, buf_len: usize) -> u16;
}

/// Eight bytes from the host's random source, or `None` if it has none.
pub fn entropy() -> Option<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the host writes at most `buf_len` bytes into the buffer we own.
    let errno = unsafe { random_get(bytes.as_mut_ptr(), bytes.len()) };
    (errno == 0).then(|| u64::from_le_bytes(bytes))
}

/// Every header of `map`, in the host's encoding (empty if the host has none to give).
fn header_map(map: MapType) -> Headers {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: as in the SDK's `get_map_bytes`: on `Ok` the host has written a buffer it
    // allocated through this module's `proxy_on_memory_allocate` (the global allocator, as a
    // `Vec<u8>` of exactly `size` bytes), whose ownership passes to us.
    let bytes = unsafe {
        match proxy_get_header_map_pairs(map, &mut data, &mut size) {
            Status::Ok if !data.is_null() => Vec::from_raw_parts(data, size, size),
            _ => Vec::new(),
        }
    };
    Headers::decode(bytes).unwrap_or_else(|| {
        log::warn!("the host's {map:?} headers were malformed; read as none");
        Headers::default()
    })
}

/// Every request header, pseudo-headers included.
pub fn request_headers() -> Headers {
    let _span = profile::span("request_headers");
    header_map(MapType::HttpRequestHeaders)
}

/// Sets (replacing every existing value) a request header.
pub fn set_request_header(name: &str, value: &str) {
    let _span = profile::span("set_request_header");
    if let Err(status) = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, Some(value)) {
        log::warn!("could not set request header {name}: {status:?}");
    }
}

/// Removes every value of a request header.
pub fn remove_request_header(name: &str) {
    let _span = profile::span("remove_request_header");
    if let Err(status) = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name) {
        log::warn!("could not remove request header {name}: {status:?}");
    }
}

/// A request header, if present and text.
pub fn request_header(name: &str) -> Option<String> {
    let _span = profile::span("request_header");
    hostcalls::get_map_value(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
}

/// Replaces the `size` bytes of the request body in hand with `with`.
pub fn replace_request_body(size: usize, with: &[u8]) -> bool {
    let _span = profile::span("replace_request_body");
    let set = hostcalls::set_buffer(BufferType::HttpRequestBody, 0, size, with);
    if let Err(status) = set {
        log::warn!("could not replace the request body: {status:?}");
    }
    set.is_ok()
}

/// The response's `:status` (502 when it has none: Envoy's own reply without one).
pub fn response_status() -> u16 {
    response_header(":status")
        .and_then(|s| std::str::from_utf8(&s).ok()?.parse::<u16>().ok())
        .unwrap_or(502)
}

/// A response header as bytes, if present.
pub fn response_header(name: &str) -> Option<Vec<u8>> {
    let _span = profile::span("response_header");
    hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, name)
        .ok()
        .flatten()
}

/// Every response header.
pub fn response_headers() -> Headers {
    let _span = profile::span("response_headers");
    header_map(MapType::HttpResponseHeaders)
}

/// The current chunk of the response body.
pub fn response_body(size: usize) -> Vec<u8> {
    let _span = profile::span("response_body");
    hostcalls::get_buffer(BufferType::HttpResponseBody, 0, size)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Sets a response header.
pub fn set_response_header(name: &str, value: &str) {
    let _span = profile::span("set_response_header");
    if let Err(status) = hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value)) {
        log::warn!("could not set response header {name}: {status:?}");
    }
}

/// Removes a response header.
pub fn remove_response_header(name: &str) {
    let _span = profile::span("remove_response_header");
    if let Err(status) = hostcalls::remove_map_value(MapType::HttpResponseHeaders, name) {
        log::warn!("could not remove response header {name}: {status:?}");
    }
}

/// Replaces the `size` bytes of the response body chunk in hand with `with`.
pub fn replace_response_body(size: usize, with: &[u8]) {
    let _span = profile::span("replace_response_body");
    if let Err(status) = hostcalls::set_buffer(BufferType::HttpResponseBody, 0, size, with) {
        log::warn!("could not rewrite the response body: {status:?}");
    }
}

/// The buffered request body, up to `max` bytes.
pub fn request_body(max: usize) -> Vec<u8> {
    let _span = profile::span("request_body");
    hostcalls::get_buffer(BufferType::HttpRequestBody, 0, max)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Applies `edits` to Envoy's buffered request body, which holds `body`. Envoy can only drain
/// and prepend at the start of a body, so the edited bytes up to the last edit replace that
/// part, last first, and the rest of the body never leaves Envoy or gets copied here.
pub fn edit_request_body(body: &[u8], edits: &Edits) -> bool {
    let _span = profile::span("edit_request_body");
    let set = |drain: usize, part: &[u8]| {
        let result = hostcalls::set_buffer(BufferType::HttpRequestBody, 0, drain, part);
        if let Err(status) = result {
            log::warn!("could not edit the request body: {status:?}");
        }
        result.is_ok()
    };
    // A head shorter than a slice is joined and handed over in one host call: copying a few
    // KB here costs less than another crossing into Envoy.
    let end = edits.head_end();
    if end < ENVOY_SLICE {
        // The bytes after `end` stay as they are, so the edited head is this long.
        let head_len = edits
            .new_len(body)
            .saturating_sub(body.len().saturating_sub(end));
        let mut joined = Vec::with_capacity(head_len);
        return match edits.write_head(body, &mut joined) {
            Some(end) => (end == 0 && joined.is_empty()) || set(end, &joined),
            None => false,
        };
    }
    let Some((head, end)) = edits.head_parts(body) else {
        return false;
    };
    // A longer head goes over in parts of at most a slice (1 MB bodies, 8 connections: Envoy's
    // RSS growth per request in flight 2.1-2.4 MB in one part, 1.85-1.9 MB in slice-sized
    // parts).
    let mut parts = head.rev();
    // The first call drains the old head too, even when the edits leave no bytes to prepend.
    let first = parts.next().unwrap_or_default();
    ((end == 0 && first.is_empty()) || set(end, first)) && parts.all(|part| set(0, part))
}

/// A property such as `response.code_details`, as a string.
pub fn property(path: &[&str]) -> Option<String> {
    property_bytes(path).and_then(|b| String::from_utf8(b).ok())
}

/// A property as the host serialises it (a string leaf as its bytes).
pub fn property_bytes(path: &[&str]) -> Option<Vec<u8>> {
    let _span = profile::span("property");
    hostcalls::get_property(path.to_vec()).ok().flatten()
}

/// Sends a local reply instead of the request's upstream answer.
pub fn send_reply(status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
    let _span = profile::span("send_reply");
    if let Err(s) = hostcalls::send_http_response(u32::from(status), headers, Some(body)) {
        log::warn!("could not send a {status} reply: {s:?}");
    }
}

/// Starts an HTTP call to `cluster`; `None` if the host refused it (unknown cluster, ...).
pub fn dispatch(
    cluster: &str,
    headers: Vec<(&str, &str)>,
    body: &[u8],
    timeout_ms: u64,
) -> Option<u32> {
    let _span = profile::span("dispatch");
    let timeout = Duration::from_millis(timeout_ms);
    match hostcalls::dispatch_http_call(cluster, headers, Some(body), vec![], timeout) {
        Ok(token) => Some(token),
        Err(status) => {
            log::warn!("could not call cluster {cluster}: {status:?}");
            None
        }
    }
}

/// The headers and body of the HTTP call whose response callback is running.
pub fn call_response(body_size: usize) -> (Headers, Vec<u8>) {
    let _span = profile::span("call_response");
    let headers = header_map(MapType::HttpCallResponseHeaders);
    let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
        .ok()
        .flatten()
        .unwrap_or_default();
    (headers, body)
}

/// Makes later host calls act on the stream `context_id`; false if it is gone.
pub fn set_effective_context(context_id: u32) -> bool {
    let _span = profile::span("set_effective_context");
    hostcalls::set_effective_context(context_id).is_ok()
}

/// Sets the root context's tick period (0 stops ticking).
pub fn set_tick_ms(ms: u64) {
    let _span = profile::span("set_tick_ms");
    if let Err(status) = hostcalls::set_tick_period(Duration::from_millis(ms)) {
        log::warn!("could not set the tick period: {status:?}");
    }
}

/// Lets a paused request continue (after an HTTP call answered).
pub fn resume_request() {
    let _span = profile::span("resume_request");
    if let Err(status) = hostcalls::resume_http_request() {
        log::warn!("could not resume the request: {status:?}");
    }
}

/// Makes the filter's log level Envoy's own for Wasm logs, so a debug line costs no host call
/// unless Envoy would print it.
pub fn follow_host_log_level() {
    if let Ok(level) = hostcalls::get_log_level() {
        proxy_wasm::set_log_level(level);
    }
}

/// The plugin configuration bytes.
pub fn plugin_configuration() -> Vec<u8> {
    let _span = profile::span("plugin_configuration");
    hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Host time in milliseconds since the Unix epoch (0 if unavailable).
pub fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

/// The host time, read on first use and then kept: for callbacks that need it only sometimes.
#[derive(Default)]
pub struct Clock(std::cell::Cell<Option<u64>>);

impl Clock {
    /// Host time in milliseconds since the Unix epoch, the same on every call.
    pub fn now_ms(&self) -> u64 {
        let now = self.0.get().unwrap_or_else(now_ms);
        self.0.set(Some(now));
        now
    }
}

/// Host time in nanoseconds since the Unix epoch (0 if unavailable).
pub fn now_ns() -> u64 {
    // The host call behind every clock read; named as docs/profile.md has always shown it.
    let _span = profile::span("now_ms");
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Sets the stream's filter state `wasm.<key>` (Envoy's name for a Wasm property) to `value`,
/// for the access log's `%FILTER_STATE(wasm.<key>:PLAIN)%`.
pub fn set_filter_state(key: &str, value: &[u8]) {
    let _span = profile::span("set_property");
    // SAFETY: both pointers and lengths describe live slices the host only reads.
    let status =
        unsafe { proxy_set_property(key.as_ptr(), key.len(), value.as_ptr(), value.len()) };
    if status != Status::Ok {
        log::debug!("could not set filter state {key}: {status:?}");
    }
}

/// Defines a metric; its id, or `None` if the host refused it. (The SDK panics on a status
/// other than `Ok`; Envoy answers otherwise only for an unknown metric type.)
pub fn define_metric(kind: MetricType, name: &str) -> Option<u32> {
    hostcalls::define_metric(kind, name).ok()
}

/// Adds `n` to a counter.
pub fn add_to_counter(id: u32, n: u64) {
    let _span = profile::span("increment_metric");
    let _ = hostcalls::increment_metric(id, i64::try_from(n).unwrap_or(i64::MAX));
}

/// Sets a gauge, or records a value in a histogram.
pub fn record_metric(id: u32, value: u64) {
    let _span = profile::span("record_metric");
    let _ = hostcalls::record_metric(id, value);
}

/// Shared data: one store for every worker of this Envoy, kept across config reloads.
pub struct SharedData;

impl crate::core::health::store::Store for SharedData {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        let _span = profile::span("get_shared_data");
        match hostcalls::get_shared_data(key) {
            Ok((Some(bytes), Some(cas))) => Some((bytes, cas)),
            _ => None,
        }
    }

    fn set(
        &self,
        key: &str,
        value: &[u8],
        cas: Option<u32>,
    ) -> Result<(), crate::core::health::store::WriteError> {
        let _span = profile::span("set_shared_data");
        use crate::core::health::store::WriteError;
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(WriteError::CasMismatch),
            Err(_) => Err(WriteError::Failed),
        }
    }
}
