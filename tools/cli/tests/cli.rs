//! The `switchboard` command line, run as a user would.

mod common;

use common::{run, temp};

#[test]
fn check_accepts_the_example_and_names_the_field_path_of_an_error() {
    let (ok, out, _) = run(&["check", "examples/production-chat.json"]);
    assert!(ok);
    assert!(out.contains("ok (3 models, 2 virtual models)"), "{out}");

    let bad = temp(
        "bad-config.json",
        r#"{"models":[{"name":"a","cluster":"c","model":"m"}],"virtual_models":[{"name":"v",
            "model_types":["chat"],"routing_config":{"type":"weight-based-routing",
            "load_balance_targets":[{"target":"a","weight":"100"}]}}]}"#,
    );
    let (ok, _, err) = run(&["check", bad.to_str().unwrap()]);
    std::fs::remove_file(bad).unwrap();
    assert!(!ok);
    assert!(
        err.contains("virtual_models[0].routing_config.load_balance_targets[0].weight: expected an integer from 0 to 100"),
        "{err}"
    );
}

#[test]
fn check_warns_when_response_ids_would_be_minted_with_the_built_in_key() {
    let config = |keys: &str| {
        format!(
            r#"{{"models":[{{"name":"a","cluster":"c","model":"m"}}]{keys},
            "virtual_models":[{{"name":"v","model_types":["responses"],
            "routing_config":{{"type":"weight-based-routing",
            "load_balance_targets":[{{"target":"a","weight":100}}]}}}}]}}"#
        )
    };
    let path = temp("no-keys.json", &config(""));
    let (ok, out, err) = run(&["check", path.to_str().unwrap()]);
    assert!(ok && out.contains(": ok ("), "{out}{err}");
    assert!(
        err.contains("warning: response_id_keys is not set"),
        "{err}"
    );
    std::fs::write(
        &path,
        config(r#", "response_id_keys": ["0123456789abcdef-0123"]"#),
    )
    .unwrap();
    let (ok, _, err) = run(&["check", path.to_str().unwrap()]);
    std::fs::remove_file(path).unwrap();
    assert!(ok);
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn check_warns_about_a_responses_target_that_is_not_native() {
    // TrueFoundry virtual models, "Responses API conversations": a request routed to such a
    // target gets a 400.
    let config = |mode: &str| {
        format!(
            r#"{{"models":[{{"name":"openai/gpt-4o","cluster":"o","model":"gpt-4o"}},
              {{"name":"anthropic/claude","cluster":"a","model":"c","provider":"anthropic"}}],
            "response_id_keys":["0123456789abcdef-0123"]{mode},
            "virtual_models":[{{"name":"team/mixed","model_types":["responses","chat"],
            "routing_config":{{"type":"round-robin-routing","load_balance_targets":[
              {{"target":"openai/gpt-4o"}},{{"target":"anthropic/claude"}}]}}}}]}}"#
        )
    };
    let path = temp("non-native.json", &config(""));
    let (ok, out, err) = run(&["check", path.to_str().unwrap()]);
    assert!(ok && out.contains(": ok ("), "{out}{err}");
    assert!(
        err.contains(
            "warning: virtual model `team/mixed` serves responses, but its target \
             `anthropic/claude` does not serve /v1/responses natively"
        ),
        "{err}"
    );
    std::fs::write(&path, config(r#", "non_native_responses": "skip""#)).unwrap();
    let (ok, _, err) = run(&["check", path.to_str().unwrap()]);
    std::fs::remove_file(path).unwrap();
    assert!(ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn check_warns_when_env_references_have_no_env_keys_to_limit_them() {
    let config = |env_keys: &str| {
        format!(
            r#"{{{env_keys}"models":[{{"name":"a","cluster":"c","model":"m",
                "headers":{{"authorization":"Bearer ${{env:SWITCHBOARD_CLI_TEST_KEY}}"}}}}]}}"#
        )
    };
    let open = temp("env-open.json", &config(""));
    let (ok, _, err) = run(&["check", open.to_str().unwrap()]);
    std::fs::remove_file(open).unwrap();
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: `${env:NAME}` reads SWITCHBOARD_CLI_TEST_KEY with no `env_keys`"),
        "{err}"
    );
    let listed = temp(
        "env-listed.json",
        &config(r#""env_keys":["SWITCHBOARD_CLI_TEST_KEY"],"#),
    );
    let (ok, _, err) = run(&["check", listed.to_str().unwrap()]);
    std::fs::remove_file(listed).unwrap();
    assert!(ok, "{err}");
    assert!(!err.contains("warning:"), "{err}");
}

