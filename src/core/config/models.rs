//! One `models[]` entry: a catalog model, its provider and APIs, who may call it, the
//! headers set on every request to it, where it lives and its health policy.

use super::catalog::{is_credential, Model, Provider, Visibility};
use super::fields::{ConfigError, Fields};
use super::header_rules::{checked_header_name, header_value, is_header_value};
use super::settings::HeaderNames;
use super::upstream::{compile_upstream, Env};
use crate::core::endpoint::{Api, Apis};
use crate::core::health::policy::{Eviction, HealthPolicy};

/// One `models[]` entry, read in its fields' order.
pub(super) fn compile_model(
    mut f: Fields<'_>,
    header_names: &HeaderNames,
    env: &Env<'_>,
) -> Result<Model, ConfigError> {
    let name = f.str("name")?.to_string();
    let cluster = f.str("cluster")?;
    if !is_header_value(cluster) {
        return Err(f.error("cluster", "must not contain control characters"));
    }
    let upstream_model = f.str("model")?.to_string();
    let provider = compile_provider(&mut f)?;
    let apis = compile_apis(&mut f, provider)?;
    let max_output_tokens = match f.opt_u64("max_output_tokens", u64::from(u32::MAX))? {
        Some(0) => return Err(f.error("max_output_tokens", "must be greater than 0")),
        n => n.and_then(|n| u32::try_from(n).ok()),
    };
    let visibility = compile_visibility(&mut f)?;
    let headers = compile_headers(&mut f, header_names, env)?;
    let upstream = compile_upstream(&mut f)?;
    let stores_responses = f
        .opt_bool("stores_responses")?
        .unwrap_or(matches!(provider, Provider::OpenAi | Provider::Azure));
    let health = match f.opt_object("health")? {
        Some(obj) => compile_health(obj)?,
        None => HealthPolicy::default(),
    };
    // Serialising a string cannot fail; the fallback is only to stay panic-free.
    let upstream_model_json =
        serde_json::to_string(&upstream_model).unwrap_or_else(|_| String::from("\"\""));
    f.finish(&["params"])?;
    Ok(Model {
        name,
        cluster: cluster.to_string(),
        upstream_model,
        upstream_model_json,
        provider,
        apis,
        max_output_tokens,
        visibility,
        sets_credential: headers.iter().any(|(n, _)| is_credential(n)),
        headers,
        upstream,
        stores_responses,
        health,
    })
}

/// `provider`: one of [`Provider::ALL`]'s names (default `openai`).
fn compile_provider(f: &mut Fields<'_>) -> Result<Provider, ConfigError> {
    let Some(p) = f.opt_str("provider")? else {
        return Ok(Provider::OpenAi);
    };
    Provider::ALL
        .iter()
        .find(|(_, n)| *n == p)
        .map(|(v, _)| *v)
        .ok_or_else(|| {
            let known: Vec<&str> = Provider::ALL.iter().map(|(_, n)| *n).collect();
            f.error(
                "provider",
                format!(
                    "unknown provider `{p}`; expected one of: {}",
                    known.join(", ")
                ),
            )
        })
}

/// `apis`: the native APIs it serves (default: its provider's, [`Provider::default_apis`]).
fn compile_apis(f: &mut Fields<'_>, provider: Provider) -> Result<Apis, ConfigError> {
    let Some(items) = f.opt_array("apis")? else {
        return Ok(provider.default_apis());
    };
    let mut apis = Apis::default();
    for (path, value) in items {
        let api = value.as_str().and_then(Api::from_name).ok_or_else(|| {
            let known: Vec<&str> = Api::ALL.iter().map(|(_, n)| *n).collect();
            ConfigError::new(path, format!("expected one of: {}", known.join(", ")))
        })?;
        apis.insert(api);
    }
    if apis.is_empty() {
        return Err(f.error("apis", "must list at least one API"));
    }
    Ok(apis)
}

/// `visibility`: `internal` (default) or `public`.
fn compile_visibility(f: &mut Fields<'_>) -> Result<Visibility, ConfigError> {
    match f.opt_str("visibility")? {
        // Internal by default: a catalog entry holding credentials is never callable by accident.
        None | Some("internal") => Ok(Visibility::Internal),
        Some("public") => Ok(Visibility::Public),
        Some(other) => Err(f.error(
            "visibility",
            format!("expected `public` or `internal`, got `{other}`"),
        )),
    }
}

/// `headers`: set on every request to the model (names lower-cased, `${env:NAME}` resolved).
fn compile_headers(
    f: &mut Fields<'_>,
    header_names: &HeaderNames,
    env: &Env<'_>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::new();
    for entry in f.opt_string_map("headers")? {
        let name = checked_header_name(entry.key, header_names)
            .map_err(|m| ConfigError::new(entry.path.clone(), m))?;
        headers.push((name, header_value(entry.value, &entry.path, env)?));
    }
    Ok(headers)
}

/// `models[].health` (agentgateway virtual models, "Health vs eviction"), with the failure
/// classes' own settings: `quota_patterns`, and `eviction.quota_duration` /
/// `eviction.credential_duration` (see `health::failure_class`). Those two alone do not turn
/// `eviction` on: a target evicted by status needs one of agentgateway's own keys.
fn compile_health(mut f: Fields<'_>) -> Result<HealthPolicy, ConfigError> {
    let mut policy = HealthPolicy::default();
    if let Some(codes) = f.opt_status_codes("unhealthy_status_codes")? {
        policy.unhealthy_status_codes = codes;
    }
    for (path, value) in f.opt_array("quota_patterns")?.unwrap_or_default() {
        match value.as_str() {
            Some(p) if !p.trim().is_empty() => policy.quota_patterns.push(p.to_ascii_lowercase()),
            _ => return Err(ConfigError::new(path, "expected a non-empty string")),
        }
    }
    if let Some(mut e) = f.opt_object("eviction")? {
        let consecutive_failures = e
            .opt_u64("consecutive_failures", 1_000)?
            .map(|n| u32::try_from(n).unwrap_or(1_000));
        if consecutive_failures == Some(0) {
            return Err(e.error("consecutive_failures", "must be at least 1"));
        }
        let eviction = Eviction {
            duration_ms: e.opt_duration_ms("duration")?,
            consecutive_failures,
            health_threshold: e.opt_fraction("health_threshold")?,
            restore_health: e.opt_fraction("restore_health")?,
        };
        if let Some(ms) = e.opt_duration_ms("quota_duration")? {
            policy.quota_ms = ms;
        }
        if let Some(ms) = e.opt_duration_ms("credential_duration")? {
            policy.credential_ms = ms;
        }
        let by_status = eviction.duration_ms.is_some()
            || eviction.consecutive_failures.is_some()
            || eviction.health_threshold.is_some()
            || eviction.restore_health.is_some();
        let only_classes = e.has("quota_duration") || e.has("credential_duration");
        // `eviction: {}` keeps meaning "evict on every failure"; the class durations alone don't.
        if by_status || !only_classes {
            policy.eviction = Some(eviction);
        }
        e.finish(&[])?;
    }
    f.finish(&["unhealthy_expression"])?;
    Ok(policy)
}
