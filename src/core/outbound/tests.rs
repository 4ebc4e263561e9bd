use super::*;
use crate::core::config::Named;
use crate::core::request::inspect;

/// One target of each provider shape, behind one virtual model.
const CONFIG: &str = r#"{
  "models": [
    {"name": "openai/gpt-4o", "cluster": "openai", "model": "gpt-4o", "provider": "openai",
     "authority": "api.openai.com", "headers": {"authorization": "Bearer ${env:OPENAI_KEY}"}},
    {"name": "azure/gpt-4o", "cluster": "azure", "model": "gpt-4o", "provider": "azure",
     "authority": "my-res.openai.azure.com", "base_path": "/openai/deployments/gpt-4o-prod",
     "query": {"api-version": "2024-10-21"}, "headers": {"api-key": "${env:AZURE_KEY}"}},
    {"name": "anthropic/claude", "cluster": "anthropic", "model": "claude-sonnet-4-5",
     "provider": "anthropic", "authority": "api.anthropic.com",
     "headers": {"x-api-key": "ant-key"}},
    {"name": "vllm/llama", "cluster": "vllm", "model": "llama", "provider": "openai-compatible",
     "authority": "vllm.internal:8000", "base_path": "/v1/"},
    {"name": "plain", "cluster": "plain", "model": "m", "visibility": "public"}
  ],
  "virtual_models": [
    {"name": "vm", "model_types": ["chat", "embedding"], "routing_config": {
      "type": "priority-based-routing", "load_balance_targets": [
        {"target": "openai/gpt-4o", "priority": 0,
         "headers_override": {"set": {"x-team": "a", "authorization": "Bearer override"},
                              "remove": ["x-debug"]}},
        {"target": "azure/gpt-4o", "priority": 1},
        {"target": "anthropic/claude", "priority": 2},
        {"target": "vllm/llama", "priority": 3}]}},
    {"name": "mixed", "model_types": ["chat"], "translate": ["chat_completions", "messages"],
     "routing_config": {
      "type": "priority-based-routing", "load_balance_targets": [
        {"target": "anthropic/claude", "priority": 0, "override_params": {"top_k": 5}},
        {"target": "openai/gpt-4o", "priority": 1},
        {"target": "azure/gpt-4o", "priority": 2},
        {"target": "vllm/llama", "priority": 3}]}}
  ]
}"#;

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_KEY" => Some("sk-openai".to_string()),
        "AZURE_KEY" => Some("az-key".to_string()),
        _ => None,
    }
}

fn config() -> Config {
    Config::parse_with_env(CONFIG.as_bytes(), &env).unwrap()
}

fn id(config: &Config, name: &str) -> ModelId {
    match config.lookup(name) {
        Some(Named::Catalog(id, _)) => id,
        _ => panic!("{name} is not a catalog model"),
    }
}

const BODY: &[u8] = br#"{"model":"vm","messages":[]}"#;

/// The outbound request of `target` for a chat request with these client headers.
fn out<'c>(config: &'c Config, target: &str, headers: &[(&str, &str)]) -> Outbound<'c> {
    let headers = Headers::from_pairs(headers.iter().copied());
    let layout = inspect(BODY).unwrap().layout(false);
    let vm = config.virtual_models.first();
    let client = ClientRequest {
        endpoint: Endpoint::from_path(headers.get_str(":path").unwrap_or("/v1/chat/completions"))
            .unwrap(),
        headers: &headers,
        body: Some((BODY, &layout)),
        stored_path: None,
    };
    outbound(config, vm, id(config, target), &client).unwrap()
}

const CLIENT: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/chat/completions"),
    (":authority", "gateway.example.com"),
    ("authorization", "Bearer client-key"),
    ("content-type", "application/json"),
    ("x-debug", "1"),
    ("x-switchboard-metadata", "{}"),
];

