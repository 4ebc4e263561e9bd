//! `fallback_on`: answers that look like success or like the client's fault but that another
//! target may well answer, opted into per virtual model.
//!
//! A filter that sees every answer can move a refusal, an empty answer, an error object in a
//! 200 or a prompt too long for one target's window to the next candidate, which a client
//! cannot do without knowing the other targets. Off by default: each changes what a client gets
//! for the same request, and a refusal's fallback may be exactly what an operator does not want.

use super::fields::{ConfigError, Fields};

/// `fallback_on: ["content_filter", "empty", "error_body", "context_length"]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AnswerFallbacks {
    /// A 200 whose `finish_reason` is `content_filter` (Anthropic `stop_reason: "refusal"`), or
    /// an Azure 400 with `code: "content_filter"`, falls back.
    pub content_filter: bool,
    /// A 200 with no content and no tool call falls back.
    pub empty: bool,
    /// A 200 whose body is an error object falls back and counts against the target.
    pub error_body: bool,
    /// A 400 `context_length_exceeded` falls back to the next candidate without counting
    /// against the first.
    pub context_length: bool,
}

impl AnswerFallbacks {
    /// The names `fallback_on` accepts.
    pub const NAMES: [&'static str; 4] =
        ["content_filter", "empty", "error_body", "context_length"];

    /// Whether any is on.
    pub fn any(self) -> bool {
        self.content_filter || self.empty || self.error_body || self.context_length
    }
}

/// Reads `fallback_on`.
pub(super) fn compile_answer_fallbacks(f: &mut Fields<'_>) -> Result<AnswerFallbacks, ConfigError> {
    let mut on = AnswerFallbacks::default();
    for (path, value) in f.opt_array("fallback_on")?.unwrap_or_default() {
        let flag = match value.as_str() {
            Some("content_filter") => &mut on.content_filter,
            Some("empty") => &mut on.empty,
            Some("error_body") => &mut on.error_body,
            Some("context_length") => &mut on.context_length,
            _ => {
                let known = AnswerFallbacks::NAMES.join(", ");
                return Err(ConfigError::new(path, format!("expected one of: {known}")));
            }
        };
        *flag = true;
    }
    Ok(on)
}

#[cfg(test)]
mod tests {
    use crate::core::config::Config;

    fn vm_with(extra: &str) -> Result<Config, String> {
        let json = format!(
            r#"{{"models": [{{"name": "m", "cluster": "c", "model": "m"}}],
               "virtual_models": [{{"name": "vm", "model_types": ["chat"], {extra}
                 "routing_config": {{"type": "weight-based-routing",
                   "load_balance_targets": [{{"target": "m", "weight": 100}}]}}}}]}}"#
        );
        Config::parse(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn fallback_on_reads_each_name_and_names_a_wrong_one_by_its_path() {
        let c = vm_with(r#""fallback_on": ["empty", "context_length"],"#).unwrap();
        let on = c.virtual_models[0].answer_fallbacks;
        assert!(on.empty && on.context_length && !on.content_filter && !on.error_body);
        assert!(!vm_with("").unwrap().virtual_models[0]
            .answer_fallbacks
            .any());
        let err = vm_with(r#""fallback_on": ["empty", "refusal"],"#).unwrap_err();
        assert!(
            err.contains("fallback_on[1]") && err.contains("content_filter"),
            "{err}"
        );
    }
}
