//! The part of Envoy's dynamic-modules ABI this module uses, declared by hand against Envoy
//! 1.40.0 (`source/extensions/dynamic_modules/abi/abi.h`, ABI version "v0.2.0").
//!
//! Event hooks (`envoy_dynamic_module_on_*`) are the functions this library exports; they live
//! in [`super::hooks`]. Callbacks (`envoy_dynamic_module_callback_*`) are functions the Envoy
//! binary exports; they are looked up by name when Envoy loads the module ([`Api::resolve`]),
//! not linked: the library then has no undefined symbols, so the host's test binaries and the
//! CLI link the same crate without an Envoy, and a binary that lacks a callback is refused at
//! load time with its name in Envoy's log instead of failing on first use.

use std::ffi::{c_char, c_void, CStr};

/// The ABI version this module was written against; Envoy logs a warning if it differs.
pub const ABI_VERSION: &CStr = c"v0.2.0";

/// Envoy's per-config object (`DynamicModuleHttpFilterConfig`).
pub type ConfigEnvoyPtr = *mut c_void;
/// Envoy's per-stream object (`DynamicModuleHttpFilter`).
pub type FilterEnvoyPtr = *mut c_void;
/// A scheduler Envoy allocates for one stream; the module deletes it.
pub type SchedulerPtr = *mut c_void;

/// Bytes owned by Envoy, valid until the end of the current hook unless changed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

impl EnvoyBuffer {
    /// A null buffer for Envoy to fill in.
    pub const NULL: EnvoyBuffer = EnvoyBuffer {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// The bytes, empty if null.
    ///
    /// # Safety
    /// Envoy must have filled the buffer in the current hook and not changed it since.
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            &[]
        } else {
            // SAFETY: Envoy hands out `len` readable bytes at `ptr` (the caller's contract).
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
        }
    }

    /// The bytes of a body slice, for writing in place; empty if null.
    ///
    /// # Safety
    /// As [`EnvoyBuffer::bytes`], for a body slice (Envoy's own buffer memory, which its Rust
    /// SDK hands out as `EnvoyMutBuffer`: "mutable and can be modified in place"); no other
    /// view of the same bytes may be alive.
    pub unsafe fn bytes_mut<'a>(self) -> &'a mut [u8] {
        if self.ptr.is_null() || self.len == 0 {
            &mut []
        } else {
            // SAFETY: as above; Envoy lends `len` writable bytes at `ptr`.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.cast_mut(), self.len) }
        }
    }
}

/// Bytes owned by the module, lent to Envoy for the duration of one callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

impl ModuleBuffer {
    /// A null buffer: "no value" where the ABI accepts one (it removes a header).
    pub const NULL: ModuleBuffer = ModuleBuffer {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// Lends `bytes`.
    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }
}

/// A header owned by Envoy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyHeader {
    pub key: EnvoyBuffer,
    pub value: EnvoyBuffer,
}

impl EnvoyHeader {
    /// A null header for Envoy to fill in.
    pub const NULL: EnvoyHeader = EnvoyHeader {
        key: EnvoyBuffer::NULL,
        value: EnvoyBuffer::NULL,
    };
}

/// A header owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleHeader {
    pub key: ModuleBuffer,
    pub value: ModuleBuffer,
}

impl ModuleHeader {
    /// Lends a (name, value) pair.
    pub fn of(name: &[u8], value: &[u8]) -> ModuleHeader {
        ModuleHeader {
            key: ModuleBuffer::of(name),
            value: ModuleBuffer::of(value),
        }
    }
}

/// `envoy_dynamic_module_type_http_header_type`.
pub mod header_map {
    pub const REQUEST: u32 = 0;
    pub const RESPONSE: u32 = 2;
}

/// `envoy_dynamic_module_type_http_body_type`.
pub mod body {
    pub const RECEIVED_REQUEST: u32 = 0;
    pub const BUFFERED_REQUEST: u32 = 1;
    pub const RECEIVED_RESPONSE: u32 = 2;
    pub const BUFFERED_RESPONSE: u32 = 3;
}

