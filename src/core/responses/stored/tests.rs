use crate::core::config::{Config, ModelId};
use crate::core::decision::{decide, decide_stored_path};
use crate::core::endpoint::Endpoint;
use crate::core::headers::{Headers, NO_HEADERS};
use crate::core::routing::state::LocalState;
use crate::core::routing::HealthInput;

/// `routing` is the virtual model's routing_config with `TARGETS` spliced in.
fn config(routing: &str) -> Config {
    let json = format!(
        r#"{{"models": [
          {{"name": "OpenAI-A/gpt-4o", "cluster": "a", "model": "gpt-4o"}},
          {{"name": "openai-a/gpt-4o-mini", "cluster": "a", "model": "gpt-4o-mini"}},
          {{"name": "openai-b/gpt-4o", "cluster": "b", "model": "gpt-4o"}},
          {{"name": "router/gpt-4o", "cluster": "r", "model": "gpt-4o", "stores_responses": false}}],
          "stored_responses_virtual_model": "vm",
          "virtual_models": [{{"name": "vm", "model_types": ["responses"],
            "routing_config": {routing}}}]}}"#
    );
    Config::parse(json.as_bytes()).unwrap()
}

const ONE_ACCOUNT: &str = r#"{"type": "round-robin-routing", "load_balance_targets": [
    {"target": "router/gpt-4o"}, {"target": "OpenAI-A/gpt-4o"}, {"target": "openai-a/gpt-4o-mini"}]}"#;
const TWO_ACCOUNTS: &str = r#"{"type": "round-robin-routing", "load_balance_targets": [
    {"target": "OpenAI-A/gpt-4o"}, {"target": "openai-b/gpt-4o"}, {"target": "router/gpt-4o"}]}"#;
const BY_USER: &str = r#"{"type": "hash-based-routing", "hash_key": {"source": "user"},
    "load_balance_targets": [{"target": "OpenAI-A/gpt-4o"}, {"target": "openai-b/gpt-4o"}]}"#;

fn run(c: &Config, body: &str, headers: &Headers, seed: u64) -> Result<(Vec<ModelId>, bool), u16> {
    decide(
        c,
        Endpoint::Responses,
        body.as_bytes(),
        headers,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(seed),
    )
    .map(|d| (d.plan.candidates, d.plan.pinned))
    .map_err(|e| e.status)
}

const CONTINUES: [&str; 3] = [
    r#"{"model":"vm","input":"x","previous_response_id":"resp_raw1"}"#,
    r#"{"model":"vm","input":"x","conversation":"conv_1"}"#,
    r#"{"model":"vm","input":[{"type":"item_reference","id":"msg_1"}]}"#,
];

#[test]
fn one_storing_provider_name_takes_every_continuation_without_a_retry_model() {
    let c = config(ONE_ACCOUNT);
    for body in CONTINUES {
        for seed in 0..10 {
            let (candidates, pinned) = run(&c, body, &NO_HEADERS, seed).unwrap();
            // Names compare without case: OpenAI-A and openai-a are one account.
            assert!(
                candidates == [ModelId(0)] || candidates == [ModelId(1)],
                "{body}"
            );
            assert!(pinned, "no retry model");
        }
    }
}

#[test]
fn two_provider_names_need_a_caller_key_else_400() {
    let c = config(TWO_ACCOUNTS);
    for body in CONTINUES {
        assert_eq!(run(&c, body, &NO_HEADERS, 1), Err(400), "{body}");
    }
    let c = config(BY_USER);
    let alice = Headers::from_pairs([("authorization", "Bearer alice")]);
    let first = run(&c, r#"{"model":"vm","input":"hi"}"#, &alice, 1)
        .unwrap()
        .0[0];
    for body in CONTINUES {
        assert_eq!(run(&c, body, &alice, 2).unwrap(), (vec![first], true));
        assert_eq!(run(&c, body, &NO_HEADERS, 2), Err(400), "no key: {body}");
    }
}

#[test]
fn a_provider_that_stores_nothing_gets_creates_only_with_store_false() {
    let c = config(ONE_ACCOUNT);
    for seed in 0..20 {
        let (stored, _) = run(&c, r#"{"model":"vm","input":"x"}"#, &NO_HEADERS, seed).unwrap();
        assert!(!stored.contains(&ModelId(3)), "seed {seed}");
    }
    let any = (0..20).any(|seed| {
        run(
            &c,
            r#"{"model":"vm","input":"x","store":false}"#,
            &NO_HEADERS,
            seed,
        )
        .unwrap()
        .0
        .first()
            == Some(&ModelId(3))
    });
    assert!(any, "store: false may go anywhere");
}

#[test]
fn a_raw_retrieve_goes_by_the_same_rules() {
    let c = config(ONE_ACCOUNT);
    let target = decide_stored_path(
        &c,
        0,
        &NO_HEADERS,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .unwrap();
    assert!(target == ModelId(0) || target == ModelId(1));
    let c = config(TWO_ACCOUNTS);
    let e = decide_stored_path(
        &c,
        0,
        &NO_HEADERS,
        &HealthInput::NONE,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.body.contains("stored_response_unroutable"));
}