#[test]
fn openai_gets_its_host_the_canonical_path_and_the_override_credential_only() {
    let c = config();
    let o = out(&c, "openai/gpt-4o", CLIENT);
    assert_eq!(o.cluster, "openai");
    assert_eq!(o.authority, Some("api.openai.com"));
    assert_eq!(o.path, None, "the client's path already is OpenAI's");
    // headers_override.set wins over the catalog's value of the same header.
    assert_eq!(
        o.set,
        [("authorization", "Bearer override"), ("x-team", "a")]
    );
    assert_eq!(o.remove, ["x-switchboard-metadata", "x-debug"]);
    assert_eq!(
        String::from_utf8(o.body(BODY).unwrap().into_owned()).unwrap(),
        r#"{"model":"gpt-4o","messages":[]}"#
    );
}

#[test]
fn a_client_path_without_v1_reaches_the_canonical_path() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h[1] = (":path", "/chat/completions?trace=1");
    let o = out(&c, "openai/gpt-4o", &h);
    assert_eq!(o.path.as_deref(), Some("/v1/chat/completions?trace=1"));
}

#[test]
fn azure_gets_its_deployment_path_api_version_and_key_and_no_client_credential() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h[1] = (
        ":path",
        "/v1/chat/completions?api-version=1999-01-01&keep=yes",
    );
    h.push(("x-api-key", "another-client-key"));
    let o = out(&c, "azure/gpt-4o", &h);
    assert_eq!(o.cluster, "azure");
    assert_eq!(o.authority, Some("my-res.openai.azure.com"));
    // The catalog's api-version replaces the client's; the client's other parameters stay.
    assert_eq!(
        o.path.as_deref(),
        Some("/openai/deployments/gpt-4o-prod/chat/completions?keep=yes&api-version=2024-10-21")
    );
    assert_eq!(o.set, [("api-key", "az-key")]);
    assert_eq!(
        o.remove,
        ["authorization", "x-api-key", "x-switchboard-metadata"]
    );
}

#[test]
fn anthropic_gets_a_version_unless_the_client_sends_one() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h[1] = (":path", "/v1/messages");
    let o = out(&c, "anthropic/claude", &h);
    assert_eq!(o.authority, Some("api.anthropic.com"));
    assert_eq!(o.path, None);
    assert_eq!(
        o.set,
        [
            ("x-api-key", "ant-key"),
            ("anthropic-version", "2023-06-01")
        ]
    );
    assert!(o.remove.contains(&"authorization"));
    h.push(("anthropic-version", "2023-01-01"));
    let o = out(&c, "anthropic/claude", &h);
    assert_eq!(
        o.set,
        [("x-api-key", "ant-key")],
        "the client's version is kept"
    );
}

#[test]
fn a_self_hosted_server_without_a_credential_of_its_own_keeps_the_clients() {
    let c = config();
    let o = out(&c, "vllm/llama", CLIENT);
    assert_eq!(o.authority, Some("vllm.internal:8000"));
    // base_path "/v1/" lost its trailing slash when the config loaded: "/v1/chat/completions"
    // is the client's path already.
    assert_eq!(o.path, None);
    assert!(o.set.is_empty());
    assert_eq!(o.remove, ["x-switchboard-metadata"]);
    let mut h = CLIENT.to_vec();
    h[1] = (":path", "/chat/completions");
    let o = out(&c, "vllm/llama", &h);
    assert_eq!(o.path.as_deref(), Some("/v1/chat/completions"));
}

#[test]
fn a_model_without_upstream_fields_changes_neither_authority_nor_path() {
    let c = config();
    let o = out(&c, "plain", &CLIENT[..3]);
    assert_eq!((o.authority, o.path), (None, None));
    assert!(o.remove.is_empty() && o.set.is_empty());
}