/// The statuses the hooks return (`FilterHeadersStatus`, `FilterDataStatus`,
/// `FilterTrailersStatus` in Envoy).
pub mod status {
    /// Headers and trailers: go on.
    pub const CONTINUE: u32 = 0;
    /// Stop here until the filter continues the stream; in a body hook, also keep the data
    /// in Envoy's buffer (StopIterationAndBuffer has the same value).
    pub const STOP_ITERATION: u32 = 1;
}

/// `envoy_dynamic_module_type_http_callout_init_result`.
pub mod callout_init {
    pub const SUCCESS: u32 = 0;
}

/// `envoy_dynamic_module_type_http_callout_result`.
pub mod callout_result {
    pub const SUCCESS: u32 = 0;
}

/// `envoy_dynamic_module_type_http_filter_stream_reset_reason`.
pub mod stream_reset {
    /// `LocalReset` (the first value; Envoy 1.40 maps any value but `LocalRefusedStreamReset`,
    /// 1, to it).
    pub const LOCAL_RESET: u32 = 0;
}

/// `envoy_dynamic_module_type_attribute_id`.
pub mod attribute {
    /// `response.code_details`.
    pub const RESPONSE_CODE_DETAILS: u32 = 16;
}

/// `envoy_dynamic_module_type_log_level`.
pub mod log_level {
    pub const TRACE: u32 = 0;
    pub const DEBUG: u32 = 1;
    pub const INFO: u32 = 2;
    pub const WARN: u32 = 3;
    pub const ERROR: u32 = 4;
}

/// Declares the callback table: one function pointer per callback, resolved by name.
macro_rules! callbacks {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        /// Envoy's callbacks, resolved once when the module loads.
        pub struct Api {
            $( $(#[$doc])* pub $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        impl Api {
            /// Looks every callback up with `lookup` (given the full symbol name); the name of
            /// the first one missing otherwise.
            pub fn resolve(lookup: impl Fn(&CStr) -> *mut c_void) -> Result<Api, &'static str> {
                Ok(Api {
                    $( $name: {
                        const SYMBOL: &str = concat!(
                            "envoy_dynamic_module_callback_", stringify!($name), "\0");
                        let Ok(symbol) = CStr::from_bytes_with_nul(SYMBOL.as_bytes()) else {
                            return Err(SYMBOL);
                        };
                        let found = lookup(symbol);
                        if found.is_null() {
                            return Err(SYMBOL);
                        }
                        // SAFETY: the symbol is Envoy's callback of this name, whose C
                        // signature the declaration below transcribes.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(found)
                        }
                    }, )*
                })
            }
        }
    };
}

