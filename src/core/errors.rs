//! OpenAI-shaped error replies the filter sends itself.
//!
//! The shape is `{"error":{"message","type","param","code"}}`, what the OpenAI SDKs parse into
//! their typed exceptions. Each reply is built by a named constructor so a status and its code
//! never drift apart.

use serde::Serialize;
use std::borrow::Cow;

/// The most bytes of one client-supplied value an error message echoes.
pub const ECHO_LIMIT: usize = 256;

/// A client's value as an error message may echo it: whole up to [`ECHO_LIMIT`] bytes, else cut
/// at the last character boundary within them and followed by `…`. Every constructor below
/// passes each string it is given through this (a detail too, though callers build those, as
/// a backstop), so no caller can send a 1 MB model name back. A client's value inside a detail
/// gets a constructor of its own that clips it, so the message stays whole around it.
pub fn clip(value: &str) -> Cow<'_, str> {
    if value.len() <= ECHO_LIMIT {
        return Cow::Borrowed(value);
    }
    // `str::floor_char_boundary` is newer than our rust-version; a UTF-8 character is at most
    // 4 bytes, so this steps back at most 3 times.
    let mut end = ECHO_LIMIT;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", value.get(..end).unwrap_or_default()))
}

/// A complete local reply: HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// HTTP status code.
    pub status: u16,
    /// Serialised JSON body.
    pub body: String,
    /// What the operator should change, for a warn line: the fix is theirs, not the client's.
    pub operator_note: Option<String>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
}

impl ErrorReply {
    fn new(status: u16, kind: &str, code: &str, param: Option<&str>, message: &str) -> Self {
        let envelope = Envelope {
            error: Body {
                message,
                kind,
                param,
                code,
            },
        };
        // Serialising plain strings cannot fail; the fallback keeps the reply valid anyway.
        let body = serde_json::to_string(&envelope).unwrap_or_else(|_| {
            r#"{"error":{"message":"internal error","type":"server_error","code":"internal"}}"#
                .to_string()
        });
        ErrorReply {
            status,
            body,
            operator_note: None,
        }
    }

    /// The same error in Anthropic's shape, `{"type":"error","error":{"type","message"}}`,
    /// which Anthropic SDK clients of `/v1/messages` parse into their typed errors.
    pub fn in_anthropic_shape(&self) -> Self {
        let kind = match self.status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            504 => "timeout_error",
            529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        let parsed: Option<serde_json::Value> = serde_json::from_str(&self.body).ok();
        let message = parsed
            .as_ref()
            .and_then(|v| v.get("error")?.get("message")?.as_str())
            .unwrap_or("The request could not be served.");
        let body = serde_json::json!({
            "type": "error",
            "error": {"type": kind, "message": message},
        });
        ErrorReply {
            status: self.status,
            body: body.to_string(),
            operator_note: self.operator_note.clone(),
        }
    }

    /// 404: the model is unknown, or internal and so not callable directly.
    pub fn model_not_found(model: &str) -> Self {
        let model = clip(model);
        let message =
            format!("The model `{model}` does not exist or you do not have access to it.");
        Self::new(
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
            &message,
        )
    }

    /// 400: the body has no `model` field (or it is null).
    pub fn missing_model() -> Self {
        Self::new(
            400,
            "invalid_request_error",
            "missing_model",
            Some("model"),
            "You must provide a model parameter.",
        )
    }

    /// 400: `model` is present but not a string.
    pub fn model_not_string() -> Self {
        Self::new(
            400,
            "invalid_request_error",
            "invalid_model",
            Some("model"),
            "The `model` field must be a string.",
        )
    }

    /// 400: the body is not a JSON object we can read.
    pub fn invalid_json(detail: &str) -> Self {
        let detail = clip(detail);
        let message = format!("The request body is not valid JSON: {detail}.");
        Self::new(400, "invalid_request_error", "invalid_json", None, &message)
    }

    /// 400: a top-level key of the JSON body appears twice; `param` names it.
    pub fn duplicate_key(key: &str) -> Self {
        let key = clip(key);
        let message = format!(
            "The request body is not valid JSON: the `{key}` field appears more than once."
        );
        Self::new(
            400,
            "invalid_request_error",
            "invalid_json",
            Some(&key),
            &message,
        )
    }

