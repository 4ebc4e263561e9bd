//! Strict mode's body checks: a strict Anthropic validates a Messages body and
//! a strict OpenAI a Chat Completions body the way the hosted API does
//! (unknown fields, roles, content blocks, tool call / result pairing),
//! answering the first fault in that API's own error shape, so a gateway that
//! translates between the two is caught sending what the real service refuses.
//!
//! Pure functions of the body; only the refusal's text is the mock's.

mod anthropic;
mod openai;

use crate::strict::{Kind, Refusal};
use hyper::header::HeaderMap;
use hyper::StatusCode;
use serde_json::{json, Value};

/// The body check a strict `kind` applies to `operation` (a POST), if any:
/// `Err` is the refusal. A body that is no JSON object is left to the
/// endpoint's own answer.
pub fn check(
    kind: &Kind,
    operation: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Refusal> {
    let applies = matches!(
        (kind, operation),
        (Kind::Anthropic, "/messages") | (Kind::OpenAi, "/chat/completions")
    );
    if !applies {
        return Ok(());
    }
    let Ok(request @ Value::Object(_)) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    match kind {
        // Anthropic, Beta headers: `anthropic-beta` opens the beta fields.
        Kind::Anthropic => anthropic::check(&request, headers.contains_key("anthropic-beta"))
            .map_err(|message| Refusal {
                status: StatusCode::BAD_REQUEST,
                body: json!({"type": "error", "error": {
                    "type": "invalid_request_error", "message": message,
                }}),
            }),
        _ => openai::check(&request).map_err(|e| Refusal {
            status: StatusCode::BAD_REQUEST,
            body: json!({"error": {
                "message": e.message, "type": "invalid_request_error",
                "param": e.param, "code": e.code,
            }}),
        }),
    }
}

/// JSON's name for a value's type, as error messages spell it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `'a', 'b' or 'c'` with `last_join` " or ", the way the APIs list accepted
/// values (OpenAI's has a serial comma: ", and ").
fn quoted_list(items: &[&str], last_join: &str) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{}{last_join}{last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_strict_messages_and_chat_bodies_are_checked() {
        let bad = br#"{"model": "m", "messages": [], "bogus": 1}"#;
        let none = headers(&[]);
        let refused = check(&Kind::Anthropic, "/messages", &none, bad).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(refused.body["type"], "error");
        assert_eq!(refused.body["error"]["type"], "invalid_request_error");
        let refused = check(&Kind::OpenAi, "/chat/completions", &none, bad).unwrap_err();
        assert_eq!(
            refused.body["error"]["message"],
            "Unrecognized request argument supplied: bogus"
        );
        assert_eq!(refused.body["error"]["param"], Value::Null);
        assert!(check(&Kind::Anthropic, "/messages/count_tokens", &none, bad).is_ok());
        assert!(check(&Kind::OpenAi, "/embeddings", &none, bad).is_ok());
        let azure = Kind::Azure {
            deployment: "d".into(),
            api_version: "v".into(),
        };
        assert!(check(&azure, "/chat/completions", &none, bad).is_ok());
        assert!(check(&Kind::OpenAi, "/chat/completions", &none, b"not json").is_ok());
        assert!(check(&Kind::OpenAi, "/chat/completions", &none, b"[1]").is_ok());
    }

    #[test]
    fn the_beta_header_opens_beta_fields() {
        let body = br#"{"model": "claude", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "context_management": {"edits": []}}"#;
        let refused = check(&Kind::Anthropic, "/messages", &headers(&[]), body).unwrap_err();
        assert_eq!(
            refused.body["error"]["message"],
            "context_management: Extra inputs are not permitted"
        );
        let beta = headers(&[("anthropic-beta", "context-management-2025-06-27")]);
        assert!(check(&Kind::Anthropic, "/messages", &beta, body).is_ok());
    }

    #[test]
    fn lists_read_like_the_apis() {
        assert_eq!(quoted_list(&["a"], " or "), "'a'");
        assert_eq!(quoted_list(&["a", "b", "c"], " or "), "'a', 'b' or 'c'");
        assert_eq!(quoted_list(&["a", "b"], ", and "), "'a', and 'b'");
        assert_eq!(quoted_list(&[], " or "), "");
        assert_eq!(type_name(&json!([])), "array");
    }
}
