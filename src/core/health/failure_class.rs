//! Classes of a provider's failed answer, told from its status and its (small) error body: what
//! the failure means for the target's health and whether retrying the same target can help.
//!
//! The error bodies matched here are the providers' own, as they answer them:
//! - OpenAI, out of quota: a 429 `{"error": {"message": "You exceeded your current quota, please
//!   check your plan and billing details. ...", "type": "insufficient_quota", "code":
//!   "insufficient_quota"}}`; a spending cap reached: a 400 `{"error": {"code":
//!   "billing_hard_limit_reached", "message": "Billing hard limit has been reached", "type":
//!   "invalid_request_error"}}`.
//! - Anthropic, out of credit: a 400 `{"type": "error", "error": {"type":
//!   "invalid_request_error", "message": "Your credit balance is too low to access the Anthropic
//!   API. Please go to Plans & Billing to upgrade or purchase credits."}}`.
//! - Azure, a free tier's quota spent: a 403 "Out of call volume quota for ... pricing tier";
//!   a quota error's code `InsufficientQuota`.
//! - Context window: OpenAI and Azure answer a 400 with `code: "context_length_exceeded"`
//!   ("This model's maximum context length is ... tokens"); Anthropic a 400
//!   `invalid_request_error` "prompt is too long: 208656 tokens > 200000 maximum".
//! - Azure's content filter on the prompt: a 400 `{"error": {"message": "The response was
//!   filtered due to the prompt triggering Azure OpenAI's content management policy. ...",
//!   "code": "content_filter", ...}}`.
//!
//! A catalog model adds its own quota markers with `health.quota_patterns` (substrings of the
//! body, compared without case).

use serde_json::Value;

/// Error bodies are small: past this many bytes a failed answer is judged by its status alone.
pub const MAX_JUDGED_BODY: usize = 64 * 1024;

/// What kind of failure a provider's answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The account's quota or credit is spent: no retry can succeed until someone pays.
    Quota,
    /// A 429 that is not a quota: the provider asks for less traffic.
    RateLimit,
    /// A 401 or 403 to the gateway's own credential: the key is wrong, revoked or not allowed.
    Credential,
    /// Anthropic's 529 `overloaded_error`.
    Overloaded,
    /// The request does not fit the model's context window (a 400): another target with a
    /// larger window may take it; the target is not at fault.
    ContextLength,
    /// Azure's content filter refused the prompt (a 400): another target may answer it.
    ContentFilter,
    /// Anything else: counted and moved on by status, as before.
    Other,
}

impl FailureClass {
    /// Whether a failure of this class moves to the next candidate at once, never retrying the
    /// same target: a spent quota or a refused key answers the same way to every retry.
    pub fn moves_on(self) -> bool {
        matches!(self, FailureClass::Quota | FailureClass::Credential)
    }

    /// Whether the class needs the answer's body to be told (so a failed answer with this
    /// status is held until its body ends).
    pub fn needs_body(status: u16) -> bool {
        matches!(status, 400 | 401 | 402 | 403 | 429)
    }
}

/// The class of a failed answer with `status` and `body` (possibly cut at
/// [`MAX_JUDGED_BODY`], or empty when it was not read). `gateway_credential`: the attempt
/// carried the gateway's own credential (a catalog `headers` or `headers_override` key).
pub fn classify(
    status: u16,
    body: &[u8],
    quota_patterns: &[String],
    gateway_credential: bool,
) -> FailureClass {
    if status == 529 {
        return FailureClass::Overloaded;
    }
    if !FailureClass::needs_body(status) {
        return FailureClass::Other;
    }
    let error = ErrorFields::of(body);
    if error.is_quota() || matches_pattern(body, quota_patterns) {
        return FailureClass::Quota;
    }
    match status {
        429 => FailureClass::RateLimit,
        401 | 403 if gateway_credential => FailureClass::Credential,
        400 if error.is_context_length() => FailureClass::ContextLength,
        400 if error.code == "content_filter" => FailureClass::ContentFilter,
        _ => FailureClass::Other,
    }
}

/// The parts of an error object that tell its kind: OpenAI's and Azure's `{"error": {"code",
/// "type", "message"}}`, Anthropic's `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Default)]
struct ErrorFields {
    code: String,
    kind: String,
    /// Lower-cased.
    message: String,
}

impl ErrorFields {
    fn of(body: &[u8]) -> Self {
        let Ok(value) = serde_json::from_slice::<Value>(body) else {
            return ErrorFields::default();
        };
        let error = value.get("error").unwrap_or(&value);
        let text = |k: &str| match error.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        ErrorFields {
            code: text("code"),
            kind: text("type"),
            message: text("message").to_ascii_lowercase(),
        }
    }

    fn is_quota(&self) -> bool {
        const CODES: [&str; 3] = [
            "insufficient_quota",
            "billing_hard_limit_reached",
            "InsufficientQuota",
        ];
        CODES.contains(&self.code.as_str())
            || CODES.contains(&self.kind.as_str())
            || self.message.contains("credit balance is too low")
            || self.message.contains("out of call volume quota")
    }

