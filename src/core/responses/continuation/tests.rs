use super::*;
use crate::core::decision::decide;
use crate::core::endpoint::Endpoint;
use crate::core::headers::NO_HEADERS;
use crate::core::routing::HealthInput;
use crate::core::routing::LocalState;

const CONFIG: &str = r#"{
  "models": [
    {"name": "openai-a/gpt-4o", "cluster": "a", "model": "gpt-4o"},
    {"name": "openai-b/gpt-4o", "cluster": "b", "model": "gpt-4o"},
    {"name": "azure/gpt-4o", "cluster": "c", "model": "gpt-4o-prod", "provider": "azure"},
    {"name": "anthropic/claude", "cluster": "d", "model": "claude", "provider": "anthropic"},
    {"name": "elsewhere/gpt-4o", "cluster": "e", "model": "gpt-4o"}
  ],
  "response_id_keys": ["0123456789abcdef-signing"],
  "virtual_models": [
    {"name": "vm", "model_types": ["responses", "chat"], "routing_config": {
      "type": "weight-based-routing", "load_balance_targets": [
        {"target": "openai-a/gpt-4o", "weight": 40, "retry_config": {"attempts": 2}},
        {"target": "openai-b/gpt-4o", "weight": 30},
        {"target": "azure/gpt-4o", "weight": 30},
        {"target": "anthropic/claude", "weight": 0}]}}
  ]
}"#;

fn config() -> Config {
    Config::parse(CONFIG.as_bytes()).unwrap()
}

fn run(
    config: &Config,
    body: &str,
) -> Result<crate::core::decision::Decision<'static>, ErrorReply> {
    // The config outlives every decision of a test: leak one per call to keep tests short.
    let config: &'static Config = Box::leak(Box::new(config.clone()));
    decide(
        config,
        Endpoint::Responses,
        body.as_bytes(),
        &NO_HEADERS,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(7),
    )
}

fn sent(d: &crate::core::decision::Decision<'_>, body: &str) -> serde_json::Value {
    let bytes = d.outbound.body(body.as_bytes()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_follow_up_goes_only_to_its_origin_with_the_providers_id_swapped_in() {
    let c = config();
    let id = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "openai-b/gpt-4o"),
        "resp_real42",
    );
    let body = format!(r#"{{"model":"vm","input":"more","previous_response_id":"{id}"}}"#);
    for seed in 0..20 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let d = decide(
            &c,
            Endpoint::Responses,
            body.as_bytes(),
            &NO_HEADERS,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut rng,
        )
        .unwrap();
        assert_eq!(d.plan.candidates, [ModelId(1)], "no load balancing");
        assert!(d.plan.pinned, "no fallback");
        let v = sent(&d, &body);
        assert_eq!(v["previous_response_id"], "resp_real42");
        assert_eq!(v["model"], "gpt-4o");
        assert_eq!(v["input"], "more");
    }
}

#[test]
fn an_id_that_looks_like_ours_but_does_not_decode_is_a_409_before_anything_else() {
    let c = config();
    let id = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "openai-b/gpt-4o"),
        "resp_real42",
    );
    let other = id::mint(
        &crate::core::seal::Keys::new(&["another-key-entirely"]),
        &id::Turn::unbound("vm", "openai-b/gpt-4o"),
        "r",
    );
    let mut changed = id.clone().into_bytes();
    let last = changed.len() - 3;
    changed[last] = if changed[last] == b'x' { b'y' } else { b'x' };
    let changed = String::from_utf8(changed).unwrap();
    for bad in [
        changed.as_str(),
        &id[..id.len() - 4],
        other.as_str(),
        "resp_sb1-",
    ] {
        // Even with a model that does not exist: the id is checked first.
        for model in ["vm", "no-such-model"] {
            let body = format!(r#"{{"model":"{model}","previous_response_id":"{bad}"}}"#);
            let e = run(&c, &body).unwrap_err();
            assert_eq!(e.status, 409, "{bad}");
            assert!(e.body.contains("invalid_response_id"), "{}", e.body);
        }
    }
}

#[test]
fn an_origin_that_is_no_longer_a_target_is_a_409_and_one_without_native_responses_a_400() {
    let c = config();
    let gone = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "elsewhere/gpt-4o"),
        "resp_1",
    );
    let body = format!(r#"{{"model":"vm","previous_response_id":"{gone}"}}"#);
    let e = run(&c, &body).unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.body.contains("conversation_origin_removed"), "{}", e.body);
    let unknown = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "deleted/model"),
        "resp_1",
    );
    let body = format!(r#"{{"model":"vm","previous_response_id":"{unknown}"}}"#);
    assert_eq!(run(&c, &body).unwrap_err().status, 409);
    let claude = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "anthropic/claude"),
        "resp_1",
    );
    let body = format!(r#"{{"model":"vm","previous_response_id":"{claude}"}}"#);
    let e = run(&c, &body).unwrap_err();
    assert_eq!(e.status, 400);
}

