//! What the flight machine asks its host to do: plain data, applied in the order given.
//!
//! Every effect names the target it concerns and says why it happens, so an adapter can count
//! and trace from the effects alone (retries and fallbacks with their reason, each outcome by
//! target, the final answer with its target, status and attempts).

use crate::core::config::ModelId;
use crate::core::errors::ErrorReply;
use crate::core::fallback::AttemptOutcome;
use crate::core::headers::Headers;
use crate::core::health::record::Outcome;
use crate::core::health::sla::LatencySample;
use crate::core::outbound::Outbound;

/// Response headers not copied into a replacement answer (the host sets its own framing).
const NOT_REPLAYED: &[&str] = &[
    ":status",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

/// Effects kept inline before the rest go to the heap: the plain request (one attempt, a 2xx
/// answer) has at most two per event.
const INLINE: usize = 4;

/// The effects of one event, in order. The first few live inline, so the plain request's
/// events allocate nothing here. (A hand-written buffer: `smallvec` cost 2.6 KB of `.wasm`.)
#[derive(Debug, Default)]
pub struct Effects<'c> {
    inline: [Option<Effect<'c>>; INLINE],
    more: Vec<Effect<'c>>,
}

impl<'c> Effects<'c> {
    /// No effects.
    pub fn new() -> Self {
        Effects::default()
    }

    /// Adds an effect after the others.
    pub fn push(&mut self, effect: Effect<'c>) {
        if self.more.is_empty() {
            if let Some(slot) = self.inline.iter_mut().find(|s| s.is_none()) {
                *slot = Some(effect);
                return;
            }
        }
        self.more.push(effect);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.inline.iter().all(Option::is_none) && self.more.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.inline.iter().flatten().count() + self.more.len()
    }

    /// Whether they went past the inline room (to the heap).
    pub fn spilled(&self) -> bool {
        !self.more.is_empty()
    }

    /// Takes them all, in order, leaving none.
    pub fn take(&mut self) -> impl Iterator<Item = Effect<'c>> {
        let inline = std::mem::take(&mut self.inline);
        let more = std::mem::take(&mut self.more);
        inline.into_iter().flatten().chain(more)
    }
}

/// Whether the router's answer (its headers, a body chunk, its trailers) goes on now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Let it through to the client.
    Continue,
    /// Hold it: a failed answer waits to be replaced (proxy-wasm `Action::Pause`, a native
    /// filter's stop-iteration status).
    Hold,
}

/// Names a call-out attempt within its request; the adapter maps its host's call handle to
/// (request, `CallId`) and hands it back with the answer.
pub type CallId = u32;

/// Why an attempt is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    /// The request's first attempt, through the router.
    First,
    /// The same target again, after the previous attempt ended so.
    Retry(AttemptOutcome),
    /// The next candidate, after the previous attempt ended so.
    Fallback(AttemptOutcome),
}

/// One attempt of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt<'c> {
    /// The target.
    pub target: ModelId,
    /// Attempts made so far, this one included.
    pub number: u32,
    /// First, retry or fallback, with the reason.
    pub kind: AttemptKind,
    /// `None` for the first attempt, which the adapter already wrote into the request the
    /// router sends; otherwise the call-out to make ([`super::Machine::call_request`]).
    pub call: Option<Box<Call<'c>>>,
    /// The retry's configured `delay` waited before it, milliseconds (0: none); what
    /// [`crate::core::overhead`] leaves out of Switchboard's own time.
    pub delay_ms: u64,
}

/// A call-out attempt, finished: the adapter only dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'c> {
    /// Reported back with the answer, or with [`super::Machine::on_dispatch_refused`].
    pub id: CallId,
    /// The request, as changes to the client's ([`crate::core::outbound::outbound`]).
    pub outbound: Outbound<'c>,
    /// The body, when the target's differs from the client's.
    pub(super) body: Option<Vec<u8>>,
    /// Its `content-length` value.
    pub(super) content_length: String,
    /// The longest the call may take (`attempt_timeout_ms`).
    pub timeout_ms: u64,
}

/// A call-out ready to dispatch: every header, the body and its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRequest<'a> {
    /// The Envoy cluster.
    pub cluster: &'a str,
    /// Every header, pseudo-headers included.
    pub headers: Vec<(&'a str, &'a str)>,
    /// The body.
    pub body: &'a [u8],
    /// The call's timeout.
    pub timeout_ms: u64,
}

/// How the request ended, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// The target whose answer the client gets; `None` when no target answered (Envoy's own
    /// reply for an unreachable upstream, or an error Switchboard makes).
    pub target: Option<ModelId>,
    /// The status the client gets.
    pub status: u16,
    /// Attempts made.
    pub attempts: u32,
    /// Nothing was left to try: a failure goes to the client.
    pub gave_up: bool,
}

/// Headers Switchboard adds to the client's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerHeaders<'c> {
    /// (`x-switchboard-resolved-model`, the catalog name of the target that answered).
    pub resolved_model: Option<(&'c str, &'c str)>,
    /// (`x-switchboard-attempts`, the count), when more than one or when all failed.
    pub attempts: Option<(&'c str, String)>,
    /// `Retry-After` in seconds, when every target was evicted and the answer (a 429 or 503)
    /// has none of its own.
    pub retry_after: Option<String>,
}

impl<'c> AnswerHeaders<'c> {
    /// With `Retry-After` (see [`AnswerHeaders::retry_after`]).
    pub fn with_retry_after(mut self, retry_after: Option<String>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Each (name, value).
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let resolved = self.resolved_model;
        let attempts = self.attempts.as_ref().map(|(n, v)| (*n, v.as_str()));
        let retry_after = self.retry_after.as_deref().map(|v| ("retry-after", v));
        resolved.into_iter().chain(attempts).chain(retry_after)
    }
}