    fn is_context_length(&self) -> bool {
        self.code == "context_length_exceeded"
            || (self.kind == "invalid_request_error"
                && self.message.starts_with("prompt is too long"))
    }
}

/// Whether the body contains one of the (lower-cased) patterns, compared without case.
fn matches_pattern(body: &[u8], patterns: &[String]) -> bool {
    if patterns.is_empty() {
        return false;
    }
    let body = body.get(..MAX_JUDGED_BODY).unwrap_or(body);
    let lower = body.to_ascii_lowercase();
    patterns
        .iter()
        .any(|p| !p.is_empty() && memchr::memmem::find(&lower, p.as_bytes()).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureClass::*;

    const OPENAI_QUOTA: &str = r#"{"error": {"message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
    const OPENAI_BILLING: &str = r#"{"error": {"code": "billing_hard_limit_reached", "message": "Billing hard limit has been reached", "param": null, "type": "invalid_request_error"}}"#;
    const OPENAI_RATE: &str = r#"{"error": {"message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 601.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#;
    const ANTHROPIC_CREDIT: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"req_011"}"#;
    const ANTHROPIC_RATE: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    const ANTHROPIC_TOO_LONG: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"}}"#;
    const AZURE_QUOTA_403: &str = r#"{"error":{"code":"403","message":"Out of call volume quota for OpenAI F0 pricing tier. Please retry after 3 days. To increase your call volume switch to a paid tier."}}"#;
    const AZURE_RATE: &str = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-08-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}"#;
    const OPENAI_CONTEXT: &str = r#"{"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
    const AZURE_FILTER: &str = r#"{"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.", "type": null, "param": "prompt", "code": "content_filter", "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation"}}}"#;
    const OPENAI_BAD_KEY: &str = r#"{"error": {"message": "Incorrect API key provided: sk-****.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}"#;

    fn class(status: u16, body: &str) -> FailureClass {
        classify(status, body.as_bytes(), &[], true)
    }

    #[test]
    fn each_providers_quota_body_is_a_quota_whatever_its_status() {
        assert_eq!(class(429, OPENAI_QUOTA), Quota);
        assert_eq!(class(400, OPENAI_BILLING), Quota);
        assert_eq!(class(400, ANTHROPIC_CREDIT), Quota);
        assert_eq!(class(403, AZURE_QUOTA_403), Quota);
        assert_eq!(class(503, OPENAI_QUOTA), Other, "a 5xx is judged by status");
    }

    #[test]
    fn a_429_without_a_quota_body_is_a_rate_limit() {
        assert_eq!(class(429, OPENAI_RATE), RateLimit);
        assert_eq!(class(429, ANTHROPIC_RATE), RateLimit);
        assert_eq!(class(429, AZURE_RATE), RateLimit);
        assert_eq!(class(429, ""), RateLimit, "no body: by status");
        assert_eq!(class(429, "not json"), RateLimit);
    }

    #[test]
    fn a_401_or_403_is_a_credential_failure_only_to_the_gateways_own_key() {
        assert_eq!(class(401, OPENAI_BAD_KEY), Credential);
        assert_eq!(class(403, "{}"), Credential);
        assert_eq!(classify(401, OPENAI_BAD_KEY.as_bytes(), &[], false), Other);
        assert_eq!(class(529, ""), Overloaded);
    }

    #[test]
    fn context_length_and_content_filter_400s() {
        assert_eq!(class(400, OPENAI_CONTEXT), ContextLength);
        assert_eq!(class(400, ANTHROPIC_TOO_LONG), ContextLength);
        assert_eq!(class(400, AZURE_FILTER), ContentFilter);
        assert_eq!(class(400, r#"{"error":{"code":"invalid_value"}}"#), Other);
        // The words inside a message that is not the provider's verdict do not count.
        let echoed = r#"{"error":{"message":"bad field content_filter","code":null}}"#;
        assert_eq!(class(400, echoed), Other);
    }

    #[test]
    fn a_catalog_models_quota_patterns_match_the_body_without_case() {
        let patterns = vec!["monthly budget exhausted".to_string()];
        let body = br#"{"error":{"message":"Monthly Budget Exhausted for team"}}"#;
        assert_eq!(classify(429, body, &patterns, true), Quota);
        assert_eq!(classify(403, body, &patterns, false), Quota);
        assert_eq!(classify(429, body, &[], true), RateLimit);
    }

    #[test]
    fn only_quota_and_credential_move_on_without_a_retry() {
        assert!(Quota.moves_on() && Credential.moves_on());
        assert!(!RateLimit.moves_on() && !Overloaded.moves_on() && !Other.moves_on());
        assert!(FailureClass::needs_body(429) && !FailureClass::needs_body(500));
    }
}
