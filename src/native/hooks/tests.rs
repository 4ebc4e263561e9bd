//! The hooks against a fake Envoy: callbacks that record what the module asked for, and a
//! local reply (or the module's own answer headers) that runs the filter's response hooks
//! again, as Envoy's does.

use super::streams::*;
use super::*;
use crate::native::ffi::{body, header_map, ModuleBuffer, ModuleHeader, SchedulerPtr};
use std::ffi::CStr;

mod body_edit;
mod streams;

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
    /// The request went on to the router.
    ContinueRequest,
    /// A streamed call-out started to this cluster.
    StartStream(String),
    /// A streamed call-out was reset.
    ResetStream(u64),
    /// Bytes appended to a body buffer: which, and how many.
    Append(u32, usize),
    /// Bytes drained from the front of a body buffer: which, and how many.
    Drain(u32, usize),
    /// Answer headers sent to the client, and whether they end it.
    SendHeaders(Vec<(String, String)>, bool),
    /// Answer bytes sent to the client, and whether they end it.
    SendData(String, bool),
    Unexpected,
}

/// One test thread's Envoy.
struct Fake {
    request: Vec<(Vec<u8>, Vec<u8>)>,
    /// The request body, as the chunk the body hook received.
    body: Vec<u8>,
    /// The request body Envoy buffered before that chunk.
    buffered: Vec<u8>,
    /// The size of the slices a body is lent in (0: one slice).
    slice: usize,
    /// How many more times Envoy lends a body's slices before it refuses (`None`: always).
    lends: Option<usize>,
    calls: Vec<Call>,
    module: *const c_void,
    /// The last streamed call-out's id.
    streams: u64,
    /// The next streamed call-out is answered 503 before starting it returns (as Envoy's
    /// router answers at once when a cluster has no healthy host).
    answer_at_start: bool,
}

thread_local! {
    static FAKE: RefCell<Fake> = const {
        RefCell::new(Fake {
            request: Vec::new(),
            body: Vec::new(),
            buffered: Vec::new(),
            slice: 0,
            lends: None,
            calls: Vec::new(),
            module: std::ptr::null(),
            streams: 0,
            answer_at_start: false,
        })
    };
}

fn record(call: Call) {
    FAKE.with(|f| f.borrow_mut().calls.push(call));
}

fn text(b: ModuleBuffer) -> String {
    if b.ptr.is_null() {
        return String::new();
    }
    // SAFETY: the module lends `len` bytes for the call.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(b.ptr, b.len) }).into_owned()
}

