//! Server-sent-event framing for the streaming APIs.

use bytes::Bytes;
use serde_json::Value;

/// `data: {json}\n\n` (OpenAI chat/completions chunks).
pub fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// `event: NAME\ndata: {json}\n\n` (Anthropic and Responses API events).
pub fn event(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

/// The OpenAI end-of-stream marker.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn framing() {
        assert_eq!(data(&json!({"a": 1})), "data: {\"a\":1}\n\n");
        assert_eq!(
            event("message_stop", &json!({"type": "message_stop"})),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        assert_eq!(done(), "data: [DONE]\n\n");
    }

    #[test]
    fn newlines_in_text_stay_escaped() {
        let chunk = data(&json!({"t": "a\nb"}));
        assert_eq!(chunk.iter().filter(|&&b| b == b'\n').count(), 2);
    }
}
