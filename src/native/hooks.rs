//! The event hooks Envoy calls: the `envoy_dynamic_module_on_*` symbols of the library.
//!
//! Each hook turns Envoy's raw pointers into a [`Stream`] and the module's own objects, runs
//! the adapter, and then makes the calls into Envoy the filter queued ([`After`]). A panic
//! never crosses into Envoy: it is caught here and logged. On a stream it fails closed: the
//! filter leaves the stream, and the request never goes on with the client's headers; the
//! client gets a 500 `internal_error` if no response headers went out yet, else the stream is
//! reset ([`fallback`]).

use super::ffi::{self, status, Api, ConfigEnvoyPtr, EnvoyBuffer, EnvoyHeader, FilterEnvoyPtr};
use super::filter::{After, Filter, Verdict};
use super::host::{self, Side, Stream};
use super::plugin::Plugin;
use crate::core::config::ConfigVersion;
use crate::core::errors::ErrorReply;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What Envoy holds for one stream.
struct Slot {
    api: &'static Api,
    filter: RefCell<Filter>,
    /// A response hook let the response headers go on: from then on the client may have them.
    /// Outside the filter, so a panic leaves it readable.
    response_sent: Cell<bool>,
    /// A hook panicked: the filter's state is unknown, so it no longer runs on this stream.
    failed: Cell<bool>,
}

/// Which side of the stream a hook is on, for what it answers once the filter has failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    Request,
    Response,
    /// A call-out's answer or a timer: Envoy takes no status from it.
    Event,
}

/// What replaces the filter's answer when one of its hooks panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fallback {
    /// Answer 500 `internal_error` in the client's API shape. Envoy sends it through the
    /// response hooks when no response has started, else in place of the response headers
    /// this filter holds (`sendLocalReply` sends it straight to the client and stops the
    /// response's filter chain).
    Reply,
    /// Reset the stream: the response headers may be with the client, so no answer can
    /// replace them.
    Reset,
}

/// The fallback for a panic on a stream whose response headers went on (`response_sent`) or
/// not. Either way the request stops: letting it go on would forward the client's headers as
/// sent, past the checks and rewrites the filter did not finish.
fn fallback(response_sent: bool) -> Fallback {
    if response_sent {
        Fallback::Reset
    } else {
        Fallback::Reply
    }
}

/// What a hook answers once the filter has failed on its stream: the request stays stopped;
/// the response goes on, since it is the 500 on its way out (or the stream's end).
fn status_after_failure(hook: Hook) -> u32 {
    match hook {
        Hook::Request => status::STOP_ITERATION,
        Hook::Response | Hook::Event => status::CONTINUE,
    }
}

/// Runs `f`, turning a panic into `fallback` (and a log line) rather than unwinding into Envoy.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log::error!("a Switchboard hook panicked");
        fallback
    })
}

fn code(v: Verdict) -> u32 {
    match v {
        Verdict::Continue => status::CONTINUE,
        // The same value means StopIteration for headers and trailers and
        // StopIterationAndBuffer for bodies.
        Verdict::Stop => status::STOP_ITERATION,
    }
}

/// Runs `f` on the stream's filter, then the calls it queued. A hook that runs while the
/// filter is already in use (Envoy re-entered this filter from one of those calls, e.g. the
/// response hooks of its own local reply) lets the stream go on untouched.
///
/// # Safety
/// `module` must be a pointer this library returned from `on_http_filter_new`, not yet
/// destroyed, and `envoy` Envoy's pointer for the same stream.
unsafe fn on_filter(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    hook: Hook,
    f: impl FnOnce(&mut Filter, &mut Stream) -> Verdict,
) -> u32 {
    guard(status_after_failure(hook), || {
        // SAFETY: the caller's contract.
        let slot = unsafe { &*(module as *const Slot) };
        let mut stream = Stream::new(slot.api, envoy);
        on_slot(slot, &mut stream, hook, f)
    })
}