#[test]
fn call_headers_carry_the_targets_authority_path_and_credential_never_the_clients() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h.push(("x-switchboard-cluster", "client-choice"));
    h.push(("content-length", "999"));
    let o = out(&c, "azure/gpt-4o", &h);
    let client = Headers::from_pairs(h.iter().copied());
    let sent = o.call_headers(&client, &c.header_names, "27");
    assert_eq!(
        sent,
        [
            (":method", "POST"),
            (
                ":path",
                "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
            ),
            (":authority", "my-res.openai.azure.com"),
            ("content-type", "application/json"),
            ("x-debug", "1"),
            ("api-key", "az-key"),
            ("content-length", "27"),
        ]
    );
}

#[test]
fn the_classifier_call_gets_its_models_shape_and_only_the_gateways_authority() {
    let c = config();
    let client = Headers::from_pairs([(":authority", "gateway.example.com")]);
    let call = crate::core::decision::ClassifierCall {
        model: id(&c, "azure/gpt-4o"),
        headers: Headers::from_pairs([
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            (":authority", client.get_str(":authority").unwrap()),
        ]),
        body: b"{}".to_vec(),
        timeout_ms: 100,
    };
    let o = call.outbound(&c).unwrap();
    let sent = o.call_headers(&call.headers, &c.header_names, "2");
    assert!(sent.contains(&(":authority", "my-res.openai.azure.com")));
    assert!(sent.contains(&(
        ":path",
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    )));
    assert!(sent.contains(&("api-key", "az-key")));
}

#[test]
fn every_endpoint_keeps_its_own_path_under_a_base_path() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h[1] = (":path", "/embeddings");
    let o = out(&c, "azure/gpt-4o", &h);
    assert_eq!(
        o.path.as_deref(),
        Some("/openai/deployments/gpt-4o-prod/embeddings?api-version=2024-10-21")
    );
}

