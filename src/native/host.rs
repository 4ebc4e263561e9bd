//! Safe wrappers over Envoy's per-stream callbacks, handing back plain values.
//!
//! Reads borrow `&self` and writes take `&mut self`, so bytes Envoy lent (valid until the hook
//! returns or the map changes) cannot be held across a write.

use super::ffi::{
    attribute, body, callout_init, header_map, stream_reset, Api, EnvoyBuffer, EnvoyHeader,
    FilterEnvoyPtr, ModuleBuffer, ModuleHeader, SchedulerPtr,
};
use crate::core::access_log::Value;
use crate::core::edit_in_place;
use crate::core::headers::Headers;
use crate::core::report::Write;
use crate::core::request::Edits;

/// The one or two buffers a body is in, in order ([`Stream::body_buffers`]).
struct BodyBuffers {
    ids: [u32; 2],
    n: usize,
}

impl std::ops::Deref for BodyBuffers {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        self.ids.get(..self.n).unwrap_or_default()
    }
}

/// Headers read without allocating Envoy's array: a chat request carries about a dozen.
const INLINE_HEADERS: usize = 48;
/// Body slices read without allocating Envoy's array: a small body is one or two.
const INLINE_CHUNKS: usize = 8;

/// One HTTP stream in Envoy, for the duration of a hook.
pub struct Stream {
    api: &'static Api,
    ptr: FilterEnvoyPtr,
}

/// Which side of the stream a header map or body belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
}

impl Side {
    fn headers(self) -> u32 {
        match self {
            Side::Request => header_map::REQUEST,
            Side::Response => header_map::RESPONSE,
        }
    }

    fn received(self) -> u32 {
        match self {
            Side::Request => body::RECEIVED_REQUEST,
            Side::Response => body::RECEIVED_RESPONSE,
        }
    }

    fn buffered(self) -> u32 {
        match self {
            Side::Request => body::BUFFERED_REQUEST,
            Side::Response => body::BUFFERED_RESPONSE,
        }
    }
}

/// Where a body's bytes are when it is read or replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyAt {
    /// In a body hook: Envoy's buffer plus the chunk just received, not yet added to it.
    BufferAndChunk,
    /// Outside the body hooks: only Envoy's buffer (the last chunk was added when the hook
    /// stopped the stream).
    Buffer,
}

impl Stream {
    /// The stream behind `ptr`.
    pub fn new(api: &'static Api, ptr: FilterEnvoyPtr) -> Stream {
        Stream { api, ptr }
    }