#[test]
fn replayed_reasoning_is_pinned_to_its_origin_and_the_provider_gets_its_own_value() {
    let c = config();
    let marked = id::mark(
        &c.response_keys,
        &id::Turn::unbound("vm", "azure/gpt-4o"),
        "gAAAAB+abc/==",
    );
    let body = format!(
        r#"{{"model":"vm","store":false,"input":[{{"role":"user","content":"hi"}},
        {{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"{marked}"}},
        {{"role":"user","content":"and?"}}]}}"#
    );
    let d = run(&c, &body).unwrap();
    assert_eq!(d.plan.candidates, [ModelId(2)]);
    assert!(d.plan.pinned);
    let v = sent(&d, &body);
    assert_eq!(v["input"][1]["encrypted_content"], "gAAAAB+abc/==");
    assert_eq!(v["model"], "gpt-4o-prod");
    // A forged mark is a 409; reasoning of two origins is a 409 too.
    let forged = body.replace("sbrc1.", "sbrc1.AAAA");
    assert_eq!(run(&c, &forged).unwrap_err().status, 409);
    let other = id::mark(
        &c.response_keys,
        &id::Turn::unbound("vm", "openai-a/gpt-4o"),
        "gAAAAB-other",
    );
    let two = body.replace(
        r#"{"role":"user","content":"and?"}"#,
        &format!(r#"{{"type":"reasoning","encrypted_content":"{other}"}}"#),
    );
    assert!(run(&c, &two)
        .unwrap_err()
        .body
        .contains("conversation_origins_differ"));
}

#[test]
fn plain_history_and_unmarked_reasoning_load_balance_like_a_first_turn() {
    let c = config();
    let body = r#"{"model":"vm","store":false,"input":[{"role":"user","content":"hi"},
        {"type":"reasoning","encrypted_content":"gAAAAB-from-a-direct-call"}]}"#;
    let d = run(&c, body).unwrap();
    assert!(!d.plan.pinned);
    assert!(d.plan.candidates.len() > 1);
    let r = read(
        &c.response_keys,
        body.as_bytes(),
        &crate::core::request::inspect(body.as_bytes())
            .unwrap()
            .fields,
    )
    .unwrap();
    assert!(!r.raw_stored && r.origin.is_none() && r.edits.is_empty());
}

#[test]
fn raw_provider_ids_conversations_and_item_references_name_stored_state() {
    let keys = crate::core::seal::Keys::default();
    for body in [
        r#"{"model":"vm","previous_response_id":"resp_raw"}"#,
        r#"{"model":"vm","conversation":"conv_1"}"#,
        r#"{"model":"vm","input":[{"type":"item_reference","id":"msg_1"}]}"#,
    ] {
        let fields = crate::core::request::inspect(body.as_bytes())
            .unwrap()
            .fields;
        let r = read(&keys, body.as_bytes(), &fields).unwrap();
        assert!(r.raw_stored, "{body}");
        assert!(r.origin.is_none());
    }
}

#[test]
fn stored_response_paths_give_the_id_and_what_follows_it() {
    assert_eq!(stored_path("/v1/responses/resp_1"), Some(("resp_1", "")));
    assert_eq!(
        stored_path("/responses/resp_1/input_items?limit=5"),
        Some(("resp_1", "/input_items"))
    );
    assert_eq!(
        stored_path("/v1/responses/resp_1/cancel"),
        Some(("resp_1", "/cancel"))
    );
    assert_eq!(stored_path("/v1/responses/resp_1/other"), None);
    assert_eq!(stored_path("/v1/responses"), None);
    assert_eq!(stored_path("/v1/responses/"), None);
}

#[test]
fn a_stored_path_id_resolves_to_its_virtual_model_and_target() {
    let c = config();
    let id = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "azure/gpt-4o"),
        "resp_9",
    );
    let (vm, target, origin) = stored_origin(&c, &id, &NO_HEADERS, &LocalState::default()).unwrap();
    assert_eq!(
        (vm, target, origin.provider_id.as_str()),
        (0, ModelId(2), "resp_9")
    );
    let gone = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "elsewhere/gpt-4o"),
        "resp_9",
    );
    assert_eq!(
        stored_origin(&c, &gone, &NO_HEADERS, &LocalState::default())
            .unwrap_err()
            .status,
        409
    );
    assert_eq!(
        stored_origin(&c, "resp_sb1-zz", &NO_HEADERS, &LocalState::default())
            .unwrap_err()
            .status,
        409
    );
}