    /// 400: an upload endpoint's body is not well-formed `multipart/form-data`.
    pub fn invalid_multipart(detail: &str) -> Self {
        let detail = clip(detail);
        let message = format!("The request body must be multipart/form-data: {detail}.");
        Self::new(
            400,
            "invalid_request_error",
            "invalid_multipart",
            None,
            &message,
        )
    }

    /// 400: batch input names a virtual model (TrueFoundry virtual models, "FAQ").
    pub fn batch_needs_catalog_model(model: &str) -> Self {
        let model = clip(model);
        let message = format!(
            "`{model}` is a virtual model; the Batch API needs a real catalog model, because a batch runs later on one provider with no fallback."
        );
        Self::new(
            400,
            "invalid_request_error",
            "virtual_model_in_batch",
            Some("model"),
            &message,
        )
    }

    /// 400: an LLM endpoint was called without a body.
    pub fn body_required() -> Self {
        Self::new(
            400,
            "invalid_request_error",
            "missing_body",
            None,
            "This endpoint needs a JSON request body.",
        )
    }

    /// 415: the body is compressed (`content-encoding`), so its `model` cannot be read.
    pub fn unsupported_content_encoding(encoding: &str) -> Self {
        // The client's value is echoed only when it is a plain token, never its raw bytes.
        let shown = if encoding.len() <= 32
            && encoding
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_, ".contains(&b))
        {
            encoding
        } else {
            "this encoding"
        };
        let message = format!(
            "Request bodies with content-encoding `{shown}` are not supported: send the JSON \
             body uncompressed."
        );
        Self::new(
            415,
            "invalid_request_error",
            "unsupported_content_encoding",
            None,
            &message,
        )
    }

    /// 409: a response id (or reasoning mark) that looks like one Switchboard minted does not
    /// decode: changed, truncated, or minted with another key (TrueFoundry virtual models,
    /// "Responses API conversations").
    pub fn response_id_invalid() -> Self {
        Self::new(
            409,
            "invalid_request_error",
            "invalid_response_id",
            Some("previous_response_id"),
            "This response id looks like one the gateway minted but cannot be decoded. Pass \
             ids back verbatim, or start a new conversation.",
        )
    }

    /// 409: a follow-up names another model than the virtual model its response id was
    /// minted for; a conversation continues where it started, under that virtual model's rules.
    pub fn response_id_of_another_model(model: &str) -> Self {
        let message = format!(
            "This conversation was started with another model than `{model}`: call the model \
             that started it, or start a new conversation."
        );
        Self::new(
            409,
            "invalid_request_error",
            "conversation_model_mismatch",
            Some("model"),
            &message,
        )
    }

    /// 409: under `response_id_binding: "caller"`, the response id was minted for another
    /// caller (or before ids were bound to callers).
    pub fn foreign_response_id() -> Self {
        Self::new(
            409,
            "invalid_request_error",
            "foreign_response_id",
            Some("previous_response_id"),
            "This response id was issued to another caller; pass only ids your own requests \
             received, or start a new conversation.",
        )
    }

    /// 409: the target that started the conversation is no longer a target of `model`.
    pub fn origin_removed(model: &str) -> Self {
        let model = clip(model);
        let message = format!(
            "The model that started this conversation is no longer a target of `{model}`. \
             Start a new conversation."
        );
        Self::new(
            409,
            "invalid_request_error",
            "conversation_origin_removed",
            None,
            &message,
        )
    }

    /// 409: the conversation's origin answered with a 5xx or not at all; the gateway does not
    /// fall back, since another target would not hold the conversation.
    pub fn origin_unavailable(model: &str) -> Self {
        let model = clip(model);
        let message = format!(
            "`{model}`, which holds this conversation, is unavailable right now. Retry shortly, \
             or start a new conversation."
        );
        Self::new(
            409,
            "server_error",
            "conversation_origin_unavailable",
            None,
            &message,
        )
    }

    /// 409: the request replays turns of two different origins.
    pub fn mixed_origins() -> Self {
        Self::new(
            409,
            "invalid_request_error",
            "conversation_origins_differ",
            Some("input"),
            "The request continues turns served by two different models; a conversation stays \
             on the model that started it.",
        )
    }

