//! Error bodies of real providers for an injected failure (`--fail-body`), so a gateway can be
//! tested on what it must tell apart: a spent quota from a rate limit, a refused key, a prompt
//! too long for the window, a prompt a content filter refused. Each is the provider's own JSON
//! as its API answers it (the status is `--fail-status`'s, e.g. 429 for `quota`).

use serde::Serialize;
use serde_json::{json, Value};

/// Which provider error an injected failure carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailBody {
    /// OpenAI's 429 `insufficient_quota`.
    Quota,
    /// OpenAI's 400 `billing_hard_limit_reached`.
    Billing,
    /// Anthropic's 400 credit-balance error.
    Credit,
    /// OpenAI's 429 `rate_limit_exceeded`.
    RateLimit,
    /// OpenAI's 401 `invalid_api_key`.
    InvalidKey,
    /// OpenAI's (and Azure's) 400 `context_length_exceeded`.
    ContextLength,
    /// Anthropic's 400 "prompt is too long".
    PromptTooLong,
    /// Azure's 400 `content_filter` on the prompt.
    ContentFilter,
}

impl FailBody {
    /// Every name, as `--fail-body` and `fail_body` take them.
    const NAMES: [(&'static str, FailBody); 8] = [
        ("quota", FailBody::Quota),
        ("billing", FailBody::Billing),
        ("credit", FailBody::Credit),
        ("rate_limit", FailBody::RateLimit),
        ("invalid_key", FailBody::InvalidKey),
        ("context_length", FailBody::ContextLength),
        ("prompt_too_long", FailBody::PromptTooLong),
        ("content_filter", FailBody::ContentFilter),
    ];

    pub fn parse(name: &str) -> Result<FailBody, String> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                format!("fail body {name:?} is not one of {}", names.join(", "))
            })
    }

    /// The provider's error body.
    pub fn body(self) -> Value {
        match self {
            FailBody::Quota => json!({"error": {
                "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
            FailBody::Billing => json!({"error": {
                "code": "billing_hard_limit_reached", "message": "Billing hard limit has been reached",
                "param": null, "type": "invalid_request_error"}}),
            FailBody::Credit => json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}),
            FailBody::RateLimit => json!({"error": {
                "message": "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1.",
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}}),
            FailBody::InvalidKey => json!({"error": {
                "message": "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
            FailBody::ContextLength => json!({"error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            FailBody::PromptTooLong => json!({"type": "error", "error": {
                "type": "invalid_request_error", "message": "prompt is too long: 208656 tokens > 200000 maximum"}}),
            FailBody::ContentFilter => json!({"error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.",
                "type": null, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation",
                               "content_filter_result": {"jailbreak": {"detected": true, "filtered": true}}}}}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_to_a_body_with_an_error() {
        for (name, b) in FailBody::NAMES {
            assert_eq!(FailBody::parse(name), Ok(b));
            assert!(b.body().get("error").is_some(), "{name}");
        }
        assert!(FailBody::parse("nope").unwrap_err().contains("quota"));
    }
}
