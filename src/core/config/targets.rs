//! `load_balance_targets`: each target's catalog model and the settings every strategy
//! shares (retries, fallback, `metadata_match`, `headers_override`, `override_params`); the
//! strategy's own field is read by its caller.

use super::catalog::{Model, ModelId};
use super::fields::{ConfigError, Fields};
use super::header_rules::{checked_header_name, header_value};
use super::root::{name_key, NameEntry};
use super::settings::HeaderNames;
use super::upstream::Env;
use super::virtual_model::{HeadersOverride, TargetConfig, TargetPolicy};
use hashbrown::HashMap;

/// The names a target may refer to.
pub(super) struct Catalog<'c> {
    pub models: &'c [Model],
    pub names: &'c HashMap<String, NameEntry>,
    pub virtual_names: &'c [&'c str],
    pub header_names: &'c HeaderNames,
    /// `model_name_case: "insensitive"`.
    pub fold_case: bool,
    /// The environment `${env:NAME}` references are read from.
    pub env: &'c Env<'c>,
}

/// Reads `load_balance_targets`: each target's shared retry and fallback fields, its strategy
/// field by `read`, and refuses the other strategy's field (TrueFoundry virtual models,
/// "Configuration structure": the routing strategy fields are mutually exclusive).
pub(super) fn compile_targets<T>(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    (strategy, other_strategy_fields): (&str, &[&str]),
    targets: &mut Vec<TargetConfig>,
    mut read: impl FnMut(&mut Fields<'_>, ModelId, &mut TargetPolicy) -> Result<T, ConfigError>,
) -> Result<Vec<T>, ConfigError> {
    let items = rc
        .opt_array("load_balance_targets")?
        .ok_or_else(|| rc.error("load_balance_targets", "is required"))?;
    if items.is_empty() {
        return Err(rc.error("load_balance_targets", "must list at least one target"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (path, value) in items {
        let mut t = Fields::new(path, value)?;
        let model = resolve_target(&mut t, catalog)?;
        if targets.iter().any(|x| x.model == model) {
            return Err(t.error("target", "is listed twice in this virtual model"));
        }
        let mut policy = compile_policy(&mut t)?;
        out.push(read(&mut t, model, &mut policy)?);
        let metadata_match = t
            .opt_string_map("metadata_match")?
            .into_iter()
            .map(|e| (e.key.to_string(), e.value.to_string()))
            .collect();
        let headers_override = match t.opt_object("headers_override")? {
            Some(h) => compile_headers_override(h, catalog)?,
            None => HeadersOverride::default(),
        };
        let override_params = compile_override_params(&mut t)?;
        targets.push(TargetConfig {
            model,
            policy,
            metadata_match,
            headers_override,
            override_params,
        });
        if let Some(field) = other_strategy_fields.iter().find(|f| t.has(f)) {
            return Err(t.error(field, format!("does not apply to `{strategy}`")));
        }
        t.finish(&[])?;
    }
    Ok(out)
}

/// `headers_override {set, remove}`: keys case-insensitive (lower-cased here).
fn compile_headers_override(
    mut f: Fields<'_>,
    catalog: &Catalog<'_>,
) -> Result<HeadersOverride, ConfigError> {
    let mut out = HeadersOverride::default();
    for entry in f.opt_string_map("set")? {
        let name = checked_header_name(entry.key, catalog.header_names)
            .map_err(|m| ConfigError::new(entry.path.clone(), m))?;
        let value = header_value(entry.value, &entry.path, catalog.env)?;
        out.set.push((name, value));
    }
    for (path, value) in f.opt_array("remove")?.unwrap_or_default() {
        let name = value
            .as_str()
            .ok_or_else(|| ConfigError::new(path.clone(), "expected a header name"))
            .and_then(|n| {
                checked_header_name(n, catalog.header_names).map_err(|m| ConfigError::new(path, m))
            })?;
        out.remove.push(name);
    }
    f.finish(&[])?;
    Ok(out)
}

/// `override_params`: top-level body fields set for this target, kept as raw JSON.
fn compile_override_params(t: &mut Fields<'_>) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(map) = t.opt_raw_object("override_params")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let path = t.field_path(&format!("override_params.{key}"));
        match key.as_str() {
            "model" | "stream" => {
                return Err(ConfigError::new(
                    path,
                    "is decided by Switchboard and the client; it cannot be overridden",
                ))
            }
            "prompt_version_fqn" => {
                return Err(ConfigError::new(
                    path,
                    "prompt hydration is not supported by Switchboard",
                ))
            }
            _ => out.push((key.clone(), value.to_string())),
        }
    }
    Ok(out)
}

/// The per-target retry and fallback fields every strategy shares.
fn compile_policy(t: &mut Fields<'_>) -> Result<TargetPolicy, ConfigError> {
    let mut p = TargetPolicy::default();
    if let Some(mut r) = t.opt_object("retry_config")? {
        if let Some(n) = r.opt_u64("attempts", 10)? {
            p.retry_attempts = n as u32;
        }
        if let Some(ms) = r.opt_u64("delay", 60_000)? {
            p.retry_delay_ms = ms;
        }
        match r.opt_u64("backoff_multiplier", 10)? {
            Some(0) => return Err(r.error("backoff_multiplier", "must be from 1 to 10")),
            Some(m) => p.retry_backoff = m as u32,
            None => {}
        }
        if let Some(b) = r.opt_bool("on_connection_failure")? {
            p.retry_no_answer = b;
        }
        if let Some(codes) = r.opt_status_codes("on_status_codes")? {
            p.retry_on = codes;
        }
        r.finish(&[])?;
    }
    if let Some(codes) = t.opt_status_codes("fallback_status_codes")? {
        p.fallback_on = codes;
    }
    if let Some(b) = t.opt_bool("fallback_candidate")? {
        p.fallback_candidate = b;
    }
    Ok(p)
}

/// Reads `target` and resolves it to a catalog model; virtual models are not allowed
/// (TrueFoundry virtual models, "FAQ": targets must be real catalog models).
fn resolve_target(t: &mut Fields<'_>, catalog: &Catalog<'_>) -> Result<ModelId, ConfigError> {
    let name = t.str("target")?;
    let key = name_key(name, catalog.fold_case);
    match catalog.names.get(key.as_ref()) {
        Some(NameEntry::Catalog(id)) if id.0 < catalog.models.len() => Ok(*id),
        _ if catalog
            .virtual_names
            .iter()
            .any(|v| name_key(v, catalog.fold_case) == key) =>
        {
            Err(t.error(
                "target",
                format!("`{name}` is a virtual model; targets must be catalog models"),
            ))
        }
        _ => Err(t.error("target", format!("`{name}` is not a model in `models`"))),
    }
}
