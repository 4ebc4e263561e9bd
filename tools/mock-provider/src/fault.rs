//! Stream faults: a streamed chat completion, Responses or Messages answer
//! that breaks in the provider's own way, before its content or after its
//! first N content tokens. Each API builds its normal stream and says where
//! the tokens are and how it reports an error in-stream; the fault is laid
//! out here.

use crate::respond::Step;
use bytes::Bytes;
use serde::Serialize;
use std::time::Duration;

/// How a streamed answer breaks (`--stream-fault`, `"stream_fault"`).
// The variants spell the names tests set (`cut-after-content`), suffix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamFault {
    /// The API's non-content opening, then its in-stream error; the stream ends.
    ErrorBeforeContent,
    /// N tokens, then the in-stream error; the stream ends.
    ErrorAfterContent,
    /// N tokens, then a line that is no SSE event, then the rest of the stream.
    GarbageAfterContent,
    /// N tokens, then nothing for `stall_ms`, then the rest of the stream.
    StallAfterContent,
    /// N tokens, flushed, then the connection is aborted.
    CutAfterContent,
}

impl StreamFault {
    const NAMES: &'static str = "error-before-content, error-after-content, \
        garbage-after-content, stall-after-content or cut-after-content";

    /// Parses the kebab-case names (underscores accepted too).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.replace('_', "-").as_str() {
            "error-before-content" => Ok(Self::ErrorBeforeContent),
            "error-after-content" => Ok(Self::ErrorAfterContent),
            "garbage-after-content" => Ok(Self::GarbageAfterContent),
            "stall-after-content" => Ok(Self::StallAfterContent),
            "cut-after-content" => Ok(Self::CutAfterContent),
            other => Err(format!(
                "unknown stream fault {other:?} (expected {})",
                Self::NAMES
            )),
        }
    }

    /// Whether the stream ends with the provider's error event.
    pub fn is_error(self) -> bool {
        matches!(self, Self::ErrorBeforeContent | Self::ErrorAfterContent)
    }
}

/// The fault one streamed answer gets, with its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: StreamFault,
    /// Content tokens sent before an `*-after-content` fault (fewer if the answer has fewer).
    pub after_tokens: usize,
    /// The pause of `stall-after-content`.
    pub stall: Duration,
}

/// The line `garbage-after-content` sends: no field, so not an SSE event.
pub const GARBAGE: &[u8] = b"this is not an event\n\n";

/// The message of every injected in-stream error.
pub fn message(name: &str) -> String {
    format!("injected stream error from {name}")
}

/// Where the content tokens are in a normal stream: `tokens` steps from `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub first: usize,
    pub count: usize,
}

/// How an API breaks its stream: `failed_opening` is the whole
/// `error-before-content` stream (its non-content opening and its error),
/// `error(sent)` the error event sent after `sent` events.
pub struct Errors<F, E> {
    pub failed_opening: F,
    pub error: E,
}