/// Let the router's answer through, with Switchboard's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<'c> {
    /// Who answered, with what, after how many attempts.
    pub ending: Ending,
    /// Headers to set on the answer.
    pub headers: AnswerHeaders<'c>,
    /// Remove the answer's `content-length`: its ids are rewritten as it streams, so its
    /// length changes ([`Effect::ReplaceBody`] follows for each chunk).
    pub drop_content_length: bool,
    /// Provider headers to remove from the answer: they name the gateway's account
    /// ([`crate::core::outbound::hidden_answer_headers`]).
    pub hidden: &'c [String],
}

/// Replace the held answer with a call-out's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'c> {
    /// Who answered, with what, after how many attempts.
    pub ending: Ending,
    /// The call's answer headers.
    pub(super) answer: Headers,
    /// Switchboard's headers.
    pub(super) added: AnswerHeaders<'c>,
    /// The call's headers the client must not see (they name the gateway's account).
    pub(super) hidden: &'c [String],
    /// The body to send.
    pub body: Vec<u8>,
}

impl Reply<'_> {
    /// Every header of the reply: the call's, without framing and hidden ones, then
    /// Switchboard's.
    pub fn headers(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .answer
            .text_pairs()
            .filter(|(k, _)| !NOT_REPLAYED.contains(k) && !self.hidden.iter().any(|h| h == k))
            .collect();
        out.extend(self.added.pairs());
        out
    }
}

/// Replace the held answer (or answer instead of one) with an error Switchboard makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure<'c> {
    /// No target answered; the status is the error's.
    pub ending: Ending,
    /// The error, already in the client's API shape (OpenAI's, or Anthropic's).
    pub error: ErrorReply,
    /// Switchboard's headers.
    pub(super) added: AnswerHeaders<'c>,
}

impl Failure<'_> {
    /// Every header of the reply: JSON, then Switchboard's.
    pub fn headers(&self) -> Vec<(&str, &str)> {
        let mut out = vec![("content-type", "application/json")];
        out.extend(self.added.pairs());
        out
    }
}

/// One thing for the host to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<'c> {
    /// An attempt starts: the first through the router, or a call-out to dispatch.
    Attempt(Attempt<'c>),
    /// Wake the machine at `due_ms` with `token` ([`super::Machine::on_timer`]). A timer that
    /// is no longer wanted is not cancelled: its token is stale by then and ignored.
    ArmTimer {
        /// When, in the host's milliseconds.
        due_ms: u64,
        /// Handed back as it is.
        token: u64,
    },
    /// An attempt ended: update its target's health.
    Record {
        /// The target.
        target: ModelId,
        /// How the attempt ended.
        outcome: AttemptOutcome,
        /// The change to its health record; `None` when this outcome changes nothing (a
        /// status that is neither a success nor one of its failure codes).
        health: Option<Outcome>,
    },
    /// A successful answer's latency samples and reported token usage, for its target.
    Samples {
        /// The target.
        target: ModelId,
        /// The samples.
        sample: LatencySample,
        /// When the answer ended.
        now_ms: u64,
        /// `usage` as the provider reported it, for the token metrics.
        tokens: Tokens,
        /// Whether routing uses the samples (latency routing, an SLA cutoff): only then do
        /// they go into the target's health record.
        for_routing: bool,
    },
    /// Keep a sticky session on the target a fallback reached, for the rest of its window
    /// (TrueFoundry virtual models, "Sticky routing": fallback during a sticky session).
    Pin {
        /// The virtual model's name.
        virtual_model: &'c str,
        /// The session's hash (never its key).
        session: u64,
        /// Its TTL window.
        window: u64,
        /// The catalog name of the target.
        target: &'c str,
        /// The virtual model's `idle_ttl_seconds`, in milliseconds.
        idle_ms: Option<u64>,
    },
    /// Let the router's answer through.
    Deliver(Delivery<'c>),
    /// Answer with a call-out's answer instead of the held one.
    Reply(Box<Reply<'c>>),
    /// Answer with an error Switchboard makes.
    Fail(Box<Failure<'c>>),
    /// End the client's streamed answer now, after what it already got and then `tail` (the
    /// honest end of a stream that failed), and stop the attempt in flight. A host that
    /// cannot end it early (the router's answer on proxy-wasm, where `tail` is always empty:
    /// it went in with [`Effect::ReplaceBody`]) lets it run; the machine swallows the rest.
    EndAnswer {
        /// Bytes to send before the end.
        tail: Vec<u8>,
    },
    /// Replace the `len` bytes of the body in hand (every byte held so far) with `with`.
    ReplaceBody {
        /// Bytes replaced (all of them).
        len: usize,
        /// The new bytes.
        with: Vec<u8>,
    },
}

/// Tokens of one answer as its `usage` reported them (`None`: not reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// `prompt_tokens` or `input_tokens`.
    pub prompt: Option<u64>,
    /// `completion_tokens` or `output_tokens`.
    pub completion: Option<u64>,
}

/// What a finished (or abandoned) request did, for access-log fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The virtual model called (its index in the config), if one was.
    pub virtual_model: Option<usize>,
    /// Attempts made.
    pub attempts: u32,
    /// How the request ended, once it has.
    pub ending: Option<Ending>,
    /// Why the request last moved to a retry or another target.
    pub last_switch: Option<AttemptKind>,
}
