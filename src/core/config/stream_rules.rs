//! A virtual model's rules for streamed answers: where an answer commits to its target
//! (`stream_commit`) and how long a stream may go without an event (`stream_idle_timeout_ms`).
//!
//! A streamed answer is held until its first content event, so that a failure reported
//! before it (an `error` event, a `response.failed`, a reset) falls back like a failed
//! status; the hold is bounded so a stream that sends only non-content events still goes on.

use super::fields::{ConfigError, Fields};

/// `stream_commit` and `stream_idle_timeout_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRules {
    /// `stream_commit.max_bytes`: commit after this many bytes without content.
    pub commit_max_bytes: u32,
    /// `stream_commit.max_events`: commit after this many events without content.
    pub commit_max_events: u32,
    /// `stream_idle_timeout_ms`: a stream with no event (pings count) for this long failed.
    /// Only a host that forwards the stream itself can act on it (the native module).
    pub idle_timeout_ms: u64,
    /// `stream_fallbacks`: how the `.wasm` makes a streaming request's retries and fallbacks.
    pub fallbacks: StreamFallbacks,
}

/// `stream_fallbacks`: `"call_out"` (the default) or `"router"`.
///
/// On the `.wasm`, a call-out hands back a whole answer, so a streamed fallback reaches the
/// client whole; `"router"` sends every attempt of a streaming request through Envoy's router
/// instead (see [`crate::core::router_path`]), which needs the Envoy config that
/// `switchboard envoy-config` writes, and a second and third pass of the `.wasm` per request.
/// The native module streams every attempt itself, so it reads the field and changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamFallbacks {
    /// Retries and fallbacks are call-outs the filter makes.
    #[default]
    CallOut,
    /// Every attempt goes through the router, with the route's retries.
    Router,
}

impl Default for StreamRules {
    fn default() -> Self {
        StreamRules {
            commit_max_bytes: 16_384,
            commit_max_events: 64,
            idle_timeout_ms: 120_000,
            fallbacks: StreamFallbacks::CallOut,
        }
    }
}

/// Reads `stream_commit: {max_bytes, max_events}`, `stream_idle_timeout_ms` and
/// `stream_fallbacks`.
pub(super) fn compile_stream_rules(f: &mut Fields<'_>) -> Result<StreamRules, ConfigError> {
    let mut rules = StreamRules::default();
    if let Some(mut commit) = f.opt_object("stream_commit")? {
        // Held bytes are memory per stream: a megabyte is far past any first content event.
        if let Some(n) = commit.opt_u64("max_bytes", 1 << 20)? {
            rules.commit_max_bytes = positive(&commit, "max_bytes", n)?;
        }
        if let Some(n) = commit.opt_u64("max_events", 10_000)? {
            rules.commit_max_events = positive(&commit, "max_events", n)?;
        }
        commit.finish(&[])?;
    }
    if let Some(ms) = f.opt_u64("stream_idle_timeout_ms", 3_600_000)? {
        if ms == 0 {
            return Err(f.error("stream_idle_timeout_ms", "must be greater than 0"));
        }
        rules.idle_timeout_ms = ms;
    }
    rules.fallbacks = match f.opt_str("stream_fallbacks")? {
        None | Some("call_out") => StreamFallbacks::CallOut,
        Some("router") => StreamFallbacks::Router,
        Some(_) => return Err(f.error("stream_fallbacks", "must be \"call_out\" or \"router\"")),
    };
    Ok(rules)
}

fn positive(f: &Fields<'_>, key: &str, n: u64) -> Result<u32, ConfigError> {
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(f.error(key, "must be greater than 0")),
    }
}