    /// 400: the conversation's origin no longer serves the endpoint natively.
    pub fn origin_not_native(model: &str, endpoint: &str) -> Self {
        let model = clip(model);
        let endpoint = clip(endpoint);
        let message = format!(
            "`{model}`, which holds this conversation, does not serve {endpoint} natively; \
             translating it would lose the conversation. Start a new conversation."
        );
        Self::new(
            400,
            "invalid_request_error",
            "unsupported_endpoint",
            None,
            &message,
        )
    }

    /// 400: routing picked a target of the virtual model `model` that does not serve
    /// `endpoint` natively (TrueFoundry virtual models, "Responses API conversations": serving
    /// it would mean translating and losing conversation state; terminal, no fallback). The
    /// log names the operator's fix.
    pub fn target_not_native(model: &str, target: &str, endpoint: &str) -> Self {
        let (model, target, endpoint) = (clip(model), clip(target), clip(endpoint));
        let message = format!(
            "`{model}` routed this request to `{target}`, which does not serve {endpoint} \
             natively; translating it would lose the conversation state, so the request is \
             refused rather than sent elsewhere."
        );
        let mut reply = Self::new(
            400,
            "invalid_request_error",
            "unsupported_endpoint",
            Some("model"),
            &message,
        );
        reply.operator_note = Some(format!(
            "virtual model `{model}` routed a request to `{target}`, which does not serve \
             {endpoint} natively: give that model `apis` with `responses` if it serves them, \
             remove it from the virtual model, or set non_native_responses: \"skip\""
        ));
        reply
    }

    /// 400: a request that reads or continues a stored response cannot be told which provider
    /// account holds it (Zuplo model load balancing, "Stored responses"); the fix is the
    /// operator's, so the log names it and the client is told only this.
    pub fn stored_response_unroutable(model: &str) -> Self {
        let model = clip(model);
        let message = format!(
            "`{model}` cannot read or continue this stored response: it cannot tell which \
             provider account holds it."
        );
        let mut reply = Self::new(
            400,
            "invalid_request_error",
            "stored_response_unroutable",
            None,
            &message,
        );
        reply.operator_note = Some(format!(
            "stored-response request on `{model}` could not be routed: list the targets that \
             store responses under one provider name, use hash-based-routing by user or by a \
             header or metadata key, or set stores_responses: false on the targets that do not \
             hold them"
        ));
        reply
    }

    /// 413: the body is larger than the configured limit.
    pub fn body_too_large(limit: usize) -> Self {
        let message = format!("The request body is larger than the limit of {limit} bytes.");
        Self::new(
            413,
            "invalid_request_error",
            "request_too_large",
            None,
            &message,
        )
    }

    /// 400: the request must be translated for the target routing picked (a virtual model's
    /// `translate`) and `field` has no equivalent in the target's API; `param` names
    /// it. The adapter puts it in Anthropic's shape for a `/v1/messages` client.
    pub fn untranslatable(field: &str, reason: &str) -> Self {
        let (field, reason) = (clip(field), clip(reason));
        let message = format!("`{field}` cannot be translated for the target: {reason}.");
        Self::new(
            400,
            "invalid_request_error",
            "untranslatable_field",
            Some(&field),
            &message,
        )
    }

    /// 400: a virtual model was called on an endpoint its `model_types` do not include.
    pub fn endpoint_not_served(model: &str, endpoint: &str) -> Self {
        let model = clip(model);
        let endpoint = clip(endpoint);
        let message =
            format!("The model `{model}` does not serve `{endpoint}`; check its model_types.");
        Self::new(
            400,
            "invalid_request_error",
            "unsupported_endpoint",
            Some("model"),
            &message,
        )
    }

    /// 400: the metadata header is not a JSON object of strings.
    pub fn invalid_metadata(detail: &str) -> Self {
        Self::metadata_reply(&clip(detail))
    }

    /// 400: a value of the metadata header is not a string.
    pub fn metadata_value_not_string(key: &str) -> Self {
        Self::metadata_reply(&format!("the value of `{}` is not a string", clip(key)))
    }

    fn metadata_reply(detail: &str) -> Self {
        let message = format!(
            "The x-switchboard-metadata header must be a JSON object of strings: {detail}."
        );
        Self::new(
            400,
            "invalid_request_error",
            "invalid_metadata",
            None,
            &message,
        )
    }

