//! What the machine is given: how the request was routed, what it needs for another attempt,
//! a call-out's answer, and the host facts it reads only when a rule needs them.

use crate::core::caller::Caller;
use crate::core::config::ModelId;
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::request::Layout;
use crate::core::routing::sticky::Session;
use crate::core::routing::Plan;
use crate::core::sse::Dialect;

/// An answer's body in hand, shared: a host that holds the bytes itself (the native module
/// forwarding a streamed call-out's answer) lends them to the machine, which only reads them,
/// instead of copying them for it (callgrind, a 100 KiB streamed answer: that copy was about
/// 1k instructions per KB).
pub type Chunk = std::rc::Rc<Vec<u8>>;

/// Facts about the answer in hand that may cost the host a call to read: the machine asks
/// only when a rule needs one (a plain 2xx answer needs none).
pub trait AnswerFacts {
    /// The host's time, in milliseconds.
    fn now_ms(&mut self) -> u64;
    /// Envoy's response code details of the router's answer (`response.code_details`).
    fn code_details(&mut self) -> Option<String>;
    /// Every header of the router's answer.
    fn headers(&mut self) -> Headers;
    /// The body in hand: every byte of the answer's body held so far (after the machine held
    /// the answer, Envoy's buffer and the chunk just received; otherwise that chunk).
    fn chunk(&mut self) -> Chunk;
    /// How many bytes [`AnswerFacts::chunk`] would read: read while an answer is held to be
    /// judged whole, to bound it.
    fn held_len(&mut self) -> usize {
        self.chunk().len()
    }
    /// Whether the answer ended with its headers (no body follows): read only when a good
    /// answer could be held until its end.
    fn ends_with_headers(&mut self) -> bool;
}

/// How a request was routed, as its flight starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The virtual model, if one was called.
    pub virtual_model: Option<usize>,
    /// The candidates, best first; the first is the router's attempt.
    pub candidates: Vec<ModelId>,
    /// Pinned to the first candidate: retries only, no fallback.
    pub pinned: bool,
    /// The client asked for a streamed answer.
    pub stream: bool,
    /// Its sticky session, if any.
    pub sticky: Option<Session>,
    /// A Responses API answer of a virtual model: its ids are minted as it streams.
    pub mint_ids: bool,
    /// Errors Switchboard answers itself go in Anthropic's shape.
    pub anthropic_errors: bool,
    /// It continues a conversation at its origin: the origin failing is a 409.
    pub conversation: bool,
    /// The caller its minted ids are bound to (`response_id_binding: "caller"`).
    pub caller: Option<Caller>,
    /// How its streamed answer's events read, when it streams on an API whose events are
    /// watched (the commit point and the honest end).
    pub dialect: Option<Dialect>,
    /// Every attempt, the first included, is a streamed call-out the host forwards itself
    /// ([`crate::core::stream::Host::streams_attempts`]), rather than the router's.
    pub streams_attempts: bool,
    /// Every attempt goes through Envoy's router, which retries and falls back
    /// ([`crate::core::router_path`]): the machine makes no attempt of its own.
    pub router_path: bool,
    /// The client's Chat Completions body asked for the usage chunk
    /// (`stream_options.include_usage`), which a translated stream must add; read from the
    /// request kept for replay when it is not set here (the router path keeps none).
    pub include_usage: bool,
    /// Every candidate was evicted when it was routed: the shortest eviction time left, which
    /// a final 429 or 503 without its own `Retry-After` carries.
    pub evicted_for_ms: Option<u64>,
}

impl Start {
    /// The start of a request routed by [`crate::core::decision::decide`].
    pub fn routed(endpoint: Endpoint, plan: Plan, stream: bool, conversation: bool) -> Self {
        Start {
            mint_ids: endpoint == Endpoint::Responses && plan.virtual_model.is_some(),
            virtual_model: plan.virtual_model,
            candidates: plan.candidates,
            pinned: plan.pinned,
            stream,
            sticky: plan.sticky,
            anthropic_errors: endpoint.speaks_anthropic(),
            conversation,
            caller: None,
            dialect: if stream { Dialect::of(endpoint) } else { None },
            streams_attempts: false,
            router_path: false,
            include_usage: false,
            evicted_for_ms: None,
        }
    }

    /// The start of a stored-response request (retrieve, input items, cancel, delete) sent to
    /// `target` of virtual model `index`: retries there, no fallback; a minted id's answer
    /// gets minted ids back, and its origin failing is a 409.
    pub fn stored(index: usize, target: ModelId, minted: bool) -> Self {
        Start {
            virtual_model: Some(index),
            candidates: vec![target],
            pinned: true,
            stream: false,
            sticky: None,
            mint_ids: minted,
            anthropic_errors: false,
            conversation: minted,
            caller: None,
            dialect: None,
            streams_attempts: false,
            router_path: false,
            include_usage: false,
            evicted_for_ms: None,
        }
    }
}

/// What the request needs for another attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// The client's body.
    pub body: Vec<u8>,
    /// Where its parts sit, to rewrite it for another target.
    pub layout: Layout,
    /// The client's request headers.
    pub headers: Headers,
    /// A stored response's path after the version prefix, with the provider's id.
    pub stored_path: Option<String>,
}

/// A call-out's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallAnswer {
    /// Its headers, `:status` included.
    pub headers: Headers,
    /// Its whole body.
    pub body: Vec<u8>,
}
