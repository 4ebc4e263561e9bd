//! agentgateway virtual models ("Virtual models"): `llm.models[]` become catalog entries
//! (`params.model` upstream, `params.apiKey: $VAR` a credential header read from the Wasm VM's
//! environment, `health.eviction` as is), `llm.virtualModels[]` become virtual models
//! (`weighted` weights scaled to sum to 100, `failover` priority groups, `conditional` `when`,
//! target `params` as `override_params`).
//!
//! Where agentgateway's semantics differ from Switchboard's defaults the import sets the
//! fields that reproduce them: an unhealthy response is a 5xx ("Health vs eviction": "When
//! unset, any 5xx ... or connection failure is unhealthy"), and a failing response is not
//! re-sent to another target in flight ("Failover is driven by eviction of the active set,
//! not by rewriting a single in-flight request ... The request that triggers eviction still
//! fails"), so each request tries one target (`max_targets_per_request: 1`, which holds for a
//! connection failure or timeout too) and `fallback_status_codes` is empty, and
//! failures never mark a target unhealthy (`failure_window: {failures: 0}`): "traffic moves to
//! the next group only after every target in the current group is evicted. Lowering a health
//! score alone is not enough" ("Failover routing"), so only eviction moves a target back.

use super::{drop_unknown, join, list, object, string, Builder};
use serde_json::{json, Map, Value};

const UNKNOWN: &str = "not an agentgateway field Switchboard knows";

pub fn import(source: &Value, out: &mut Builder) -> Result<(), String> {
    let (llm, base) = llm_section(source, out)?;
    drop_unknown(out, base, &llm, &["models", "virtualModels"], UNKNOWN);
    let models_path = join(base, "models");
    if let Some(models) = llm.get("models") {
        for (i, m) in list(models, &models_path)?.iter().enumerate() {
            let p = format!("{models_path}[{i}]");
            model(object(m, &p)?, &p, out)?;
        }
    }
    let vms_path = join(base, "virtualModels");
    let vms = list(
        llm.get("virtualModels")
            .ok_or_else(|| format!("{vms_path}: is required: no virtual model to import"))?,
        &vms_path,
    )?;
    out.expect_virtual_models(vms.len())?;
    for (i, vm) in vms.iter().enumerate() {
        let p = format!("{vms_path}[{i}]");
        virtual_model(object(vm, &p)?, &p, out)?;
    }
    // "Failover routing": a priority group spills only once every target in it is evicted;
    // TrueFoundry's failure window, the default, would demote a failing target before that.
    out.set_root("failure_window", json!({"failures": 0}));
    notes(out);
    Ok(())
}

/// The `llm` section and its path: the file's `llm`, the file itself (the section alone), or
/// the model list shape (one list of models and virtual models).
fn llm_section(
    source: &Value,
    out: &mut Builder,
) -> Result<(Map<String, Value>, &'static str), String> {
    match source {
        Value::Object(root) if root.contains_key("llm") => {
            drop_unknown(
                out,
                "",
                root,
                &["llm"],
                "only the `llm` section holds virtual models",
            );
            Ok((object(&source["llm"], "llm")?.clone(), "llm"))
        }
        Value::Object(root) => Ok((root.clone(), "")),
        Value::Array(items) => {
            let (vms, models): (Vec<Value>, Vec<Value>) = items
                .iter()
                .cloned()
                .partition(|i| i.get("routing").is_some());
            let llm: Map<String, Value> = [
                ("models".to_string(), Value::Array(models)),
                ("virtualModels".to_string(), Value::Array(vms)),
            ]
            .into_iter()
            .collect();
            Ok((llm, ""))
        }
        other => Err(format!(
            "expected an object with `llm`, got {}",
            super::type_name(other)
        )),
    }
}

/// What the import sets for every model and virtual model, and why.
fn notes(out: &mut Builder) {
    out.note(
        "failure_window: {failures: 0}: failures lower a target's health score but never mark \
         it unhealthy, so a priority group spills to the next only when every target in it is \
         evicted (agentgateway's rule; Switchboard's default window demotes a target after 2 \
         failures in 2 minutes)"
            .to_string(),
    );
    out.note(
        "models: an unhealthy response is any 5xx (agentgateway's default), so \
         health.unhealthy_status_codes is [\"5xx\"] on every model"
            .to_string(),
    );
    out.note(
        "max_targets_per_request: 1 and fallback_status_codes: []: agentgateway fails over \
         by evicting targets, not by re-sending a failed request, so a request that fails (a \
         connection failure or timeout included) fails; drop max_targets_per_request to let a \
         connection failure or timeout move the request to the next candidate"
            .to_string(),
    );
}

