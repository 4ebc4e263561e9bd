//! The fake generation shared by every API: token text, token counts, timing,
//! ids and timestamps for one request.

use crate::behaviour::Behaviour;
use crate::fault::Fault;
use crate::respond::Step;
use bytes::Bytes;
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Request fields that cap the number of generated tokens.
const MAX_TOKEN_FIELDS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// Everything an API handler needs to answer one request.
#[derive(Clone, Debug)]
pub struct Gen {
    pub name: String,
    /// The request's `model`, echoed verbatim.
    pub model: Value,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub stream: bool,
    pub include_usage: bool,
    pub ttft: Duration,
    pub token_delay: Duration,
    pub created: u64,
    /// A fixed answer replacing the generated tokens.
    pub reply: Option<String>,
    /// How a streamed answer breaks, for the APIs that read it.
    pub fault: Option<Fault>,
}

impl Gen {
    pub fn new(behaviour: &Behaviour, body: &Value) -> Self {
        Self {
            name: behaviour.name.clone(),
            model: body
                .get("model")
                .cloned()
                .unwrap_or_else(|| Value::from("mock-model")),
            prompt_tokens: estimate_prompt_tokens(body),
            output_tokens: capped_tokens(behaviour.output_tokens, body),
            stream: wants_stream(body),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true),
            ttft: Duration::from_millis(behaviour.ttft_ms),
            token_delay: Duration::from_millis(behaviour.token_delay_ms),
            created: now_secs(),
            reply: behaviour.reply.clone(),
            fault: behaviour.stream_fault.map(|kind| Fault {
                kind,
                after_tokens: usize::try_from(behaviour.fault_after_tokens).unwrap_or(usize::MAX),
                stall: Duration::from_millis(behaviour.stall_ms),
            }),
        }
    }

    /// The generated tokens: `tok1 `, `tok2 `, ...
    pub fn tokens(&self) -> Box<dyn Iterator<Item = String> + '_> {
        match &self.reply {
            Some(text) => Box::new(std::iter::once(text.clone())),
            None => Box::new((1..=self.output_tokens).map(|i| format!("tok{i} "))),
        }
    }

    /// How many tokens `tokens` yields.
    pub fn token_count(&self) -> usize {
        match self.reply {
            Some(_) => 1,
            None => usize::try_from(self.output_tokens).unwrap_or(usize::MAX),
        }
    }

    /// All tokens concatenated.
    pub fn text(&self) -> String {
        self.tokens().collect()
    }

    /// Delay before the non-streamed answer: time to first token plus one
    /// token delay per token.
    pub fn total_delay(&self) -> Duration {
        let per_token = u32::try_from(self.output_tokens).unwrap_or(u32::MAX);
        self.ttft
            .saturating_add(self.token_delay.saturating_mul(per_token))
    }

    /// One stream step per token: the first after the TTFT, the rest after
    /// the token delay.
    pub fn token_steps<'a>(
        &'a self,
        frame: impl FnMut(&str) -> Bytes + 'a,
    ) -> impl Iterator<Item = Step> + 'a {
        self.steps_for(self.tokens(), frame)
    }

    /// One stream step per piece (tokens, tool argument fragments), timed as tokens are.
    pub fn steps_for<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = String> + 'a,
        mut frame: impl FnMut(&str) -> Bytes + 'a,
    ) -> impl Iterator<Item = Step> + 'a {
        pieces.into_iter().enumerate().map(move |(i, piece)| {
            let delay = if i == 0 { self.ttft } else { self.token_delay };
            Step::after(delay, frame(&piece))
        })
    }

    /// This generation answering `text` (one token) instead of its tokens.
    pub fn with_reply(&self, text: String) -> Self {
        Self {
            reply: Some(text),
            ..self.clone()
        }
    }
}

/// Whether the request asks for a streamed answer (`"stream": true`).
pub fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The configured token count, lowered by any `max_*tokens` field in the body.
pub fn capped_tokens(configured: u64, body: &Value) -> u64 {
    MAX_TOKEN_FIELDS
        .iter()
        .filter_map(|field| body.get(*field).and_then(Value::as_u64))
        .fold(configured, u64::min)
}

/// A rough prompt size: characters of every string in the body except the
/// model name, divided by four, at least one.
pub fn estimate_prompt_tokens(body: &Value) -> u64 {
    fn chars(v: &Value) -> usize {
        match v {
            Value::String(s) => s.chars().count(),
            Value::Array(items) => items.iter().map(chars).sum(),
            Value::Object(map) => map
                .iter()
                .filter(|(k, _)| k.as_str() != "model")
                .map(|(_, v)| chars(v))
                .sum(),
            _ => 0,
        }
    }
    (chars(body).div_ceil(4) as u64).max(1)
}

/// `prefix` followed by 24 random hex digits.
pub fn new_id(prefix: &str) -> String {
    format!(
        "{prefix}{:016x}{:08x}",
        fastrand::u64(..),
        fastrand::u32(..)
    )
}

/// `prefix` followed by 48 hex digits from the OS random source, as long as
/// OpenAI's own ids, so that no two mock processes ever hand out the same one.
pub fn random_id(prefix: &str) -> String {
    use ring::rand::{SecureRandom, SystemRandom};
    use std::fmt::Write;
    let mut bytes = [0u8; 24];
    if SystemRandom::new().fill(&mut bytes).is_err() {
        // The OS source never fails on supported systems; fall back anyway.
        bytes.iter_mut().for_each(|b| *b = fastrand::u8(..));
    }
    let mut id = String::with_capacity(prefix.len() + 2 * bytes.len());
    id.push_str(prefix);
    for b in bytes {
        let _ = write!(id, "{b:02x}");
    }
    id
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn caps_tokens_with_smallest_limit() {
        assert_eq!(capped_tokens(8, &json!({})), 8);
        assert_eq!(capped_tokens(8, &json!({"max_tokens": 3})), 3);
        assert_eq!(capped_tokens(8, &json!({"max_completion_tokens": 100})), 8);
        assert_eq!(
            capped_tokens(8, &json!({"max_tokens": 5, "max_output_tokens": 2})),
            2
        );
        assert_eq!(capped_tokens(8, &json!({"max_tokens": null})), 8);
    }

    #[test]
    fn generation_text_and_timing() {
        let b = Behaviour {
            output_tokens: 3,
            ttft_ms: 100,
            token_delay_ms: 10,
            ..Behaviour::default()
        };
        let g = Gen::new(&b, &json!({"model": "m-1", "stream": true}));
        assert_eq!(g.text(), "tok1 tok2 tok3 ");
        assert_eq!(g.model, "m-1");
        assert!(g.stream && !g.include_usage);
        assert_eq!(g.total_delay(), Duration::from_millis(130));
        let delays: Vec<_> = g
            .token_steps(|t| Bytes::from(t.to_owned()))
            .map(|s| s.delay)
            .collect();
        assert_eq!(delays, [100, 10, 10].map(Duration::from_millis).to_vec());
    }

    #[test]
    fn random_ids_are_long_and_distinct() {
        let a = random_id("resp_");
        assert_eq!(a.len(), 5 + 48);
        assert!(a.starts_with("resp_"));
        assert!(a[5..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_id("resp_"));
    }

    #[test]
    fn prompt_estimate() {
        assert_eq!(estimate_prompt_tokens(&json!({})), 1);
        let body = json!({"model": "a-very-long-model-name", "messages": [{"role": "user", "content": "12345678"}]});
        // "user" (4) + "12345678" (8) = 12 chars -> 3 tokens
        assert_eq!(estimate_prompt_tokens(&body), 3);
    }
}
