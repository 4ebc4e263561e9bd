//! Mutation fuzzing of the request path, natively: bodies, headers and configs a client or an
//! operator could send, mangled at random with a fixed seed. In the filter a panic aborts the
//! Wasm VM and fails every later request on that worker, so every input must get an answer;
//! and what is forwarded must be the client's JSON with only `model` (and a target's
//! `override_params`) changed, for the first target and for every fallback.

// A test's helpers fail loudly; the request path under test is held to the crate's lints.
#![allow(clippy::panic, clippy::indexing_slicing, clippy::expect_used)]

use serde_json::{Map, Value};
use std::collections::BTreeSet;
use switchboard::core::config::{Config, ModelId};
use switchboard::core::decision::{decide, Decision};
use switchboard::core::endpoint::Endpoint;
use switchboard::core::errors::ErrorReply;
use switchboard::core::headers::Headers;
use switchboard::core::outbound::body_for;
use switchboard::core::request::inspect_multipart;
use switchboard::core::routing::HealthInput;
use switchboard::core::routing::LocalState;

/// The example config (weighted with sticky sessions, `override_params`, fallback, conditional)
/// and one virtual model for each other strategy, with `metadata_match` and direct models.
fn configs() -> Vec<Config> {
    let example = include_str!("../examples/production-chat.json");
    let strategies = r#"{
      "models": [
        {"name": "a/m", "cluster": "ca", "model": "m-a", "visibility": "public"},
        {"name": "b/m", "cluster": "cb", "model": "m\"b\\é", "provider": "azure"},
        {"name": "c/m", "cluster": "cc", "model": "claude-x", "provider": "anthropic"}
      ],
      "default_metadata": {"env": "prod"},
      "virtual_models": [
        {"name": "vm/priority", "model_types": ["chat", "responses", "completion", "embedding", "rerank", "moderation", "image", "text_to_speech", "audio_transcription"],
          "routing_config": {"type": "priority-based-routing",
          "load_balance_targets": [{"target": "a/m", "priority": 0,
            "override_params": {"max_tokens": 7, "temperature": 0.5}},
           {"target": "b/m", "priority": 1, "metadata_match": {"env": "prod"}},
           {"target": "c/m", "priority": 2}]}},
        {"name": "vm/latency", "model_types": ["chat", "responses", "completion", "embedding", "rerank", "moderation", "image", "text_to_speech", "audio_transcription"],
          "routing_config": {"type": "latency-based-routing",
          "load_balance_targets": [{"target": "a/m"}, {"target": "b/m"}]}},
        {"name": "vm/complexity", "model_types": ["chat"], "routing_config": {"type": "complexity-based-routing",
          "load_balance_targets": [{"target": "a/m", "tier": "simple"},
           {"target": "b/m", "tier": "medium"}, {"target": "c/m", "tier": "complex"}]}},
        {"name": "vm/round-robin", "model_types": ["chat", "responses", "completion", "embedding", "rerank", "moderation", "image", "text_to_speech", "audio_transcription"],
          "routing_config": {"type": "round-robin-routing",
          "load_balance_targets": [{"target": "a/m"}, {"target": "b/m",
            "override_params": {"user": "fuzz", "messages": []}}]}},
        {"name": "vm/hash", "model_types": ["chat", "responses", "completion", "embedding", "rerank", "moderation", "image", "text_to_speech", "audio_transcription"],
          "routing_config": {"type": "hash-based-routing",
          "hash_key": {"source": "headers", "key": "x-user-id"},
          "load_balance_targets": [{"target": "a/m"}, {"target": "b/m"}, {"target": "c/m"}]}},
        {"name": "vm/metadata", "model_types": ["chat", "responses", "completion", "embedding", "rerank", "moderation", "image", "text_to_speech", "audio_transcription"],
          "routing_config": {"type": "weight-based-routing",
          "load_balance_targets": [
           {"target": "a/m", "weight": 50, "metadata_match": {"team": "x"}},
           {"target": "b/m", "weight": 50, "metadata_match": {"env": "prod"}}]}}
      ]
    }"#;
    [example, strategies]
        .iter()
        .map(|text| Config::parse(text.as_bytes()).unwrap_or_else(|e| panic!("fuzz config: {e}")))
        .collect()
}

