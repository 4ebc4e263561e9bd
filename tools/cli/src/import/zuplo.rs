//! Zuplo model load balancing ("Model Load Balancing Policy"): a `policies.json` policy
//! entry, the whole document, an `inboundPolicyChain` or one chain entry with `options`, or
//! the bare `options`. Each policy becomes one virtual model named by the policy's `name` (or
//! `--name`) over its `completions` and `embeddings` lists.
//!
//! The import sets what reproduces the document's "Failures and retries" and "Limitations": a 429
//! is retried twice, after 250 ms then 500 ms (`retry_config` with `backoff_multiplier: 2`);
//! a 5xx, 408 or 425, or a model that can't be reached, moves to the retry model at once
//! (`fallback_status_codes`, `on_connection_failure: false`); at most two models are tried
//! (`max_targets_per_request: 2`); on Responses and Messages a 5xx, 408, 425 or an unreachable
//! model fails the request and a slow one is waited for (`fail_fast_endpoints`);
//! `fallbackTimeoutSeconds` (default 60) bounds each attempt (the whole answer of a request
//! that does not stream: `fallback_timeout_scope: "whole_answer"`), and the retry model gets
//! twice that, after which the request fails (`fallback_timeout_growth: 2`,
//! `fallback_timeout_at_last: "fail"`);
//! model names compare without case (`model_name_case: "insensitive"`). Models are eligible
//! by provider and by whether they are Claude ("Endpoints"), written as each entry's `apis`.
//! "The policy doesn't remember failures between requests" ("Failures and retries"), so no
//! failure marks a target unhealthy (`failure_window: {failures: 0}`) and no status counts
//! against a model (`unhealthy_status_codes: []`, so a 429's Retry-After evicts nothing), and
//! neither a spent quota nor a refused key evicts one (`health.eviction.quota_duration` and
//! `credential_duration` set to `"0s"`).

use super::{drop_unknown, join, list, object, string, Builder};
use serde_json::{json, Value};

const POLICY_TYPE: &str = "ai-gateway-load-balancing-inbound";
const OPTIONS: &[&str] = &[
    "strategy",
    "stickyBy",
    "expression",
    "models",
    "fallbackTimeoutSeconds",
];

/// One policy to import: its name, its options and where they are in the file.
struct Policy<'v> {
    name: Option<&'v str>,
    options: &'v Value,
    path: String,
}

pub fn import(source: &Value, out: &mut Builder) -> Result<(), String> {
    let default_options = json!({"models": {"completions": ["openai/gpt-4o-mini"]}});
    let policies = find_policies(source, &default_options, out)?;
    out.expect_virtual_models(policies.len())?;
    let mut serving_responses = Vec::new();
    for p in policies {
        if let Some(name) = policy(&p, out)? {
            serving_responses.push(name);
        }
    }
    stored_responses(&serving_responses, out);
    forget_failures(out);
    out.set_root("model_name_case", json!("insensitive"));
    out.note(
        "model_name_case: insensitive: Zuplo compares model entries without regard to case"
            .to_string(),
    );
    // Zuplo, "How it works": models that can't serve the request's endpoint are dropped, on
    // /v1/responses too, where Switchboard's default is TrueFoundry's 400.
    out.set_root("non_native_responses", json!("skip"));
    out.note(
        "non_native_responses: skip: Zuplo drops the models that can't serve a request's \
         endpoint, /v1/responses included"
            .to_string(),
    );
    out.note(
        "every target: a 429 is retried twice (250 ms, then 500 ms); a 5xx, 408, 425 or a \
         connection failure moves to the retry model; at most two models per request"
            .to_string(),
    );
    out.note(
        "fail_fast_endpoints: responses, messages: there a 5xx, 408, 425 or an unreachable \
         model fails the request, and a slow model is waited for"
            .to_string(),
    );
    out.note(
        "fallback_timeout_growth: 2, fallback_timeout_at_last: fail: the retry model starts \
         over with twice fallbackTimeoutSeconds, and the request fails if that runs out too"
            .to_string(),
    );
    out.note(
        "clients must call the virtual model by its name; Zuplo accepts any `model` value"
            .to_string(),
    );
    Ok(())
}

