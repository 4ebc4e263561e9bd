//! The calls into Envoy a hook queues while it holds the filter: each may run this filter's
//! hooks again (a local reply passes through the response hooks, resuming the request can make
//! the router answer at once), so they are made once the hook has let go of it.

/// A call into Envoy to make once the hook has let go of the filter.
pub enum After {
    /// Resume the request stopped earlier.
    ContinueRequest,
    /// Answer the client locally.
    Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Send the client answer headers (`:status` among them).
    SendHeaders {
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        end: bool,
    },
    /// Send the client answer bytes after the headers.
    SendData { data: Vec<u8>, end: bool },
    /// Reset a streamed call-out.
    ResetStream(u64),
}
