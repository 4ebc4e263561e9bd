//! Reading what routing needs from a request body, and rewriting `model` by splicing bytes.
//!
//! The body is read with serde_json into a struct of borrowed [`RawValue`]s: one pass that
//! validates the whole document and skips every other field without building a tree. Each
//! raw value is a slice of the original body, so its position is known and the rewrite is a
//! splice: every byte the client sent, other than the `model` value, reaches the provider as is.

use crate::core::errors::ErrorReply;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// The top-level fields routing reads; serde skips the rest without allocating.
#[derive(Deserialize)]
struct TopLevel<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
}

/// What the filter learnt from a JSON request body.
#[derive(Debug, PartialEq, Eq)]
pub struct Inspected<'a> {
    /// The requested model name, unescaped.
    pub model: Cow<'a, str>,
    /// Where the `model` value (quotes included) sits in the body.
    pub model_span: Range<usize>,
    /// `"stream": true`: the answer comes as server-sent events.
    pub stream: bool,
}

/// Reads the top-level `model` of a JSON object body.
///
/// Errors are the client's: malformed JSON, a non-object body, a duplicate, missing or
/// non-string `model` each give a 400 reply.
pub fn inspect(body: &[u8]) -> Result<Inspected<'_>, ErrorReply> {
    // serde would also read a struct from a JSON array; only an object is a request.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                Ok(_) => ErrorReply::invalid_json("the body must be a JSON object"),
                Err(e) => describe(&e),
            },
        );
    }
    let top: TopLevel<'_> = serde_json::from_slice(body).map_err(|e| describe(&e))?;
    let raw = top.model.ok_or_else(ErrorReply::missing_model)?;
    let text = raw.get();
    if !text.starts_with('"') {
        return Err(ErrorReply::model_not_string());
    }
    let model: Cow<'_, str> = match text.get(1..text.len() - 1) {
        // No escapes: the name is the bytes between the quotes.
        Some(inner) if !inner.contains('\\') => Cow::Borrowed(inner),
        _ => Cow::Owned(
            serde_json::from_str::<String>(text).map_err(|_| ErrorReply::model_not_string())?,
        ),
    };
    let start = (text.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    let span = start..start + text.len();
    // The raw value always borrows from `body`; checked so a surprise cannot mis-splice.
    if body.get(span.clone()) != Some(text.as_bytes()) {
        return Err(ErrorReply::invalid_json("could not locate the model field"));
    }
    Ok(Inspected {
        model,
        model_span: span,
        stream: top.stream.is_some_and(|v| v.get() == "true"),
    })
}

/// Turns a serde_json error into a client-facing 400 without echoing body content.
fn describe(e: &serde_json::Error) -> ErrorReply {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data if e.to_string().contains("duplicate field") => {
            ErrorReply::invalid_json(&format!(
                "the `model` field appears more than once (line {}, column {})",
                e.line(),
                e.column()
            ))
        }
        Category::Eof => ErrorReply::invalid_json("the body ends before the JSON document does"),
        _ => ErrorReply::invalid_json(&format!(
            "syntax error at line {}, column {}",
            e.line(),
            e.column()
        )),
    }
}

/// Returns `body` with the bytes in `span` replaced by `replacement`.
///
/// Returns `None` if the span lies outside the body.
pub fn splice(body: &[u8], span: Range<usize>, replacement: &[u8]) -> Option<Vec<u8>> {
    let head = body.get(..span.start)?;
    let tail = body.get(span.end..)?;
    let mut out = Vec::with_capacity(head.len() + replacement.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(replacement);
    out.extend_from_slice(tail);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> (u16, String) {
        let e = inspect(body.as_bytes()).unwrap_err();
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        (
            e.status,
            v["error"]["message"].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn finds_model_and_its_span() {
        let body = br#"{"messages":[{"role":"user","content":"hi \"model\": x"}], "model" : "a/b" ,"n":1}"#;
        let i = inspect(body).unwrap();
        assert_eq!(i.model, "a/b");
        assert_eq!(&body[i.model_span.clone()], br#""a/b""#);
        assert!(matches!(i.model, Cow::Borrowed(_)));
    }

    #[test]
    fn reads_the_stream_flag() {
        assert!(inspect(br#"{"model":"a","stream":true}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a","stream":false}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a","stream":"true"}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a"}"#).unwrap().stream);
    }

    #[test]
    fn nested_model_fields_are_not_the_top_level_model() {
        let body = br#"{"metadata":{"model":"nested"},"model":"top"}"#;
        assert_eq!(inspect(body).unwrap().model, "top");
        assert_eq!(code(r#"{"metadata":{"model":"nested"}}"#).0, 400);
    }

    #[test]
    fn escaped_model_names_are_unescaped() {
        let body = br#"{"model":"a\/b\u0041"}"#;
        let i = inspect(body).unwrap();
        assert_eq!(i.model, "a/bA");
        assert_eq!(&body[i.model_span], br#""a\/b\u0041""#);
    }

    #[test]
    fn missing_null_or_non_string_model_is_a_400() {
        assert_eq!(
            code(r#"{"messages":[]}"#),
            (400, "You must provide a model parameter.".into())
        );
        assert_eq!(code(r#"{"model":null}"#).0, 400);
        assert_eq!(
            code(r#"{"model":5}"#),
            (400, "The `model` field must be a string.".into())
        );
        assert_eq!(
            code(r#"{"model":["a"]}"#).1,
            "The `model` field must be a string."
        );
        assert_eq!(code(r#"{"model":{"a":1}}"#).0, 400);
    }

    #[test]
    fn malformed_bodies_are_400s_that_say_why() {
        assert!(code(r#"{"model":"a""#).1.contains("ends before"));
        assert!(code(r#"{"model":"a",}"#)
            .1
            .contains("syntax error at line 1"));
        assert!(code(r#"[{"model":"a"}]"#)
            .1
            .contains("must be a JSON object"));
        assert!(code(r#""model""#).1.contains("must be a JSON object"));
        assert!(code(r#"{"model":"a","model":"b"}"#)
            .1
            .contains("more than once"));
        assert!(code(r#"{"model":"a"} trailing"#).1.contains("syntax error"));
        assert_eq!(code("").0, 400);
        assert_eq!(inspect(&[0xff, 0xfe, b'{']).unwrap_err().status, 400);
        assert_eq!(inspect(b"{\"model\":\"\xff\"}").unwrap_err().status, 400);
    }

    #[test]
    fn deeply_nested_bodies_do_not_overflow_the_stack() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        // Skipped fields are walked iteratively: deep but valid JSON is fine.
        let deep = format!("{{\"model\":\"a\",\"x\":{}}}", nest(100_000));
        assert_eq!(inspect(deep.as_bytes()).unwrap().model, "a");
        let deep_model = format!("{{\"model\":{}}}", nest(100_000));
        assert_eq!(inspect(deep_model.as_bytes()).unwrap_err().status, 400);
        let unbalanced = format!("{{\"model\":\"a\",\"x\":{}", "[".repeat(100_000));
        assert_eq!(inspect(unbalanced.as_bytes()).unwrap_err().status, 400);
    }

    #[test]
    fn splice_replaces_only_the_span() {
        let body = br#"{"model":"vm","x":1}"#;
        let i = inspect(body).unwrap();
        let out = splice(body, i.model_span, br#""gpt-4o""#).unwrap();
        assert_eq!(out, br#"{"model":"gpt-4o","x":1}"#);
        assert_eq!(splice(b"abc", 2..5, b"x"), None);
        assert_eq!(splice(b"abc", 0..3, b"").unwrap(), b"");
    }
}