/// [`on_filter`] on the stream's slot: a panic anywhere in the hook, the calls it queued
/// included, takes the filter out of the stream and fails closed ([`fallback`]).
fn on_slot(
    slot: &Slot,
    stream: &mut Stream,
    hook: Hook,
    f: impl FnOnce(&mut Filter, &mut Stream) -> Verdict,
) -> u32 {
    if slot.failed.get() {
        return status_after_failure(hook);
    }
    let status = match catch_unwind(AssertUnwindSafe(|| run_filter(slot, stream, f))) {
        Ok(status) => status,
        Err(_) => {
            // Set first: the fallback's own calls re-enter the hooks.
            slot.failed.set(true);
            let fallback = fallback(slot.response_sent.get());
            let answer = match fallback {
                Fallback::Reply => "answered 500 internal_error",
                Fallback::Reset => "reset (its response headers had gone on)",
            };
            log::error!("a Switchboard hook panicked: the stream is {answer}");
            // A panic while answering leaves the request stopped all the same.
            let _ = catch_unwind(AssertUnwindSafe(|| answer_failure(slot, stream, fallback)));
            status::STOP_ITERATION
        }
    };
    if hook == Hook::Response && status == status::CONTINUE {
        slot.response_sent.set(true);
    }
    status
}

/// Runs `f` on the filter unless it is in use, then the calls it queued.
fn run_filter(
    slot: &Slot,
    stream: &mut Stream,
    f: impl FnOnce(&mut Filter, &mut Stream) -> Verdict,
) -> u32 {
    let (verdict, queued) = {
        let Ok(mut filter) = slot.filter.try_borrow_mut() else {
            return status::CONTINUE;
        };
        let verdict = f(&mut filter, stream);
        (verdict, std::mem::take(&mut filter.after))
    };
    run(stream, queued);
    code(verdict)
}

/// Makes the fallback's call into Envoy.
fn answer_failure(slot: &Slot, stream: &mut Stream, fallback: Fallback) {
    match fallback {
        Fallback::Reset => stream.reset(),
        Fallback::Reply => {
            // The unwinding released the filter; only a flag is read from it.
            let anthropic = slot.filter.try_borrow().is_ok_and(|f| f.speaks_anthropic());
            let reply = ErrorReply::internal_error();
            let reply = if anthropic {
                reply.in_anthropic_shape()
            } else {
                reply
            };
            let json = [("content-type", "application/json")];
            stream.send_response(reply.status, &json, reply.body.as_bytes());
        }
    }
}

/// Makes the queued calls into Envoy.
fn run(stream: &mut Stream, queued: Vec<After>) {
    for call in queued {
        match call {
            After::ContinueRequest => stream.continue_request(),
            After::Reply {
                status,
                headers,
                body,
            } => {
                let pairs: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                stream.send_response(status, &pairs, &body);
            }
        }
    }
}

/// Loads the module: resolves Envoy's callbacks; null (Envoy refuses the module) if any is
/// missing, which means this Envoy's ABI is not the one the module was built for.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guard(std::ptr::null(), || {
        match Api::resolve(ffi::lookup_in_process) {
            Ok(api) => {
                let _ = super::API.set(api);
                super::logger::install();
                if !ffi::pin_module() {
                    log::warn!(
                        "could not keep the module loaded: set dynamic_module_config.do_not_close"
                    );
                }
                ffi::ABI_VERSION.as_ptr()
            }
            Err(missing) => {
                // No logger without the log callback: stderr is all there is.
                eprintln!(
                    "switchboard: this Envoy lacks the callback {}; the module needs Envoy \
                     1.40's dynamic modules ABI",
                    missing.trim_end_matches('\0')
                );
                std::ptr::null()
            }
        }
    })
}

/// A filter config: the plugin config JSON (a `StringValue` `filter_config`), parsed and
/// compiled once. Null rejects the config.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: ConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    guard(std::ptr::null(), || {
        let Some(api) = super::api() else {
            return std::ptr::null();
        };
        // SAFETY: Envoy's buffer, valid during this hook.
        let json = unsafe { config.bytes() };
        let version = ConfigVersion::of(json);
        let define = |config| super::metrics::define(api, config_envoy, config, version.0);
        match Plugin::load(api, json, define) {
            Ok(plugin) => {
                // One line for the whole Envoy: the config is shared by every worker.
                log::info!(
                    "loaded config {version}: {} models and {} virtual models",
                    plugin.config().models.len(),
                    plugin.config().virtual_models.len()
                );
                for warning in &plugin.config().warnings {
                    log::warn!("config {version}: {warning}");
                }
                Arc::into_raw(Arc::new(plugin)).cast()
            }
            Err(e) => {
                // Null makes Envoy refuse the config; on an ECDS update the previous one keeps
                // serving.
                log::error!("invalid plugin configuration: {e} (config {version} refused)");
                std::ptr::null()
            }
        }
    })
}

