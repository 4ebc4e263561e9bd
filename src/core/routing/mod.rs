//! Turning a requested model name into an ordered list of catalog targets.
//!
//! A catalog model routes straight to itself; a virtual model asks its strategy. The plan is
//! the primary target first, then the order later attempts would take.

pub mod priority;
pub mod weighted;

use crate::core::config::{Config, ModelId, Named, Routing, Visibility};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;

/// The routing decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they are tried; never empty, no duplicates.
    pub candidates: Vec<ModelId>,
}

impl Plan {
    /// The target of the first attempt.
    pub fn primary(&self) -> Option<ModelId> {
        self.candidates.first().copied()
    }
}

/// Decides where a request for `model` on `endpoint` goes.
pub fn plan(
    config: &Config,
    endpoint: Endpoint,
    model: &str,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    match config.lookup(model) {
        None => Err(ErrorReply::model_not_found(model)),
        // Internal models exist only as targets; to a client they are unknown.
        Some(Named::Catalog(_, m)) if m.visibility == Visibility::Internal => {
            Err(ErrorReply::model_not_found(model))
        }
        Some(Named::Catalog(id, _)) => Ok(Plan {
            candidates: vec![id],
        }),
        Some(Named::Virtual(vm)) => {
            if !vm.model_types.contains(endpoint.model_type()) {
                return Err(ErrorReply::endpoint_not_served(
                    model,
                    endpoint.display_path(),
                ));
            }
            let candidates = match &vm.routing {
                Routing::Weighted(targets) => weighted::order(targets, rng),
                Routing::Priority(targets) => priority::order(targets, rng),
            };
            if candidates.is_empty() {
                return Err(ErrorReply::no_target_available(model));
            }
            Ok(Plan { candidates })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
      "models": [
        {"name": "a", "cluster": "ca", "model": "ma", "visibility": "internal"},
        {"name": "b", "cluster": "cb", "model": "mb", "visibility": "internal"},
        {"name": "pub", "cluster": "cp", "model": "mp", "visibility": "public"}
      ],
      "virtual_models": [
        {"name": "vm", "model_types": ["chat", "embedding"],
         "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
           {"target": "a", "weight": 50}, {"target": "b", "weight": 50}]}}
      ]
    }"#;

    fn run(endpoint: Endpoint, model: &str) -> Result<Plan, ErrorReply> {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        plan(&config, endpoint, model, &mut fastrand::Rng::with_seed(7))
    }

    #[test]
    fn public_catalog_model_routes_straight_to_itself() {
        assert_eq!(
            run(Endpoint::ChatCompletions, "pub").unwrap().candidates,
            vec![ModelId(2)]
        );
    }

    #[test]
    fn internal_and_unknown_models_are_not_found() {
        assert_eq!(run(Endpoint::ChatCompletions, "a").unwrap_err().status, 404);
        assert_eq!(
            run(Endpoint::ChatCompletions, "nope").unwrap_err().status,
            404
        );
        assert_eq!(
            run(Endpoint::ChatCompletions, "a").unwrap_err().body,
            run(Endpoint::ChatCompletions, "nope")
                .unwrap_err()
                .body
                .replace("nope", "a"),
            "an internal model must be indistinguishable from an unknown one"
        );
    }

    #[test]
    fn virtual_model_plans_every_target_once() {
        let p = run(Endpoint::Embeddings, "vm").unwrap();
        let mut c = p.candidates.clone();
        c.sort_by_key(|m| m.0);
        assert_eq!(c, vec![ModelId(0), ModelId(1)]);
        assert!(p.primary().is_some());
    }

    #[test]
    fn virtual_model_refuses_endpoints_outside_its_model_types() {
        let e = run(Endpoint::Completions, "vm").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("/v1/completions"));
        // `/messages` is served by the `chat` model type.
        assert!(run(Endpoint::Messages, "vm").is_ok());
    }
}
