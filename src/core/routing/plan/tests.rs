//! `plan` end to end: lookup, refusals, strategies, health and the filters before them.

use super::*;
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::headers::NO_HEADERS;
use crate::core::metadata::Metadata;
use crate::core::routing::pins::PinClock;
use crate::core::routing::{CursorKey, LocalState, RoutingState};

static NO_STATE: NoState = NoState;

/// Routing state for tests that use neither pins nor cursors.
struct NoState;
impl RoutingState for NoState {
    fn pinned(&self, _: &str, _: u64, _: u64, _: PinClock) -> Option<String> {
        None
    }
    fn next_cursor(&self, _: CursorKey, _: usize, _: &mut fastrand::Rng) -> usize {
        0
    }
    fn pin(&self, _: &str, _: u64, _: u64, _: &str, _: PinClock) {}
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
    // Zuplo model load balancing, "Failures and retries": each request tries at most two models.
    // Without the limit (the old behaviour) every target was a candidate.
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
    // Zuplo model load balancing, "Limitations": `openai/gpt-5` and `OpenAI/gpt-5` are one model.
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
fn eligibility_follows_each_models_apis_and_the_virtual_models_translation() {
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
            {"name": "claude", "model_types": ["chat"], "translate": [], "routing_config": {
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
        [3].map(ModelId),
        "with no translation, only the GPT model serves Chat Completions (Anthropic's default \
         apis are Messages only)"
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

#[test]
fn a_target_that_needs_translation_is_eligible_where_the_virtual_model_translates() {
    let config = |translate: &str| {
        Config::parse(
            format!(
                r#"{{"models": [
            {{"name": "anthropic/claude", "cluster": "c", "model": "m", "provider": "anthropic"}},
            {{"name": "vllm/llama", "cluster": "c", "model": "m", "provider": "openai-compatible"}}],
          "virtual_models": [
            {{"name": "mixed", "model_types": ["chat"], {translate} "routing_config": {{
              "type": "priority-based-routing", "load_balance_targets": [
                {{"target": "anthropic/claude", "priority": 0}},
                {{"target": "vllm/llama", "priority": 1}}]}}}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    };
    let metadata = Metadata::default();
    let mut rng = fastrand::Rng::with_seed(4);
    let mut run = |config: &Config, endpoint| {
        let r = request(endpoint, "mixed", &metadata);
        plan(config, &r, &HealthInput::NONE, &mut rng).map(|p| p.candidates)
    };
    // Default: Chat Completions is translated for Claude; Messages is not for vLLM.
    let c = config("");
    assert_eq!(
        run(&c, Endpoint::ChatCompletions).unwrap(),
        [0, 1].map(ModelId)
    );
    assert_eq!(run(&c, Endpoint::Messages).unwrap(), [0].map(ModelId));
    let both = config(r#""translate": ["chat_completions", "messages"],"#);
    assert_eq!(run(&both, Endpoint::Messages).unwrap(), [0, 1].map(ModelId));
    let none = config(r#""translate": [],"#);
    assert_eq!(
        run(&none, Endpoint::ChatCompletions).unwrap(),
        [1].map(ModelId)
    );
}