#[test]
fn upstream_fields_are_validated_with_their_path() {
    let err = |from: &str, to: &str| {
        assert!(CONFIG.contains(from), "{from}");
        Config::parse_with_env(CONFIG.replacen(from, to, 1).as_bytes(), &env)
            .unwrap_err()
            .to_string()
    };
    assert!(err(r#""api.openai.com""#, r#""https://api.openai.com""#)
        .starts_with("models[0].authority: expected a host name"));
    assert_eq!(
        err(r#""/openai/deployments/gpt-4o-prod""#, r#""openai/x""#),
        "models[1].base_path: must start with `/`"
    );
    assert!(err(r#""/openai/deployments/gpt-4o-prod""#, r#""/x?y=1""#)
        .starts_with("models[1].base_path: must not contain `?`"));
    assert_eq!(
        err(r#""2024-10-21""#, r#""a\nb""#),
        "models[1].query.api-version: must not contain control characters"
    );
    assert_eq!(
        err(r#""2024-10-21""#, "1"),
        "models[1].query.api-version: expected a string, got a number"
    );
    let missing = err("${env:AZURE_KEY}", "${env:NOT_SET}");
    assert!(
        missing.starts_with("models[1].headers.api-key: environment variable `NOT_SET` is not set"),
        "{missing}"
    );
    // An error never shows a resolved value.
    let bad = Config::parse_with_env(CONFIG.as_bytes(), &|n: &str| {
        Some(format!("line\nbreak-{n}"))
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        bad,
        "models[0].headers.authorization: value must not contain control characters"
    );
    // Without an environment, a reference cannot be resolved.
    assert!(Config::parse(CONFIG.as_bytes()).is_err());
}

#[test]
fn a_virtual_models_responses_answer_is_asked_for_uncompressed() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h[1] = (":path", "/v1/responses");
    h.push(("accept-encoding", "gzip, deflate"));
    let headers = Headers::from_pairs(h.iter().copied());
    let client = ClientRequest {
        endpoint: Endpoint::Responses,
        headers: &headers,
        body: None,
        stored_path: None,
    };
    let vm = c.virtual_models.first();
    let o = outbound(&c, vm, id(&c, "openai/gpt-4o"), &client).unwrap();
    assert!(o.remove.contains(&"accept-encoding"));
    // Other endpoints keep the client's choice.
    let o = out(&c, "openai/gpt-4o", &h[..3]);
    assert!(!o.remove.contains(&"accept-encoding"));
}

#[test]
fn the_trace_token_header_never_reaches_a_provider() {
    let c = config();
    let mut h = CLIENT.to_vec();
    h.push(("x-switchboard-trace-token", "0123456789abcdef-secret"));
    for target in ["openai/gpt-4o", "vllm/llama"] {
        let o = out(&c, target, &h);
        assert!(
            o.remove.contains(&"x-switchboard-trace-token"),
            "{target}: {:?}",
            o.remove
        );
    }
    // Not sent: nothing to remove.
    assert_eq!(
        out(&c, "vllm/llama", CLIENT).remove,
        ["x-switchboard-metadata"]
    );
}

#[test]
fn account_headers_go_only_where_the_client_key_goes() {
    let c = config();
    let client = [
        (":path", "/v1/chat/completions"),
        ("authorization", "Bearer client-key"),
        ("openai-organization", "org-client"),
        ("openai-project", "proj_client"),
        ("cookie", "session=1"),
        ("proxy-authorization", "Basic x"),
    ];
    let account = [
        "openai-organization",
        "openai-project",
        "cookie",
        "proxy-authorization",
    ];
    // A target with the gateway's key (the catalog's, or the override's): none of them go.
    for target in ["openai/gpt-4o", "azure/gpt-4o"] {
        let o = out(&c, target, &client);
        for name in account {
            assert!(
                o.remove.contains(&name),
                "{target} keeps {name}: {:?}",
                o.remove
            );
        }
    }
    // A target without a credential of its own gets the client's key, and its account.
    let o = out(&c, "vllm/llama", &client);
    assert!(
        account.iter().all(|n| !o.remove.contains(n)),
        "{:?}",
        o.remove
    );
    // The answer's account headers are hidden exactly where the gateway's key went.
    let vm = c.virtual_models.first();
    let hidden = |t: &str| hidden_answer_headers(&c, vm, id(&c, t));
    // Each provider's own: a removal per header its answers cannot carry is work for nothing.
    assert_eq!(
        hidden("openai/gpt-4o"),
        ["openai-organization", "openai-project"]
    );
    assert_eq!(hidden("anthropic/claude"), ["anthropic-organization-id"]);
    assert!(hidden("vllm/llama").is_empty());
}

/// Issue 28: the outbound request of `target` behind virtual model `vm` (index) for a client
/// request to `path` with `body`, or why it cannot be built.
fn translated<'c>(
    config: &'c Config,
    vm: usize,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Outbound<'c>, Unbuildable> {
    let headers = Headers::from_pairs(headers.iter().copied());
    let layout = inspect(body).unwrap().layout(false);
    let client = ClientRequest {
        endpoint: Endpoint::from_path(headers.get_str(":path").unwrap()).unwrap(),
        headers: &headers,
        body: Some((body, &layout)),
        stored_path: None,
    };
    try_outbound(
        config,
        config.virtual_models.get(vm),
        id(config, target),
        &client,
    )
}

/// The body an outbound request sends, as JSON.
fn sent_json(o: &Outbound<'_>, body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(&o.body(body).unwrap()).unwrap()
}

const CHAT: &[u8] = br#"{"model":"vm","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":50,"stream":true}"#;

const MESSAGES: &[u8] = br#"{"model":"mixed","system":"Be brief.","max_tokens":50,"messages":[{"role":"user","content":"Hi"}]}"#;

/// An OpenAI SDK's request, with the headers translation must not carry.
const OPENAI_CLIENT: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/chat/completions?trace=1"),
    (":authority", "gateway.example.com"),
    ("authorization", "Bearer client-key"),
    ("content-type", "application/json"),
    ("accept-encoding", "gzip, br"),
];

/// An Anthropic SDK's request.
const ANTHROPIC_CLIENT: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/messages?beta=true"),
    (":authority", "gateway.example.com"),
    ("x-api-key", "client-key"),
    ("anthropic-version", "2023-06-01"),
    ("anthropic-beta", "prompt-caching-2024-07-31"),
    ("content-type", "application/json"),
    ("accept-encoding", "gzip"),
];

#[test]
fn a_chat_request_to_an_anthropic_target_is_sent_as_messages() {
    let c = config();
    let o = translated(&c, 0, "anthropic/claude", OPENAI_CLIENT, CHAT).unwrap();
    assert_eq!(o.cluster, "anthropic");
    assert_eq!(o.authority, Some("api.anthropic.com"));
    // Messages' own path; the client's query is its API's, not the target's.
    assert_eq!(o.path.as_deref(), Some("/v1/messages"));
    assert_eq!(
        o.set,
        [
            ("x-api-key", "ant-key"),
            ("anthropic-version", "2023-06-01")
        ]
    );
    // The client's key never goes with the gateway's; the answer is read, so uncompressed.
    assert_eq!(o.remove, ["authorization", "accept-encoding"]);
    assert_eq!(
        sent_json(&o, CHAT),
        serde_json::json!({
            "model": "claude-sonnet-4-5",
            "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_tokens": 50,
            "stream": true,
        })
    );
    // The whole body is one edit, so the router's attempt writes it like any other.
    let edits = o.edits.as_ref().unwrap();
    assert_eq!(edits.head_end(), CHAT.len());
}

#[test]
fn a_messages_request_to_openai_compatible_targets_is_sent_as_chat_completions() {
    let c = config();
    let o = translated(&c, 1, "openai/gpt-4o", ANTHROPIC_CLIENT, MESSAGES).unwrap();
    assert_eq!(o.authority, Some("api.openai.com"));
    assert_eq!(o.path.as_deref(), Some("/v1/chat/completions"));
    assert_eq!(o.set, [("authorization", "Bearer sk-openai")]);
    assert_eq!(
        o.remove,
        [
            "x-api-key",
            "accept-encoding",
            "anthropic-version",
            "anthropic-beta"
        ]
    );
    let client = Headers::from_pairs(ANTHROPIC_CLIENT.iter().copied());
    let sent = o.call_headers(&client, &c.header_names, "1");
    assert!(
        sent.iter().all(|(n, _)| !n.starts_with("anthropic-")),
        "{sent:?}"
    );
    let body = sent_json(&o, MESSAGES);
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}
        ])
    );
    assert_eq!(body["max_tokens"], 50);
    // base_path and the model's query stay the target's rules.
    let azure = translated(&c, 1, "azure/gpt-4o", ANTHROPIC_CLIENT, MESSAGES).unwrap();
    assert_eq!(
        azure.path.as_deref(),
        Some("/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21")
    );
    let vllm = translated(&c, 1, "vllm/llama", ANTHROPIC_CLIENT, MESSAGES).unwrap();
    assert_eq!(vllm.path.as_deref(), Some("/v1/chat/completions"));
    assert_eq!(sent_json(&vllm, MESSAGES)["model"], "llama");
}

