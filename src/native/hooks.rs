//! The event hooks Envoy calls: the `envoy_dynamic_module_on_*` symbols of the library.
//!
//! Each hook turns Envoy's raw pointers into a [`Stream`] and the module's own objects, runs
//! the adapter, and then makes the calls into Envoy the filter queued ([`After`]). A panic
//! never crosses into Envoy: it is caught here and logged. On a stream it fails closed: the
//! filter leaves the stream, and the request never goes on with the client's headers; the
//! client gets a 500 `internal_error` if no response headers went out yet, else the stream is
//! reset ([`fallback`]).
//!
//! Envoy may run a streamed call-out's hooks while the filter is in use (it can answer one
//! before starting it returns, e.g. no healthy upstream): its events wait in the slot and run,
//! in order, as soon as the filter is free ([`drain`]).

use super::ffi::{self, status, Api, ConfigEnvoyPtr, EnvoyBuffer, EnvoyHeader, FilterEnvoyPtr};
use super::filter::{After, Filter, Verdict};
use super::forward::StreamEvent;
use super::host::{self, Side, Stream};
use super::plugin::Plugin;
use crate::core::config::ConfigVersion;
use crate::core::errors::ErrorReply;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
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
    /// Streamed call-out events that came while the filter was in use, to run in order.
    pending: RefCell<VecDeque<StreamEvent>>,
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
        let status = on_slot(slot, &mut stream, hook, f);
        drain(slot, &mut stream);
        status
    })
}

/// Queues a streamed call-out's event (`event` copies it out of Envoy's hook) and runs the
/// queue unless the filter is in use, in which case the hook using it runs the queue.
///
/// # Safety
/// As [`on_filter`].
unsafe fn on_stream_event(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    event: impl FnOnce() -> StreamEvent,
) {
    guard((), || {
        // SAFETY: the caller's contract.
        let slot = unsafe { &*(module as *const Slot) };
        if slot.failed.get() {
            return;
        }
        slot.pending.borrow_mut().push_back(event());
        drain(slot, &mut Stream::new(slot.api, envoy));
    });
}

/// Runs the queued streamed call-out events, in order, while the filter is free.
fn drain(slot: &Slot, stream: &mut Stream) {
    while slot.filter.try_borrow_mut().is_ok() {
        let Some(event) = slot.pending.borrow_mut().pop_front() else {
            return;
        };
        on_slot(slot, stream, Hook::Event, |f, s| {
            f.on_stream_event(s, event);
            Verdict::Continue
        });
    }
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
    run(slot, stream, queued);
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
fn run(slot: &Slot, stream: &mut Stream, queued: Vec<After>) {
    for call in queued {
        match call {
            After::SendHeaders { headers, end } => {
                // Set first: the headers may be with the client once the call starts.
                slot.response_sent.set(true);
                stream.send_headers(&headers, end);
            }
            After::SendData { data, end } => stream.send_data(&data, end),
            After::ResetStream(id) => stream.reset_call_stream(id),
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
            pending: RefCell::new(VecDeque::new()),
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

/// The client's stream is over (before the filter is destroyed): a streamed call-out still
/// running is reset.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    envoy: FilterEnvoyPtr,
    filter: *const c_void,
) {
    // SAFETY: as above.
    unsafe {
        on_filter(envoy, filter, Hook::Event, |f, _| {
            f.on_client_done();
            Verdict::Continue
        });
    }
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

/// A streamed call-out's answer: every attempt of a request that streams is one
/// ([`crate::core::stream::Host::start_stream`]). The config-level hooks are unused and only
/// complete the ABI.
mod streams {
    use super::*;

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
        envoy: FilterEnvoyPtr,
        filter: *const c_void,
        stream_id: u64,
        headers: *const EnvoyHeader,
        headers_len: usize,
        end_stream: bool,
    ) {
        // SAFETY: Envoy passes the pointers of one live stream; the array is this hook's.
        unsafe {
            on_stream_event(envoy, filter, || StreamEvent::Headers {
                id: stream_id,
                headers: host::header_pairs(headers, headers_len),
                end: end_stream,
            });
        }
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
        envoy: FilterEnvoyPtr,
        filter: *const c_void,
        stream_id: u64,
        data: *const EnvoyBuffer,
        data_len: usize,
        end_stream: bool,
    ) {
        // SAFETY: as above.
        unsafe {
            on_stream_event(envoy, filter, || StreamEvent::Data {
                id: stream_id,
                bytes: host::joined(data, data_len),
                end: end_stream,
            });
        }
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
        envoy: FilterEnvoyPtr,
        filter: *const c_void,
        stream_id: u64,
        _trailers: *const EnvoyHeader,
        _trailers_len: usize,
    ) {
        // SAFETY: as above.
        unsafe { on_stream_event(envoy, filter, || StreamEvent::Trailers { id: stream_id }) }
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
        envoy: FilterEnvoyPtr,
        filter: *const c_void,
        stream_id: u64,
    ) {
        // SAFETY: as above.
        unsafe { on_stream_event(envoy, filter, || StreamEvent::Complete { id: stream_id }) }
    }

    #[no_mangle]
    pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
        envoy: FilterEnvoyPtr,
        filter: *const c_void,
        stream_id: u64,
        _reason: u32,
    ) {
        // SAFETY: as above.
        unsafe { on_stream_event(envoy, filter, || StreamEvent::Reset { id: stream_id }) }
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
mod tests;
