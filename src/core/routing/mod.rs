//! Turning a requested model name into an ordered list of catalog targets.
//!
//! A catalog model routes straight to itself; a virtual model asks its strategy. The plan is
//! the primary target first, then the order later attempts would take.

pub mod condition;
pub mod conditional;
pub mod priority;
pub mod standing;
pub mod weighted;

pub use standing::HealthInput;

use crate::core::config::{Config, ModelId, Named, Routing, VirtualModel, Visibility};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::metadata::Metadata;

/// What routing looks at in a request besides its body.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// The requested model name.
    pub model: &'a str,
    /// Resolved metadata.
    pub metadata: &'a Metadata,
    /// The client's headers (names lower-case).
    pub headers: &'a [(String, Vec<u8>)],
}

/// The routing decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they are tried; never empty, no duplicates.
    pub candidates: Vec<ModelId>,
    /// Index of the virtual model in the config, or `None` for a catalog model called directly.
    pub virtual_model: Option<usize>,
}

impl Plan {
    /// The target of the first attempt.
    pub fn primary(&self) -> Option<ModelId> {
        self.candidates.first().copied()
    }

    /// The virtual model that made this plan.
    pub fn virtual_model<'c>(&self, config: &'c Config) -> Option<&'c VirtualModel> {
        self.virtual_model
            .and_then(|i| config.virtual_models.get(i))
    }
}

/// Decides where a request goes: the ordered candidates, health applied.
pub fn plan(
    config: &Config,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    let model = request.model;
    match config.lookup(model) {
        None => Err(ErrorReply::model_not_found(model)),
        // Internal models exist only as targets; to a client they are unknown.
        Some(Named::Catalog(_, m)) if m.visibility == Visibility::Internal => {
            Err(ErrorReply::model_not_found(model))
        }
        Some(Named::Catalog(id, _)) => Ok(Plan {
            candidates: vec![id],
            virtual_model: None,
        }),
        Some(Named::Virtual(index, vm)) => {
            if !vm.model_types.contains(request.endpoint.model_type()) {
                return Err(ErrorReply::endpoint_not_served(
                    model,
                    request.endpoint.display_path(),
                ));
            }
            let mut candidates = order(vm, request, rng);
            if candidates.is_empty() {
                return Err(match vm.routing {
                    Routing::Conditional(_) => ErrorReply::no_condition_matched(model),
                    _ if vm.has_metadata_match => ErrorReply::no_target_matched(model),
                    _ => ErrorReply::no_target_available(model),
                });
            }
            standing::apply(&mut candidates, |m| health.standing(vm, m));
            Ok(Plan {
                candidates,
                virtual_model: Some(index),
            })
        }
    }
}