#[test]
fn a_translated_body_gets_the_targets_override_params() {
    let c = config();
    let mut h = OPENAI_CLIENT.to_vec();
    h[1] = (":path", "/v1/chat/completions");
    let o = translated(&c, 1, "anthropic/claude", &h, CHAT).unwrap();
    let body = sent_json(&o, CHAT);
    assert_eq!(body["top_k"], 5);
    assert_eq!(body["model"], "claude-sonnet-4-5");
}

#[test]
fn native_attempts_and_direct_calls_are_not_translated() {
    let c = config();
    // A Messages request to Anthropic: only the model changes, on the client's path.
    let o = translated(&c, 1, "anthropic/claude", ANTHROPIC_CLIENT, MESSAGES).unwrap();
    assert_eq!(o.path, None);
    assert_eq!(sent_json(&o, MESSAGES)["model"], "claude-sonnet-4-5");
    assert_eq!(sent_json(&o, MESSAGES)["system"], "Be brief.");
    assert!(!o.remove.contains(&"accept-encoding"));
    assert!(!o.remove.contains(&"anthropic-beta"));
    // `translate` of the first virtual model is Chat Completions only.
    let o = translated(&c, 0, "openai/gpt-4o", ANTHROPIC_CLIENT, MESSAGES).unwrap();
    assert_eq!(o.path, None, "sent as the client sent it: {:?}", o.path);
    assert!(sent_json(&o, MESSAGES).get("system").is_some());
    // A catalog model called directly is never translated.
    let headers = Headers::from_pairs(OPENAI_CLIENT.iter().copied());
    let layout = inspect(CHAT).unwrap().layout(false);
    let client = ClientRequest {
        endpoint: Endpoint::ChatCompletions,
        headers: &headers,
        body: Some((CHAT, &layout)),
        stored_path: None,
    };
    let o = outbound(&c, None, id(&c, "anthropic/claude"), &client).unwrap();
    assert_eq!(o.path, None);
    assert!(sent_json(&o, CHAT).get("messages").is_some());
    assert_eq!(sent_json(&o, CHAT)["messages"][0]["role"], "system");
}