/// One `llm.models[]` entry.
fn model(m: &Map<String, Value>, path: &str, out: &mut Builder) -> Result<(), String> {
    drop_unknown(
        out,
        path,
        m,
        &["name", "visibility", "provider", "params", "health"],
        UNKNOWN,
    );
    let name = required_string(m, path, "name")?;
    let provider = required_string(m, path, "provider")?;
    let kind = out.provider_kind(provider);
    let params_path = join(path, "params");
    let params = match m.get("params") {
        Some(p) => object(p, &params_path)?.clone(),
        None => Map::new(),
    };
    drop_unknown(out, &params_path, &params, &["model", "apiKey"], "Switchboard has no such provider parameter; set the cluster, `authority` or `base_path` by hand");
    let upstream = match params.get("model") {
        Some(v) => string(v, &join(&params_path, "model"))?,
        None => name,
    };
    let mut entry = json!({
        "name": name,
        "cluster": super::cluster_name(provider),
        "model": upstream,
        "provider": kind,
        "health": {"unhealthy_status_codes": ["5xx"]},
    });
    if kind == "openai-compatible" {
        out.note(format!(
            "{}: `{provider}` is not openai, azure or anthropic: imported as openai-compatible",
            join(path, "provider")
        ));
    }
    if let Some(authority) = authority(kind) {
        entry["authority"] = json!(authority);
    }
    if let Some(v) = m.get("visibility") {
        entry["visibility"] = v.clone();
    }
    if let Some(key) = params.get("apiKey") {
        if let Some(headers) = api_key(key, &join(&params_path, "apiKey"), kind, out)? {
            entry["headers"] = headers;
        }
    }
    if let Some(h) = m.get("health") {
        if let Some(eviction) = eviction(h, &join(path, "health"), out)? {
            entry["health"]["eviction"] = eviction;
        }
    }
    out.add_model(entry, provider);
    Ok(())
}

/// The string `key` of object `m` at `path`, which must be there.
fn required_string<'v>(
    m: &'v Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<&'v str, String> {
    let value = m
        .get(key)
        .ok_or_else(|| format!("{path}.{key}: is required"))?;
    string(value, &join(path, key))
}

/// The host of a hosted provider's API.
fn authority(kind: &str) -> Option<&'static str> {
    match kind {
        "openai" => Some("api.openai.com"),
        "anthropic" => Some("api.anthropic.com"),
        _ => None,
    }
}

/// `params.apiKey`: `$VAR` becomes the provider's credential header read from the environment;
/// a literal key is dropped.
fn api_key(
    key: &Value,
    key_path: &str,
    kind: &str,
    out: &mut Builder,
) -> Result<Option<Value>, String> {
    let key = string(key, key_path)?;
    match key
        .strip_prefix('$')
        .map(|v| v.trim_matches(|c| c == '{' || c == '}'))
    {
        Some(var) if !var.is_empty() => {
            let (header, value) = match kind {
                "anthropic" => ("x-api-key", format!("${{env:{var}}}")),
                "azure" => ("api-key", format!("${{env:{var}}}")),
                _ => ("authorization", format!("Bearer ${{env:{var}}}")),
            };
            out.note(format!(
                "apiKey ${var}: sent as `{header}: ...${{env:{var}}}`; list {var} in the \
                 Wasm vm_config.environment_variables.host_env_keys"
            ));
            Ok(Some(json!({ header: value })))
        }
        _ => {
            out.dropped(
                key_path,
                "a literal key is never copied into the plugin config (it shows in Envoy's \
                 config dump); put it in an environment variable and write $NAME",
            );
            Ok(None)
        }
    }
}

/// `health`: its `eviction`, renamed; `unhealthyExpression` dropped.
fn eviction(h: &Value, hp: &str, out: &mut Builder) -> Result<Option<Value>, String> {
    let h = object(h, hp)?;
    drop_unknown(out, hp, h, &["eviction", "unhealthyExpression"], UNKNOWN);
    if h.contains_key("unhealthyExpression") {
        out.dropped(
            &join(hp, "unhealthyExpression"),
            "CEL expressions on responses are not supported; any 5xx counts as unhealthy",
        );
    }
    let Some(e) = h.get("eviction") else {
        return Ok(None);
    };
    let ep = join(hp, "eviction");
    let e = object(e, &ep)?;
    let fields = [
        ("duration", "duration"),
        ("consecutiveFailures", "consecutive_failures"),
        ("healthThreshold", "health_threshold"),
        ("restoreHealth", "restore_health"),
    ];
    let ev: Map<String, Value> = fields
        .iter()
        .filter_map(|(from, to)| Some((to.to_string(), e.get(*from)?.clone())))
        .collect();
    let known: Vec<&str> = fields.iter().map(|(from, _)| *from).collect();
    drop_unknown(out, &ep, e, &known, UNKNOWN);
    Ok(Some(Value::Object(ev)))
}

