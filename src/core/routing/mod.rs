//! Turning a requested model name into an ordered list of catalog targets.
//!
//! A catalog model routes straight to itself; a virtual model asks its strategy. The plan is
//! the primary target first, then the order later attempts would take.

pub mod classifier;
pub mod complexity;
pub mod conditional;
pub mod hash;
pub mod health_input;
pub mod latency;
pub mod native;
pub mod pins;
pub mod priority;
pub mod rendezvous;
pub mod request;
pub mod round_robin;
pub mod shared_state;
pub mod sticky;
pub mod weighted;

pub use health_input::HealthInput;
pub use request::Request;
pub use shared_state::{LocalState, RoutingState};

use crate::core::config::{
    Config, ModelId, Named, Routing, SessionIdentifier, Tier, VirtualModel, Visibility,
};
use crate::core::errors::ErrorReply;
use std::borrow::Cow;

/// The routing decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they are tried; never empty, no duplicates.
    pub candidates: Vec<ModelId>,
    /// Index of the virtual model in the config, or `None` for a catalog model called directly.
    pub virtual_model: Option<usize>,
    /// The sticky session the request belongs to, if the virtual model pins sessions.
    pub sticky: Option<sticky::Session>,
    /// Pinned to its first candidate: retries only, no fallback (a conversation's origin).
    pub pinned: bool,
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
    plan_within(config, request, health, rng, None)
}

/// [`plan`], a virtual model's strategy choosing only among the targets `within` keeps (a
/// Responses request that must reach a provider that stores responses, `responses::stored`).
pub fn plan_within(
    config: &Config,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
    within: Option<&dyn Fn(ModelId) -> bool>,
) -> Result<Plan, ErrorReply> {
    let model = request.model;
    match config.lookup(model) {
        None => Err(ErrorReply::model_not_found(model)),
        // Internal models exist only as targets; to a client they are unknown.
        Some(Named::Catalog(_, m)) if m.visibility == Visibility::Internal => {
            Err(ErrorReply::model_not_found(model))
        }
        Some(Named::Catalog(_, m)) if !request.endpoint.served_by(m.apis) => Err(
            ErrorReply::no_capable_target(model, request.endpoint.display_path()),
        ),
        Some(Named::Catalog(id, _)) => Ok(Plan {
            candidates: vec![id],
            virtual_model: None,
            sticky: None,
            pinned: false,
        }),
        Some(Named::Virtual(index, vm)) => {
            check_virtual(config, vm, request)?;
            let admit = Admit::new(config, vm, request, within);
            let (mut candidates, sticky, ranked) =
                order(config, index, vm, request, health, rng, &admit);
            if candidates.is_empty() {
                return Err(nothing_left(vm, request.model));
            }
            // Health demotion does not apply to complexity routing (TrueFoundry seed); weighted
            // orders come out demoted already, from one look at each target's standing.
            if !ranked && !matches!(vm.routing, Routing::Complexity { .. }) {
                health_input::apply(&mut candidates, |m| health.standing(vm, m));
            }
            native::refuse_or_cut(config, vm, request, &mut candidates)?;
            if let Some(n) = vm.max_targets {
                limit(&mut candidates, n, |m| vm.policy(m).fallback_candidate);
            }
            Ok(Plan {
                candidates,
                virtual_model: Some(index),
                sticky,
                pinned: false,
            })
        }
    }
}

/// A virtual model's own refusals: an endpoint outside its `model_types`, or no target that
/// serves the endpoint natively.
fn check_virtual(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
) -> Result<(), ErrorReply> {
    let (model, path) = (request.model, request.endpoint.display_path());
    if !vm.model_types.contains(request.endpoint.model_type()) {
        return Err(ErrorReply::endpoint_not_served(model, path));
    }
    let native = |m: ModelId| {
        config
            .model(m)
            .is_some_and(|m| request.endpoint.served_by(m.apis))
    };
    if !vm.targets.iter().any(|t| native(t.model)) {
        return Err(ErrorReply::no_capable_target(model, path));
    }
    Ok(())
}