    /// 404: metadata filtering left no target (TrueFoundry virtual models, `metadata_match`).
    pub fn no_target_matched(model: &str) -> Self {
        let model = clip(model);
        let message = format!(
            "None of the targets of `{model}` matched the request metadata (metadata_match)."
        );
        Self::new(
            404,
            "invalid_request_error",
            "no_matching_target",
            Some("model"),
            &message,
        )
    }

    /// 400: no `when` expression of a conditional virtual model held for this request.
    pub fn no_condition_matched(model: &str) -> Self {
        let model = clip(model);
        let message = format!("No `when` condition of `{model}` matched this request.");
        Self::new(
            400,
            "invalid_request_error",
            "no_matching_condition",
            Some("model"),
            &message,
        )
    }

    /// 400: no target of the model serves this endpoint natively.
    pub fn no_capable_target(model: &str, endpoint: &str) -> Self {
        let model = clip(model);
        let endpoint = clip(endpoint);
        let message = format!(
            "No target of `{model}` serves `{endpoint}` natively; Switchboard does not translate between APIs."
        );
        Self::new(
            400,
            "invalid_request_error",
            "unsupported_endpoint",
            Some("model"),
            &message,
        )
    }

    /// 500: the gateway itself failed while handling the request (a bug caught at the native
    /// module's hook); the request went nowhere.
    pub fn internal_error() -> Self {
        Self::new(
            500,
            "server_error",
            "internal_error",
            None,
            "The gateway could not handle the request because of an internal error.",
        )
    }

    /// 503: no target could be chosen (every target drained or unavailable).
    pub fn no_target_available(model: &str) -> Self {
        let model = clip(model);
        let message = format!("No target of `{model}` is available.");
        Self::new(503, "server_error", "no_target_available", None, &message)
    }

    /// 504: the last target a request of virtual model `model` could try did not answer
    /// within its fallback timeout (`fallback_timeout_at_last: "fail"`; Zuplo model load
    /// balancing, "Failures and retries": "the request fails if that runs out too"). A gateway
    /// that got no timely answer upstream is RFC 9110's 504 (section 15.6.5).
    pub fn fallback_timed_out(model: &str) -> Self {
        let model = clip(model);
        let message = format!("No target of `{model}` answered within its fallback timeout.");
        Self::new(504, "server_error", "fallback_timeout", None, &message)
    }

