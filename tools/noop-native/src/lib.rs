//! An Envoy dynamic-modules HTTP filter that implements nothing: `libnoop_native.so`. `make
//! bench` runs it beside Switchboard's native build, as it runs the no-op `.wasm` beside the
//! `.wasm`, to show what any native module costs in Envoy and what Switchboard adds on top.
//!
//! Its filter config (a `StringValue`) picks a floor:
//! - empty: every hook returns at once: the cost of Envoy's dynamic-module filter machinery;
//! - `calls`: hold the request until its body is in, then make the calls a body-routing module
//!   cannot avoid, with no logic between them: read the headers and the body, write a
//!   model-name-sized edit of the same length over the body in Envoy's own slices (as
//!   Switchboard writes its edits), set a credential and the cluster header, clear the cached
//!   route, read the answer's status and set one header on it;
//! - `calls:LIST`: hold the request as `calls` does and make only the calls LIST names (comma
//!   separated, any order): `headers`, `body-read`, `body-set` (needs `body-read`: it writes
//!   from the copy read), `credential`, `cluster`, `clear-route-cache`, `status`, `response-header`;
//!   `held` (or `calls:`) makes none. `scripts/instructions.py` adds them one at a time to
//!   price each call. One more, not in `calls`: `remove-absent` removes three response headers
//!   the answer does not have (Switchboard's default `account_headers.response`, removed from
//!   every answer on the gateway's key). Any other config fails the filter's configuration.
//!
//! The ABI declarations are the few this needs, by hand, against Envoy 1.40.0's dynamic
//! modules ABI ("v0.2.0"); callbacks are looked up in the process with `dlsym`, as
//! Switchboard's native adapter does. Every hook Envoy 1.40 requires is exported.

// The hooks are the ABI: Envoy calls them with its own pointers, which they hand back to
// Envoy's callbacks.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

pub type Ptr = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Buffer {
    ptr: *const u8,
    len: usize,
}

impl Buffer {
    const NULL: Buffer = Buffer {
        ptr: std::ptr::null(),
        len: 0,
    };