callbacks! {
    /// Writes a line to Envoy's log under the `dynamic_modules` component.
    fn log(level: u32, message: ModuleBuffer);
    /// Whether Envoy would print a line of this level.
    fn log_enabled(level: u32) -> bool;

    /// Value `index` of header `key` in one of the stream's maps; the number of values too.
    fn http_get_header(
        filter: FilterEnvoyPtr, map: u32, key: ModuleBuffer, out: *mut EnvoyBuffer,
        index: usize, count: *mut usize,
    ) -> bool;
    /// How many headers a map has.
    fn http_get_headers_size(filter: FilterEnvoyPtr, map: u32) -> usize;
    /// Every header of a map, into an array of `http_get_headers_size` entries.
    fn http_get_headers(filter: FilterEnvoyPtr, map: u32, out: *mut EnvoyHeader) -> bool;
    /// Replaces every value of a header; a null value removes it.
    fn http_set_header(
        filter: FilterEnvoyPtr, map: u32, key: ModuleBuffer, value: ModuleBuffer,
    ) -> bool;
    /// Answers the client locally (Envoy's `sendLocalReply`).
    fn http_send_response(
        filter: FilterEnvoyPtr, status: u32, headers: *mut ModuleHeader, headers_len: usize,
        body: ModuleBuffer, details: ModuleBuffer,
    );
    /// How many slices a body has.
    fn http_get_body_chunks_size(filter: FilterEnvoyPtr, body: u32) -> usize;
    /// The slices of a body, into an array of `http_get_body_chunks_size` entries.
    fn http_get_body_chunks(filter: FilterEnvoyPtr, body: u32, out: *mut EnvoyBuffer) -> bool;
    /// The size of a body in bytes.
    fn http_get_body_size(filter: FilterEnvoyPtr, body: u32) -> usize;
    /// Appends bytes to a body.
    fn http_append_body(filter: FilterEnvoyPtr, body: u32, data: ModuleBuffer) -> bool;
    /// Drops bytes from the start of a body.
    fn http_drain_body(filter: FilterEnvoyPtr, body: u32, bytes: usize) -> bool;
    /// Whether the request body just received is the one already buffered (an earlier
    /// filter buffered it), so reading both would read it twice.
    fn http_received_buffered_request_body(filter: FilterEnvoyPtr) -> bool;
    /// The same for the response body.
    fn http_received_buffered_response_body(filter: FilterEnvoyPtr) -> bool;
    /// Makes Envoy select the route again with the request's headers as they are now.
    fn http_clear_route_cache(filter: FilterEnvoyPtr);
    /// A string attribute of the stream, such as `response.code_details`.
    fn http_filter_get_attribute_string(
        filter: FilterEnvoyPtr, attribute: u32, out: *mut EnvoyBuffer,
    ) -> bool;
    /// Starts an HTTP call to a cluster; its answer comes to `on_http_filter_http_callout_done`.
    fn http_filter_http_callout(
        filter: FilterEnvoyPtr, id_out: *mut u64, cluster: ModuleBuffer,
        headers: *mut ModuleHeader, headers_len: usize, body: ModuleBuffer, timeout_ms: u64,
    ) -> u32;
    /// Starts a streamed call-out to a cluster with its whole request (`end_stream`: nothing
    /// follows the body); its answer comes to the `on_http_filter_http_stream_*` hooks.
    /// `timeout_ms` 0 sets no timeout.
    fn http_filter_start_http_stream(
        filter: FilterEnvoyPtr, id_out: *mut u64, cluster: ModuleBuffer,
        headers: *mut ModuleHeader, headers_len: usize, body: ModuleBuffer, end_stream: bool,
        timeout_ms: u64,
    ) -> u32;
    /// Resets a streamed call-out; Envoy may run its `on_http_filter_http_stream_reset` hook
    /// before this returns.
    fn http_filter_reset_http_stream(filter: FilterEnvoyPtr, stream_id: u64);
    /// Sends response headers to the client (a `:status` among them), through the response
    /// filters (this one's included).
    fn http_send_response_headers(
        filter: FilterEnvoyPtr, headers: *mut ModuleHeader, headers_len: usize, end_stream: bool,
    );
    /// Sends response body bytes to the client after `http_send_response_headers`.
    fn http_send_response_data(filter: FilterEnvoyPtr, data: ModuleBuffer, end_stream: bool);
    /// A handle that posts events to this stream's worker from any thread.
    fn http_filter_scheduler_new(filter: FilterEnvoyPtr) -> SchedulerPtr;
    /// Posts `event_id` to `on_http_filter_scheduled` on the stream's worker.
    fn http_filter_scheduler_commit(scheduler: SchedulerPtr, event_id: u64);
    /// Frees a scheduler.
    fn http_filter_scheduler_delete(scheduler: SchedulerPtr);
    /// Resumes a request stopped in a hook.
    fn http_filter_continue_decoding(filter: FilterEnvoyPtr);
    /// Resets the stream (both directions), with a reason and details for Envoy's logs.
    fn http_filter_reset_stream(filter: FilterEnvoyPtr, reason: u32, details: ModuleBuffer);

    // Declared for access-log fields and gauge arithmetic, which the adapter does not use
    // yet: they are resolved at load like the rest, so a module using them later needs no
    // new check.
    /// Sets a string in the stream's dynamic metadata (what access logs read).
    #[allow(dead_code)]
    fn http_set_dynamic_metadata_string(
        filter: FilterEnvoyPtr, namespace: ModuleBuffer, key: ModuleBuffer, value: ModuleBuffer,
    );
    /// Sets a number in the stream's dynamic metadata.
    #[allow(dead_code)]
    fn http_set_dynamic_metadata_number(
        filter: FilterEnvoyPtr, namespace: ModuleBuffer, key: ModuleBuffer, value: f64,
    );
    /// A string value under a top-level key of a metadata namespace.
    #[allow(dead_code)]
    fn http_get_metadata_string(
        filter: FilterEnvoyPtr, source: u32, namespace: ModuleBuffer, key: ModuleBuffer,
        out: *mut EnvoyBuffer,
    ) -> bool;
    /// Sets bytes in the stream's filter state.
    fn http_set_filter_state_bytes(
        filter: FilterEnvoyPtr, key: ModuleBuffer, value: ModuleBuffer,
    ) -> bool;
    /// An integer attribute of the stream, such as `response.code`.
    #[allow(dead_code)]
    fn http_filter_get_attribute_int(filter: FilterEnvoyPtr, attribute: u32, out: *mut u64) -> bool;
    /// Defines a counter (on the main thread, in `on_http_filter_config_new`); its id out.
    fn http_filter_config_define_counter(
        config: ConfigEnvoyPtr, name: ModuleBuffer, labels: *mut ModuleBuffer, labels_len: usize,
        id_out: *mut usize,
    ) -> u32;
    /// Defines a gauge; its id out.
    fn http_filter_config_define_gauge(
        config: ConfigEnvoyPtr, name: ModuleBuffer, labels: *mut ModuleBuffer, labels_len: usize,
        id_out: *mut usize,
    ) -> u32;
    /// Defines a histogram; its id out.
    fn http_filter_config_define_histogram(
        config: ConfigEnvoyPtr, name: ModuleBuffer, labels: *mut ModuleBuffer, labels_len: usize,
        id_out: *mut usize,
    ) -> u32;
    /// Sets a gauge of the config, outside any stream (the config version).
    fn http_filter_config_set_gauge(
        config: ConfigEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
    /// Adds to a counter, with one value per label it was defined with.
    fn http_filter_increment_counter(
        filter: FilterEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
    /// Sets a gauge.
    fn http_filter_set_gauge(
        filter: FilterEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
    /// Adds to a gauge.
    #[allow(dead_code)]
    fn http_filter_increment_gauge(
        filter: FilterEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
    /// Subtracts from a gauge.
    #[allow(dead_code)]
    fn http_filter_decrement_gauge(
        filter: FilterEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
    /// Records a value in a histogram.
    fn http_filter_record_histogram_value(
        filter: FilterEnvoyPtr, id: usize, labels: *mut ModuleBuffer, labels_len: usize,
        value: u64,
    ) -> u32;
}

/// Keeps this library loaded for the life of the process, whatever Envoy does with its
/// handle: Envoy closes a module when its last filter config goes, but the module's timer
/// thread and thread-local values outlive any one config. True if it is pinned.
pub fn pin_module() -> bool {
    #[repr(C)]
    struct DlInfo {
        fname: *const c_char,
        fbase: *mut c_void,
        sname: *const c_char,
        saddr: *mut c_void,
    }
    extern "C" {
        fn dladdr(addr: *const c_void, info: *mut DlInfo) -> i32;
        fn dlopen(filename: *const c_char, flags: i32) -> *mut c_void;
    }
    // glibc's and musl's values.
    const RTLD_LAZY: i32 = 0x1;
    const RTLD_NOLOAD: i32 = 0x4;
    const RTLD_NODELETE: i32 = 0x1000;
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: `dladdr` fills `info` for an address inside this library; `dlopen` with
    // RTLD_NOLOAD only finds the already loaded library (by its own file name) and marks it
    // never to be unloaded; the extra reference it returns is kept on purpose.
    unsafe {
        let here = pin_module as *const c_void;
        dladdr(here, &mut info) != 0
            && !info.fname.is_null()
            && !dlopen(info.fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE).is_null()
    }
}

/// `dlsym` with `RTLD_DEFAULT`: the Envoy binary's exported symbols.
pub fn lookup_in_process(symbol: &CStr) -> *mut c_void {
    extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // SAFETY: `RTLD_DEFAULT` is the null handle on glibc and musl; the name is NUL-terminated.
    unsafe { dlsym(std::ptr::null_mut(), symbol.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn never_called() {}

    #[test]
    fn resolving_names_the_first_callback_envoy_lacks() {
        let missing = c"envoy_dynamic_module_callback_http_send_response";
        let lookup = |name: &CStr| {
            if name == missing {
                std::ptr::null_mut()
            } else {
                never_called as *mut c_void
            }
        };
        assert_eq!(
            Api::resolve(lookup).err(),
            Some("envoy_dynamic_module_callback_http_send_response\0")
        );
        assert!(Api::resolve(|_| never_called as *mut c_void).is_ok());
    }
}