    /// Envoy's callbacks.
    pub fn api(&self) -> &'static Api {
        self.api
    }

    /// The first value of a header, as Envoy holds it.
    pub fn header(&self, side: Side, name: &str) -> Option<&[u8]> {
        let (found, out) = self.first_value(side, name);
        // SAFETY: Envoy filled `out` in this hook; `&self` keeps writes away while it is held.
        (found && !out.ptr.is_null()).then(|| unsafe { out.bytes() })
    }

    /// Envoy's lookup of a header's first value: whether it has one, and the value.
    fn first_value(&self, side: Side, name: &str) -> (bool, EnvoyBuffer) {
        let mut out = EnvoyBuffer::NULL;
        // SAFETY: `out` is ours to fill; a count pointer may be null.
        let found = unsafe {
            (self.api.http_get_header)(
                self.ptr,
                side.headers(),
                ModuleBuffer::of(name.as_bytes()),
                &mut out,
                0,
                std::ptr::null_mut(),
            )
        };
        (found, out)
    }

    /// Every header of one side, pseudo-headers included, copied.
    pub fn headers(&self, side: Side) -> Headers {
        let mut inline = [EnvoyHeader::NULL; INLINE_HEADERS];
        let mut spilled;
        // SAFETY: the array has the size Envoy reported, and Envoy fills each entry.
        let pairs: &[EnvoyHeader] = unsafe {
            let n = (self.api.http_get_headers_size)(self.ptr, side.headers());
            let out = match inline.get_mut(..n) {
                Some(out) => out,
                None => {
                    spilled = vec![EnvoyHeader::NULL; n];
                    spilled.as_mut_slice()
                }
            };
            if n == 0 || !(self.api.http_get_headers)(self.ptr, side.headers(), out.as_mut_ptr()) {
                return Headers::default();
            }
            out
        };
        // SAFETY: filled in this hook, copied before it returns.
        Headers::from_pairs(
            pairs
                .iter()
                .map(|h| unsafe { (h.key.bytes(), h.value.bytes()) }),
        )
    }

    /// Replaces every value of a header.
    pub fn set_header(&mut self, side: Side, name: &str, value: &[u8]) {
        // SAFETY: both buffers outlive the call, which copies them.
        let ok = unsafe {
            (self.api.http_set_header)(
                self.ptr,
                side.headers(),
                ModuleBuffer::of(name.as_bytes()),
                ModuleBuffer::of(value),
            )
        };
        if !ok {
            log::warn!("could not set header {name}");
        }
    }

    /// Removes every value of a header.
    pub fn remove_header(&mut self, side: Side, name: &str) {
        // SAFETY: a null value removes the header.
        unsafe {
            (self.api.http_set_header)(
                self.ptr,
                side.headers(),
                ModuleBuffer::of(name.as_bytes()),
                ModuleBuffer::NULL,
            );
        }
    }

    /// The slices of one body buffer, appended to `out`.
    fn append_chunks(&self, which: u32, out: &mut Vec<u8>) {
        self.with_chunks(&[which], |chunks| {
            out.reserve(chunks.iter().map(|c| c.len).sum());
            for c in chunks {
                // SAFETY: Envoy's slices, read in this hook and copied before it returns.
                out.extend_from_slice(unsafe { c.bytes() });
            }
        });
    }

    /// Whether the chunk just received is the buffer itself (an earlier filter buffered the
    /// body and resumed), so it must not be read twice.
    fn chunk_is_buffer(&self, side: Side) -> bool {
        // SAFETY: a plain query.
        unsafe {
            match side {
                Side::Request => (self.api.http_received_buffered_request_body)(self.ptr),
                Side::Response => (self.api.http_received_buffered_response_body)(self.ptr),
            }
        }
    }

    /// A whole body, copied into one contiguous vector.
    pub fn body(&self, side: Side, at: BodyAt) -> Vec<u8> {
        let mut out = Vec::new();
        let buffers = self.body_buffers(side, at);
        if buffers.len() > 1 {
            // One allocation for both parts.
            out.reserve(self.buffers_size(&buffers));
        }
        for which in buffers.iter() {
            self.append_chunks(*which, &mut out);
        }
        out
    }

    /// The size of a body held so far, in a body hook (the chunk just received included).
    pub fn body_size(&self, side: Side) -> usize {
        let buffers = self.body_buffers(side, BodyAt::BufferAndChunk);
        self.buffers_size(&buffers)
    }

    /// The bytes in the body buffers `buffers` together.
    fn buffers_size(&self, buffers: &[u32]) -> usize {
        buffers.iter().map(|&which| self.buffer_size(which)).sum()
    }

    /// The bytes in the body buffer `which`.
    fn buffer_size(&self, which: u32) -> usize {
        // SAFETY: a plain query.
        unsafe { (self.api.http_get_body_size)(self.ptr, which) }
    }

    /// Replaces a whole body with `parts`, in order. Envoy can only drain from the start and
    /// append, so every byte goes: what the client sent, then the new body, appended to the
    /// last of its buffers.
    pub fn replace_body<'p>(
        &mut self,
        side: Side,
        at: BodyAt,
        parts: impl IntoIterator<Item = &'p [u8]>,
    ) -> bool {
        let buffers = self.body_buffers(side, at);
        let Some(&target) = buffers.last() else {
            return false;
        };
        let (api, ptr) = (self.api, self.ptr);
        let emptied = buffers.iter().all(|&which| {
            let held = self.buffer_size(which);
            // SAFETY: draining what the buffer holds.
            held == 0 || unsafe { (api.http_drain_body)(ptr, which, held) }
        });
        // SAFETY: each part outlives its append.
        emptied
            && parts
                .into_iter()
                .filter(|part| !part.is_empty())
                .all(|part| unsafe { (api.http_append_body)(ptr, target, ModuleBuffer::of(part)) })
    }

    /// The buffers a body is in, in order: Envoy's buffer, then the chunk just received when
    /// that is not the buffer itself.
    fn body_buffers(&self, side: Side, at: BodyAt) -> BodyBuffers {
        let (ids, n) = match at {
            BodyAt::BufferAndChunk if self.chunk_is_buffer(side) => ([side.received(); 2], 1),
            BodyAt::BufferAndChunk => ([side.buffered(), side.received()], 2),
            BodyAt::Buffer => ([side.buffered(); 2], 1),
        };
        BodyBuffers { ids, n }
    }

    /// Writes `edits` over the body Envoy holds (`len` bytes, as read in this hook) in its own
    /// slices (core::edit_in_place): Envoy appends only what a longer body adds and drains only
    /// what a shorter one loses, and no byte the edit keeps in place is copied. False if
    /// Envoy's body is not `len` bytes or Envoy refused a call; the body is then to be
    /// replaced whole ([`Stream::replace_body`]).
    pub fn edit_body_in_place(
        &mut self,
        side: Side,
        at: BodyAt,
        len: usize,
        edits: &Edits,
    ) -> bool {
        let (api, ptr) = (self.api, self.ptr);
        let buffers = self.body_buffers(side, at);
        let (Some(first), Some(last)) = (buffers.first(), buffers.last()) else {
            return false;
        };
        if self.buffers_size(&buffers) != len {
            return false;
        }
        let resize = edit_in_place::resize(edits, len);
        if resize.grow > 0 {
            let room = vec![b' '; resize.grow];
            // SAFETY: the bytes outlive the call, which copies them.
            if !unsafe { (api.http_append_body)(ptr, *last, ModuleBuffer::of(&room)) } {
                return false;
            }
        }
        let written = self.with_chunks(&buffers, |chunks| {
            let mut inline: [&mut [u8]; INLINE_CHUNKS] = Default::default();
            let mut spilled;
            let parts = match inline.get_mut(..chunks.len()) {
                Some(parts) => parts,
                None => {
                    spilled = Vec::new();
                    spilled.resize_with(chunks.len(), <&mut [u8]>::default);
                    spilled.as_mut_slice()
                }
            };
            for (part, chunk) in parts.iter_mut().zip(chunks) {
                // SAFETY: Envoy's slices of this body, read just now, each its own memory;
                // nothing else reads or writes them until this hook returns.
                *part = unsafe { chunk.bytes_mut() };
            }
            edit_in_place::apply(edits, len, parts)
        });
        if !written {
            return false;
        }
        if resize.shrink == 0 {
            return true;
        }
        let front = self.buffer_size(*first).min(resize.shrink);
        // SAFETY: draining at most what each buffer holds.
        unsafe {
            (front == 0 || (api.http_drain_body)(ptr, *first, front))
                && (resize.shrink == front
                    || (api.http_drain_body)(ptr, *last, resize.shrink - front))
        }
    }

    /// Envoy's slices of the body buffers `which` (one or two), in order, handed to `f`; none
    /// if Envoy refused to lend them.
    fn with_chunks<T>(&self, which: &[u32], f: impl FnOnce(&[EnvoyBuffer]) -> T) -> T {
        let mut inline = [EnvoyBuffer::NULL; INLINE_CHUNKS];
        let mut spilled;
        // SAFETY: plain queries.
        let sizes = which
            .iter()
            .map(|w| unsafe { (self.api.http_get_body_chunks_size)(self.ptr, *w) });
        let (mut sizes_inline, mut total) = ([0; 2], 0);
        for (slot, n) in sizes_inline.iter_mut().zip(sizes) {
            *slot = n;
            total += n;
        }
        let chunks = match inline.get_mut(..total) {
            Some(chunks) => chunks,
            None => {
                spilled = vec![EnvoyBuffer::NULL; total];
                spilled.as_mut_slice()
            }
        };
        let (mut from, mut read) = (0, true);
        for (w, n) in which.iter().zip(sizes_inline) {
            read &= n == 0
                || chunks.get_mut(from..from + n).is_some_and(|room| {
                    // SAFETY: the room has the size Envoy reported for this buffer.
                    unsafe { (self.api.http_get_body_chunks)(self.ptr, *w, room.as_mut_ptr()) }
                });
            from += n;
        }
        f(if read { chunks } else { &[] })
    }

    /// `response.code_details`: why Envoy ended the upstream attempt the way it did.
    pub fn response_code_details(&self) -> Option<String> {
        let mut out = EnvoyBuffer::NULL;
        // SAFETY: `out` is ours to fill; copied at once.
        unsafe {
            (self.api.http_filter_get_attribute_string)(
                self.ptr,
                attribute::RESPONSE_CODE_DETAILS,
                &mut out,
            )
            .then(|| String::from_utf8_lossy(out.bytes()).into_owned())
        }
    }

    /// Answers the client locally.
    pub fn send_response(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut list = lend(headers);
        // SAFETY: the headers and body outlive the call, which copies them.
        unsafe {
            (self.api.http_send_response)(
                self.ptr,
                u32::from(status),
                list.as_mut_ptr(),
                list.len(),
                ModuleBuffer::of(body),
                ModuleBuffer::of(b"switchboard"),
            );
        }
    }

    /// Starts an HTTP call to `cluster`; `None` if Envoy refused it (unknown cluster, ...).
    pub fn callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u64> {
        let api = self.api;
        let start = |ptr, id: &mut u64, cluster, list: &mut [ModuleHeader], body| {
            // SAFETY: everything lent outlives the call, which copies it.
            unsafe {
                (api.http_filter_http_callout)(
                    ptr,
                    id,
                    cluster,
                    list.as_mut_ptr(),
                    list.len(),
                    body,
                    timeout_ms,
                )
            }
        };
        self.start_call(cluster, headers, body, start)
    }

    /// Starts a streamed call-out to `cluster` with its whole request and no timeout (0);
    /// `None` if Envoy refused it. Its events may come before this returns (an answer Envoy
    /// makes at once, such as no healthy upstream).
    pub fn start_stream(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Option<u64> {
        let api = self.api;
        let start = |ptr, id: &mut u64, cluster, list: &mut [ModuleHeader], body| {
            // SAFETY: everything lent outlives the call, which copies it.
            unsafe {
                (api.http_filter_start_http_stream)(
                    ptr,
                    id,
                    cluster,
                    list.as_mut_ptr(),
                    list.len(),
                    body,
                    true,
                    0,
                )
            }
        };
        self.start_call(cluster, headers, body, start)
    }

    /// Lends a call's cluster, headers and body to `start`, one of Envoy's call starts; the
    /// call's id, or `None` (logged) if Envoy refused it.
    fn start_call(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        start: impl FnOnce(
            FilterEnvoyPtr,
            &mut u64,
            ModuleBuffer,
            &mut [ModuleHeader],
            ModuleBuffer,
        ) -> u32,
    ) -> Option<u64> {
        let mut list = lend(headers);
        let mut id = 0u64;
        let result = start(
            self.ptr,
            &mut id,
            ModuleBuffer::of(cluster.as_bytes()),
            &mut list,
            ModuleBuffer::of(body),
        );
        if result == callout_init::SUCCESS {
            Some(id)
        } else {
            log::warn!("could not call cluster {cluster}: Envoy refused the call ({result})");
            None
        }
    }

    /// Resets a streamed call-out (its reset hook may run before this returns).
    pub fn reset_call_stream(&mut self, id: u64) {
        // SAFETY: a plain call on the stream; an unknown id is ignored.
        unsafe { (self.api.http_filter_reset_http_stream)(self.ptr, id) }
    }

    /// Sends the client answer headers (they pass this filter's response hooks).
    pub fn send_headers(&mut self, headers: &[(Vec<u8>, Vec<u8>)], end: bool) {
        let mut list: Vec<ModuleHeader> = headers
            .iter()
            .map(|(k, v)| ModuleHeader::of(k, v))
            .collect();
        // SAFETY: the headers outlive the call, which copies them.
        unsafe {
            (self.api.http_send_response_headers)(self.ptr, list.as_mut_ptr(), list.len(), end)
        }
    }

    /// Sends the client answer bytes after its headers.
    pub fn send_data(&mut self, data: &[u8], end: bool) {
        // SAFETY: the bytes outlive the call, which copies them.
        unsafe { (self.api.http_send_response_data)(self.ptr, ModuleBuffer::of(data), end) }
    }

    /// Makes Envoy pick the route again, with the request headers as they are now.
    pub fn clear_route_cache(&mut self) {
        // SAFETY: a plain call on the stream.
        unsafe { (self.api.http_clear_route_cache)(self.ptr) }
    }

    /// A handle that wakes this stream's worker from another thread; the caller deletes it
    /// ([`super::timer::Wake`]).
    pub fn new_scheduler(&mut self) -> SchedulerPtr {
        // SAFETY: a plain call on the stream.
        unsafe { (self.api.http_filter_scheduler_new)(self.ptr) }
    }

    /// Performs a metric write the core decided ([`crate::core::report`]) on a label-less
    /// metric of this stream's config.
    pub fn write_metric(&self, id: u32, w: Write) {
        let null = std::ptr::null_mut();
        // SAFETY: plain calls on the stream with an id its config defined; no labels.
        unsafe {
            match w {
                Write::Add(n) => {
                    (self.api.http_filter_increment_counter)(self.ptr, id as usize, null, 0, n)
                }
                Write::Record(v) => {
                    (self.api.http_filter_record_histogram_value)(self.ptr, id as usize, null, 0, v)
                }
            }
        };
    }

    /// Writes access-log fields as filter state under `wasm.<key>`, the key the Wasm build's
    /// `set_property` gets, so the shipped `%FILTER_STATE(wasm.switchboard.*:PLAIN)%` format
    /// reads either build (no allocation: key and numbers go through stack buffers).
    pub fn write_fields<'a>(&mut self, fields: impl Iterator<Item = (&'static str, Value<'a>)>) {
        let mut number = [0u8; 20];
        let mut key = [0u8; 64];
        for (name, value) in fields {
            let Some(full) = prefixed(&mut key, name) else {
                continue;
            };
            let value = value.bytes(&mut number);
            // SAFETY: both buffers are live slices Envoy copies during the call.
            let set = unsafe {
                (self.api.http_set_filter_state_bytes)(
                    self.ptr,
                    ModuleBuffer::of(full),
                    ModuleBuffer::of(value),
                )
            };
            if !set {
                log::debug!("could not set filter state {name}");
            }
        }
    }

    /// Sets a label-less gauge of this stream's config.
    pub fn set_gauge(&self, id: u32, value: u64) {
        // SAFETY: as above.
        unsafe {
            (self.api.http_filter_set_gauge)(self.ptr, id as usize, std::ptr::null_mut(), 0, value)
        };
    }

    /// Resets the stream: what is left when the response headers may already be with the
    /// client, so no answer can replace them.
    pub fn reset(&mut self) {
        // SAFETY: a plain call on the stream; the details are read during the call.
        unsafe {
            (self.api.http_filter_reset_stream)(
                self.ptr,
                stream_reset::LOCAL_RESET,
                ModuleBuffer::of(b"switchboard_internal_error"),
            );
        }
    }

    /// Resumes the request after a hook stopped it.
    pub fn continue_request(&mut self) {
        // SAFETY: as above.
        unsafe { (self.api.http_filter_continue_decoding)(self.ptr) }
    }
}