#[test]
fn a_stored_path_id_whose_target_no_longer_matches_the_metadata_is_a_409() {
    let c = Config::parse(
        br#"{"models": [{"name": "eu/gpt-4o", "cluster": "eu", "model": "gpt-4o"}],
          "virtual_models": [{"name": "vm", "model_types": ["responses"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [
              {"target": "eu/gpt-4o", "weight": 100, "metadata_match": {"region": "eu"}}]}}]}"#,
    )
    .unwrap();
    let id = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "eu/gpt-4o"),
        "resp_1",
    );
    let eu = crate::core::headers::Headers::from_pairs([(
        "x-switchboard-metadata",
        r#"{"region":"eu"}"#,
    )]);
    assert!(stored_origin(&c, &id, &eu, &LocalState::default()).is_ok());
    let e = stored_origin(&c, &id, &NO_HEADERS, &LocalState::default()).unwrap_err();
    assert_eq!(e.status, 409);
}

#[test]
fn a_stored_path_id_whose_provider_id_is_not_a_plain_token_is_refused() {
    let c = config();
    for bad in ["x/../../files", "resp_1?x=1", ""] {
        let id = id::mint(
            &c.response_keys,
            &id::Turn::unbound("vm", "azure/gpt-4o"),
            bad,
        );
        let e = stored_origin(&c, &id, &NO_HEADERS, &LocalState::default()).unwrap_err();
        assert_eq!(e.status, 409, "{bad}");
    }
}