/// "The policy doesn't remember failures between requests. While a model is down, every
/// request that picks it tries it first" ("Failures and retries"): no failure window, and no
/// status that counts against a model, so nothing demotes or evicts a target.
fn forget_failures(out: &mut Builder) {
    out.set_root("failure_window", json!({"failures": 0}));
    for entry in out.models_mut() {
        entry.insert(
            "health".to_string(),
            json!({"unhealthy_status_codes": [],
                   "eviction": {"quota_duration": "0s", "credential_duration": "0s"}}),
        );
    }
    out.note(
        "failure_window: {failures: 0} and health.unhealthy_status_codes: [] on every model: \
         Zuplo remembers no failures between requests, so a failing model is tried first \
         every time it is picked (not demoted, not evicted, even by a 429's Retry-After)"
            .to_string(),
    );
    out.note(
        "health.eviction.quota_duration: \"0s\" and credential_duration: \"0s\" on every \
         model: Switchboard evicts a target whose quota is spent (1 h) or whose key is refused \
         (5 min) by default, but Zuplo doesn't remember failures between requests"
            .to_string(),
    );
}

/// The load-balancing policies in any of the shapes the document shows ("Configuration",
/// "Policy order").
fn find_policies<'v>(
    source: &'v Value,
    default_options: &'v Value,
    out: &mut Builder,
) -> Result<Vec<Policy<'v>>, String> {
    let root = object(source, "the file")?;
    if root.contains_key("policyType") {
        return Ok(vec![policy_entry(source, "")?]);
    }
    if let Some(entries) = root.get("policies") {
        return policies_json(entries, out);
    }
    if let Some(chain) = root.get("inboundPolicyChain") {
        return policy_chain(chain, default_options, out);
    }
    if let Some(options) = root.get("options") {
        drop_unknown(
            out,
            "",
            root,
            &["name", "options"],
            "not a field of a chain entry",
        );
        return Ok(vec![Policy {
            name: source.get("name").and_then(Value::as_str),
            options,
            path: "options".to_string(),
        }]);
    }
    if root.contains_key("models") || root.contains_key("strategy") {
        return Ok(vec![Policy {
            name: None,
            options: source,
            path: String::new(),
        }]);
    }
    Err(
        "expected a Model Load Balancing policy entry (`policyType`, `handler.options`), \
         `policies`, an `inboundPolicyChain`, or the policy's options (`models`)"
            .to_string(),
    )
}

/// `policies`: the Model Load Balancing entries of a `policies.json`, the others dropped.
fn policies_json<'v>(entries: &'v Value, out: &mut Builder) -> Result<Vec<Policy<'v>>, String> {
    let mut found = Vec::new();
    for (i, e) in list(entries, "policies")?.iter().enumerate() {
        let p = format!("policies[{i}]");
        if e.get("policyType").and_then(Value::as_str) == Some(POLICY_TYPE) {
            found.push(policy_entry(e, &p)?);
        } else {
            out.dropped(&p, "not a Model Load Balancing policy");
        }
    }
    if found.is_empty() {
        return Err(format!("policies: no entry has policyType `{POLICY_TYPE}`"));
    }
    Ok(found)
}

/// `inboundPolicyChain`: each entry with `options`, or the policy named bare (its declared
/// options); Fallback Model and other policies dropped.
fn policy_chain<'v>(
    chain: &'v Value,
    default_options: &'v Value,
    out: &mut Builder,
) -> Result<Vec<Policy<'v>>, String> {
    let name = |v: &'v Value| v.get("name").and_then(Value::as_str);
    let mut found = Vec::new();
    for (i, e) in list(chain, "inboundPolicyChain")?.iter().enumerate() {
        let p = format!("inboundPolicyChain[{i}]");
        match (name(e), e.get("options")) {
            (_, Some(options)) => found.push(Policy {
                name: name(e),
                options,
                path: join(&p, "options"),
            }),
            (Some(POLICY_TYPE), None) => {
                out.note(format!(
                    "{p}: no options, so the declared ones apply; Zuplo's default \
                     declared options are the one-model list openai/gpt-4o-mini"
                ));
                found.push(Policy {
                    name: Some(POLICY_TYPE),
                    options: default_options,
                    path: p,
                });
            }
            (Some(n), None) if n.contains("fallback-model") => out.dropped(
                &p,
                "Fallback Model's `fallback` (openai/gpt-4o-mini unless its declared options \
                 change it) would become the retry model; add it as a target by hand",
            ),
            (n, None) => out.dropped(
                &p,
                &format!(
                    "`{}` is not the Model Load Balancing policy; only that one is imported",
                    n.unwrap_or("?")
                ),
            ),
        }
    }
    if found.is_empty() {
        return Err("inboundPolicyChain: no Model Load Balancing entry".to_string());
    }
    Ok(found)
}