/// Envoy dropped a filter config (streams still running keep their own reference).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    guard((), || {
        if !config.is_null() {
            // SAFETY: made by `Arc::into_raw` in `on_http_filter_config_new`, dropped once.
            drop(unsafe { Arc::from_raw(config.cast::<Plugin>()) });
        }
    });
}

/// A new stream.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _envoy: FilterEnvoyPtr,
) -> *const c_void {
    guard(std::ptr::null(), || {
        if config.is_null() {
            return std::ptr::null();
        }
        let config = config.cast::<Plugin>();
        // SAFETY: the config's `Arc` is alive while Envoy creates streams from it; this
        // stream takes its own reference.
        let plugin = unsafe {
            Arc::increment_strong_count(config);
            Arc::from_raw(config)
        };
        let slot = Slot {
            api: plugin.api,
            filter: RefCell::new(Filter::new(plugin)),
            response_sent: Cell::new(false),
            failed: Cell::new(false),
        };
        Box::into_raw(Box::new(slot)).cast_const().cast()
    })
}

/// The stream ended: the filter goes.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *const c_void) {
    guard((), || {
        if !filter.is_null() {
            // SAFETY: made by `Box::into_raw` in `on_http_filter_new`, dropped once.
            drop(unsafe { Box::from_raw(filter.cast::<Slot>().cast_mut()) });
        }
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: Envoy passes the pointers of one live stream.
    unsafe {
        on_filter(envoy, filter, Hook::Request, |f, s| {
            f.on_request_headers(s, end_of_stream)
        })
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Request, |f, s| {
            let size = s.body_size(Side::Request);
            f.on_request_body(s, size, end_of_stream)
        })
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
) -> u32 {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Request, |f, s| {
            f.on_request_trailers(s)
        })
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Response, |f, s| {
            f.on_response_headers(s, end_of_stream)
        })
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Response, |f, s| {
            f.on_response_body(s, end_of_stream)
        })
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
) -> u32 {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Response, |f, s| {
            f.on_response_trailers(s)
        })
    }
}

/// A call-out this stream made finished (`result` not success: no answer).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_len: usize,
    chunks: *const EnvoyBuffer,
    chunks_len: usize,
) {
    // SAFETY: as above; the arrays are this hook's.
    unsafe {
        let answer = (result == ffi::callout_result::SUCCESS)
            .then(|| host::callout_answer(headers, headers_len, chunks, chunks_len));
        on_filter(envoy, filter, Hook::Event, |f, s| {
            f.on_callout_done(s, callout_id, answer);
            Verdict::Continue
        });
    }
}

/// An event this stream's scheduler posted: a timer's token.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
    event_id: u64,
) {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Event, |f, s| {
            f.on_scheduled(s, event_id);
            Verdict::Continue
        });
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _envoy: FilterEnvoyPtr,
    _filter: *const c_void,
) {
}

/// Envoy is about to send a local reply (its own or ours): let it.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_local_reply(
    _envoy: FilterEnvoyPtr,
    _filter: *const c_void,
    _status: u32,
    _details: EnvoyBuffer,
    _reset_imminent: bool,
) -> u32 {
    0 // Continue
}

// The hooks below are part of the 1.40 HTTP filter ABI; Switchboard uses none of them.

/// Per-route configs are not used: null refuses one.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    std::ptr::null()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(
    _config: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _config_envoy: ConfigEnvoyPtr,
    _config: *const c_void,
    _event_id: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _config_envoy: ConfigEnvoyPtr,
    _config: *const c_void,
    _callout_id: u64,
    _result: u32,
    _headers: *const EnvoyHeader,
    _headers_len: usize,
    _chunks: *const EnvoyBuffer,
    _chunks_len: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _envoy: FilterEnvoyPtr,
    _filter: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _envoy: FilterEnvoyPtr,
    _filter: *const c_void,
) {
}