/// The strategy's order over the targets the request's metadata allows (TrueFoundry seed:
/// metadata filtering runs before load balancing and stickiness).
fn order(vm: &VirtualModel, request: &Request<'_>, rng: &mut fastrand::Rng) -> Vec<ModelId> {
    let allowed = |m: ModelId| {
        !vm.has_metadata_match
            || vm
                .target(m)
                .is_some_and(|t| request.metadata.matches(&t.metadata_match))
    };
    match &vm.routing {
        Routing::Weighted(targets) if vm.has_metadata_match => {
            let kept: Vec<_> = targets
                .iter()
                .filter(|t| allowed(t.model))
                .copied()
                .collect();
            weighted::order(&kept, rng)
        }
        Routing::Weighted(targets) => weighted::order(targets, rng),
        Routing::Priority(targets) if vm.has_metadata_match => {
            let kept: Vec<_> = targets
                .iter()
                .filter(|t| allowed(t.model))
                .copied()
                .collect();
            priority::order(&kept, rng)
        }
        Routing::Priority(targets) => priority::order(targets, rng),
        Routing::Conditional(targets) => conditional::order(targets, request)
            .into_iter()
            .filter(|m| allowed(*m))
            .collect(),
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

    fn request<'a>(endpoint: Endpoint, model: &'a str, metadata: &'a Metadata) -> Request<'a> {
        Request {
            endpoint,
            model,
            metadata,
            headers: &[],
        }
    }

    fn run(endpoint: Endpoint, model: &str) -> Result<Plan, ErrorReply> {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let metadata = Metadata::default();
        let r = request(endpoint, model, &metadata);
        plan(
            &config,
            &r,
            &HealthInput::NONE,
            &mut fastrand::Rng::with_seed(7),
        )
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
    fn evicted_group_spills_to_the_next_priority_and_unhealthy_targets_go_last() {
        use crate::core::health::policy::FailureWindow;
        use crate::core::health::record::HealthRecord;
        let config = Config::parse(
            br#"{"models": [
                {"name": "a", "cluster": "c", "model": "m"},
                {"name": "b", "cluster": "c", "model": "m"},
                {"name": "c", "cluster": "c", "model": "m"}],
              "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                  {"target": "a", "priority": 0}, {"target": "b", "priority": 0},
                  {"target": "c", "priority": 1}]}}]}"#,
        )
        .unwrap();
        let evicted = HealthRecord {
            evicted_until_ms: 1_000,
            ..HealthRecord::default()
        };
        let mut records = vec![
            evicted.clone(),
            HealthRecord::default(),
            HealthRecord::default(),
        ];
        let mut rng = fastrand::Rng::with_seed(3);
        let run = |records: &[HealthRecord], rng: &mut fastrand::Rng| {
            let health = HealthInput {
                records,
                now_ms: 500,
                window: FailureWindow::default(),
            };
            let metadata = Metadata::default();
            let r = request(Endpoint::ChatCompletions, "vm", &metadata);
            plan(&config, &r, &health, rng).unwrap().candidates
        };
        // One of the group evicted: the other member of the group still comes first.
        for _ in 0..20 {
            assert_eq!(run(&records, &mut rng), [1, 2, 0].map(ModelId));
        }
        // Both evicted: the backup group takes over.
        records[1] = evicted;
        assert_eq!(
            run(&records, &mut rng),
            vec![ModelId(2), ModelId(0), ModelId(1)]
        );
        // Unhealthy (two recent failures) goes behind healthy, ahead of evicted.
        records[2] = HealthRecord {
            failures: vec![400, 450],
            ..HealthRecord::default()
        };
        assert_eq!(
            run(&records, &mut rng)[0],
            ModelId(2),
            "unhealthy still beats evicted"
        );
        records[0] = HealthRecord::default();
        assert_eq!(
            run(&records, &mut rng),
            vec![ModelId(0), ModelId(2), ModelId(1)]
        );
    }

    #[test]
    fn metadata_match_filters_targets_before_the_strategy() {
        let config = Config::parse(
            br#"{"models": [
                {"name": "us", "cluster": "c", "model": "m"},
                {"name": "eu", "cluster": "c", "model": "m"},
                {"name": "any", "cluster": "c", "model": "m"}],
              "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing", "load_balance_targets": [
                  {"target": "us", "weight": 80, "metadata_match": {"region": "us", "tier": "enterprise"}},
                  {"target": "eu", "weight": 20, "metadata_match": {"region": "eu"}},
                  {"target": "any", "weight": 0}]}}]}"#,
        )
        .unwrap();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut run = |meta: &[u8]| {
            let metadata = Metadata::resolve(Some(meta), &[]).unwrap();
            plan(
                &config,
                &request(Endpoint::ChatCompletions, "vm", &metadata),
                &HealthInput::NONE,
                &mut rng,
            )
            .map(|p| p.candidates)
        };
        assert_eq!(
            run(br#"{"region":"us","tier":"enterprise"}"#).unwrap(),
            [0, 2].map(ModelId)
        );
        assert_eq!(
            run(br#"{"region":"us"}"#).unwrap(),
            vec![ModelId(2)],
            "AND of every pair"
        );
        assert_eq!(run(br#"{"region":"eu"}"#).unwrap(), [1, 2].map(ModelId));
        assert_eq!(
            run(b"{}").unwrap(),
            vec![ModelId(2)],
            "a target without metadata_match always stays"
        );

        let strict = Config::parse(
            br#"{"models": [{"name": "us", "cluster": "c", "model": "m"}],
              "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                  {"target": "us", "priority": 0, "metadata_match": {"region": "us"}}]}}]}"#,
        )
        .unwrap();
        let metadata = Metadata::default();
        let e = plan(
            &strict,
            &request(Endpoint::ChatCompletions, "vm", &metadata),
            &HealthInput::NONE,
            &mut rng,
        )
        .unwrap_err();
        assert_eq!(e.status, 404);
        assert!(e.body.contains("metadata_match"));
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