/// A `policies.json` entry: `{name, policyType, handler: {export, module, options}}`.
fn policy_entry<'v>(entry: &'v Value, path: &str) -> Result<Policy<'v>, String> {
    let pt_path = join(path, "policyType");
    let pt = string(&entry["policyType"], &pt_path)?;
    if pt != POLICY_TYPE {
        return Err(format!("{pt_path}: `{pt}` is not `{POLICY_TYPE}`"));
    }
    let hp = join(path, "handler");
    let handler = entry
        .get("handler")
        .ok_or_else(|| format!("{hp}: is required"))?;
    let options = object(handler, &hp)?
        .get("options")
        .ok_or_else(|| format!("{hp}.options: is required"))?;
    Ok(Policy {
        name: entry.get("name").and_then(Value::as_str),
        options,
        path: join(&hp, "options"),
    })
}

/// Imports one policy as a virtual model; returns its name when it serves the Responses API
/// (it has a `completions` list).
fn policy(p: &Policy<'_>, out: &mut Builder) -> Result<Option<String>, String> {
    let path = p.path.as_str();
    let opts = object(p.options, if path.is_empty() { "options" } else { path })?;
    drop_unknown(
        out,
        path,
        opts,
        OPTIONS,
        "not an option of the Model Load Balancing policy",
    );
    let name = out.vm_name(p.name, "the policy")?;
    let mut routing = policy_routing(opts, path, out)?;
    let timeout_s = fallback_timeout_seconds(opts, path)?;
    let (targets, model_types) = policy_models(opts, &join(path, "models"), out)?;
    routing["load_balance_targets"] = Value::Array(targets);
    let responses = model_types.contains(&"responses");
    // No `translate`: the default, Chat Completions only, is Zuplo's rule ("Endpoints":
    // `/v1/chat/completions` translates the request for each provider, `/v1/messages` takes
    // only models the gateway sends Messages requests to).
    out.add_virtual_model(json!({
        "name": name,
        "model_types": model_types,
        "max_targets_per_request": 2,
        "fallback_timeout_ms": timeout_s * 1000,
        // "Failures and retries": Responses and Messages fail on a 5xx, 408, 425 or an
        // unreachable model, and keep waiting for a slow one.
        "fail_fast_endpoints": ["responses", "messages"],
        // The retry model "starts over with twice the time, and the request fails if that
        // runs out too".
        "fallback_timeout_growth": 2,
        "fallback_timeout_at_last": "fail",
        // "A response that doesn't stream starts only when it's complete, so the timeout
        // covers the whole response."
        "fallback_timeout_scope": "whole_answer",
        "routing_config": routing,
    }));
    Ok(responses.then_some(name))
}

/// `strategy`, `stickyBy` and `expression`: the `routing_config` without its targets.
fn policy_routing(
    opts: &serde_json::Map<String, Value>,
    path: &str,
    out: &mut Builder,
) -> Result<Value, String> {
    let field = |key: &str| join(path, key);
    let get_str = |key: &str| -> Result<Option<&str>, String> {
        opts.get(key).map(|v| string(v, &field(key))).transpose()
    };
    let strategy = get_str("strategy")?.unwrap_or("round-robin");
    let sticky_by = get_str("stickyBy")?;
    let expression = get_str("expression")?;
    let routing = match (strategy, sticky_by) {
        ("round-robin", None) => json!({"type": "round-robin-routing"}),
        ("round-robin", Some(_)) => {
            return Err(format!(
                "{}: is not allowed with round-robin",
                field("stickyBy")
            ))
        }
        ("sticky", None) => {
            return Err(format!(
                "{}: is required when strategy is sticky",
                field("stickyBy")
            ))
        }
        ("sticky", Some(by)) => sticky(by, expression, &field("expression"), out)?,
        (other, _) => {
            return Err(format!(
                "{}: expected `round-robin` or `sticky`, got `{other}`",
                field("strategy")
            ))
        }
    };
    if expression.is_some() && sticky_by != Some("expression") {
        return Err(format!(
            "{}: is only allowed when stickyBy is expression",
            field("expression")
        ));
    }
    Ok(routing)
}

