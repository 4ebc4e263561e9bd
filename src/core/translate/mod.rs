//! Translation between OpenAI Chat Completions and Anthropic Messages, both ways, for a
//! virtual model whose target does not serve the client's API natively (`translate`). Each
//! attempt is translated for its own target by the outbound builder; the answer is translated
//! back as it streams. Pure functions over bytes: no host calls.

pub mod answer;
pub mod request;
pub mod stream;

/// A request field that cannot be carried to the target's API: a 400 in the client's shape,
/// naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslatable {
    /// The field's path in the client's body (`n`, `messages[2].content[0]`, `logprobs`).
    pub field: String,
    /// Why, for the error message.
    pub reason: String,
}

/// What the request translation needs to know about the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The provider's model id (the catalog model's `model`).
    pub model: &'a str,
    /// The catalog model's `max_output_tokens`: Anthropic requires `max_tokens`.
    pub max_output_tokens: Option<u32>,
    /// `anthropic_cache: "auto"` on the virtual model: add `cache_control` breakpoints.
    pub anthropic_cache: bool,
}