#[test]
fn a_follow_up_naming_an_internal_model_is_a_404_whatever_id_it_carries() {
    let c = config();
    let id = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "openai-b/gpt-4o"),
        "resp_real42",
    );
    // The internal model the id names, and another internal model.
    for model in ["openai-b/gpt-4o", "openai-a/gpt-4o"] {
        let body = format!(r#"{{"model":"{model}","previous_response_id":"{id}"}}"#);
        let e = run(&c, &body).unwrap_err();
        assert_eq!(e.status, 404, "{model}: {}", e.body);
        assert!(e.body.contains("model_not_found"), "{}", e.body);
    }
    // As a direct call without any id.
    let e = run(&c, r#"{"model":"openai-b/gpt-4o","input":"x"}"#).unwrap_err();
    assert_eq!(e.status, 404);
}

#[test]
fn a_follow_up_must_name_the_virtual_model_its_id_was_minted_for() {
    let c = Config::parse(
        br#"{"models": [
            {"name": "a", "cluster": "a", "model": "gpt-4o"},
            {"name": "pub", "cluster": "p", "model": "gpt-4o", "visibility": "public"}],
          "virtual_models": [
            {"name": "vm", "model_types": ["responses"], "routing_config": {
              "type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}},
            {"name": "other", "model_types": ["responses"], "routing_config": {
              "type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}}]}"#,
    )
    .unwrap();
    let id = id::mint(&c.response_keys, &id::Turn::unbound("vm", "a"), "resp_1");
    for model in ["other", "pub"] {
        let body = format!(r#"{{"model":"{model}","previous_response_id":"{id}"}}"#);
        let e = run(&c, &body).unwrap_err();
        assert_eq!(e.status, 409, "{model}: {}", e.body);
        assert!(e.body.contains("conversation_model_mismatch"), "{}", e.body);
    }
    let body = format!(r#"{{"model":"vm","previous_response_id":"{id}"}}"#);
    assert_eq!(run(&c, &body).unwrap().plan.candidates, [ModelId(0)]);
}

#[test]
fn a_follow_up_goes_through_its_virtual_models_types_conditions_and_overrides() {
    let c = Config::parse(
        br#"{"models": [
            {"name": "a", "cluster": "a", "model": "gpt-4o"},
            {"name": "b", "cluster": "b", "model": "gpt-4o-mini"}],
          "virtual_models": [
            {"name": "chat-only", "model_types": ["chat"], "routing_config": {
              "type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}},
            {"name": "tiers", "model_types": ["responses"], "routing_config": {
              "type": "conditional-routing", "load_balance_targets": [
                {"target": "a", "when": "request.headers[\"x-tier\"] == \"paid\"",
                 "override_params": {"temperature": 0.2}},
                {"target": "b", "when": "true"}]}}]}"#,
    )
    .unwrap();
    let chat = id::mint(
        &c.response_keys,
        &id::Turn::unbound("chat-only", "a"),
        "resp_1",
    );
    let body = format!(r#"{{"model":"chat-only","previous_response_id":"{chat}"}}"#);
    let e = run(&c, &body).unwrap_err();
    assert_eq!(e.status, 400, "{}", e.body);
    assert!(e.body.contains("unsupported_endpoint"), "{}", e.body);

    let paid = id::mint(&c.response_keys, &id::Turn::unbound("tiers", "a"), "resp_2");
    let body = format!(r#"{{"model":"tiers","previous_response_id":"{paid}","temperature":1}}"#);
    // The origin's `when` no longer holds for this request: it is not a target of it now.
    let e = run(&c, &body).unwrap_err();
    assert_eq!(e.status, 409, "{}", e.body);
    assert!(e.body.contains("conversation_origin_removed"), "{}", e.body);
    let headers = crate::core::headers::Headers::from_pairs([("x-tier", "paid")]);
    let config: &'static Config = Box::leak(Box::new(c.clone()));
    let d = decide(
        config,
        Endpoint::Responses,
        body.as_bytes(),
        &headers,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .unwrap();
    assert_eq!(d.plan.candidates, [ModelId(0)]);
    let v = sent(&d, &body);
    assert_eq!(v["temperature"], 0.2, "the target's override_params apply");
    assert_eq!(v["previous_response_id"], "resp_2");
}

/// The config with ids bound to callers.
fn bound() -> Config {
    let json = CONFIG.replacen('{', r#"{"response_id_binding": "caller","#, 1);
    Config::parse(json.as_bytes()).unwrap()
}

fn as_caller(config: &Config, key: &str, body: &str) -> Result<ModelId, ErrorReply> {
    let config: &'static Config = Box::leak(Box::new(config.clone()));
    let headers = crate::core::headers::Headers::from_pairs([("authorization", key)]);
    decide(
        config,
        Endpoint::Responses,
        body.as_bytes(),
        &headers,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .map(|d| d.target)
}

#[test]
fn a_bound_id_serves_only_its_own_caller() {
    let c = bound();
    let alice = crate::core::caller::Caller::of(b"Bearer alice");
    let turn = id::Turn {
        caller: Some(alice),
        ..id::Turn::unbound("vm", "openai-b/gpt-4o")
    };
    let id = id::mint(&c.response_keys, &turn, "resp_1");
    let body = format!(r#"{{"model":"vm","previous_response_id":"{id}"}}"#);
    assert_eq!(as_caller(&c, "Bearer alice", &body), Ok(ModelId(1)));
    let e = as_caller(&c, "Bearer mallory", &body).unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.body.contains("foreign_response_id"), "{}", e.body);
    // A mark too, and an id minted before ids were bound.
    let marked = id::mark(&c.response_keys, &turn, "gAAAA");
    let replay = format!(
        r#"{{"model":"vm","input":[{{"type":"reasoning","encrypted_content":"{marked}"}}]}}"#
    );
    assert_eq!(as_caller(&c, "Bearer alice", &replay), Ok(ModelId(1)));
    assert_eq!(
        as_caller(&c, "Bearer bob", &replay).unwrap_err().status,
        409
    );
    let old = id::mint(
        &c.response_keys,
        &id::Turn::unbound("vm", "openai-b/gpt-4o"),
        "r",
    );
    let body = format!(r#"{{"model":"vm","previous_response_id":"{old}"}}"#);
    assert!(as_caller(&c, "Bearer alice", &body)
        .unwrap_err()
        .body
        .contains("foreign_response_id"));
    // Unbound, any holder of the id may use it.
    assert_eq!(as_caller(&config(), "Bearer bob", &body), Ok(ModelId(1)));
}

#[test]
fn a_bound_stored_path_id_serves_only_its_own_caller() {
    let c = bound();
    let turn = id::Turn {
        caller: Some(crate::core::caller::Caller::of(b"Bearer alice")),
        ..id::Turn::unbound("vm", "azure/gpt-4o")
    };
    let id = id::mint(&c.response_keys, &turn, "resp_9");
    let headers = |key: &str| crate::core::headers::Headers::from_pairs([("authorization", key)]);
    let state = LocalState::default();
    assert!(stored_origin(&c, &id, &headers("Bearer alice"), &state).is_ok());
    let e = stored_origin(&c, &id, &headers("Bearer mallory"), &state).unwrap_err();
    assert_eq!(e.status, 409);
    assert!(e.body.contains("foreign_response_id"));
}

#[test]
fn a_bound_answer_mints_ids_for_the_requests_caller() {
    let c = bound();
    let config: &'static Config = Box::leak(Box::new(c.clone()));
    let headers = crate::core::headers::Headers::from_pairs([("authorization", "Bearer alice")]);
    let d = decide(
        config,
        Endpoint::Responses,
        br#"{"model":"vm","input":"hi"}"#,
        &headers,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .unwrap();
    assert_eq!(
        d.caller,
        Some(crate::core::caller::Caller::of(b"Bearer alice"))
    );
}
