//! The request-phase decision in one call: inspect the body, plan the targets, rewrite.
//!
//! The adapter hands over the endpoint and the buffered body and gets back what to do to the
//! request: which cluster, which body (only if it changed) and which headers to set.

use crate::core::config::{Config, Model, ModelId};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::request::{inspect, splice};
use crate::core::routing::{plan, HealthInput, Plan};
use std::ops::Range;

/// What to do with a request that will be forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The ordered targets; the first is where this attempt goes.
    pub plan: Plan,
    /// The target of this attempt.
    pub target: ModelId,
    /// The rewritten body, or `None` when the body is already right for the target.
    pub new_body: Option<Vec<u8>>,
    /// Where the `model` value sits in the client's body, to rewrite it for other targets.
    pub model_span: Range<usize>,
    /// The client asked for a streamed (SSE) answer.
    pub stream: bool,
}

impl Decision {
    /// The catalog entry of the target.
    pub fn model<'c>(&self, config: &'c Config) -> Option<&'c Model> {
        config.model(self.target)
    }
}

/// Decides where a buffered request goes and how its body must change for that target.
pub fn decide(
    config: &Config,
    endpoint: Endpoint,
    body: &[u8],
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Decision, ErrorReply> {
    let inspected = inspect(body)?;
    let plan = plan(config, endpoint, &inspected.model, health, rng)?;
    let target = plan
        .primary()
        .ok_or_else(|| ErrorReply::no_target_available(&inspected.model))?;
    let model = config
        .model(target)
        .ok_or_else(|| ErrorReply::no_target_available(&inspected.model))?;
    let span = inspected.model_span;
    let new_body = body_for(body, &span, model)
        .ok_or_else(|| ErrorReply::invalid_json("could not rewrite the model field"))?;
    Ok(Decision {
        plan,
        target,
        new_body,
        model_span: span,
        stream: inspected.stream,
    })
}

/// The client's body rewritten for `model`: `Some(None)` when it already names the model's
/// upstream id, `None` if the span does not fit the body.
pub fn body_for(body: &[u8], span: &Range<usize>, model: &Model) -> Option<Option<Vec<u8>>> {
    let current = body.get(span.clone())?;
    if current == model.upstream_model_json.as_bytes() {
        return Some(None);
    }
    splice(body, span.clone(), model.upstream_model_json.as_bytes()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
      "models": [
        {"name": "openai/gpt-4o", "cluster": "c1", "model": "gpt-4o", "visibility": "internal"},
        {"name": "gpt-4o", "cluster": "c2", "model": "gpt-4o", "visibility": "public"}
      ],
      "virtual_models": [
        {"name": "chat", "model_types": ["chat"],
         "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
           {"target": "openai/gpt-4o", "weight": 100}]}}
      ]
    }"#;

    fn config() -> Config {
        Config::parse(CONFIG.as_bytes()).unwrap()
    }

    #[test]
    fn rewrites_virtual_model_to_target_upstream_model() {
        let body = br#"{"model": "chat", "messages": [{"role":"user","content":"hi"}]}"#;
        let d = decide(
            &config(),
            Endpoint::ChatCompletions,
            body,
            &HealthInput::NONE,
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        assert_eq!(d.target, ModelId(0));
        assert_eq!(
            d.new_body.unwrap(),
            br#"{"model": "gpt-4o", "messages": [{"role":"user","content":"hi"}]}"#
        );
    }

    #[test]
    fn leaves_body_alone_when_model_already_matches() {
        let body = br#"{"model":"gpt-4o"}"#;
        let d = decide(
            &config(),
            Endpoint::ChatCompletions,
            body,
            &HealthInput::NONE,
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        assert_eq!(d.target, ModelId(1));
        assert_eq!(d.new_body, None);
    }

    #[test]
    fn client_errors_come_back_as_replies() {
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            decide(
                &config(),
                Endpoint::ChatCompletions,
                b"{",
                &HealthInput::NONE,
                &mut rng
            )
            .unwrap_err()
            .status,
            400
        );
        assert_eq!(
            decide(
                &config(),
                Endpoint::ChatCompletions,
                br#"{"model":"x"}"#,
                &HealthInput::NONE,
                &mut rng
            )
            .unwrap_err()
            .status,
            404
        );
        assert_eq!(
            decide(
                &config(),
                Endpoint::Embeddings,
                br#"{"model":"chat"}"#,
                &HealthInput::NONE,
                &mut rng
            )
            .unwrap_err()
            .status,
            400
        );
    }
}
