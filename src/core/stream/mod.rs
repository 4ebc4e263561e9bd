//! The machine of one HTTP stream, from the request's headers to the last attempt's answer:
//! the request phase (admit, buffer the body, ask a classifier, decide, write the router's
//! attempt into the request) and, once forwarded, the flight ([`crate::core::flight`]) with
//! its effects applied. Sans-IO: each event is a method taking the stream's [`Host`] for this
//! hook, through which the machine reads what it needs and performs its effects; time,
//! randomness, the health view and the routing state all come from the host, so a fake host
//! replays any sequence in a unit test.
//!
//! # Events
//! - [`Stream::on_request_headers`], [`Stream::on_request_body`],
//!   [`Stream::on_request_trailers`]: the client's request.
//! - [`Stream::on_call_done`]: a call-out this stream made answered (or failed).
//! - [`Stream::on_timer`]: a timer this stream armed fired.
//! - [`Stream::on_response_headers`], [`Stream::on_response_body`],
//!   [`Stream::on_response_trailers`]: the router's answer.
//! - [`Stream::on_destroyed`]: the stream went away.
//!
//! Each hook event returns a [`Verdict`]. What an adapter does beyond calling these: give each
//! event a [`Host`] for the hook (the body's size, which buffer to read, the stream's id), map
//! the host's call handles and timers back to the stream, and keep one `Stream` per HTTP
//! stream.

mod flight;
mod host;
mod phase;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod twins;

pub use host::{Host, Verdict};

use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::overhead::Overhead;
use crate::core::trace::Trace;

/// Where the request side of a stream is.
enum Phase {
    /// Not an LLM request: Switchboard leaves it alone.
    PassThrough,
    /// An LLM request whose body is being buffered, with its headers as the client sent them.
    Inspecting(Endpoint, Headers),
    /// Waiting for a complexity virtual model's classifier model to name the tier.
    Classifying(Box<Classifying>),
    /// Batch input being buffered to check it names no virtual model.
    CheckingBatch {
        /// The request path.
        path: String,
        /// Its content type.
        content_type: String,
    },
    /// Forwarded: its flight owns the rest.
    Forwarded(Box<flight::Flight>),
    /// Switchboard answered it with a local reply.
    Replied,
}

/// A request waiting for the classifier model's answer.
struct Classifying {
    endpoint: Endpoint,
    headers: Headers,
    body: Vec<u8>,
    /// The host's id of the classifier call.
    call: u64,
}

/// One HTTP stream.
pub struct Stream {
    phase: Phase,
    /// The client calls an Anthropic API: errors go in Anthropic's shape.
    anthropic: bool,
    /// This stream's randomness (weighted picks, round-robin starts).
    rng: fastrand::Rng,
    /// The routing trace, from the decision until the flight takes it (when asked for).
    trace: Option<Box<Trace>>,
    /// Switchboard's own time, from the decision until the flight takes it.
    overhead: Overhead,
}

impl Stream {
    /// A stream drawing its random choices from `rng`.
    pub fn new(rng: fastrand::Rng) -> Stream {
        Stream {
            phase: Phase::PassThrough,
            anthropic: false,
            rng,
            trace: None,
            overhead: Overhead::default(),
        }
    }

    /// Whether errors Switchboard makes for it go in Anthropic's shape.
    pub fn speaks_anthropic(&self) -> bool {
        self.anthropic
    }

    /// Whether it was forwarded (its flight is under way or done).
    pub fn forwarded(&self) -> bool {
        matches!(self.phase, Phase::Forwarded(_))
    }
}
