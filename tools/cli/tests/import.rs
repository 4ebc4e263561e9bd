//! `switchboard import` on every example config of the three seeds
//! (`tests/fixtures/seeds/<seed>/`): each imports, passes `switchboard check`, and
//! `switchboard explain` shows the candidates the seed describes. Fields that cannot be
//! carried over are reported on stderr; bad input is an error naming the file and field.

mod common;

use common::{run, temp};
use std::path::{Path, PathBuf};

const FIXTURES: &str = "tools/cli/tests/fixtures/seeds";

/// Imports a fixture and checks the output; returns the config path and stderr.
fn import(seed: &str, file: &str, extra: &[&str]) -> (PathBuf, String) {
    let src = format!("{FIXTURES}/{seed}/{file}");
    let mut args = vec!["import", "--from", seed, src.as_str()];
    args.extend_from_slice(extra);
    let (ok, out, err) = run(&args);
    assert!(ok, "{src}: {err}");
    let config = temp(&format!("{seed}-{file}.json"), &out);
    let (ok, checked, err2) = run(&["check", config.to_str().unwrap()]);
    assert!(
        ok && checked.contains(": ok ("),
        "{src}: check failed: {err2}\n{out}"
    );
    (config, err)
}

/// `explain` for a chat request to `model`: the candidates, in order.
fn candidates(config: &Path, model: &str, path: &str, headers: &[&str]) -> Vec<String> {
    let body = if path == "/v1/embeddings" {
        format!(r#"{{"model": "{model}", "input": "hello"}}"#)
    } else {
        format!(
            r#"{{"model": "{model}", "max_tokens": 16, "messages": [{{"role": "system", "content": "Be brief."}}, {{"role": "user", "content": "Hello"}}]}}"#
        )
    };
    let req = temp(&format!("req-{}.json", model.replace('/', "_")), &body);
    let mut args = vec![
        "explain",
        config.to_str().unwrap(),
        req.to_str().unwrap(),
        "--path",
        path,
    ];
    for h in headers {
        args.extend(["--header", h]);
    }
    let (ok, out, err) = run(&args);
    assert!(ok, "explain {model}: {err}");
    out.lines()
        .skip_while(|l| !l.starts_with("candidates"))
        .skip(1)
        .take_while(|l| {
            l.starts_with("  ")
                && l.trim_start()
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
        })
        .map(|l| l.split_once(". ").map_or("", |(_, n)| n).to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const CHAT: &str = "/v1/chat/completions";
const VM: &str = "my-group/production-chat";

#[test]
fn truefoundry_examples_import_check_and_explain() {
    let n = ["--name", VM];
    let (c, err) = import("truefoundry", "sticky-routing.yaml", &n);
    assert!(err.contains("cluster `provider-a` (derived from provider `provider-a`, provider kind `openai-compatible`)"), "{err}");
    let first = candidates(&c, VM, CHAT, &["x-user-id:alice"]);
    assert_eq!(
        sorted(first.clone()),
        names(&["provider-a/model-a", "provider-b/model-b"])
    );
    assert_eq!(
        candidates(&c, VM, CHAT, &["x-user-id:alice"]),
        first,
        "a session keeps its target"
    );

    let (c, _) = import("truefoundry", "retries-and-fallbacks.yaml", &n);
    assert_eq!(
        candidates(&c, VM, CHAT, &[]),
        names(&["azure/gpt-4o", "openai/gpt-4o", "anthropic/claude-sonnet"])
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""attempts": 3"#) && config.contains(r#""fallback_candidate": false"#),
        "{config}"
    );

    let (c, _) = import("truefoundry", "header-overrides.yaml", &n);
    assert_eq!(
        sorted(candidates(&c, VM, CHAT, &[])),
        names(&["provider-a/model-a", "provider-b/model-b"])
    );

    // The seed's metadata header keeps its name: region eu leaves only openai/gpt-4o.
    let (c, err) = import("truefoundry", "metadata-match.yaml", &n);
    assert!(err.contains("x-tfy-metadata"), "{err}");
    assert_eq!(
        sorted(candidates(
            &c,
            VM,
            CHAT,
            &[r#"x-tfy-metadata:{"region":"us","tier":"enterprise"}"#]
        )),
        names(&["azure/gpt-4o", "openai/gpt-4o"])
    );
    assert_eq!(
        candidates(
            &c,
            VM,
            CHAT,
            &[r#"x-tfy-metadata:{"region":"eu","tier":"enterprise"}"#]
        ),
        names(&["openai/gpt-4o"])
    );

    // tfy_gateway_region is gateway_region here.
    let (c, err) = import("truefoundry", "gateway-region.yaml", &n);
    assert!(
        err.contains("`tfy_gateway_region` is `gateway_region`"),
        "{err}"
    );
    assert_eq!(
        candidates(&c, VM, CHAT, &[r#"x-tfy-metadata:{"gateway_region":"EU"}"#]),
        names(&["azure-eu/gpt-4o", "openai/gpt-4o"])
    );
    assert_eq!(candidates(&c, VM, CHAT, &[]), names(&["openai/gpt-4o"]));

    let (c, err) = import("truefoundry", "prompt-overrides.yaml", &n);
    assert!(err.contains("not carried over: routing_config.load_balance_targets[0].override_params.prompt_version_fqn: prompt hydration"), "{err}");
    assert_eq!(
        sorted(candidates(&c, VM, CHAT, &[])),
        names(&["anthropic/claude-sonnet", "openai/gpt-4o"])
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""resolved_model": "x-tfy-resolved-model""#),
        "{config}"
    );
}

#[test]
fn truefoundry_fragments_and_the_field_template_are_refused_naming_file_and_field() {
    for (file, says) in [
        ("session-identifiers-headers.yaml", "found only: session_identifiers"),
        ("session-identifiers-metadata.yaml", "found only: session_identifiers"),
        ("gateway-zone.yaml", "found only: metadata_match"),
        (
            "configuration-structure.yaml",
            "routing_config.load_balance_targets[0].target: `string` is not a model written as providerName/model",
        ),
    ] {
        let src = format!("{FIXTURES}/truefoundry/{file}");
        let (ok, out, err) = run(&["import", "--from", "truefoundry", &src, "--name", VM]);
        assert!(!ok && out.is_empty(), "{file}");
        assert!(err.starts_with(&format!("{src}: ")) && err.contains(says), "{file}: {err}");
    }
}

#[test]
fn agentgateway_examples_import_check_and_explain() {
    let (c, err) = import("agentgateway", "weighted-routing.yaml", &[]);
    assert!(
        err.contains("apiKey $OPENAI_API_KEY: sent as `authorization"),
        "{err}"
    );
    assert_eq!(
        sorted(candidates(&c, "smart", CHAT, &[])),
        names(&["gpt-4o-fallback", "gpt-4o-primary"])
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""weight": 90"#) && config.contains(r#""visibility": "public""#),
        "{config}"
    );

    let (c, _) = import("agentgateway", "failover-routing.yaml", &[]);
    let got = candidates(&c, "resilient", "/v1/messages", &[]);
    assert_eq!(got[0], "claude-primary", "{got:?}");
    assert_eq!(
        sorted(got[1..].to_vec()),
        names(&["claude-backup-a", "claude-backup-b"])
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""consecutive_failures": 1"#) && config.contains(r#""duration": "60s""#),
        "{config}"
    );

    let (c, _) = import("agentgateway", "conditional-routing.yaml", &[]);
    assert_eq!(
        candidates(&c, "adaptive", CHAT, &["x-tier:free"]),
        names(&["openai-fast"])
    );
    assert_eq!(
        candidates(&c, "adaptive", CHAT, &["x-tier:pro"]),
        names(&["openai-smart"])
    );
}

#[test]
fn zuplo_examples_import_check_and_explain() {
    let (c, err) = import("zuplo", "policy-entry.json", &[]);
    assert!(err.contains("model_name_case: insensitive"), "{err}");
    let vm = "my-ai-gateway-load-balancing-inbound-policy";
    let got = candidates(&c, vm, CHAT, &[]);
    assert_eq!(got.len(), 2, "at most two models per request: {got:?}");
    // Names compare without case.
    assert_eq!(candidates(&c, &vm.to_ascii_uppercase(), CHAT, &[]).len(), 2);
    let config = std::fs::read_to_string(&c).unwrap();
    for field in [
        r#""backoff_multiplier": 2"#,
        r#""delay": 250"#,
        r#""fallback_timeout_ms": 60000"#,
        r#""on_connection_failure": false"#,
        r#""5xx""#,
    ] {
        assert!(config.contains(field), "{field}: {config}");
    }

    let (c, _) = import(
        "zuplo",
        "serve-one-model-from-several-providers.json",
        &["--name", "sonnet"],
    );
    let both = names(&[
        "anthropic/claude-sonnet-4-6",
        "bedrockmantle/anthropic.claude-sonnet-4-6",
    ]);
    assert_eq!(sorted(candidates(&c, "sonnet", CHAT, &[])), both);
    assert_eq!(
        sorted(candidates(&c, "sonnet", "/v1/messages", &[])),
        both,
        "Claude serves Messages on any provider"
    );

    let (c, _) = import(
        "zuplo",
        "keep-conversations-on-one-deployment.json",
        &["--name", "chat"],
    );
    let first = candidates(&c, "chat", CHAT, &[]);
    assert_eq!(first.len(), 2);
    assert_eq!(
        candidates(&c, "chat", CHAT, &[]),
        first,
        "one conversation, one model"
    );

    let (c, err) = import(
        "zuplo",
        "keep-each-customer-on-one-model.json",
        &["--name", "chat"],
    );
    assert!(err.contains("`sub` claim of the JWT"), "{err}");
    // No verified JWT here: round robin over both; only OpenAI serves /v1/responses.
    assert_eq!(candidates(&c, "chat", CHAT, &[]).len(), 2);
    assert_eq!(
        candidates(&c, "chat", "/v1/responses", &[]),
        names(&["openai/gpt-5"])
    );

    let (c, _) = import("zuplo", "balance-embeddings.json", &["--name", "embed"]);
    assert_eq!(
        sorted(candidates(&c, "embed", "/v1/embeddings", &[])),
        names(&[
            "azure-eastus/text-embedding-3-large",
            "openai/text-embedding-3-large"
        ])
    );

    // The expression's header stays the key: one end user, one model.
    let (c, _) = import("zuplo", "sticky-by-expression.json", &["--name", "chat"]);
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(config.contains(r#""key": "x-end-user-id""#), "{config}");
    let alice = candidates(&c, "chat", CHAT, &["x-end-user-id:alice"]);
    assert_eq!(alice.len(), 2);
    assert_eq!(
        candidates(&c, "chat", CHAT, &["x-end-user-id:alice"]),
        alice
    );

    // A chain entry without options: Zuplo's default declared options.
    let (c, err) = import("zuplo", "policy-order.json", &[]);
    assert!(
        err.contains("not carried over: inboundPolicyChain[2]: Fallback Model's"),
        "{err}"
    );
    assert_eq!(
        candidates(&c, "ai-gateway-load-balancing-inbound", CHAT, &[]),
        names(&["openai/gpt-4o-mini"])
    );

    let (c, _) = import("zuplo", "configure-lists-per-app.json", &[]);
    assert_eq!(
        sorted(candidates(
            &c,
            "ai-gateway-load-balancing-inbound",
            CHAT,
            &[]
        )),
        names(&["azure-eastus/gpt-5", "azure-westus/gpt-5"])
    );
}

#[test]
fn fields_that_cannot_be_carried_over_are_reported_on_stderr() {
    let ag = temp(
        "unsupported.yaml",
        r#"llm:
  models:
    - name: gem
      provider: gemini
      params: {model: gemini-2.0, apiKey: sk-literal, hostOverride: example.com:443}
      health:
        unhealthyExpression: response.code >= 500
        eviction: {duration: 10s}
      rateLimit: 5
  virtualModels:
    - name: v
      description: not a field
      routing:
        weighted:
          targets:
            - {model: gem, weight: 3, params: {temperature: 0.1, model: other}}
"#,
    );
    let (ok, out, err) = run(&["import", "--from", "agentgateway", ag.to_str().unwrap()]);
    assert!(ok, "{err}");
    for line in [
        "not carried over: llm.models[0].rateLimit:",
        "not carried over: llm.models[0].params.hostOverride:",
        "not carried over: llm.models[0].params.apiKey: a literal key is never copied",
        "not carried over: llm.models[0].health.unhealthyExpression:",
        "not carried over: llm.virtualModels[0].description:",
        "not carried over: llm.virtualModels[0].routing.weighted.targets[0].params.model:",
        "note: llm.models[0].provider: `gemini` is not openai, azure or anthropic",
        "weights [3] scaled to [100]",
    ] {
        assert!(err.contains(line), "{line}\n{err}");
    }
    assert!(
        !out.contains("sk-literal") && out.contains(r#""temperature": 0.1"#),
        "{out}"
    );

    let zu = temp(
        "unsupported.json",
        r#"{"strategy": "sticky", "stickyBy": "expression", "expression": "context.custom.tenant",
            "cacheTtl": 5, "models": {"completions": ["openai/gpt-5", "OpenAI/gpt-5-mini"]}}"#,
    );
    let (ok, out, err) = run(&[
        "import",
        "--from",
        "zuplo",
        zu.to_str().unwrap(),
        "--name",
        "x",
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("not carried over: cacheTtl:"), "{err}");
    assert!(
        err.contains(
            "not carried over: expression: `context.custom.tenant` reads what Envoy cannot see"
        ),
        "{err}"
    );
    assert!(out.contains("round-robin-routing"), "{out}");

    let tf = temp(
        "unsupported.yaml",
        "name: a/b\nmodel_types: [chat]\nowner: me\nrouting_config:\n  type: weight-based-routing\n  load_balance_targets:\n    - target: openai/gpt-4o\n      weight: 100\n      budget: 5\n",
    );
    let (ok, _, err) = run(&["import", "--from", "truefoundry", tf.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        err.contains("not carried over: owner:")
            && err.contains("not carried over: routing_config.load_balance_targets[0].budget:"),
        "{err}"
    );
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_field() {
    let cases = [
        ("zuplo", "t1.json", r#"{"fallbackTimeoutSeconds": 301, "models": {"completions": ["openai/gpt-5"]}}"#, "fallbackTimeoutSeconds: expected a whole number of seconds from 1 through 300, got 301"),
        ("zuplo", "t2.json", r#"{"models": {"completions": ["openai/gpt-5", "OPENAI/gpt-5"]}}"#, "models.completions[1]: `OPENAI/gpt-5` is listed twice"),
        ("zuplo", "t3.json", r#"{"strategy": "sticky", "models": {"completions": ["openai/gpt-5"]}}"#, "stickyBy: is required when strategy is sticky"),
        ("zuplo", "t4.json", r#"{"models": {"completions": ["gpt-5"]}}"#, "models.completions[0]: `gpt-5` is not a model written as providerName/model"),
        ("zuplo", "t5.json", r#"{"models": {}}"#, "models: set at least one list"),
        ("agentgateway", "t6.yaml", "llm:\n  virtualModels:\n    - name: v\n      routing: {weighted: {targets: [{model: nope, weight: 1}]}}\n", "llm.virtualModels[0].routing.weighted.targets[0].model: `nope` is not a model in llm.models"),
        ("agentgateway", "t7.yaml", "llm: [1, 2\n", "not valid YAML"),
        ("truefoundry", "t8.yaml", "routing_config:\n  type: weight-based-routing\n  load_balance_targets:\n    - target: openai/gpt-4o\n      weight: 90\n", "weights sum to 90"),
    ];
    let many: Vec<String> = (0..33).map(|i| format!("\"p{i}/m\"")).collect();
    let t9 = format!(r#"{{"models": {{"completions": [{}]}}}}"#, many.join(","));
    for (from, name, text, says) in cases.iter().copied().chain([(
        "zuplo",
        "t9.json",
        t9.as_str(),
        "must list from 1 through 32 models, got 33",
    )]) {
        let f = temp(name, text);
        let (ok, out, err) = run(&["import", "--from", from, f.to_str().unwrap(), "--name", "x"]);
        assert!(!ok && out.is_empty(), "{name}: {out}");
        assert!(
            err.starts_with(f.to_str().unwrap()) && err.contains(says),
            "{name}: {err}"
        );
    }
    let (ok, _, err) = run(&["import", "--from", "kong", "x.yaml"]);
    assert!(!ok && err.contains("x.yaml"), "{err}");
}

/// Every virtual model of a Zuplo import, from the config it wrote.
fn zuplo_virtual_models(file: &str) -> (Vec<serde_json::Value>, String) {
    let src = format!("{FIXTURES}/zuplo/{file}");
    let (ok, out, err) = run(&["import", "--from", "zuplo", &src, "--name", "vm"]);
    assert!(ok, "{src}: {err}");
    // A file of its own: tests run in parallel.
    let written = temp(&format!("zuplo-failures-{file}"), &out);
    let (ok, _, check) = run(&["check", written.to_str().unwrap()]);
    assert!(ok, "{src}: {check}");
    let config: serde_json::Value = serde_json::from_str(&out).unwrap();
    let vms = config["virtual_models"].as_array().unwrap().clone();
    assert!(!vms.is_empty());
    (vms, err)
}

#[test]
fn zuplo_imports_carry_the_per_endpoint_failure_rules() {
    // Zuplo model load balancing, "Failures and retries": Responses and Messages fail on a
    // 5xx, 408, 425 or an unreachable model, and keep waiting for a slow one.
    for file in ["policy-entry.json", "configure-lists-per-app.json"] {
        let (vms, err) = zuplo_virtual_models(file);
        for vm in &vms {
            assert_eq!(
                vm["fail_fast_endpoints"],
                serde_json::json!(["responses", "messages"]),
                "{file}: {vm}"
            );
            // The retry model "starts over with twice the time".
            assert_eq!(vm["fallback_timeout_growth"], 2, "{file}: {vm}");
            // "... and the request fails if that runs out too".
            assert_eq!(vm["fallback_timeout_at_last"], "fail", "{file}: {vm}");
            // "A response that doesn't stream starts only when it's complete, so the timeout
            // covers the whole response."
            assert_eq!(vm["fallback_timeout_scope"], "whole_answer", "{file}: {vm}");
        }
        assert!(
            err.contains("fail_fast_endpoints: responses, messages"),
            "{err}"
        );
        assert!(
            err.contains("fallback_timeout_growth: 2, fallback_timeout_at_last: fail"),
            "{err}"
        );
        assert!(!err.contains("Responses and Messages failures"), "{err}");
        assert!(
            !err.contains("fallbackTimeoutSeconds on the retry model"),
            "{err}"
        );
    }
}