/// One `llm.virtualModels[]` entry.
fn virtual_model(vm: &Map<String, Value>, path: &str, out: &mut Builder) -> Result<(), String> {
    drop_unknown(out, path, vm, &["name", "routing"], UNKNOWN);
    let source_name = match vm.get("name") {
        Some(n) => Some(string(n, &join(path, "name"))?),
        None => None,
    };
    let name = out.vm_name(source_name, "the virtual model")?;
    let rp = join(path, "routing");
    let routing = object(
        vm.get("routing")
            .ok_or_else(|| format!("{rp}: is required"))?,
        &rp,
    )?;
    let mode = routing_mode(routing, &rp, out)?;
    let mp = join(&rp, mode);
    let m = object(&routing[mode], &mp)?;
    drop_unknown(out, &mp, m, &["targets"], UNKNOWN);
    let tp = join(&mp, "targets");
    let targets = list(
        m.get("targets")
            .ok_or_else(|| format!("{tp}: is required"))?,
        &tp,
    )?;
    let field = match mode {
        "weighted" => "weight",
        "failover" => "priority",
        _ => "when",
    };
    let mut out_targets = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        out_targets.push(target(t, &format!("{tp}[{i}]"), field, out)?);
    }
    let kind = match mode {
        "weighted" => {
            scale_weights(&mut out_targets, &tp, out)?;
            "weight-based-routing"
        }
        "failover" => "priority-based-routing",
        _ => "conditional-routing",
    };
    out.note(format!(
        "{path}: model_types set to [\"chat\"] (chat completions and messages): agentgateway \
         virtual models do not list them"
    ));
    // No `translate`: the default, Chat Completions only. agentgateway's seed names
    // Anthropic models as targets of virtual models its OpenAI-style clients call, and says
    // nothing of serving `/v1/messages` from other providers, so Messages is not translated.
    out.add_virtual_model(json!({
        "name": name,
        "model_types": ["chat"],
        "max_targets_per_request": 1,
        "routing_config": {"type": kind, "load_balance_targets": out_targets},
    }));
    Ok(())
}

/// The one route selection mode of `routing`: `weighted`, `failover` or `conditional`.
fn routing_mode(
    routing: &Map<String, Value>,
    rp: &str,
    out: &mut Builder,
) -> Result<&'static str, String> {
    let modes = ["weighted", "failover", "conditional"];
    let present: Vec<&str> = modes
        .iter()
        .copied()
        .filter(|m| routing.contains_key(*m))
        .collect();
    let [mode] = present.as_slice() else {
        return Err(format!(
            "{rp}: expected exactly one of weighted, failover, conditional; found {}",
            if present.is_empty() {
                "none".to_string()
            } else {
                present.join(", ")
            }
        ));
    };
    drop_unknown(out, rp, routing, &modes, UNKNOWN);
    Ok(mode)
}

/// One target: its catalog model, its mode's `field` as is, `params` as `override_params`
/// (but `model` and `stream`), and no fallback status.
fn target(t: &Value, p: &str, field: &str, out: &mut Builder) -> Result<Value, String> {
    let t = object(t, p)?;
    drop_unknown(out, p, t, &["model", field, "params"], UNKNOWN);
    let model = required_string(t, p, "model")?;
    if out.find_model(model, false).is_none() {
        return Err(format!("{p}.model: `{model}` is not a model in llm.models"));
    }
    let mut o = json!({"target": model, "fallback_status_codes": []});
    if let Some(v) = t.get(field) {
        o[field] = v.clone();
    }
    if let Some(params) = t.get("params") {
        let pp = join(p, "params");
        let mut params = object(params, &pp)?.clone();
        for key in ["model", "stream"] {
            if params.remove(key).is_some() {
                out.dropped(&join(&pp, key), "decided by Switchboard and the client; a target's upstream model is its catalog entry's");
            }
        }
        if !params.is_empty() {
            o["override_params"] = Value::Object(params);
        }
    }
    Ok(o)
}

/// Largest relative weight read: keeps `w * 100` and the sum far from overflow.
const MAX_WEIGHT: u64 = 1_000_000_000;

/// agentgateway weights are relative; Switchboard's are integers summing to 100. Scales them by
/// largest remainder, reporting any change.
fn scale_weights(targets: &mut [Value], path: &str, out: &mut Builder) -> Result<(), String> {
    let mut weights = Vec::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        let w = t
            .get("weight")
            .and_then(Value::as_u64)
            .filter(|w| *w <= MAX_WEIGHT)
            .ok_or_else(|| {
                format!("{path}[{i}].weight: expected a whole number from 0 to {MAX_WEIGHT}")
            })?;
        weights.push(w);
    }
    let sum: u64 = weights.iter().sum();
    if sum == 0 {
        return Err(format!("{path}: the weights sum to 0"));
    }
    if sum == 100 {
        return Ok(());
    }
    let mut scaled: Vec<(u64, u64, usize)> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| (w * 100 / sum, w * 100 % sum, i))
        .collect();
    let mut left = 100 - scaled.iter().map(|s| s.0).sum::<u64>();
    let mut order: Vec<usize> = (0..scaled.len()).collect();
    order.sort_by(|a, b| scaled[*b].1.cmp(&scaled[*a].1).then(a.cmp(b)));
    for i in order {
        if left == 0 {
            break;
        }
        scaled[i].0 += 1;
        left -= 1;
    }
    for (t, (w, _, _)) in targets.iter_mut().zip(&scaled) {
        t["weight"] = json!(w);
    }
    out.note(format!(
        "{path}: weights {weights:?} scaled to {:?} (Switchboard's sum to 100)",
        scaled.iter().map(|s| s.0).collect::<Vec<_>>()
    ));
    Ok(())
}