    /// 504: a request of virtual model `model` spent its `request_deadline_ms` before any
    /// target answered (a gateway that got no timely answer upstream: RFC 9110, section
    /// 15.6.5). Anthropic's shape names a 504 `timeout_error`.
    pub fn deadline_exceeded(model: &str) -> Self {
        let model = clip(model);
        let message = format!("No target of `{model}` answered within the request's deadline.");
        Self::new(504, "server_error", "deadline_exceeded", None, &message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_endpoints_get_anthropics_error_shape_with_the_same_status_and_message() {
        let e = ErrorReply::model_not_found("nobody").in_anthropic_shape();
        assert_eq!(e.status, 404);
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert!(v["error"]["message"].as_str().unwrap().contains("`nobody`"));
        let v: serde_json::Value =
            serde_json::from_str(&ErrorReply::body_too_large(1).in_anthropic_shape().body).unwrap();
        assert_eq!(v["error"]["type"], "request_too_large");
        let v: serde_json::Value = serde_json::from_str(
            &ErrorReply::no_target_available("m")
                .in_anthropic_shape()
                .body,
        )
        .unwrap();
        assert_eq!(v["error"]["type"], "api_error");
        let timed_out = ErrorReply::fallback_timed_out("vm");
        assert_eq!(timed_out.status, 504);
        let v: serde_json::Value = serde_json::from_str(&timed_out.body).unwrap();
        assert_eq!(v["error"]["code"], "fallback_timeout");
        let v: serde_json::Value =
            serde_json::from_str(&timed_out.in_anthropic_shape().body).unwrap();
        assert_eq!(
            v["error"]["type"], "timeout_error",
            "Anthropic's type for a 504"
        );
    }

    #[test]
    fn error_body_is_openai_shaped() {
        let reply = ErrorReply::model_not_found("a\"b");
        assert_eq!(reply.status, 404);
        let v: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert!(v["error"]["message"].as_str().unwrap().contains("a\"b"));
    }

    #[test]
    fn clip_keeps_256_bytes_cut_on_a_character_boundary() {
        assert_eq!(clip("gpt-4o"), "gpt-4o");
        let exact = "x".repeat(ECHO_LIMIT);
        assert!(matches!(clip(&exact), Cow::Borrowed(s) if s == exact));
        assert_eq!(clip(&"x".repeat(ECHO_LIMIT + 1)), format!("{exact}…"));
        // Byte 256 falls inside `é` (bytes 255 and 256): the cut comes before it.
        let accented = format!("a{}", "é".repeat(1000));
        assert_eq!(clip(&accented), format!("a{}…", "é".repeat(127)));
        // A 4-byte character straddling the limit, from each of its offsets.
        for pad in 253..=256 {
            let s = format!("{}🦀🦀", "x".repeat(pad));
            let clipped = clip(&s);
            let kept = clipped.strip_suffix('…').unwrap_or(&clipped);
            assert!(kept.len() <= ECHO_LIMIT && s.starts_with(kept), "{pad}");
            assert!(kept.len() > ECHO_LIMIT - 4, "{pad}");
        }
    }

    #[test]
    fn no_constructor_echoes_more_than_256_bytes_of_a_value() {
        let huge = format!("a{}", "é".repeat(500_000));
        let shown = format!("a{}…", "é".repeat(127));
        let replies = [
            ErrorReply::model_not_found(&huge),
            ErrorReply::invalid_json(&huge),
            ErrorReply::duplicate_key(&huge),
            ErrorReply::invalid_multipart(&huge),
            ErrorReply::batch_needs_catalog_model(&huge),
            ErrorReply::unsupported_content_encoding(&huge),
            ErrorReply::origin_removed(&huge),
            ErrorReply::origin_unavailable(&huge),
            ErrorReply::origin_not_native(&huge, &huge),
            ErrorReply::stored_response_unroutable(&huge),
            ErrorReply::target_not_native(&huge, &huge, "/v1/responses"),
            ErrorReply::endpoint_not_served(&huge, &huge),
            ErrorReply::invalid_metadata(&huge),
            ErrorReply::metadata_value_not_string(&huge),
            ErrorReply::no_target_matched(&huge),
            ErrorReply::no_condition_matched(&huge),
            ErrorReply::no_capable_target(&huge, &huge),
            ErrorReply::no_target_available(&huge),
            ErrorReply::fallback_timed_out(&huge),
        ];
        for reply in replies {
            for body in [&reply.body, &reply.in_anthropic_shape().body] {
                assert!(body.len() < 1024, "{}", &body[..300]);
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                let message = v["error"]["message"].as_str().unwrap();
                assert!(message.contains(&shown) || reply.status == 415, "{message}");
            }
            let note = reply.operator_note.unwrap_or_default();
            assert!(note.len() < 1024, "{}", &note[..300]);
        }
    }

    #[test]
    fn each_constructor_has_its_status() {
        assert_eq!(ErrorReply::missing_model().status, 400);
        assert_eq!(ErrorReply::model_not_string().status, 400);
        assert_eq!(ErrorReply::invalid_json("x").status, 400);
        assert_eq!(ErrorReply::body_required().status, 400);
        assert_eq!(ErrorReply::body_too_large(10).status, 413);
        assert_eq!(ErrorReply::endpoint_not_served("m", "e").status, 400);
        assert_eq!(ErrorReply::no_target_available("m").status, 503);
        assert_eq!(ErrorReply::invalid_metadata("x").status, 400);
        assert_eq!(ErrorReply::no_target_matched("m").status, 404);
        assert_eq!(ErrorReply::internal_error().status, 500);
    }

    #[test]
    fn an_internal_error_is_a_server_error_in_either_shape() {
        let v: serde_json::Value =
            serde_json::from_str(&ErrorReply::internal_error().body).unwrap();
        assert_eq!(v["error"]["code"], "internal_error");
        assert_eq!(v["error"]["type"], "server_error");
        let anthropic = ErrorReply::internal_error().in_anthropic_shape();
        let v: serde_json::Value = serde_json::from_str(&anthropic.body).unwrap();
        assert_eq!(
            (anthropic.status, v["error"]["type"].as_str()),
            (500, Some("api_error"))
        );
    }
}