/// Why a virtual model's filters left no candidate for the request naming it `model`.
fn nothing_left(vm: &VirtualModel, model: &str) -> ErrorReply {
    match vm.routing {
        Routing::Conditional(_) => ErrorReply::no_condition_matched(model),
        _ if vm.has_metadata_match => ErrorReply::no_target_matched(model),
        _ => ErrorReply::no_target_available(model),
    }
}

/// The targets of `vm` that may take this request whatever the strategy, health and
/// `max_targets_per_request` make of it, in config order: they serve the endpoint (see
/// [`Admit`]), their `metadata_match` holds and, under conditional routing, their `when`
/// does. The same errors as [`plan`] when there are none.
pub fn eligible(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
) -> Result<Vec<ModelId>, ErrorReply> {
    check_virtual(config, vm, request)?;
    let admit = Admit::new(config, vm, request, None);
    let when = |m: ModelId| match &vm.routing {
        Routing::Conditional(targets) => targets
            .iter()
            .any(|t| t.model == m && t.when.eval(request as &dyn crate::core::when::Facts)),
        _ => true,
    };
    let out: Vec<ModelId> = vm
        .targets
        .iter()
        .map(|t| t.model)
        .filter(|m| admit.admits(*m) && when(*m))
        .collect();
    if out.is_empty() {
        return Err(nothing_left(vm, request.model));
    }
    Ok(out)
}

/// Which targets of a virtual model a request may reach before its strategy orders them.
struct Admit<'r> {
    config: &'r Config,
    vm: &'r VirtualModel,
    request: &'r Request<'r>,
    within: Option<&'r dyn Fn(ModelId) -> bool>,
    /// Under `non_native_responses: "reject"`, a `/v1/responses` target that does not serve
    /// the Responses API natively stays in, so that routing picking it answers the 400.
    keeps_non_native: bool,
    /// Whether any target can fail a check: otherwise the target list is used as it is.
    filters: bool,
}

impl<'r> Admit<'r> {
    fn new(
        config: &'r Config,
        vm: &'r VirtualModel,
        request: &'r Request<'r>,
        within: Option<&'r dyn Fn(ModelId) -> bool>,
    ) -> Self {
        let keeps_non_native =
            native::keeps_non_native(request.endpoint, config.non_native_responses);
        let mut admit = Admit {
            config,
            vm,
            request,
            within,
            keeps_non_native,
            filters: true,
        };
        admit.filters = within.is_some()
            || vm.has_metadata_match
            || !vm.targets.iter().all(|t| admit.serves(t.model));
        admit
    }

    /// A target must serve the endpoint natively (TrueFoundry virtual models, "Supported API
    /// Types": every target must support the operation called); a `/v1/responses` target that
    /// does not is kept under `"reject"`, to be refused when picked (`native.rs`).
    fn serves(&self, m: ModelId) -> bool {
        self.keeps_non_native
            || self
                .config
                .model(m)
                .is_some_and(|model| self.request.endpoint.served_by(model.apis))
    }

    fn admits(&self, m: ModelId) -> bool {
        self.serves(m)
            && (!self.vm.has_metadata_match
                || self
                    .vm
                    .target(m)
                    .is_some_and(|t| self.request.metadata.matches(&t.metadata_match)))
            && self.within.is_none_or(|within| within(m))
    }

    /// `targets` without those not admitted, copied only when some target can fail a check.
    fn keep<'t, T: Copy>(&self, targets: &'t [T], model: impl Fn(&T) -> ModelId) -> Cow<'t, [T]> {
        if self.filters {
            Cow::Owned(
                targets
                    .iter()
                    .filter(|t| self.admits(model(t)))
                    .copied()
                    .collect(),
            )
        } else {
            Cow::Borrowed(targets)
        }
    }
}