/// `steps` as sent under `fault` (unchanged without one).
pub fn apply<F, E>(
    fault: Option<Fault>,
    mut steps: Vec<Step>,
    tokens: Tokens,
    errors: Errors<F, E>,
) -> Vec<Step>
where
    F: FnOnce() -> Vec<Step>,
    E: FnOnce(usize) -> Bytes,
{
    let Some(fault) = fault else {
        return steps;
    };
    if fault.kind == StreamFault::ErrorBeforeContent {
        return (errors.failed_opening)();
    }
    let at = tokens
        .first
        .saturating_add(fault.after_tokens.min(tokens.count))
        .min(steps.len());
    let mut rest = steps.split_off(at);
    match fault.kind {
        StreamFault::ErrorAfterContent => steps.push(Step::now((errors.error)(at))),
        StreamFault::CutAfterContent => steps.push(Step::abort()),
        StreamFault::GarbageAfterContent => {
            steps.push(Step::now(Bytes::from_static(GARBAGE)));
            steps.append(&mut rest);
        }
        StreamFault::StallAfterContent => {
            if let Some(next) = rest.first_mut() {
                next.delay = next.delay.saturating_add(fault.stall);
            }
            steps.append(&mut rest);
        }
        StreamFault::ErrorBeforeContent => {}
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: StreamFault, after_tokens: usize) -> Option<Fault> {
        Some(Fault {
            kind,
            after_tokens,
            stall: Duration::from_millis(500),
        })
    }

    /// `open`, `t1`..`t3` (10 ms apart), `close`, `end`.
    fn normal() -> Vec<Step> {
        let ms = Duration::from_millis;
        vec![
            Step::now(Bytes::from_static(b"open")),
            Step::after(ms(10), Bytes::from_static(b"t1")),
            Step::after(ms(10), Bytes::from_static(b"t2")),
            Step::after(ms(10), Bytes::from_static(b"t3")),
            Step::now(Bytes::from_static(b"close")),
            Step::now(Bytes::from_static(b"end")),
        ]
    }

    fn run(fault: Option<Fault>) -> Vec<Step> {
        let errors = Errors {
            failed_opening: || vec![Step::now(Bytes::from_static(b"failed"))],
            error: |sent: usize| Bytes::from(format!("error@{sent}")),
        };
        apply(fault, normal(), Tokens { first: 1, count: 3 }, errors)
    }

    fn texts(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| {
                if s.abort {
                    "ABORT".to_owned()
                } else {
                    String::from_utf8_lossy(&s.bytes).into_owned()
                }
            })
            .collect()
    }

    #[test]
    fn names_parse_in_kebab_or_snake_case_and_serialise_kebab() {
        assert_eq!(
            StreamFault::parse("cut_after_content"),
            Ok(StreamFault::CutAfterContent)
        );
        assert_eq!(
            StreamFault::parse("error-before-content"),
            Ok(StreamFault::ErrorBeforeContent)
        );
        assert!(StreamFault::parse("sometimes").is_err());
        assert_eq!(
            serde_json::to_value(StreamFault::StallAfterContent).unwrap(),
            "stall-after-content"
        );
    }

    #[test]
    fn no_fault_keeps_the_stream() {
        assert_eq!(run(None), normal());
    }

    #[test]
    fn error_before_content_is_the_apis_failed_opening() {
        assert_eq!(
            texts(&run(fault(StreamFault::ErrorBeforeContent, 2))),
            ["failed"]
        );
    }

    #[test]
    fn error_after_n_tokens_ends_the_stream() {
        let steps = run(fault(StreamFault::ErrorAfterContent, 2));
        assert_eq!(texts(&steps), ["open", "t1", "t2", "error@3"]);
        let none = run(fault(StreamFault::ErrorAfterContent, 0));
        assert_eq!(texts(&none), ["open", "error@1"]);
        let all = run(fault(StreamFault::ErrorAfterContent, 99));
        assert_eq!(
            texts(&all),
            ["open", "t1", "t2", "t3", "error@4"],
            "capped at the answer's tokens"
        );
    }

    #[test]
    fn garbage_after_n_tokens_then_the_rest() {
        let steps = run(fault(StreamFault::GarbageAfterContent, 1));
        assert_eq!(
            texts(&steps),
            [
                "open",
                "t1",
                "this is not an event\n\n",
                "t2",
                "t3",
                "close",
                "end"
            ]
        );
    }

    #[test]
    fn stall_after_n_tokens_delays_the_next_step_only() {
        let steps = run(fault(StreamFault::StallAfterContent, 2));
        let delays: Vec<u64> = steps.iter().map(|s| s.delay.as_millis() as u64).collect();
        assert_eq!(delays, [0, 10, 10, 510, 0, 0]);
        assert_eq!(texts(&steps), texts(&normal()));
    }

    #[test]
    fn cut_after_n_tokens_aborts_there() {
        let steps = run(fault(StreamFault::CutAfterContent, 2));
        assert_eq!(texts(&steps), ["open", "t1", "t2", "ABORT"]);
    }
}
