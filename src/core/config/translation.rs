//! A virtual model's translation rules: `translate`, the client APIs whose requests may be
//! translated for a target that does not serve them natively (Chat Completions to Anthropic
//! Messages, Messages to Chat Completions), and `anthropic_cache`.
//!
//! Zuplo model load balancing, "A list mixes vendors": on `/v1/chat/completions` the gateway
//! translates the request for each provider; TrueFoundry's `chat` model type covers
//! `/chat/completions` and `/messages` over any provider. Hence the default: Chat Completions.

use super::fields::{ConfigError, Fields};
use crate::core::endpoint::{Api, Apis};

/// `translate` and `anthropic_cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// The client APIs translated for a target that does not serve them.
    pub apis: Apis,
    /// `anthropic_cache: "auto"`: a request translated to Messages gets `cache_control`
    /// breakpoints, so it keeps the prompt caching an OpenAI target gives on its own.
    pub anthropic_cache: bool,
}

impl Default for Translation {
    fn default() -> Self {
        Translation {
            apis: Apis::of(&[Api::ChatCompletions]),
            anthropic_cache: false,
        }
    }
}

/// Reads `translate: ["chat_completions", "messages"]` (either, both or none) and
/// `anthropic_cache: "auto" | "off"`.
pub(super) fn compile_translation(f: &mut Fields<'_>) -> Result<Translation, ConfigError> {
    let mut t = Translation::default();
    if let Some(items) = f.opt_array("translate")? {
        t.apis = Apis::default();
        for (path, value) in items {
            let api = match value.as_str() {
                Some("chat_completions") => Api::ChatCompletions,
                Some("messages") => Api::Messages,
                _ => {
                    let message = "expected \"chat_completions\" or \"messages\"";
                    return Err(ConfigError::new(path, message.to_string()));
                }
            };
            t.apis.insert(api);
        }
    }
    t.anthropic_cache = match f.opt_str("anthropic_cache")? {
        None | Some("off") => false,
        Some("auto") => true,
        Some(_) => return Err(f.error("anthropic_cache", "must be \"auto\" or \"off\"")),
    };
    Ok(t)
}