/// Model names worth asking for in each config: its virtual models, direct and internal
/// models, an unknown one.
const NAMES: [&[&str]; 2] = [
    &[
        "my-group/production-chat",
        "my-group/tiered",
        "openai-main/gpt-4o",
        "nope",
    ],
    &[
        "vm/priority",
        "vm/latency",
        "vm/complexity",
        "vm/round-robin",
        "vm/hash",
        "vm/metadata",
        "a/m",
        "b/m",
        "nope",
    ],
];

/// Request bodies as clients send them; `{M}` is the model's JSON string.
const BODIES: &[&str] = &[
    r#"{"model":{M},"messages":[{"role":"user","content":"hi"}]}"#,
    r#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Explain \u00e9 and \ud83d\ude00, then \"quote\" \\ this.\n"}],"model":{M},"stream":true,"stream_options":{"include_usage":true}}"#,
    r#"  {"model" : {M} , "max_tokens": 5, "temperature": 1, "messages": [], "n": 1.5e3 }  "#,
    r#"{"model":{M},"input":"write a poem","previous_response_id":"resp_abc","store":true}"#,
    r#"{"model":{M},"prompt":["a","b"],"stream":false,"echo":null}"#,
    r#"{"model":{M},"input":[[1,2,3],{"x":[]}],"encoding_format":"float"}"#,
    r#"{"model":{M},"max_tokens":1024,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"t"}]}]}"#,
    r#"{"metadata":{"model":"inner"},"model":{M},"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}"#,
];

/// [`BODIES`], and one nested deeper than serde_json's recursion limit (128) inside a message.
fn templates() -> Vec<String> {
    let deep = format!(
        r#"{{"model":{{M}},"messages":[{{"role":"user","content":{}"x"{}}}]}}"#,
        "[".repeat(140),
        "]".repeat(140)
    );
    BODIES.iter().map(|b| b.to_string()).chain([deep]).collect()
}

/// Fragments a mutation inserts: JSON structure, escapes, duplicates, non-UTF-8 bytes.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"model\":\"vm/hash\",",
    b"\"model\":null,",
    b"\"mod\\u0065l\":\"a/m\",",
    b"\"max_tokens\":9,",
    b"\"stream\":true,",
    b"\"temperature\":[1],",
    b"null",
    b"1e999",
    b"-0",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    "é😀".as_bytes(),
    b"\xff\xfe",
    b" \n\t",
];

/// The endpoints whose bodies are JSON.
const ENDPOINTS: &[Endpoint] = &[
    Endpoint::ChatCompletions,
    Endpoint::Completions,
    Endpoint::Embeddings,
    Endpoint::Responses,
    Endpoint::Messages,
    Endpoint::Rerank,
    Endpoint::Moderations,
    Endpoint::ImageGenerations,
    Endpoint::Speech,
];

fn json_string(name: &str) -> String {
    serde_json::to_string(name).expect("a string serialises")
}

/// Changes `body` in 0 to 3 random ways.
fn mutate(rng: &mut fastrand::Rng, mut body: Vec<u8>) -> Vec<u8> {
    // Half the inputs stay whole, so routing and the rewrite are reached often.
    let times = if rng.bool() { 0 } else { rng.usize(1..4) };
    for _ in 0..times {
        let len = body.len();
        let at = rng.usize(0..=len);
        match rng.u8(0..6) {
            0 if len > 0 => body[rng.usize(0..len)] = rng.u8(..),
            1 => {
                let end = rng.usize(at..=len);
                body.drain(at..end);
            }
            2 => body.truncate(at),
            3 => {
                let end = rng.usize(at..=len.min(at + 64));
                let copy = body[at..end].to_vec();
                body.splice(at..at, copy);
            }
            _ => {
                let token = TOKENS[rng.usize(0..TOKENS.len())];
                body.splice(at..at, token.iter().copied());
            }
        }
    }
    body
}

/// Headers a request could carry: sticky keys, tiers, metadata (valid or not), bad bytes.
fn headers(rng: &mut fastrand::Rng) -> Headers {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
        vec![(b"content-type".to_vec(), b"application/json".to_vec())];
    if rng.bool() {
        pairs.push((
            b"x-user-id".to_vec(),
            format!("user-{}", rng.u8(..)).into_bytes(),
        ));
    }
    if rng.bool() {
        let tier: &[u8] = if rng.bool() { b"free" } else { b"\xff" };
        pairs.push((b"x-tier".to_vec(), tier.to_vec()));
    }
    if rng.bool() {
        let metadata: &[u8] = match rng.u8(0..16) {
            0 => br#"{"team":1}"#,
            1 => b"{",
            2 => b"\xc3",
            3 => br#"{"env":"dev","team":"x"}"#,
            4 => br#"{"team":"x"}"#,
            _ => br#"{"env":"prod"}"#,
        };
        pairs.push((b"x-switchboard-metadata".to_vec(), metadata.to_vec()));
    }
    Headers::from_pairs(pairs)
}