/// Streamed call-outs (`start_http_stream`) are not used; these hooks only complete the ABI.
mod streams {
    use super::*;

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
        _envoy: FilterEnvoyPtr,
        _filter: *const c_void,
        _stream_id: u64,
        _headers: *const EnvoyHeader,
        _headers_len: usize,
        _end_stream: bool,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
        _envoy: FilterEnvoyPtr,
        _filter: *const c_void,
        _stream_id: u64,
        _data: *const EnvoyBuffer,
        _data_len: usize,
        _end_stream: bool,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
        _envoy: FilterEnvoyPtr,
        _filter: *const c_void,
        _stream_id: u64,
        _trailers: *const EnvoyHeader,
        _trailers_len: usize,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
        _envoy: FilterEnvoyPtr,
        _filter: *const c_void,
        _stream_id: u64,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
        _envoy: FilterEnvoyPtr,
        _filter: *const c_void,
        _stream_id: u64,
        _reason: u32,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_headers(
        _config_envoy: ConfigEnvoyPtr,
        _config: *const c_void,
        _stream_id: u64,
        _headers: *const EnvoyHeader,
        _headers_len: usize,
        _end_stream: bool,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_data(
        _config_envoy: ConfigEnvoyPtr,
        _config: *const c_void,
        _stream_id: u64,
        _data: *const EnvoyBuffer,
        _data_len: usize,
        _end_stream: bool,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_trailers(
        _config_envoy: ConfigEnvoyPtr,
        _config: *const c_void,
        _stream_id: u64,
        _trailers: *const EnvoyHeader,
        _trailers_len: usize,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_complete(
        _config_envoy: ConfigEnvoyPtr,
        _config: *const c_void,
        _stream_id: u64,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_reset(
        _config_envoy: ConfigEnvoyPtr,
        _config: *const c_void,
        _stream_id: u64,
        _reason: u32,
    ) {
    }
}

#[cfg(test)]
mod tests {
    //! The hooks against a fake Envoy: callbacks that record what the module asked for, and a
    //! local reply that runs the filter's response hooks again, as Envoy's does.

    use super::*;
    use crate::native::ffi::{header_map, ModuleBuffer, ModuleHeader};
    use std::ffi::CStr;

    const CONFIG: &str = r#"{"models": [{"name": "t", "cluster": "c", "model": "m"}],
      "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
        "type": "weight-based-routing", "load_balance_targets": [{"target": "t", "weight": 100}]}}]}"#;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Call {
        Lookup(String),
        Remove(String),
        ReadHeaders,
        ClearRoute,
        /// A local reply: status and body.
        Reply(u32, String),
        /// What the filter's response-headers hook answered the reply, run from inside it.
        ReplyPassed(u32),
        Reset(u32),
        Unexpected,
    }

    /// One test thread's Envoy.
    struct Fake {
        request: Vec<(Vec<u8>, Vec<u8>)>,
        calls: Vec<Call>,
        module: *const c_void,
    }

    thread_local! {
        static FAKE: RefCell<Fake> = const {
            RefCell::new(Fake { request: Vec::new(), calls: Vec::new(), module: std::ptr::null() })
        };
    }

    fn record(call: Call) {
        FAKE.with(|f| f.borrow_mut().calls.push(call));
    }

    fn text(b: ModuleBuffer) -> String {
        // SAFETY: the module lends `len` bytes for the call.
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(b.ptr, b.len) }).into_owned()
    }

    extern "C" fn get_header(
        _: FilterEnvoyPtr,
        map: u32,
        key: ModuleBuffer,
        out: *mut EnvoyBuffer,
        _index: usize,
        _count: *mut usize,
    ) -> bool {
        let key = text(key);
        record(Call::Lookup(key.clone()));
        FAKE.with(|f| {
            let f = f.borrow();
            let found = f.request.iter().find(|(k, _)| *k == key.as_bytes());
            match found {
                Some((_, v)) if map == header_map::REQUEST => {
                    // SAFETY: the module's out-parameter; the value lives in the fake.
                    unsafe {
                        *out = EnvoyBuffer {
                            ptr: v.as_ptr(),
                            len: v.len(),
                        }
                    };
                    true
                }
                _ => false,
            }
        })
    }

    extern "C" fn headers_size(_: FilterEnvoyPtr, _map: u32) -> usize {
        FAKE.with(|f| f.borrow().request.len())
    }

    extern "C" fn get_headers(_: FilterEnvoyPtr, _map: u32, out: *mut EnvoyHeader) -> bool {
        record(Call::ReadHeaders);
        FAKE.with(|f| {
            for (i, (k, v)) in f.borrow().request.iter().enumerate() {
                let buffer = |b: &Vec<u8>| EnvoyBuffer {
                    ptr: b.as_ptr(),
                    len: b.len(),
                };
                // SAFETY: the module passes an array of `headers_size` entries.
                unsafe {
                    *out.add(i) = EnvoyHeader {
                        key: buffer(k),
                        value: buffer(v),
                    }
                };
            }
        });
        true
    }

    extern "C" fn set_header(
        _: FilterEnvoyPtr,
        _map: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool {
        let key = text(key);
        if value.ptr.is_null() {
            record(Call::Remove(key.clone()));
            FAKE.with(|f| f.borrow_mut().request.retain(|(k, _)| *k != key.as_bytes()));
        } else {
            record(Call::Unexpected);
        }
        true
    }

    extern "C" fn clear_route_cache(_: FilterEnvoyPtr) {
        record(Call::ClearRoute);
    }

    extern "C" fn send_response(
        envoy: FilterEnvoyPtr,
        status: u32,
        _headers: *mut ModuleHeader,
        _headers_len: usize,
        body: ModuleBuffer,
        _details: ModuleBuffer,
    ) {
        record(Call::Reply(status, text(body)));
        // Envoy sends a reply that no response preceded through the response hooks, this
        // filter's included, before `sendLocalReply` returns.
        let module = FAKE.with(|f| f.borrow().module);
        let passed = envoy_dynamic_module_on_http_filter_response_headers(envoy, module, false);
        record(Call::ReplyPassed(passed));
    }

    extern "C" fn reset_stream(_: FilterEnvoyPtr, reason: u32, _details: ModuleBuffer) {
        record(Call::Reset(reason));
    }

    extern "C" fn unexpected() {
        record(Call::Unexpected);
    }

    fn fake_api() -> &'static Api {
        let api = Api::resolve(|name: &CStr| {
            let name = name.to_bytes();
            let name = name
                .strip_prefix(b"envoy_dynamic_module_callback_")
                .unwrap_or(name);
            match name {
                b"http_get_header" => get_header as *mut c_void,
                b"http_get_headers_size" => headers_size as *mut c_void,
                b"http_get_headers" => get_headers as *mut c_void,
                b"http_set_header" => set_header as *mut c_void,
                b"http_clear_route_cache" => clear_route_cache as *mut c_void,
                b"http_send_response" => send_response as *mut c_void,
                b"http_filter_reset_stream" => reset_stream as *mut c_void,
                _ => unexpected as *mut c_void,
            }
        });
        Box::leak(Box::new(api.unwrap()))
    }

    /// A stream of a plugin with [`CONFIG`], whose client sent `request`; the module's pointer.
    fn new_stream(request: &[(&str, &str)]) -> *const c_void {
        let plugin = Plugin::load(fake_api(), CONFIG.as_bytes(), |c| c).unwrap();
        let config = Arc::into_raw(Arc::new(plugin)).cast::<c_void>();
        let module = envoy_dynamic_module_on_http_filter_new(config, std::ptr::null_mut());
        // The stream holds its own reference.
        envoy_dynamic_module_on_http_filter_config_destroy(config);
        FAKE.with(|f| {
            let mut f = f.borrow_mut();
            f.request = request
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
            f.calls.clear();
            f.module = module;
        });
        module
    }

    fn take_calls() -> Vec<Call> {
        FAKE.with(|f| std::mem::take(&mut f.borrow_mut().calls))
    }

    fn request_headers(module: *const c_void) -> u32 {
        envoy_dynamic_module_on_http_filter_request_headers(std::ptr::null_mut(), module, false)
    }

    /// Runs a hook of `hook`'s side whose filter code is `f`.
    fn call_hook(module: *const c_void, hook: Hook, f: impl FnOnce() -> Verdict) -> u32 {
        // SAFETY: a live stream of this module.
        unsafe { on_filter(std::ptr::null_mut(), module, hook, |_, _| f()) }
    }

    fn panics() -> Verdict {
        std::panic::panic_any("a bug")
    }

    fn chat(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut h = vec![(":method", "POST"), (":path", "/v1/chat/completions")];
        h.extend_from_slice(extra);
        h
    }

    fn error_json(call: &Call) -> serde_json::Value {
        match call {
            Call::Reply(_, body) => serde_json::from_str(body).unwrap(),
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn a_panic_fails_closed_with_a_reply_until_the_response_headers_went_on_then_a_reset() {
        assert_eq!(fallback(false), Fallback::Reply);
        assert_eq!(fallback(true), Fallback::Reset);
        assert_eq!(status_after_failure(Hook::Request), status::STOP_ITERATION);
        assert_eq!(status_after_failure(Hook::Response), status::CONTINUE);
    }

    #[test]
    fn a_panic_on_the_request_answers_500_internal_error_and_the_request_never_goes_on() {
        let module = new_stream(&chat(&[]));
        assert_eq!(request_headers(module), status::STOP_ITERATION);
        take_calls();
        assert_eq!(
            call_hook(module, Hook::Request, panics),
            status::STOP_ITERATION
        );
        let calls = take_calls();
        assert!(
            matches!(calls.first(), Some(Call::Reply(500, _))),
            "{calls:?}"
        );
        let error = error_json(&calls[0]);
        assert_eq!(error["error"]["code"], "internal_error");
        assert_eq!(error["error"]["type"], "server_error");
        // The 500 goes out through the filter's own response hook, which lets it pass.
        assert_eq!(calls[1..], [Call::ReplyPassed(status::CONTINUE)]);
        // The filter is out of the stream: it never runs again; the request stays stopped.
        let ran = Cell::new(false);
        let mark = || {
            ran.set(true);
            Verdict::Continue
        };
        assert_eq!(
            call_hook(module, Hook::Request, mark),
            status::STOP_ITERATION
        );
        assert_eq!(call_hook(module, Hook::Response, mark), status::CONTINUE);
        assert!(!ran.get());
        assert_eq!(take_calls(), []);
        envoy_dynamic_module_on_http_filter_destroy(module);
    }

    #[test]
    fn an_anthropic_client_gets_the_500_in_anthropics_shape() {
        let module = new_stream(&[(":method", "POST"), (":path", "/v1/messages")]);
        request_headers(module);
        take_calls();
        call_hook(module, Hook::Request, panics);
        let error = error_json(&take_calls()[0]);
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "api_error");
        envoy_dynamic_module_on_http_filter_destroy(module);
    }

    #[test]
    fn a_panic_in_a_response_hook_replaces_a_response_whose_headers_it_held() {
        let module = new_stream(&chat(&[]));
        request_headers(module);
        // The answer's headers are held (as a flight holds a failed answer to retry it).
        assert_eq!(call_hook(module, Hook::Response, || Verdict::Stop), 1);
        take_calls();
        assert_eq!(
            call_hook(module, Hook::Response, panics),
            status::STOP_ITERATION
        );
        assert!(matches!(take_calls().first(), Some(Call::Reply(500, _))));
        envoy_dynamic_module_on_http_filter_destroy(module);
    }

    #[test]
    fn a_panic_after_the_response_headers_went_on_resets_the_stream() {
        let module = new_stream(&chat(&[]));
        request_headers(module);
        assert_eq!(call_hook(module, Hook::Response, || Verdict::Continue), 0);
        take_calls();
        assert_eq!(
            call_hook(module, Hook::Response, panics),
            status::STOP_ITERATION
        );
        assert_eq!(take_calls(), [Call::Reset(ffi::stream_reset::LOCAL_RESET)]);
        // A request hook after it (a request body still streaming) stops too.
        assert_eq!(
            call_hook(module, Hook::Request, || Verdict::Continue),
            status::STOP_ITERATION
        );
        envoy_dynamic_module_on_http_filter_destroy(module);
    }

    #[test]
    fn a_panic_in_a_timer_or_call_out_fails_closed_too() {
        let module = new_stream(&chat(&[]));
        request_headers(module);
        take_calls();
        call_hook(module, Hook::Event, panics);
        assert!(matches!(take_calls().first(), Some(Call::Reply(500, _))));
        envoy_dynamic_module_on_http_filter_destroy(module);
    }

    #[test]
    fn the_cluster_header_a_client_sent_is_removed_before_anything_else() {
        let cluster = "x-switchboard-cluster".to_string();
        // An LLM request, which the filter holds for its body (it used to keep the header
        // until the routing decision replaced it).
        let module = new_stream(&chat(&[("x-switchboard-cluster", "admin")]));
        assert_eq!(request_headers(module), status::STOP_ITERATION);
        // One read of every header, then the removal before anything is decided.
        assert_eq!(
            take_calls(),
            [
                Call::ReadHeaders,
                Call::Remove(cluster.clone()),
                Call::ClearRoute,
            ]
        );
        envoy_dynamic_module_on_http_filter_destroy(module);
        // Without one: the one read, and the cached route stays.
        let module = new_stream(&chat(&[]));
        request_headers(module);
        assert_eq!(take_calls(), [Call::ReadHeaders]);
        envoy_dynamic_module_on_http_filter_destroy(module);
    }
}