/// Keeps the first candidate and the next `max - 1` that may receive a fallback: the targets
/// one request may try under `max_targets_per_request` (Zuplo seed, "Failures and retries":
/// at most two models, the chosen one and its retry model).
fn limit(candidates: &mut Vec<ModelId>, max: usize, fallback_candidate: impl Fn(ModelId) -> bool) {
    let mut kept = 0;
    candidates.retain(|m| {
        let keep = kept < max && (kept == 0 || fallback_candidate(*m));
        kept += usize::from(keep);
        keep
    });
}

/// Who the caller is for latency routing: its `caller_identifier`, else the config's
/// `caller_identity` (by default the client's credential); hashed at once so the raw value
/// goes nowhere.
fn latency_caller(
    config: &Config,
    caller: Option<&SessionIdentifier>,
    request: &Request<'_>,
) -> [u8; 8] {
    let hash = match caller {
        Some(id) => rendezvous::hash64(&[request.identifier(id).as_deref().unwrap_or_default()]),
        None => {
            let caller = request.caller(&config.caller_identity);
            rendezvous::hash64(&[&caller.0])
        }
    };
    hash.to_le_bytes()
}

/// The strategy's order over the targets the request's metadata allows (TrueFoundry seed:
/// metadata filtering runs before load balancing and stickiness), with the sticky session, and
/// whether health already ordered it (unhealthy, then evicted targets last).
fn order(
    config: &Config,
    index: usize,
    vm: &VirtualModel,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
    admit: &Admit<'_>,
) -> (Vec<ModelId>, Option<sticky::Session>, bool) {
    let now_ms = health.now_ms;
    match &vm.routing {
        Routing::Weighted(targets) => {
            let kept = admit.keep(targets, |t| t.model);
            // `missing_identifier: "none"`: a request with none of the identifiers has no
            // session, and is weighted like any other.
            let sticky = vm
                .sticky
                .as_ref()
                .filter(|rule| rule.shared_when_missing || sticky::identified(rule, request));
            match sticky {
                Some(rule) => {
                    let session = sticky::session(&vm.name, rule, request, now_ms);
                    let pinned = request
                        .state
                        .pinned(&vm.name, session.hash, session.window)
                        .and_then(|name| match config.lookup(&name) {
                            Some(Named::Catalog(id, _)) => Some(id),
                            _ => None,
                        });
                    let standing = |m| health.standing(vm, m);
                    let order = sticky::order(config, &kept, session, pinned, standing);
                    (order, Some(session), true)
                }
                None => {
                    let standing = |m| health.standing(vm, m);
                    (weighted::order_by_health(&kept, standing, rng), None, true)
                }
            }
        }
        Routing::Priority(targets) => {
            let kept = admit.keep(targets, |t| t.model);
            let models: Vec<ModelId> = kept.iter().map(|t| t.model).collect();
            let share = health.shares(&models);
            let of = |m: ModelId| share.iter().find(|(x, _)| *x == m).map_or(1.0, |(_, s)| *s);
            (priority::order(&kept, of, rng), None, false)
        }
        Routing::Conditional(targets) => {
            let order = conditional::order(targets, request);
            (
                order.into_iter().filter(|m| admit.admits(*m)).collect(),
                None,
                false,
            )
        }
        Routing::Latency { targets, caller } => {
            let kept = admit.keep(targets, |m| *m);
            let id = latency_caller(config, caller.as_ref(), request);
            (
                latency::order(config, &vm.name, &kept, &id, health),
                None,
                false,
            )
        }
        Routing::Complexity {
            targets,
            thresholds,
            ..
        } => {
            let kept = admit.keep(targets, |t| t.model);
            // The classifier model's tier, when it gave one, spares reading the text.
            let classify = || {
                request.tier_hint.unwrap_or_else(|| {
                    let (text, turns) = crate::core::conversation::all_text(|n| request.field(n));
                    let tools = request
                        .fields
                        .iter()
                        .any(|(k, _)| k == "tools" || k == "functions");
                    complexity::classify(complexity::score(&text, turns, tools), thresholds)
                })
            };
            // An optional session pin holds the tier of the session's first request.
            // A request without any session identifier has no session to pin.
            let identified = vm
                .sticky
                .as_ref()
                .filter(|rule| sticky::identified(rule, request));
            let tier = match identified {
                Some(rule) => {
                    let session = sticky::session(&vm.name, rule, request, now_ms);
                    let pinned = request
                        .state
                        .pinned(&vm.name, session.hash, session.window)
                        .and_then(|v| v.strip_prefix("tier:").and_then(Tier::from_name));
                    let tier = pinned.unwrap_or_else(|| {
                        let tier = classify();
                        let value = format!("tier:{}", tier.name());
                        request
                            .state
                            .pin(&vm.name, session.hash, session.window, &value);
                        tier
                    });
                    tier
                }
                None => classify(),
            };
            let start = rng.usize(..kept.len().max(1));
            (complexity::order(&kept, tier, start), None, false)
        }
        Routing::Hash { targets, by } => {
            let kept = admit.keep(targets, |m| *m);
            match hash::key_hash(by, request) {
                Some(key) => (hash::order(config, &kept, key), None, false),
                // No usable key: round robin (Zuplo seed).
                None => {
                    let caller = request.caller(&config.caller_identity);
                    let start = request.state.next_cursor(index, caller, kept.len(), rng);
                    (round_robin::order(&kept, start), None, false)
                }
            }
        }
        Routing::RoundRobin(targets) => {
            let kept = admit.keep(targets, |m| *m);
            let caller = request.caller(&config.caller_identity);
            let start = request.state.next_cursor(index, caller, kept.len(), rng);
            (round_robin::order(&kept, start), None, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::caller::Caller;
    use crate::core::endpoint::Endpoint;
    use crate::core::headers::Headers;
    use crate::core::headers::NO_HEADERS;
    use crate::core::metadata::Metadata;

    static NO_STATE: NoState = NoState;

    /// Routing state for tests that use neither pins nor cursors.
    struct NoState;
    impl RoutingState for NoState {
        fn pinned(&self, _: &str, _: u64, _: u64) -> Option<String> {
            None
        }
        fn next_cursor(&self, _: usize, _: Caller, _: usize, _: &mut fastrand::Rng) -> usize {
            0
        }
        fn pin(&self, _: &str, _: u64, _: u64, _: &str) {}
    }

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

    fn request<'a>(endpoint: Endpoint, model: &'a str, metadata: &'a Metadata<'a>) -> Request<'a> {
        Request {
            endpoint,
            model,
            metadata,
            headers: &NO_HEADERS,
            state: &NO_STATE,
            body: b"",
            fields: &[],
            tier_hint: None,
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

    /// A Zuplo-shaped virtual model: round robin over three models, names in any case.
    const ZUPLO: &str = r#"{
      "model_name_case": "insensitive",
      "models": [
        {"name": "azure-eastus/gpt-5", "cluster": "azure-eastus", "model": "gpt-5", "provider": "azure"},
        {"name": "azure-westus/gpt-5", "cluster": "azure-westus", "model": "gpt-5", "provider": "azure"},
        {"name": "openai/gpt-5", "cluster": "openai", "model": "gpt-5"}
      ],
      "virtual_models": [
        {"name": "my-ai-gateway-load-balancing-inbound-policy", "model_types": ["chat"],
         "max_targets_per_request": 2,
         "routing_config": {"type": "round-robin-routing", "load_balance_targets": [
           {"target": "azure-eastus/gpt-5"}, {"target": "Azure-WestUS/gpt-5"},
           {"target": "OpenAI/gpt-5", "fallback_candidate": false}]}}
      ]
    }"#;

    fn zuplo_plan(config: &Config, model: &str, seed: u64) -> Result<Plan, ErrorReply> {
        let metadata = Metadata::default();
        let r = request(Endpoint::ChatCompletions, model, &metadata);
        plan(
            config,
            &r,
            &HealthInput::NONE,
            &mut fastrand::Rng::with_seed(seed),
        )
    }

    #[test]
    fn max_targets_per_request_keeps_the_chosen_model_and_its_retry_model() {
        // Zuplo seed, "Failures and retries": each request tries at most two models. Without
        // the limit (the old behaviour) every target was a candidate.
        let config = Config::parse(ZUPLO.as_bytes()).unwrap();
        let vm = "my-ai-gateway-load-balancing-inbound-policy";
        // The retry model is a fallback candidate: never openai/gpt-5 here.
        assert_eq!(
            zuplo_plan(&config, vm, 1).unwrap().candidates,
            vec![ModelId(0), ModelId(1)]
        );
        let unlimited = ZUPLO.replace(r#""max_targets_per_request": 2,"#, "");
        let config = Config::parse(unlimited.as_bytes()).unwrap();
        assert_eq!(zuplo_plan(&config, vm, 1).unwrap().candidates.len(), 3);
        let mut c = vec![ModelId(0), ModelId(2), ModelId(1)];
        limit(&mut c, 1, |_| true);
        assert_eq!(c, vec![ModelId(0)]);
    }

    #[test]
    fn case_insensitive_names_find_models_and_virtual_models_in_any_case() {
        // Zuplo seed, "Limitations": `openai/gpt-5` and `OpenAI/gpt-5` are one model.
        let config = Config::parse(ZUPLO.as_bytes()).unwrap();
        assert!(zuplo_plan(&config, "My-AI-Gateway-Load-Balancing-Inbound-Policy", 1).is_ok());
        assert!(matches!(
            config.lookup("OPENAI/GPT-5"),
            Some(Named::Catalog(ModelId(2), _))
        ));
        // By default names are exact (the old behaviour), so the targets above are unknown.
        let exact = ZUPLO.replace(r#""model_name_case": "insensitive","#, "");
        assert!(Config::parse(exact.as_bytes())
            .unwrap_err()
            .to_string()
            .ends_with("`Azure-WestUS/gpt-5` is not a model in `models`"));
        let fixed = exact
            .replace("Azure-WestUS", "azure-westus")
            .replace("OpenAI/", "openai/");
        let config = Config::parse(fixed.as_bytes()).unwrap();
        assert!(config.lookup("OpenAI/gpt-5").is_none());
        // Insensitive, two entries differing only in case are one name listed twice.
        let twice = ZUPLO.replace(
            r#""name": "openai/gpt-5", "cluster": "openai""#,
            r#""name": "AZURE-EASTUS/gpt-5", "cluster": "openai""#,
        );
        assert_eq!(
            Config::parse(twice.as_bytes()).unwrap_err().to_string(),
            "models[2].name: `AZURE-EASTUS/gpt-5` is already defined by another model"
        );
        assert_eq!(
            Config::parse(ZUPLO.replace(r#""insensitive""#, r#""lower""#).as_bytes())
                .unwrap_err()
                .to_string(),
            "model_name_case: expected `sensitive` or `insensitive`, got `lower`"
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

    /// 50/30/20, the first target unhealthy (two failures in the window): how often each
    /// target comes first over 10,000 requests (or 10,000 sticky sessions).
    fn firsts_with_the_first_target_unhealthy(sticky: bool) -> [u32; 3] {
        use crate::core::health::policy::FailureWindow;
        use crate::core::health::record::HealthRecord;
        let sticky = if sticky {
            r#""sticky_routing": {"ttl_seconds": 60, "session_identifiers": [{"key": "x-user", "source": "headers"}]},"#
        } else {
            ""
        };
        let config = Config::parse(
            format!(
                r#"{{"models": [
                {{"name": "a", "cluster": "c", "model": "m"}},
                {{"name": "b", "cluster": "c", "model": "m"}},
                {{"name": "c", "cluster": "c", "model": "m"}}],
              "virtual_models": [{{"name": "vm", "model_types": ["chat"], "routing_config": {{
                "type": "weight-based-routing", {sticky} "load_balance_targets": [
                  {{"target": "a", "weight": 50}}, {{"target": "b", "weight": 30}},
                  {{"target": "c", "weight": 20}}]}}}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let records = vec![
            HealthRecord {
                failures: vec![400, 450],
                ..HealthRecord::default()
            },
            HealthRecord::default(),
            HealthRecord::default(),
        ];
        let health = HealthInput {
            records: &records,
            now_ms: 500,
            window: FailureWindow::default(),
        };
        let metadata = Metadata::default();
        let mut rng = fastrand::Rng::with_seed(16);
        let mut firsts = [0u32; 3];
        for i in 0..10_000 {
            let user = format!("user-{i}");
            let headers = Headers::from_pairs([("x-user", user.as_str())]);
            let r = Request {
                headers: &headers,
                ..request(Endpoint::ChatCompletions, "vm", &metadata)
            };
            let c = plan(&config, &r, &health, &mut rng).unwrap().candidates;
            assert_eq!(c[2], ModelId(0), "the unhealthy target goes last");
            firsts[c[0].0] += 1;
        }
        firsts
    }

    #[test]
    fn healthy_targets_share_an_unhealthy_targets_traffic_by_their_weights() {
        // 60/40, not 80/20: standard deviation 49 over 10,000; bands of 4 of them.
        for sticky in [false, true] {
            let firsts = firsts_with_the_first_target_unhealthy(sticky);
            assert_eq!(firsts[0], 0);
            assert!(
                firsts[1].abs_diff(6000) < 200,
                "sticky {sticky}: {firsts:?}"
            );
            assert!(
                firsts[2].abs_diff(4000) < 200,
                "sticky {sticky}: {firsts:?}"
            );
        }
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
    fn targets_that_cannot_serve_the_endpoint_are_dropped() {
        let config = Config::parse(
            br#"{"models": [
                {"name": "claude", "cluster": "c", "model": "m", "provider": "anthropic", "visibility": "public"},
                {"name": "gpt", "cluster": "c", "model": "m", "provider": "openai"}],
              "virtual_models": [
                {"name": "vm", "model_types": ["chat", "embedding"], "routing_config": {
                  "type": "weight-based-routing", "load_balance_targets": [
                    {"target": "claude", "weight": 50}, {"target": "gpt", "weight": 50}]}}]}"#,
        )
        .unwrap();
        let metadata = Metadata::default();
        let mut rng = fastrand::Rng::with_seed(2);
        let mut run = |endpoint, model| {
            let r = request(endpoint, model, &metadata);
            plan(&config, &r, &HealthInput::NONE, &mut rng)
        };
        for _ in 0..20 {
            assert_eq!(
                run(Endpoint::Messages, "vm").unwrap().candidates,
                vec![ModelId(0)]
            );
            assert_eq!(
                run(Endpoint::Embeddings, "vm").unwrap().candidates,
                vec![ModelId(1)]
            );
        }
        assert_eq!(
            run(Endpoint::ChatCompletions, "vm")
                .unwrap()
                .candidates
                .len(),
            2
        );
        let e = run(Endpoint::Embeddings, "claude").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("/v1/embeddings"));
    }

    #[test]
    fn eligibility_follows_each_models_apis_not_its_provider() {
        // Claude served through Azure AI (an Azure endpoint that speaks the Messages API), and
        // an OpenAI-compatible server, which is not assumed to serve the Responses API.
        let config = Config::parse(
            br#"{"models": [
                {"name": "azure-ai/claude", "cluster": "c", "model": "claude-sonnet-4-6",
                 "provider": "azure", "apis": ["messages"]},
                {"name": "anthropic/claude", "cluster": "c", "model": "m", "provider": "anthropic"},
                {"name": "vllm/llama", "cluster": "c", "model": "m", "provider": "openai-compatible"},
                {"name": "openai/gpt", "cluster": "c", "model": "m", "provider": "openai"}],
              "virtual_models": [
                {"name": "claude", "model_types": ["chat"], "routing_config": {
                  "type": "priority-based-routing", "load_balance_targets": [
                    {"target": "azure-ai/claude", "priority": 0},
                    {"target": "anthropic/claude", "priority": 1},
                    {"target": "openai/gpt", "priority": 2}]}},
                {"name": "resp", "model_types": ["responses", "chat"], "routing_config": {
                  "type": "priority-based-routing", "load_balance_targets": [
                    {"target": "vllm/llama", "priority": 0},
                    {"target": "openai/gpt", "priority": 1}]}}]}"#,
        )
        .unwrap();
        let metadata = Metadata::default();
        let mut rng = fastrand::Rng::with_seed(4);
        let mut run = |endpoint, model| {
            let r = request(endpoint, model, &metadata);
            plan(&config, &r, &HealthInput::NONE, &mut rng).map(|p| p.candidates)
        };
        assert_eq!(
            run(Endpoint::Messages, "claude").unwrap(),
            [0, 1].map(ModelId),
            "Claude on Azure AI serves /v1/messages; the GPT model does not"
        );
        assert_eq!(
            run(Endpoint::ChatCompletions, "claude").unwrap(),
            [1, 3].map(ModelId),
            "that Azure model serves only the Messages API"
        );
        // Routing picks the vLLM model, which does not serve the Responses API: the 400 of
        // TrueFoundry's "Responses API conversations" (`native.rs`), not a silent skip.
        let e = run(Endpoint::Responses, "resp").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("routed this request to `vllm/llama`"));
        assert_eq!(
            run(Endpoint::ChatCompletions, "resp").unwrap(),
            [2, 3].map(ModelId)
        );
    }

    #[test]
    fn hash_and_latency_routing_key_on_the_verified_jwt_subject() {
        let config = Config::parse(
            br#"{"models": [
                {"name": "a", "cluster": "c", "model": "m"}, {"name": "b", "cluster": "c", "model": "m"},
                {"name": "c", "cluster": "c", "model": "m"}, {"name": "d", "cluster": "c", "model": "m"}],
              "virtual_models": [
                {"name": "hash", "model_types": ["chat"], "routing_config": {
                  "type": "hash-based-routing", "hash_key": {"source": "jwt", "claim": "sub"},
                  "load_balance_targets": [{"target": "a"}, {"target": "b"}, {"target": "c"}, {"target": "d"}]}},
                {"name": "latency", "model_types": ["chat"], "routing_config": {
                  "type": "latency-based-routing",
                  "caller_identifier": {"source": "jwt", "payload_in_metadata": "claims"},
                  "load_balance_targets": [{"target": "a"}, {"target": "b"}, {"target": "c"}, {"target": "d"}]}}]}"#,
        )
        .unwrap();
        let metadata = Metadata::default();
        let route = |model: &str, state: &LocalState, token: &str| {
            let headers = Headers::from_pairs([("authorization", token)]);
            let r = Request {
                headers: &headers,
                state,
                ..request(Endpoint::ChatCompletions, model, &metadata)
            };
            plan(
                &config,
                &r,
                &HealthInput::NONE,
                &mut fastrand::Rng::with_seed(9),
            )
            .unwrap()
            .candidates
        };
        let mut spread = std::collections::BTreeSet::new();
        for user in 0..40 {
            let sub = format!("user-{user}");
            let alice = LocalState::default().with_claim("jwt_payload", "sub", &sub);
            let first = route("hash", &alice, "Bearer token-1");
            assert_eq!(route("hash", &alice, "Bearer token-2"), first, "{sub}");
            spread.insert(first[0].0);
            let alice = LocalState::default().with_claim("claims", "sub", &sub);
            let first = route("latency", &alice, "Bearer token-1");
            assert_eq!(route("latency", &alice, "Bearer token-2")[0], first[0]);
        }
        assert!(spread.len() >= 3, "{spread:?}");
        // No verified token: no key, so hash routing goes round robin.
        let none = LocalState::default();
        let firsts: std::collections::BTreeSet<_> = (0..8)
            .map(|_| route("hash", &none, "Bearer x")[0].0)
            .collect();
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[test]
    fn virtual_model_refuses_endpoints_outside_its_model_types() {
        let e = run(Endpoint::Completions, "vm").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("/v1/completions"));
        // `/messages` is in the `chat` model type, but these OpenAI targets cannot serve it.
        let e = run(Endpoint::Messages, "vm").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("natively"));
    }
}