#[test]
fn an_untranslatable_request_names_its_field() {
    let c = config();
    let body = br#"{"model":"vm","n":2,"messages":[{"role":"user","content":"Hi"}]}"#;
    let e = translated(&c, 0, "anthropic/claude", OPENAI_CLIENT, body).unwrap_err();
    let Unbuildable::Untranslatable(u) = e else {
        panic!("{e:?}")
    };
    assert_eq!(u.field, "n");
    // A retry or fallback whose request cannot be built gets none (counted as refused).
    let headers = Headers::from_pairs(OPENAI_CLIENT.iter().copied());
    let layout = inspect(body).unwrap().layout(false);
    let client = ClientRequest {
        endpoint: Endpoint::ChatCompletions,
        headers: &headers,
        body: Some((body, &layout)),
        stored_path: None,
    };
    let vm = c.virtual_models.first();
    assert_eq!(outbound(&c, vm, id(&c, "anthropic/claude"), &client), None);
    // The same body to a native target goes as is.
    assert!(outbound(&c, vm, id(&c, "openai/gpt-4o"), &client).is_some());
}

/// The decision's reply for a request whose first target is `mixed`'s Anthropic model.
fn decided(endpoint: Endpoint, body: &[u8]) -> Result<Outbound<'static>, ErrorReply> {
    let c: &'static Config = Box::leak(Box::new(config()));
    crate::core::decision::decide(
        c,
        endpoint,
        body,
        &Headers::from_pairs([(":path", endpoint.display_path())]),
        &crate::core::routing::HealthInput::NONE,
        &crate::core::routing::LocalState::default(),
        &mut fastrand::Rng::with_seed(1),
    )
    .map(|d| d.outbound)
}

use crate::core::errors::ErrorReply;

#[test]
fn the_first_targets_untranslatable_field_is_a_400_naming_it() {
    let body = br#"{"model":"mixed","n":2,"messages":[{"role":"user","content":"Hi"}]}"#;
    let e = decided(Endpoint::ChatCompletions, body).unwrap_err();
    assert_eq!(e.status, 400);
    let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "n");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("`n` cannot be translated for the target: "),
        "{message}"
    );
    // In Anthropic's shape for a Messages client (the adapter's reply does this).
    let v: serde_json::Value = serde_json::from_str(&e.in_anthropic_shape().body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("`n`"));
    // A translatable one is decided for that target, translated.
    let ok = br#"{"model":"mixed","messages":[{"role":"user","content":"Hi"}]}"#;
    let o = decided(Endpoint::ChatCompletions, ok).unwrap();
    assert_eq!(o.cluster, "anthropic");
    assert_eq!(o.path.as_deref(), Some("/v1/messages"));
}
