use crate::core::config::{Config, ModelId};
use crate::core::decision::{decide, decide_stored_path};
use crate::core::endpoint::Endpoint;
use crate::core::headers::{Headers, NO_HEADERS};
use crate::core::health::policy::FailureWindow;
use crate::core::health::record::HealthRecord;
use crate::core::routing::HealthInput;
use crate::core::routing::LocalState;

/// `routing` is the virtual model's routing_config.
fn config(routing: &str) -> Config {
    config_with("", routing)
}

/// [`config`], with `vm_extra` (fields ending in a comma) spliced into the virtual model.
fn config_with(vm_extra: &str, routing: &str) -> Config {
    let json = format!(
        r#"{{"models": [
          {{"name": "OpenAI-A/gpt-4o", "cluster": "a", "model": "gpt-4o"}},
          {{"name": "openai-a/gpt-4o-mini", "cluster": "a", "model": "gpt-4o-mini"}},
          {{"name": "openai-b/gpt-4o", "cluster": "b", "model": "gpt-4o"}},
          {{"name": "router/gpt-4o", "cluster": "r", "model": "gpt-4o", "stores_responses": false}}],
          "stored_responses_virtual_model": "vm",
          "virtual_models": [{{"name": "vm", "model_types": ["responses"], {vm_extra}
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
    run_in(
        c,
        body,
        headers,
        &HealthInput::NONE,
        &LocalState::default(),
        seed,
    )
}

/// [`run`] with health records and a routing state kept across requests (round-robin cursors).
fn run_in(
    c: &Config,
    body: &str,
    headers: &Headers,
    health: &HealthInput<'_>,
    state: &LocalState,
    seed: u64,
) -> Result<(Vec<ModelId>, bool), u16> {
    decide(
        c,
        Endpoint::Responses,
        body.as_bytes(),
        headers,
        health,
        state,
        &mut fastrand::Rng::with_seed(seed),
    )
    .map(|d| (d.plan.candidates, d.plan.pinned))
    .map_err(|e| e.status)
}

/// Health records of the four models with those in `unhealthy` failing twice at 400 and 450.
fn records(unhealthy: &[ModelId]) -> Vec<HealthRecord> {
    (0..4)
        .map(|i| HealthRecord {
            failures: if unhealthy.contains(&ModelId(i)) {
                vec![400, 450]
            } else {
                Vec::new()
            },
            ..HealthRecord::default()
        })
        .collect()
}

fn at_500(records: &[HealthRecord]) -> HealthInput<'_> {
    HealthInput {
        records,
        now_ms: 500,
        window: FailureWindow::default(),
    }
}

fn stored_path(
    c: &Config,
    headers: &Headers,
    health: &HealthInput<'_>,
    seed: u64,
) -> Result<ModelId, u16> {
    decide_stored_path(
        c,
        0,
        headers,
        health,
        &LocalState::default(),
        &mut fastrand::Rng::with_seed(seed),
    )
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

const ROUTER_FIRST: &str = r#"{"type": "round-robin-routing", "load_balance_targets": [
    {"target": "router/gpt-4o"}, {"target": "OpenAI-A/gpt-4o"}]}"#;
const A_OR_B: &str = r#"{"type": "round-robin-routing", "load_balance_targets": [
    {"target": "OpenAI-A/gpt-4o"}, {"target": "openai-b/gpt-4o"}]}"#;
const A_THEN_ROUTER: &str = r#"{"type": "priority-based-routing", "load_balance_targets": [
    {"target": "OpenAI-A/gpt-4o", "priority": 0}, {"target": "router/gpt-4o", "priority": 1}]}"#;
const ONE_TARGET: &str = r#""max_targets_per_request": 1,"#;