/// `fallbackTimeoutSeconds`: 1 through 300 (default 60).
fn fallback_timeout_seconds(
    opts: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<u64, String> {
    let Some(v) = opts.get("fallbackTimeoutSeconds") else {
        return Ok(60);
    };
    v.as_u64().filter(|s| (1..=300).contains(s)).ok_or_else(|| {
        format!(
            "{}: expected a whole number of seconds from 1 through 300, got {v}",
            join(path, "fallbackTimeoutSeconds")
        )
    })
}

/// `models`: the targets of its `completions` and `embeddings` lists (each catalog model
/// once) and the model types they serve.
fn policy_models(
    opts: &serde_json::Map<String, Value>,
    mp: &str,
    out: &mut Builder,
) -> Result<(Vec<Value>, Vec<&'static str>), String> {
    let models = object(
        opts.get("models")
            .ok_or_else(|| format!("{mp}: is required"))?,
        mp,
    )?;
    drop_unknown(
        out,
        mp,
        models,
        &["completions", "embeddings"],
        "not a request type of the policy",
    );
    let mut targets: Vec<Value> = Vec::new();
    let mut model_types = Vec::new();
    for (list_name, types) in [
        ("completions", &["chat", "responses"][..]),
        ("embeddings", &["embedding"][..]),
    ] {
        let Some(entries) = models.get(list_name) else {
            continue;
        };
        model_list(entries, &join(mp, list_name), list_name, &mut targets, out)?;
        model_types.extend_from_slice(types);
    }
    if model_types.is_empty() {
        return Err(format!(
            "{mp}: set at least one list: completions or embeddings"
        ));
    }
    Ok((targets, model_types))
}

/// One list of `models` (1 through 32 entries, none twice without regard to case): each
/// entry's catalog model, its `apis`, and a target unless another list has it.
fn model_list(
    entries: &Value,
    lp: &str,
    list_name: &str,
    targets: &mut Vec<Value>,
    out: &mut Builder,
) -> Result<(), String> {
    let entries = list(entries, lp)?;
    if entries.is_empty() || entries.len() > 32 {
        return Err(format!(
            "{lp}: must list from 1 through 32 models, got {}",
            entries.len()
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ep = format!("{lp}[{i}]");
        let written = string(e, &ep)?;
        if seen.iter().any(|s| s.eq_ignore_ascii_case(written)) {
            return Err(format!(
                "{ep}: `{written}` is listed twice (entries compare without regard to case)"
            ));
        }
        seen.push(written.to_string());
        let catalog = out.provider_model(&ep, written, true)?;
        add_apis(out, &catalog, list_name);
        if !targets.iter().any(|t| {
            t["target"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(&catalog))
        }) {
            targets.push(target(&catalog));
        }
    }
    Ok(())
}

/// "Endpoints": `GET`/`DELETE /v1/responses/{id}` and its input items are "routed to the
/// account that holds the response, when the policy can tell which one it is" ("Stored
/// responses"). Those requests name no model, so Switchboard routes a raw id among the
/// targets of one virtual model, `stored_responses_virtual_model`: the policy's, when one
/// policy serves Responses. With several, which one reads them depends on the route.
fn stored_responses(serving: &[String], out: &mut Builder) {
    match serving {
        [] => {}
        [name] => {
            out.set_root("stored_responses_virtual_model", json!(name));
            out.note(format!(
                "stored_responses_virtual_model: `{name}`: a retrieve, input-items list or \
                 delete of a provider's response id is routed among its targets by the \
                 Zuplo's stored-response rules"
            ));
        }
        names => out.dropped(
            "(stored-response reads)",
            &format!(
                "{} policies serve Responses ({}), and a retrieve or delete names no model: \
                 set stored_responses_virtual_model to the one on your /v1/responses/{{id}} \
                 route; until then such requests pass through",
                names.len(),
                names.join(", ")
            ),
        ),
    }
}

/// Zuplo's `sticky` by `user`, `conversation` or `expression`, as hash routing.
fn sticky(
    by: &str,
    expression: Option<&str>,
    expression_path: &str,
    out: &mut Builder,
) -> Result<Value, String> {
    let key = match by {
        // "Sticky by user": request.user.sub, the authenticated subject.
        "user" => Some(user_key("sub", out)),
        "conversation" => Some(json!({"source": "conversation"})),
        "expression" => {
            let e = expression.ok_or_else(|| {
                format!("{expression_path}: is required when stickyBy is expression")
            })?;
            if e.len() > 1024 {
                return Err(format!("{expression_path}: longer than 1024 bytes"));
            }
            expression_key(e, expression_path, out)
        }
        other => {
            return Err(format!(
                "stickyBy: expected `user`, `conversation` or `expression`, got `{other}`"
            ))
        }
    };
    Ok(match key {
        Some(hash_key) => json!({"type": "hash-based-routing", "hash_key": hash_key}),
        None => json!({"type": "round-robin-routing"}),
    })
}

/// A verified JWT claim: Zuplo's `request.user` set by its authentication policy.
fn user_key(claim: &str, out: &mut Builder) -> Value {
    out.note(format!(
        "the sticky key is the `{claim}` claim of the JWT Envoy's jwt_authn verified \
         (payload_in_metadata: jwt_payload); without a verified token requests go round robin"
    ));
    json!({"source": "jwt", "claim": claim})
}

/// What a Metering-style selector reads: a header keeps its header; `request.user.sub` and
/// `request.user.data.<claim>` read the verified JWT. Anything else cannot be read by the
/// filter, so the request goes round robin, as Zuplo does for a request without a key.
fn expression_key(e: &str, path: &str, out: &mut Builder) -> Option<Value> {
    let e = e.trim();
    if let Some(rest) = e.strip_prefix("request.headers.get(") {
        let inner = rest.strip_suffix(')')?.trim();
        let header = inner
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
        if let Some(h) = header.filter(|h| !h.is_empty()) {
            return Some(json!({"source": "headers", "key": h.to_ascii_lowercase()}));
        }
    }
    if e == "request.user.sub" {
        return Some(user_key("sub", out));
    }
    if let Some(claim) = e
        .strip_prefix("request.user.data.")
        .filter(|c| !c.contains('.'))
    {
        return Some(user_key(claim, out));
    }
    out.dropped(
        path,
        &format!(
            "`{e}` reads what Envoy cannot see (route parameters, context.custom); the \
             virtual model goes round robin, as Zuplo does for a request without a key"
        ),
    );
    None
}

/// A target with Zuplo's retry and fallback behaviour ("Failures and retries").
fn target(name: &str) -> Value {
    json!({
        "target": name,
        "retry_config": {
            "attempts": 2,
            "delay": 250,
            "backoff_multiplier": 2,
            "on_status_codes": ["429"],
            "on_connection_failure": false,
        },
        "fallback_status_codes": ["408", "425", "5xx"],
    })
}

/// Sets the entry's `apis` by Zuplo's "Endpoints" rules: by provider and by whether the
/// model is Claude, never by what the model serves.
fn add_apis(out: &mut Builder, catalog: &str, list_name: &str) {
    let (provider, model) = catalog.split_once('/').unwrap_or(("", catalog));
    let p = provider.to_ascii_lowercase();
    let claude = model.to_ascii_lowercase().contains("claude");
    let kind = out.provider_kind(provider);
    let mut apis: Vec<&str> = match list_name {
        "embeddings" => vec!["embeddings"],
        // Anthropic itself serves Messages only: Zuplo translates a Chat Completions request
        // for it ("A list mixes vendors"), as the imported virtual model's `translate` does,
        // rather than sending it to Anthropic's OpenAI-compatibility endpoint.
        _ if kind == "anthropic" => vec!["messages"],
        _ => {
            let mut a = vec!["chat_completions"];
            if claude {
                a.push("messages");
            }
            let responses_provider = matches!(kind, "openai" | "azure")
                || p.starts_with("openrouter")
                || p.starts_with("bedrockmantle");
            if responses_provider && !claude {
                a.push("responses");
            }
            a
        }
    };
    if let Some(entry) = out.model_mut(catalog) {
        if let Some(Value::Array(existing)) = entry.get("apis") {
            for v in existing.iter().filter_map(Value::as_str) {
                if !apis.contains(&v) {
                    apis.push(match v {
                        "embeddings" => "embeddings",
                        "messages" => "messages",
                        "responses" => "responses",
                        _ => "chat_completions",
                    });
                }
            }
        }
        // "Stored responses": OpenRouter is the provider that "stores no responses", so it
        // keeps openai-compatible's `stores_responses: false`; Bedrock Mantle, also imported as
        // openai-compatible, serves Responses ("Endpoints") and stores what it creates.
        if p.starts_with("bedrockmantle") && apis.contains(&"responses") {
            entry.insert("stores_responses".to_string(), json!(true));
        }
        entry.insert("apis".to_string(), json!(apis));
    }
}