#[test]
fn explain_lists_the_candidates_and_why_targets_are_out() {
    let (ok, out, err) = run(&[
        "explain",
        "examples/production-chat.json",
        "examples/request.json",
        "--path",
        "/v1/messages",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("openai-main/gpt-4o (cluster openai_main): out: its apis do not include `messages`, which serves /v1/messages"), "{out}");
    assert!(out.contains("  1. anthropic/claude-sonnet"), "{out}");
    assert!(!out.contains("  2."), "{out}");
    assert!(
        out.contains(r#"  body: {"model": "claude-sonnet-4-0""#),
        "{out}"
    );
    // Anthropic needs a version header; the first attempt shows it is added.
    assert!(out.contains("first attempt: cluster anthropic"), "{out}");
    assert!(out.contains("anthropic-version"), "{out}");
}

#[test]
fn explain_prints_the_plans_own_reasons_for_each_target() {
    // A conditional virtual model whose second target's `when` is false, and whose third
    // target's `metadata_match` does not hold: the same words as the trace header's `skipped`.
    let config = temp(
        "explain-conditional.json",
        r#"{"models":[{"name":"a","cluster":"ca","model":"m"},{"name":"b","cluster":"cb","model":"m"},
            {"name":"c","cluster":"cc","model":"m"}],
            "virtual_models":[{"name":"v","model_types":["chat"],"routing_config":{
            "type":"conditional-routing","load_balance_targets":[
            {"target":"a","when":"true"},{"target":"b","when":"request.headers[\"x-tier\"] == \"gold\""},
            {"target":"c","when":"true","metadata_match":{"region":"eu"}}]}}]}"#,
    );
    let request = temp("explain-conditional-request.json", r#"{"model": "v"}"#);
    let (ok, out, err) = run(&[
        "explain",
        config.to_str().unwrap(),
        request.to_str().unwrap(),
    ]);
    std::fs::remove_file(config).unwrap();
    std::fs::remove_file(request).unwrap();
    assert!(ok, "{err}");
    assert!(out.contains("target a (cluster ca): when holds"), "{out}");
    assert!(
        out.contains("target b (cluster cb): out: its when is false"),
        "{out}"
    );
    assert!(
        out.contains(
            r#"target c (cluster cc): out: metadata_match [("region", "eu")] does not hold"#
        ),
        "{out}"
    );
    assert!(out.contains("  1. a"), "{out}");
    assert!(!out.contains("  2."), "{out}");
}

#[test]
fn explain_shows_which_candidates_are_translated_and_the_400_of_an_untranslatable_field() {
    let config = temp(
        "explain-translated.json",
        r#"{"models":[
            {"name":"anthropic/claude","cluster":"anthropic","model":"claude-sonnet-4-5","provider":"anthropic"},
            {"name":"openai/gpt-4o","cluster":"openai","model":"gpt-4o","provider":"openai"}],
            "virtual_models":[{"name":"v","model_types":["chat"],"translate":["chat_completions","messages"],
            "routing_config":{"type":"priority-based-routing","load_balance_targets":[
            {"target":"anthropic/claude","priority":0},{"target":"openai/gpt-4o","priority":1}]}}]}"#,
    );
    let request = temp(
        "explain-translated-request.json",
        r#"{"model":"v","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}"#,
    );
    let explain = |path: &str| {
        run(&[
            "explain",
            config.to_str().unwrap(),
            request.to_str().unwrap(),
            "--path",
            path,
        ])
    };
    let (ok, chat, err) = explain("/v1/chat/completions");
    assert!(ok, "{err}");
    assert!(
        chat.contains("  1. anthropic/claude (translated: sent as Anthropic Messages, answered as Chat Completions)"),
        "{chat}"
    );
    assert!(chat.contains("  2. openai/gpt-4o\n"), "{chat}");
    assert!(chat.contains("  :path /v1/messages"), "{chat}");
    assert!(chat.contains(r#""model":"claude-sonnet-4-5"}"#), "{chat}");
    let (ok, messages, err) = explain("/v1/messages");
    assert!(ok, "{err}");
    assert!(messages.contains("  1. anthropic/claude\n"), "{messages}");
    assert!(
        messages.contains("  2. openai/gpt-4o (translated: sent as Chat Completions, answered as Anthropic Messages)"),
        "{messages}"
    );
    std::fs::write(
        &request,
        r#"{"model":"v","n":2,"messages":[{"role":"user","content":"Hi"}]}"#,
    )
    .unwrap();
    let (ok, _, err) = explain("/v1/chat/completions");
    std::fs::remove_file(config).unwrap();
    std::fs::remove_file(request).unwrap();
    assert!(!ok);
    assert!(
        err.contains("the filter would answer 400") && err.contains("`n` cannot be translated"),
        "{err}"
    );
}

#[test]
fn explain_shows_the_filter_error_for_a_bad_request() {
    let req = temp("unknown-model.json", r#"{"model": "nobody"}"#);
    let (ok, _, err) = run(&[
        "explain",
        "examples/production-chat.json",
        req.to_str().unwrap(),
    ]);
    std::fs::remove_file(req).unwrap();
    assert!(!ok);
    assert!(err.contains("the filter would answer 404"), "{err}");
}

#[test]
fn simulate_prints_the_split_within_statistical_bands() {
    let (ok, out, err) = run(&[
        "simulate",
        "examples/production-chat.json",
        "--requests",
        "10000",
    ]);
    assert!(ok, "{err}");
    let share = |name: &str| -> f64 {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    // 80/20 over 10,000 sticky sessions: about 4 standard deviations either way.
    assert!((share("openai-main/gpt-4o") - 80.0).abs() < 1.6, "{out}");
    assert!((share("azure-east/gpt-4o") - 20.0).abs() < 1.6, "{out}");
    assert!(
        !out.contains("anthropic/claude-sonnet"),
        "weight 0 never takes a first attempt: {out}"
    );
}

#[test]
fn stats_config_prints_the_block_every_shipped_envoy_config_carries() {
    let (ok, out, _) = run(&["stats-config"]);
    assert!(ok);
    assert!(
        out.starts_with("stats_config:\n  stats_tags:\n  - tag_name: class\n"),
        "{out}"
    );
    let demo = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../envoy/demo.yaml"),
    )
    .unwrap();
    assert!(demo.contains(&out), "envoy/demo.yaml differs from:\n{out}");
    let (ok, _, err) = run(&["stats-config", "extra"]);
    assert!(!ok && err.starts_with("usage:"), "{err}");
}