    fn of(bytes: &[u8]) -> Buffer {
        Buffer {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// # Safety
    /// Envoy filled the buffer in the current hook.
    unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() {
            &[]
        } else {
            // SAFETY: Envoy's `len` bytes at `ptr` (the caller's contract).
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Header {
    key: Buffer,
    value: Buffer,
}

const REQUEST_HEADERS: u32 = 0;
const RESPONSE_HEADERS: u32 = 2;
const RECEIVED_REQUEST_BODY: u32 = 0;
const BUFFERED_REQUEST_BODY: u32 = 1;
const CONTINUE: u32 = 0;
/// StopIteration for headers, StopIterationAndBuffer for bodies.
const STOP: u32 = 1;

fn lookup(name: &CStr) -> *mut c_void {
    extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // SAFETY: RTLD_DEFAULT is the null handle; the name is NUL-terminated.
    unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) }
}

/// Declares [`Api`], the callbacks the `calls` floor makes, and [`resolve_api`], which looks
/// each up by its symbol (None if Envoy lacks one).
macro_rules! api {
    ($($field:ident: $symbol:literal fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        struct Api {
            $($field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        fn resolve_api() -> Option<Api> {
            Some(Api {$($field: {
                let found = lookup($symbol);
                if found.is_null() {
                    return None;
                }
                // SAFETY: Envoy's callback of that name, whose C signature is transcribed.
                unsafe {
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(found)
                }
            },)*})
        }
    };
}

api! {
    get_header: c"envoy_dynamic_module_callback_http_get_header"
        fn(Ptr, u32, Buffer, *mut Buffer, usize, *mut usize) -> bool;
    get_headers_size: c"envoy_dynamic_module_callback_http_get_headers_size"
        fn(Ptr, u32) -> usize;
    get_headers: c"envoy_dynamic_module_callback_http_get_headers"
        fn(Ptr, u32, *mut Header) -> bool;
    set_header: c"envoy_dynamic_module_callback_http_set_header"
        fn(Ptr, u32, Buffer, Buffer) -> bool;
    get_body_chunks_size: c"envoy_dynamic_module_callback_http_get_body_chunks_size"
        fn(Ptr, u32) -> usize;
    get_body_chunks: c"envoy_dynamic_module_callback_http_get_body_chunks"
        fn(Ptr, u32, *mut Buffer) -> bool;
    get_body_size: c"envoy_dynamic_module_callback_http_get_body_size"
        fn(Ptr, u32) -> usize;
    clear_route_cache: c"envoy_dynamic_module_callback_http_clear_route_cache"
        fn(Ptr);
}

static API: OnceLock<Api> = OnceLock::new();

/// Loads the module: null (Envoy refuses it) without the callbacks.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    match resolve_api() {
        Some(api) => {
            let _ = API.set(api);
            c"v0.2.0".as_ptr()
        }
        None => std::ptr::null(),
    }
}

/// Response headers the lean upstream never sends (Switchboard's default
/// `account_headers.response`, which it removes from every answer on the gateway's key).
const ABSENT: [&[u8]; 3] = [
    b"openai-organization",
    b"openai-project",
    b"anthropic-organization-id",
];

/// Which calls a stream makes; all false holds the body and makes none.
#[derive(Clone, Copy, Default)]
struct Calls {
    headers: bool,
    body_read: bool,
    body_set: bool,
    credential: bool,
    cluster: bool,
    clear_route_cache: bool,
    status: bool,
    response_header: bool,
    remove_absent: bool,
}

impl Calls {
    const ALL: Calls = Calls {
        headers: true,
        body_read: true,
        body_set: true,
        credential: true,
        cluster: true,
        clear_route_cache: true,
        status: true,
        response_header: true,
        remove_absent: false,
    };

    /// `headers,body-read,...`; None for a name it does not know, or `body-set` alone.
    fn parse(list: &[u8]) -> Option<Calls> {
        let mut calls = Calls::default();
        for name in list.split(|&b| b == b',').filter(|n| !n.is_empty()) {
            let flag = match name {
                b"headers" => &mut calls.headers,
                b"body-read" => &mut calls.body_read,
                b"body-set" => &mut calls.body_set,
                b"credential" => &mut calls.credential,
                b"cluster" => &mut calls.cluster,
                b"clear-route-cache" => &mut calls.clear_route_cache,
                b"status" => &mut calls.status,
                b"response-header" => &mut calls.response_header,
                b"remove-absent" => &mut calls.remove_absent,
                _ => return None,
            };
            *flag = true;
        }
        (!calls.body_set || calls.body_read).then_some(calls)
    }
}

/// A config: None does nothing; Some holds the request and makes those calls. A filter is its
/// config's address (boxed here, freed by `config_destroy`, never written).
type Floor = Option<Calls>;

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _envoy: Ptr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    // SAFETY: Envoy's buffer, valid during this hook.
    let floor: Floor = match unsafe { config.bytes() } {
        b"" => None,
        b"calls" => Some(Calls::ALL),
        b"held" => Some(Calls::default()),
        other => match other.strip_prefix(b"calls:").and_then(Calls::parse) {
            Some(calls) => Some(calls),
            // Null fails the configuration, rather than measure less than was asked.
            None => return std::ptr::null(),
        },
    };
    Box::into_raw(Box::new(floor)).cast_const().cast()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    // SAFETY: a `config_new` box, which Envoy destroys once, after its last stream.
    drop(unsafe { Box::from_raw(config.cast_mut().cast::<Floor>()) });
}

/// A stream's filter is its config: no per-stream state.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _envoy: Ptr,
) -> *const c_void {
    config
}

/// The calls `filter` (a config's address) makes, if it holds the request; and Envoy's
/// callbacks.
fn calls(filter: *const c_void) -> Option<(&'static Api, Calls)> {
    // SAFETY: `filter` is a live config's `Floor`.
    let floor = unsafe { *filter.cast::<Floor>() };
    Some((API.get()?, floor?))
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: Ptr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    let Some((api, calls)) = calls(filter) else {
        return CONTINUE;
    };
    if calls.headers {
        // SAFETY: the array has the size Envoy reported.
        unsafe { get_headers(api, envoy) };
    }
    if end_of_stream {
        CONTINUE
    } else {
        STOP
    }
}

/// Every request header, as a module that reads them all gets them.
///
/// # Safety
/// In a request hook of `envoy`'s stream.
unsafe fn get_headers(api: &Api, envoy: Ptr) {
    // SAFETY: the array has the size Envoy reported.
    unsafe {
        let n = (api.get_headers_size)(envoy, REQUEST_HEADERS);
        let mut headers = vec![
            Header {
                key: Buffer::NULL,
                value: Buffer::NULL
            };
            n
        ];
        (api.get_headers)(envoy, REQUEST_HEADERS, headers.as_mut_ptr());
        std::hint::black_box(&headers);
    }
}

/// The slices of one body, appended to `out`.
///
/// # Safety
/// In a request body hook of `envoy`'s stream.
unsafe fn append_chunks(api: &Api, envoy: Ptr, which: u32, out: &mut Vec<u8>) {
    // SAFETY: the array has the size Envoy reported; the slices are read in this hook.
    unsafe {
        let mut chunks = vec![Buffer::NULL; (api.get_body_chunks_size)(envoy, which)];
        (api.get_body_chunks)(envoy, which, chunks.as_mut_ptr());
        for chunk in chunks {
            out.extend_from_slice(chunk.bytes());
        }
    }
}

/// A model-name-sized edit of the same length, written over the body's first bytes in
/// Envoy's own slices (as Switchboard writes its edits: Envoy's SDK lends body memory as
/// mutable), from `body`, the copy read.
///
/// # Safety
/// In a request body hook of `envoy`'s stream, with `body` read from it in this hook.
unsafe fn write_in_place(api: &Api, envoy: Ptr, body: &[u8]) {
    const EDIT: usize = 24;
    // SAFETY: the array has the size Envoy reported; each slice is Envoy's writable memory,
    // written within its length in this hook.
    unsafe {
        let mut from = body.get(..EDIT.min(body.len())).unwrap_or_default();
        for which in [BUFFERED_REQUEST_BODY, RECEIVED_REQUEST_BODY] {
            let mut chunks = vec![Buffer::NULL; (api.get_body_chunks_size)(envoy, which)];
            (api.get_body_chunks)(envoy, which, chunks.as_mut_ptr());
            for chunk in chunks.iter().filter(|c| !c.ptr.is_null()) {
                let n = chunk.len.min(from.len());
                let (now, rest) = from.split_at(n);
                std::slice::from_raw_parts_mut(chunk.ptr.cast_mut(), n).copy_from_slice(now);
                from = rest;
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    envoy: Ptr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    let Some((api, calls)) = calls(filter) else {
        return CONTINUE;
    };
    if !end_of_stream {
        return STOP;
    }
    // SAFETY: plain calls on this hook's stream; every buffer lent outlives its call.
    unsafe {
        let size = |which| (api.get_body_size)(envoy, which);
        if calls.body_read {
            // One allocation of the body's size, as Switchboard makes: growing by doubling
            // would copy a 100 KB body about once more.
            let mut body =
                Vec::with_capacity(size(BUFFERED_REQUEST_BODY) + size(RECEIVED_REQUEST_BODY));
            append_chunks(api, envoy, BUFFERED_REQUEST_BODY, &mut body);
            append_chunks(api, envoy, RECEIVED_REQUEST_BODY, &mut body);
            if calls.body_set {
                write_in_place(api, envoy, &body);
            }
        }
        let set = |name: &[u8], value: &[u8]| {
            (api.set_header)(envoy, REQUEST_HEADERS, Buffer::of(name), Buffer::of(value))
        };
        if calls.credential {
            set(b"authorization", b"Bearer floor");
        }
        if calls.cluster {
            set(b"x-switchboard-cluster", b"provider");
        }
        if calls.clear_route_cache {
            (api.clear_route_cache)(envoy);
        }
    }
    CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    envoy: Ptr,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    let Some((api, calls)) = calls(filter) else {
        return CONTINUE;
    };
    // SAFETY: plain calls on this hook's stream.
    unsafe {
        if calls.status {
            let (mut status, mut count) = (Buffer::NULL, 0);
            let key = Buffer::of(b":status");
            (api.get_header)(envoy, RESPONSE_HEADERS, key, &mut status, 0, &mut count);
            std::hint::black_box(status.bytes());
        }
        if calls.remove_absent {
            for name in ABSENT {
                // A null value removes the header.
                (api.set_header)(envoy, RESPONSE_HEADERS, Buffer::of(name), Buffer::NULL);
            }
        }
        if calls.response_header {
            let name = Buffer::of(b"x-switchboard-resolved-model");
            (api.set_header)(envoy, RESPONSE_HEADERS, name, Buffer::of(b"floor"));
        }
    }
    CONTINUE
}

/// Hooks Envoy 1.40 requires of an HTTP filter module that the floor has no use for: each
/// returns at once (`continue` where it returns a status).
macro_rules! nothing {
    ($($name:ident($($arg:ty),*) $(-> $ret:ty = $value:expr)?;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($(_: $arg),*) $(-> $ret)? { $($value)? }
    )*};
}

nothing! {
    envoy_dynamic_module_on_http_filter_destroy(*const c_void);
    envoy_dynamic_module_on_http_filter_request_trailers(Ptr, *const c_void) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_response_body(Ptr, *const c_void, bool) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_response_trailers(Ptr, *const c_void) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_stream_complete(Ptr, *const c_void);
    envoy_dynamic_module_on_http_filter_http_callout_done(
        Ptr, *const c_void, u64, u32, *const Header, usize, *const Buffer, usize);
    envoy_dynamic_module_on_http_filter_scheduled(Ptr, *const c_void, u64);
    envoy_dynamic_module_on_http_filter_http_stream_headers(
        Ptr, *const c_void, u64, *const Header, usize, bool);
    envoy_dynamic_module_on_http_filter_http_stream_data(
        Ptr, *const c_void, u64, *const Buffer, usize, bool);
    envoy_dynamic_module_on_http_filter_http_stream_trailers(
        Ptr, *const c_void, u64, *const Header, usize);
    envoy_dynamic_module_on_http_filter_http_stream_complete(Ptr, *const c_void, u64);
    envoy_dynamic_module_on_http_filter_http_stream_reset(Ptr, *const c_void, u64, u32);
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
        Ptr, *const c_void);
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
        Ptr, *const c_void);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_names_its_calls_and_nothing_else() {
        let calls = Calls::parse(b"headers,body-read,status").unwrap();
        assert!(calls.headers && calls.body_read && calls.status);
        assert!(!calls.body_set && !calls.credential && !calls.cluster);
        assert!(!calls.clear_route_cache && !calls.response_header && !calls.remove_absent);
    }

    #[test]
    fn an_empty_list_holds_without_calls() {
        let calls = Calls::parse(b"").unwrap();
        assert!(!calls.headers && !calls.body_read && !calls.status && !calls.response_header);
    }

    #[test]
    fn an_unknown_name_or_a_body_set_without_its_read_is_refused() {
        assert!(Calls::parse(b"headers,bogus").is_none());
        assert!(Calls::parse(b"body-set").is_none());
        assert!(Calls::parse(b"body-set,body-read").is_some());
    }

    #[test]
    fn a_config_that_names_no_floor_fails() {
        let config = |text: &[u8]| {
            envoy_dynamic_module_on_http_filter_config_new(
                std::ptr::null_mut(),
                Buffer::NULL,
                Buffer::of(text),
            )
        };
        assert!(config(b"calls:nope").is_null());
        assert!(config(b"whatever").is_null());
        for ok in [&b""[..], b"calls", b"held", b"calls:", b"calls:headers"] {
            let made = config(ok);
            assert!(!made.is_null());
            envoy_dynamic_module_on_http_filter_config_destroy(made);
        }
    }
}
