//! Behaviour settings (latency, token count, failure injection) shared by the
//! command line and the runtime `/__config` endpoint.

use crate::answer_fault::AnswerFault;
use crate::fail_body::FailBody;
use crate::fault::StreamFault;
use serde::Serialize;
use serde_json::{Map, Value};

/// How an injected connection drop happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropMode {
    /// Close the connection without writing any response.
    BeforeResponse,
    /// Write the headers and about half of the body, then abort.
    MidStream,
}

impl DropMode {
    /// Parses `before-response` / `mid-stream` (underscores accepted too).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.replace('_', "-").as_str() {
            "before-response" => Ok(Self::BeforeResponse),
            "mid-stream" => Ok(Self::MidStream),
            other => Err(format!(
                "unknown drop mode {other:?} (expected before-response or mid-stream)"
            )),
        }
    }
}

/// Largest accepted `output_tokens`, to keep responses a sane size.
pub const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// The full behaviour of the mock; serialised as-is by `GET /__config`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Behaviour {
    pub name: String,
    pub ttft_ms: u64,
    pub token_delay_ms: u64,
    pub output_tokens: u64,
    pub fail_status: Option<u16>,
    pub fail_rate: f64,
    pub retry_after: Option<String>,
    /// A real provider's error body for the injected failure (`--fail-body`).
    pub fail_body: Option<FailBody>,
    pub drop: Option<DropMode>,
    pub stall_ms: u64,
    pub error_body_on_200: bool,
    /// A non-streamed answer sends its status and headers at once and its body when it is
    /// done (in two parts), as a server that flushes its headers before it has the answer.
    pub headers_first: bool,
    /// Fixed answer text (one token) instead of `tok1 tok2 ...`, e.g. a classifier's verdict.
    pub reply: Option<String>,
    /// How streamed chat completions, Responses and Messages answers break (others ignore it).
    pub stream_fault: Option<StreamFault>,
    /// Content tokens sent before an `*-after-content` stream fault.
    pub fault_after_tokens: u64,
    /// Chat, Responses and Messages answers are a 200 that answers nothing (a refusal or an
    /// empty answer), streamed or whole.
    pub answer_fault: Option<AnswerFault>,
}

/// Default `fault_after_tokens`.
pub const FAULT_AFTER_TOKENS: u64 = 2;

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            name: "mock".to_owned(),
            ttft_ms: 0,
            token_delay_ms: 0,
            output_tokens: 8,
            fail_status: None,
            fail_rate: 1.0,
            retry_after: None,
            fail_body: None,
            drop: None,
            stall_ms: 0,
            error_body_on_200: false,
            headers_first: false,
            reply: None,
            stream_fault: None,
            fault_after_tokens: FAULT_AFTER_TOKENS,
            answer_fault: None,
        }
    }
}

impl Behaviour {
    /// Checks values that must hold whatever set them.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || !self.name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("name must be non-empty visible ASCII (it is sent as a header)".into());
        }
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return Err(format!(
                "fail_rate {} is not within 0.0..=1.0",
                self.fail_rate
            ));
        }
        if let Some(status) = self.fail_status {
            validate_status(status)?;
        }
        if let Some(value) = &self.retry_after {
            if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
                return Err("retry_after must be printable ASCII".into());
            }
        }
        if self.output_tokens > MAX_OUTPUT_TOKENS {
            return Err(format!("output_tokens must be at most {MAX_OUTPUT_TOKENS}"));
        }
        Ok(())
    }

    /// The injected failure status for this request, if one fires.
    pub fn pick_failure(&self) -> Option<u16> {
        let status = self.fail_status?;
        (self.fail_rate >= 1.0 || fastrand::f64() < self.fail_rate).then_some(status)
    }

    /// Applies a `POST /__config` object; on error nothing changes.
    pub fn apply_patch(&mut self, patch: &Map<String, Value>) -> Result<(), String> {
        let mut next = self.clone();
        for (key, value) in patch {
            match key.as_str() {
                "name" => next.name = string(key, value)?,
                "ttft_ms" => next.ttft_ms = uint(key, value)?,
                "token_delay_ms" => next.token_delay_ms = uint(key, value)?,
                "output_tokens" => next.output_tokens = uint(key, value)?,
                "stall_ms" => next.stall_ms = uint(key, value)?,
                "fail_rate" => {
                    next.fail_rate = value
                        .as_f64()
                        .ok_or_else(|| format!("{key} must be a number"))?;
                }
                "fail_status" => {
                    next.fail_status = match value {
                        Value::Null => None,
                        v => Some(
                            u16::try_from(uint(key, v)?)
                                .map_err(|_| format!("{key} is not an HTTP status"))?,
                        ),
                    };
                }
                "retry_after" => {
                    next.retry_after = match value {
                        Value::Null => None,
                        Value::Number(n) => Some(n.to_string()),
                        v => Some(string(key, v)?),
                    };
                }
                "fail_body" => {
                    next.fail_body = match value {
                        Value::Null => None,
                        v => Some(FailBody::parse(&string(key, v)?)?),
                    };
                }
                "drop" => {
                    next.drop = match value {
                        Value::Null => None,
                        v => Some(DropMode::parse(&string(key, v)?)?),
                    };
                }
                "error_body_on_200" => {
                    next.error_body_on_200 = value
                        .as_bool()
                        .ok_or_else(|| format!("{key} must be a boolean"))?;
                }
                "headers_first" => {
                    next.headers_first = value
                        .as_bool()
                        .ok_or_else(|| format!("{key} must be a boolean"))?;
                }
                "reply" => {
                    next.reply = match value {
                        Value::Null => None,
                        v => Some(string(key, v)?),
                    };
                }
                "stream_fault" => {
                    next.stream_fault = match value {
                        Value::Null => None,
                        v => Some(StreamFault::parse(&string(key, v)?)?),
                    };
                }
                "fault_after_tokens" => next.fault_after_tokens = uint(key, value)?,
                "answer_fault" => {
                    next.answer_fault = match value {
                        Value::Null => None,
                        v => Some(AnswerFault::parse(&string(key, v)?)?),
                    };
                }
                other => return Err(format!("unknown config field {other:?}")),
            }
        }
        next.validate()?;
        *self = next;
        Ok(())
    }
}