#[test]
fn raw_ids_are_judged_on_the_whole_list_whatever_max_targets_per_request_cuts() {
    // Every other plan is [router]: the storing model was judged absent and the request got
    // a 400 half the time. The list holds one storing account: every request goes there.
    let c = config_with(ONE_TARGET, ROUTER_FIRST);
    let state = LocalState::default();
    for seed in 0..8 {
        for body in CONTINUES {
            let got = run_in(&c, body, &NO_HEADERS, &HealthInput::NONE, &state, seed);
            assert_eq!(got, Ok((vec![ModelId(0)], true)), "seed {seed}: {body}");
        }
        assert_eq!(
            stored_path(&c, &NO_HEADERS, &HealthInput::NONE, seed),
            Ok(ModelId(0))
        );
    }
    // A plan cut to [a] or [b] shows one provider name; the list has two: always the 400.
    let c = config_with(ONE_TARGET, A_OR_B);
    for seed in 0..8 {
        for body in CONTINUES {
            let got = run_in(&c, body, &NO_HEADERS, &HealthInput::NONE, &state, seed);
            assert_eq!(got, Err(400), "seed {seed}: {body}");
        }
        assert_eq!(
            stored_path(&c, &NO_HEADERS, &HealthInput::NONE, seed),
            Err(400)
        );
    }
}

#[test]
fn an_unhealthy_storing_target_still_gets_the_raw_ids_it_holds() {
    // Health puts the router first and the cut leaves [router]; the response is still on
    // openai-a's account.
    let c = config_with(ONE_TARGET, A_THEN_ROUTER);
    let records = records(&[ModelId(0)]);
    let health = at_500(&records);
    let state = LocalState::default();
    let create = r#"{"model":"vm","input":"x","store":false}"#;
    assert_eq!(
        run_in(&c, create, &NO_HEADERS, &health, &state, 1),
        Ok((vec![ModelId(3)], false)),
        "health applies to a create that stores nothing"
    );
    for body in CONTINUES {
        let got = run_in(&c, body, &NO_HEADERS, &health, &state, 1);
        assert_eq!(got, Ok((vec![ModelId(0)], true)), "{body}");
    }
    assert_eq!(stored_path(&c, &NO_HEADERS, &health, 1), Ok(ModelId(0)));
}

const BY_USER_WITH_ROUTER: &str = r#"{"type": "hash-based-routing", "hash_key": {"source": "user"},
    "load_balance_targets": [{"target": "OpenAI-A/gpt-4o"}, {"target": "openai-b/gpt-4o"},
    {"target": "router/gpt-4o"}]}"#;

#[test]
fn a_key_picks_among_the_storing_models_where_its_creates_went_whatever_their_health() {
    // Zuplo, "Stored responses": "Go to the model the key picks, where that caller's responses
    // were created". Creates that store choose among the models that store, so the key's pick
    // for a raw id is the same choice, and health does not move it: no other account holds
    // the response.
    let c = config(BY_USER_WITH_ROUTER);
    let create = r#"{"model":"vm","input":"x"}"#;
    let stateless = r#"{"model":"vm","input":"x","store":false}"#;
    let mut router_first = 0;
    for user in 0..40 {
        let token = format!("Bearer user-{user}");
        let caller = Headers::from_pairs([("authorization", token.as_str())]);
        let (planned, _) = run(&c, create, &caller, 1).unwrap();
        let origin = planned[0];
        assert_ne!(
            origin,
            ModelId(3),
            "a create that stores never goes to the router"
        );
        router_first += usize::from(run(&c, stateless, &caller, 1).unwrap().0[0] == ModelId(3));
        let records = records(&[origin]);
        let unhealthy = at_500(&records);
        let state = LocalState::default();
        let moved = run_in(&c, create, &caller, &unhealthy, &state, 1)
            .unwrap()
            .0[0];
        assert_ne!(moved, origin, "health moves this caller's new creates");
        for health in [HealthInput::NONE, unhealthy] {
            for body in CONTINUES {
                let got = run_in(&c, body, &caller, &health, &state, 1);
                assert_eq!(got, Ok((vec![origin], true)), "user-{user}: {body}");
            }
            assert_eq!(stored_path(&c, &caller, &health, 1), Ok(origin));
        }
    }
    assert!(
        router_first > 5,
        "keys that put the router first: {router_first}"
    );
}

#[test]
fn a_create_that_stores_never_lands_on_a_provider_that_stores_nothing_whatever_the_cut() {
    // Round robin with one target per request: every other plan was [router], and with no
    // storing model left in it the create went there and its response was never stored.
    let c = config_with(ONE_TARGET, ROUTER_FIRST);
    let state = LocalState::default();
    let create = r#"{"model":"vm","input":"x"}"#;
    for seed in 0..8 {
        let got = run_in(&c, create, &NO_HEADERS, &HealthInput::NONE, &state, seed);
        assert_eq!(got, Ok((vec![ModelId(0)], false)), "seed {seed}");
    }
}