/// Headers lent to Envoy for one call.
fn lend(headers: &[(&str, &str)]) -> Vec<ModuleHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHeader::of(k.as_bytes(), v.as_bytes()))
        .collect()
}

/// `wasm.<name>` in `buf`; `None` if it does not fit.
fn prefixed<'b>(buf: &'b mut [u8; 64], name: &str) -> Option<&'b [u8]> {
    const PREFIX: &[u8] = b"wasm.";
    let len = PREFIX.len() + name.len();
    let out = buf.get_mut(..len)?;
    let (head, tail) = out.split_at_mut(PREFIX.len());
    head.copy_from_slice(PREFIX);
    tail.copy_from_slice(name.as_bytes());
    Some(out)
}

/// Envoy's array of `len` items at `ptr` (null when empty).
///
/// # Safety
/// `ptr` must be null or point to `len` items valid for the current hook.
unsafe fn envoy_slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// Envoy's headers, copied as (name, value) pairs.
///
/// # Safety
/// The array must be one Envoy passed to the current hook.
pub unsafe fn header_pairs(headers: *const EnvoyHeader, len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    // SAFETY: the caller's contract; the bytes are copied in this hook.
    unsafe {
        envoy_slice(headers, len)
            .iter()
            .map(|h| (h.key.bytes().to_vec(), h.value.bytes().to_vec()))
            .collect()
    }
}

/// Envoy's body chunks, joined into one copy.
///
/// # Safety
/// The array must be one Envoy passed to the current hook.
pub unsafe fn joined(chunks: *const EnvoyBuffer, len: usize) -> Vec<u8> {
    // SAFETY: the caller's contract; the bytes are copied in this hook.
    unsafe {
        let chunks = envoy_slice(chunks, len);
        let mut body = Vec::with_capacity(chunks.iter().map(|c| c.len).sum());
        for c in chunks {
            body.extend_from_slice(c.bytes());
        }
        body
    }
}

/// The headers and body of a call-out's answer, copied out of Envoy's arrays.
///
/// # Safety
/// The pointers must be the ones Envoy passed to the current `http_callout_done` hook.
pub unsafe fn callout_answer(
    headers: *const EnvoyHeader,
    headers_len: usize,
    chunks: *const EnvoyBuffer,
    chunks_len: usize,
) -> (Headers, Vec<u8>) {
    // SAFETY: Envoy's arrays of the given lengths (null when empty).
    unsafe {
        let headers = envoy_slice(headers, headers_len);
        let list = Headers::from_pairs(headers.iter().map(|h| (h.key.bytes(), h.value.bytes())));
        (list, joined(chunks, chunks_len))
    }
}
