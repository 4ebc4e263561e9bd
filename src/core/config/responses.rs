//! The root fields about the Responses API's targets: `non_native_responses`, and the warning
//! for a virtual model whose Responses targets include one that does not serve it natively.

use super::catalog::Model;
use super::fields::{ConfigError, Fields};
use super::settings::NonNativeResponses;
use super::virtual_model::VirtualModel;
use crate::core::endpoint::{Endpoint, ModelType};

/// `non_native_responses`: `"reject"` (default) or `"skip"`.
pub(super) fn compile_non_native(root: &mut Fields<'_>) -> Result<NonNativeResponses, ConfigError> {
    match root.opt_str("non_native_responses")? {
        None | Some("reject") => Ok(NonNativeResponses::Reject),
        Some("skip") => Ok(NonNativeResponses::Skip),
        Some(other) => Err(root.error(
            "non_native_responses",
            format!("expected `reject` or `skip`, got `{other}`"),
        )),
    }
}

/// One warning per virtual model with the `responses` type whose targets include models that
/// do not serve `/v1/responses` natively: under `"reject"`, a request routed to one gets a 400
/// (TrueFoundry virtual models, "Supported API Types": every target must support the Responses
/// API natively; "Responses API conversations": the 400 is terminal).
pub(super) fn non_native_warnings(
    models: &[Model],
    virtual_models: &[VirtualModel],
    mode: NonNativeResponses,
) -> Vec<String> {
    if mode == NonNativeResponses::Skip {
        return Vec::new();
    }
    let native = |m: &Model| Endpoint::Responses.served_by(m.apis);
    virtual_models
        .iter()
        .filter(|vm| vm.model_types.contains(ModelType::Responses))
        .filter_map(|vm| {
            let names: Vec<String> = vm
                .targets
                .iter()
                .filter_map(|t| models.get(t.model.0))
                .filter(|m| !native(m))
                .map(|m| format!("`{}`", m.name))
                .collect();
            (!names.is_empty()).then(|| {
                format!(
                    "virtual model `{}` serves responses, but its target {} does not serve \
                     /v1/responses natively: a Responses request routed to it gets a 400 \
                     (non_native_responses: \"reject\"); give the model `apis` with \
                     `responses` if it serves them, remove it, or set non_native_responses: \
                     \"skip\" to leave such targets out",
                    vm.name,
                    names.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::core::config::{Config, NonNativeResponses};

    const CONFIG: &str = r#"{"models": [
        {"name": "openai/gpt-4o", "cluster": "o", "model": "gpt-4o"},
        {"name": "anthropic/claude", "cluster": "a", "model": "c", "provider": "anthropic"},
        {"name": "vllm/llama", "cluster": "v", "model": "l", "provider": "openai-compatible"},
        {"name": "vllm/responses", "cluster": "v", "model": "r", "provider": "openai-compatible",
         "apis": ["responses"]}],
      "response_id_keys": ["a-key-of-sixteen-bytes"],
      "virtual_models": [
        {"name": "team/mixed", "model_types": ["responses", "chat"], "routing_config": {
          "type": "priority-based-routing", "load_balance_targets": [
            {"target": "openai/gpt-4o", "priority": 0}, {"target": "anthropic/claude", "priority": 1},
            {"target": "vllm/llama", "priority": 2}]}},
        {"name": "team/native", "model_types": ["responses"], "routing_config": {
          "type": "round-robin-routing", "load_balance_targets": [
            {"target": "openai/gpt-4o"}, {"target": "vllm/responses"}]}},
        {"name": "team/chat", "model_types": ["chat"], "routing_config": {
          "type": "round-robin-routing", "load_balance_targets": [{"target": "anthropic/claude"}]}}]
    }"#;

    #[test]
    fn a_responses_virtual_model_with_a_target_that_is_not_native_is_warned_about() {
        let c = Config::parse(CONFIG.as_bytes()).unwrap();
        assert_eq!(c.non_native_responses, NonNativeResponses::Reject);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let w = &c.warnings[0];
        assert!(
            w.starts_with("virtual model `team/mixed` serves responses"),
            "{w}"
        );
        assert!(
            w.contains("`anthropic/claude`, `vllm/llama` does not serve /v1/responses natively")
        );
        // With "skip" the config says what it means: no warning.
        let skip = CONFIG.replace(
            r#""response_id_keys""#,
            r#""non_native_responses": "skip", "response_id_keys""#,
        );
        let c = Config::parse(skip.as_bytes()).unwrap();
        assert_eq!(c.non_native_responses, NonNativeResponses::Skip);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let bad = CONFIG.replace(
            r#""response_id_keys""#,
            r#""non_native_responses": "translate", "response_id_keys""#,
        );
        assert_eq!(
            Config::parse(bad.as_bytes()).unwrap_err().to_string(),
            "non_native_responses: expected `reject` or `skip`, got `translate`"
        );
    }
}