/// An error the filter answers with: a status the vendor documents give and an OpenAI-style body.
fn check_error(reply: &ErrorReply, case: &str) {
    assert!(
        matches!(reply.status, 400 | 404 | 409 | 413 | 503),
        "{case}: status {}",
        reply.status
    );
    let body: Value = serde_json::from_str(&reply.body)
        .unwrap_or_else(|e| panic!("{case}: error body is not JSON ({e}): {}", reply.body));
    assert!(
        body["error"]["message"].is_string(),
        "{case}: no error.message in {}",
        reply.body
    );
}

fn object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// The body the filter sends to `target` for `decision`, checked three ways: the edits apply,
/// their announced length is right, and the router attempt's edited head followed by Envoy's
/// untouched rest is the same body.
fn sent_to(
    config: &Config,
    decision: &Decision,
    target: ModelId,
    body: &[u8],
    case: &str,
) -> Vec<u8> {
    let vm = decision.plan.virtual_model(config);
    let edits = body_for(config, vm, body, &decision.layout, target)
        .unwrap_or_else(|| panic!("{case}: no body for target {target:?}"));
    let Some(edits) = edits else {
        return body.to_vec();
    };
    let sent = edits
        .apply(body)
        .unwrap_or_else(|| panic!("{case}: edits do not apply"));
    assert_eq!(sent.len(), edits.new_len(body), "{case}: new_len");
    let (head, end) = edits
        .head(body)
        .unwrap_or_else(|| panic!("{case}: no head"));
    let mut joined = head.concat();
    joined.extend_from_slice(&body[end..]);
    assert_eq!(
        joined, sent,
        "{case}: head and rest differ from the whole edit"
    );
    sent
}

/// The body the filter would send to `target`: the client's, with only the model and that
/// target's `override_params` changed.
fn check_forwarded(config: &Config, decision: &Decision, target: ModelId, body: &[u8], case: &str) {
    let vm = decision.plan.virtual_model(config);
    let sent = sent_to(config, decision, target, body, case);
    let Some(before) = object(body) else {
        return; // accepted though serde_json's tree would not read it (1e999, a lone surrogate)
    };
    let after = object(&sent).unwrap_or_else(|| {
        panic!(
            "{case}: forwarded body is not a JSON object: {}",
            String::from_utf8_lossy(&sent)
        )
    });
    let model = config.model(target).map(|m| m.upstream_model.clone());
    assert_eq!(
        after
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        model,
        "{case}: forwarded model"
    );
    let overrides: Vec<(String, Value)> = vm
        .and_then(|vm| vm.target(target))
        .map(|t| {
            t.override_params
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::from_str(v).expect("validated JSON")))
                .collect()
        })
        .unwrap_or_default();
    for (key, value) in &before {
        if key == "model" || overrides.iter().any(|(k, _)| k == key) {
            continue;
        }
        assert_eq!(after.get(key), Some(value), "{case}: field {key} changed");
    }
    for (key, value) in &overrides {
        assert_eq!(after.get(key), Some(value), "{case}: override {key}");
    }
    // Nothing lost, nothing added but the model and the overrides.
    let expected: BTreeSet<&str> = before
        .keys()
        .map(String::as_str)
        .chain(overrides.iter().map(|(k, _)| k.as_str()))
        .chain(["model"])
        .collect();
    let keys: BTreeSet<&str> = after.keys().map(String::as_str).collect();
    assert_eq!(keys, expected, "{case}: fields added or lost");
}