/// Accepts 100..=599, the range clients understand.
pub fn validate_status(status: u16) -> Result<(), String> {
    if (100..=599).contains(&status) {
        Ok(())
    } else {
        Err(format!("status {status} is not within 100..=599"))
    }
}

fn uint(key: &str, value: &Value) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| format!("{key} must be a non-negative integer"))
}

fn string(key: &str, value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{key} must be a string"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(b: &mut Behaviour, v: Value) -> Result<(), String> {
        match v {
            Value::Object(m) => b.apply_patch(&m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn patch_sets_and_clears() {
        let mut b = Behaviour::default();
        patch(
            &mut b,
            json!({"fail_status": 503, "retry_after": 7, "drop": "mid-stream", "ttft_ms": 5}),
        )
        .unwrap();
        assert_eq!(b.fail_status, Some(503));
        assert_eq!(b.retry_after.as_deref(), Some("7"));
        assert_eq!(b.drop, Some(DropMode::MidStream));
        assert_eq!(b.ttft_ms, 5);
        assert_eq!(b.output_tokens, 8, "untouched fields stay");
        patch(
            &mut b,
            json!({"fail_status": null, "retry_after": null, "drop": null}),
        )
        .unwrap();
        assert_eq!(b.fail_status, None);
        assert_eq!(b.retry_after, None);
        assert_eq!(b.drop, None);
        assert_eq!(b.ttft_ms, 5);
    }

    #[test]
    fn bad_patch_changes_nothing() {
        let mut b = Behaviour::default();
        let before = b.clone();
        assert!(patch(&mut b, json!({"ttft_ms": 9, "fail_rate": 2.0})).is_err());
        assert!(patch(&mut b, json!({"nope": 1})).is_err());
        assert!(patch(&mut b, json!({"fail_status": 42})).is_err());
        assert_eq!(b, before);
    }

    #[test]
    fn failure_rate_bounds() {
        let mut b = Behaviour::default();
        assert_eq!(b.pick_failure(), None);
        b.fail_status = Some(500);
        assert_eq!(b.pick_failure(), Some(500));
        b.fail_rate = 0.0;
        assert_eq!(b.pick_failure(), None);
    }

    #[test]
    fn patch_sets_and_clears_the_stream_fault() {
        let mut b = Behaviour::default();
        let shown = serde_json::to_value(&b).unwrap();
        assert_eq!(shown["stream_fault"], Value::Null);
        assert_eq!(shown["fault_after_tokens"], 2);
        patch(
            &mut b,
            json!({"stream_fault": "cut_after_content", "fault_after_tokens": 5}),
        )
        .unwrap();
        assert_eq!(b.stream_fault, Some(StreamFault::CutAfterContent));
        assert_eq!(b.fault_after_tokens, 5);
        let shown = serde_json::to_value(&b).unwrap();
        assert_eq!(shown["stream_fault"], "cut-after-content");
        assert_eq!(shown["fault_after_tokens"], 5);
        patch(&mut b, json!({"stream_fault": null})).unwrap();
        assert_eq!((b.stream_fault, b.fault_after_tokens), (None, 5));
        let before = b.clone();
        assert!(patch(&mut b, json!({"stream_fault": "sometimes"})).is_err());
        assert!(patch(&mut b, json!({"stream_fault": 1})).is_err());
        assert!(patch(&mut b, json!({"fault_after_tokens": -1})).is_err());
        assert_eq!(b, before);
    }

    #[test]
    fn serialises_drop_kebab_case() {
        let b = Behaviour {
            drop: Some(DropMode::BeforeResponse),
            ..Behaviour::default()
        };
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v["drop"], "before-response");
        assert_eq!(v["fail_status"], Value::Null);
    }
}