/// The (name, value) pairs of an array of headers the module lends.
fn lent_pairs(headers: *mut ModuleHeader, len: usize) -> Vec<(String, String)> {
    if headers.is_null() {
        return Vec::new();
    }
    // SAFETY: the module lends an array of `len` headers for the call.
    let list = unsafe { std::slice::from_raw_parts(headers, len) };
    list.iter().map(|h| (text(h.key), text(h.value))).collect()
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

/// The request body buffer `which`, from the fake.
fn request_body_mut(f: &mut Fake, which: u32) -> Option<&mut Vec<u8>> {
    match which {
        body::RECEIVED_REQUEST => Some(&mut f.body),
        body::BUFFERED_REQUEST => Some(&mut f.buffered),
        _ => None,
    }
}

/// The slices a body buffer of `len` bytes is lent in.
fn slices(len: usize, slice: usize) -> usize {
    match slice {
        0 => usize::from(len > 0),
        n => len.div_ceil(n),
    }
}

extern "C" fn body_size(_: FilterEnvoyPtr, which: u32) -> usize {
    FAKE.with(|f| request_body_mut(&mut f.borrow_mut(), which).map_or(0, |b| b.len()))
}

extern "C" fn body_chunks_size(_: FilterEnvoyPtr, which: u32) -> usize {
    FAKE.with(|f| {
        let mut f = f.borrow_mut();
        let slice = f.slice;
        request_body_mut(&mut f, which).map_or(0, |b| slices(b.len(), slice))
    })
}

extern "C" fn body_chunks(_: FilterEnvoyPtr, which: u32, out: *mut EnvoyBuffer) -> bool {
    FAKE.with(|f| {
        let mut f = f.borrow_mut();
        if f.lends == Some(0) {
            return false;
        }
        f.lends = f.lends.map(|n| n - 1);
        let slice = f.slice;
        let Some(body) = request_body_mut(&mut f, which) else {
            return false;
        };
        let (len, step) = (body.len(), if slice == 0 { body.len() } else { slice });
        // Writable, as Envoy's are: the module may write the body in place through them.
        let base = body.as_mut_ptr();
        for i in 0..slices(len, slice) {
            let at = i * step;
            // SAFETY: the module passes an array of `body_chunks_size` entries; each slice
            // is a distinct range of the fake's body.
            unsafe {
                *out.add(i) = EnvoyBuffer {
                    ptr: base.add(at),
                    len: step.min(len - at),
                }
            };
        }
        true
    })
}

extern "C" fn append_body(_: FilterEnvoyPtr, which: u32, data: ModuleBuffer) -> bool {
    record(Call::Append(which, data.len));
    if data.ptr.is_null() {
        return false;
    }
    // SAFETY: the module lends `len` bytes for the call.
    let bytes = unsafe { std::slice::from_raw_parts(data.ptr, data.len) };
    FAKE.with(|f| request_body_mut(&mut f.borrow_mut(), which).map(|b| b.extend_from_slice(bytes)))
        .is_some()
}

extern "C" fn drain_body(_: FilterEnvoyPtr, which: u32, n: usize) -> bool {
    record(Call::Drain(which, n));
    FAKE.with(|f| {
        request_body_mut(&mut f.borrow_mut(), which).map(|b| {
            b.drain(..n.min(b.len()));
        })
    })
    .is_some()
}

extern "C" fn no(_: FilterEnvoyPtr) -> bool {
    false
}

extern "C" fn no_attribute(_: FilterEnvoyPtr, _: u32, _: *mut EnvoyBuffer) -> bool {
    false
}

extern "C" fn set_state(_: FilterEnvoyPtr, _: ModuleBuffer, _: ModuleBuffer) -> bool {
    true
}

extern "C" fn metric(_: FilterEnvoyPtr, _: usize, _: *mut ModuleBuffer, _: usize, _: u64) -> u32 {
    0
}

extern "C" fn new_scheduler(_: FilterEnvoyPtr) -> SchedulerPtr {
    std::ptr::NonNull::<u8>::dangling().as_ptr().cast()
}

extern "C" fn scheduler_commit(_: SchedulerPtr, _: u64) {}

extern "C" fn scheduler_delete(_: SchedulerPtr) {}

extern "C" fn continue_decoding(_: FilterEnvoyPtr) {
    record(Call::ContinueRequest);
}

extern "C" fn start_stream(
    envoy: FilterEnvoyPtr,
    id_out: *mut u64,
    cluster: ModuleBuffer,
    _headers: *mut ModuleHeader,
    _headers_len: usize,
    _body: ModuleBuffer,
    _end_stream: bool,
    _timeout_ms: u64,
) -> u32 {
    record(Call::StartStream(text(cluster)));
    let (id, answer_now, module) = FAKE.with(|f| {
        let mut f = f.borrow_mut();
        f.streams += 1;
        let answer_now = std::mem::take(&mut f.answer_at_start);
        (f.streams, answer_now, f.module)
    });
    if answer_now {
        // Envoy's router answers inline: headers, then the call-out is complete.
        stream_headers(envoy, module, id, "503", true);
        envoy_dynamic_module_on_http_filter_http_stream_complete(envoy, module, id);
    }
    // SAFETY: the module's out-parameter.
    unsafe { *id_out = id };
    ffi::callout_init::SUCCESS
}

extern "C" fn reset_call_stream(envoy: FilterEnvoyPtr, id: u64) {
    record(Call::ResetStream(id));
    // Envoy runs the call-out's reset hook before the reset returns.
    let module = FAKE.with(|f| f.borrow().module);
    envoy_dynamic_module_on_http_filter_http_stream_reset(envoy, module, id, 0);
}

extern "C" fn send_headers(
    envoy: FilterEnvoyPtr,
    headers: *mut ModuleHeader,
    headers_len: usize,
    end: bool,
) {
    record(Call::SendHeaders(lent_pairs(headers, headers_len), end));
    // The headers pass through the response hooks, this filter's included.
    let module = FAKE.with(|f| f.borrow().module);
    let passed = envoy_dynamic_module_on_http_filter_response_headers(envoy, module, end);
    record(Call::ReplyPassed(passed));
}

extern "C" fn send_data(envoy: FilterEnvoyPtr, data: ModuleBuffer, end: bool) {
    record(Call::SendData(text(data), end));
    let module = FAKE.with(|f| f.borrow().module);
    let passed = envoy_dynamic_module_on_http_filter_response_body(envoy, module, end);
    assert_eq!(passed, status::CONTINUE);
}

/// Envoy hands the module a streamed call-out's answer headers: `status` and a content type.
fn stream_headers(envoy: FilterEnvoyPtr, module: *const c_void, id: u64, status: &str, end: bool) {
    let pairs = [(":status", status), ("content-type", "text/event-stream")];
    let buffer = |s: &str| EnvoyBuffer {
        ptr: s.as_ptr(),
        len: s.len(),
    };
    let headers: Vec<EnvoyHeader> = pairs
        .iter()
        .map(|(k, v)| EnvoyHeader {
            key: buffer(k),
            value: buffer(v),
        })
        .collect();
    envoy_dynamic_module_on_http_filter_http_stream_headers(
        envoy,
        module,
        id,
        headers.as_ptr(),
        headers.len(),
        end,
    );
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
            b"http_get_body_size" => body_size as *mut c_void,
            b"http_get_body_chunks_size" => body_chunks_size as *mut c_void,
            b"http_get_body_chunks" => body_chunks as *mut c_void,
            b"http_append_body" => append_body as *mut c_void,
            b"http_drain_body" => drain_body as *mut c_void,
            b"http_received_buffered_request_body" => no as *mut c_void,
            b"http_received_buffered_response_body" => no as *mut c_void,
            b"http_filter_get_attribute_string" => no_attribute as *mut c_void,
            b"http_set_filter_state_bytes" => set_state as *mut c_void,
            b"http_filter_increment_counter"
            | b"http_filter_set_gauge"
            | b"http_filter_record_histogram_value" => metric as *mut c_void,
            b"http_filter_scheduler_new" => new_scheduler as *mut c_void,
            b"http_filter_scheduler_commit" => scheduler_commit as *mut c_void,
            b"http_filter_scheduler_delete" => scheduler_delete as *mut c_void,
            b"http_filter_continue_decoding" => continue_decoding as *mut c_void,
            b"http_filter_start_http_stream" => start_stream as *mut c_void,
            b"http_filter_reset_http_stream" => reset_call_stream as *mut c_void,
            b"http_send_response_headers" => send_headers as *mut c_void,
            b"http_send_response_data" => send_data as *mut c_void,
            _ => unexpected as *mut c_void,
        }
    });
    Box::leak(Box::new(api.unwrap()))
}

/// A stream of a plugin with [`CONFIG`], whose client sent `request`; the module's pointer.
fn new_stream(request: &[(&str, &str)]) -> *const c_void {
    new_stream_of(CONFIG, request, "")
}

/// A stream of a plugin with `config`, whose client sent `request` and `body`.
fn new_stream_of(config: &str, request: &[(&str, &str)], body: &str) -> *const c_void {
    let plugin = Plugin::load(fake_api(), config.as_bytes(), |c| c).unwrap();
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
        f.body = body.as_bytes().to_vec();
        f.buffered.clear();
        f.slice = 0;
        f.lends = None;
        f.calls.clear();
        f.module = module;
        f.streams = 0;
        f.answer_at_start = false;
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