#[test]
fn no_request_body_or_header_makes_the_request_path_panic_or_lose_a_field() {
    let configs = configs();
    let templates = templates();
    let mut rng = fastrand::Rng::with_seed(0x005b_0a4d);
    let (mut forwarded, mut refused) = (0, 0);
    for i in 0..100_000 {
        let config = &configs[i % 2];
        let names = NAMES[i % 2];
        let name = names[rng.usize(0..names.len())];
        let template = &templates[rng.usize(0..templates.len())];
        let body = template.replace("{M}", &json_string(name)).into_bytes();
        let body = mutate(&mut rng, body);
        // Most virtual models serve chat only.
        let endpoint = match rng.usize(0..ENDPOINTS.len() * 2) {
            n if n < ENDPOINTS.len() => ENDPOINTS[n],
            _ => Endpoint::ChatCompletions,
        };
        let headers = headers(&mut rng);
        let case = format!(
            "case {i}, {endpoint:?}, body {:?}",
            String::from_utf8_lossy(&body)
        );
        let state = LocalState::default();
        let mut pick = fastrand::Rng::with_seed(i as u64);
        match decide(
            config,
            endpoint,
            &body,
            &headers,
            &HealthInput::NONE,
            &state,
            &mut pick,
        ) {
            Ok(decision) => {
                forwarded += 1;
                assert_eq!(decision.plan.primary(), Some(decision.target), "{case}");
                for &target in &decision.plan.candidates {
                    check_forwarded(config, &decision, target, &body, &case);
                }
            }
            Err(reply) => {
                refused += 1;
                check_error(&reply, &case);
            }
        }
    }
    // Both outcomes must be well exercised, or the mutations or names have drifted.
    assert!(forwarded > 20_000, "only {forwarded} forwarded");
    assert!(refused > 20_000, "only {refused} refused");
}

#[test]
fn no_mangled_multipart_upload_makes_the_request_path_panic() {
    let configs = configs();
    let mut rng = fastrand::Rng::with_seed(0x3417);
    let mut forwarded = 0;
    for i in 0..5_000 {
        let names = NAMES[i % 2];
        let name = names[rng.usize(0..names.len())];
        let body = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
             Content-Type: audio/wav\r\n\r\nRIFF\0\x01data\r\n--XyZ\r\n\
             Content-Disposition: form-data; name=\"model\"\r\n\r\n{name}\r\n--XyZ--\r\n"
        );
        let body = mutate(&mut rng, body.into_bytes());
        let boundary: &[u8] = if rng.bool() { b"XyZ" } else { b"\"XyZ\"" };
        let mut content_type = b"multipart/form-data; boundary=".to_vec();
        content_type.extend_from_slice(boundary);
        let headers = Headers::from_pairs([(b"content-type".to_vec(), content_type)]);
        let case = format!("case {i}, body {:?}", String::from_utf8_lossy(&body));
        let config = &configs[i % 2];
        let result = decide(
            config,
            Endpoint::Transcriptions,
            &body,
            &headers,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(1),
        );
        match result {
            Ok(decision) => {
                forwarded += 1;
                for &target in &decision.plan.candidates {
                    let sent = sent_to(config, &decision, target, &body, &case);
                    let upstream = config.model(target).map(|m| m.upstream_model.as_str());
                    let model = inspect_multipart(&sent, "XyZ").map(|i| i.model.into_owned());
                    assert_eq!(model.ok().as_deref(), upstream, "{case}: forwarded model");
                }
            }
            Err(reply) => check_error(&reply, &case),
        }
    }
    assert!(forwarded > 500, "only {forwarded} uploads forwarded");
}

/// Two headers in the host's encoding.
fn header_block() -> Vec<u8> {
    Headers::from_pairs([(":path", "/v1/chat/completions"), ("x-user-id", "u")])
        .as_bytes()
        .to_vec()
}

#[test]
fn no_mangled_config_or_header_block_makes_parsing_panic() {
    let mut rng = fastrand::Rng::with_seed(0xc0f1);
    let example = include_bytes!("../examples/production-chat.json").to_vec();
    assert!(Headers::decode(header_block()).is_some_and(|h| h.get_str("x-user-id") == Some("u")));
    let mut parsed = 0;
    for _ in 0..5_000 {
        if let Ok(config) = Config::parse(&mutate(&mut rng, example.clone())) {
            parsed += 1;
            let body = br#"{"model":"my-group/production-chat","messages":[]}"#;
            let _ = decide(
                &config,
                Endpoint::ChatCompletions,
                body,
                &headers(&mut rng),
                &HealthInput::NONE,
                &LocalState::default(),
                &mut rng,
            );
        }
        // The host's header block, as proxy_get_header_map_pairs hands it over, mangled.
        let _ = Headers::decode(mutate(&mut rng, header_block()));
    }
    assert!(parsed > 100, "only {parsed} mangled configs parsed");
}
