//! TrueFoundry virtual models ("Configuration structure"): Switchboard's own field names,
//! so `routing_config` maps field for field. What changes: each `providerName/model` target
//! becomes a catalog entry, `metadata_match` keys `tfy_gateway_region`/`tfy_gateway_zone`
//! become `gateway_region`/`gateway_zone` (Envoy's node locality), and the metadata and
//! resolved-model headers keep TrueFoundry's names (`x-tfy-metadata`, `x-tfy-resolved-model`).

use super::{drop_unknown, join, list, object, string, Builder};
use serde_json::{json, Map, Value};

const ROUTING_FIELDS: &[&str] = &[
    "type",
    "sticky_routing",
    "load_balance_targets",
    "complexity",
];
const TARGET_FIELDS: &[&str] = &[
    "target",
    "weight",
    "priority",
    "tier",
    "retry_config",
    "fallback_status_codes",
    "fallback_candidate",
    "sla_cutoff",
    "metadata_match",
    "headers_override",
    "override_params",
];
const UNKNOWN: &str = "not a field of a TrueFoundry virtual model that Switchboard knows";

pub fn import(source: &Value, out: &mut Builder) -> Result<(), String> {
    let root = object(source, "the file")?;
    if let Some(vms) = root.get("virtual_models") {
        let vms = list(vms, "virtual_models")?;
        out.expect_virtual_models(vms.len())?;
        for (i, vm) in vms.iter().enumerate() {
            virtual_model(
                object(vm, &format!("virtual_models[{i}]"))?,
                &format!("virtual_models[{i}]"),
                out,
            )?;
        }
        drop_unknown(out, "", root, &["virtual_models"], UNKNOWN);
    } else if root.contains_key("routing_config") {
        virtual_model(root, "", out)?;
    } else if root.contains_key("load_balance_targets") {
        // A bare routing_config.
        let vm: Map<String, Value> = [("routing_config".to_string(), source.clone())]
            .into_iter()
            .collect();
        virtual_model(&vm, "", out)?;
    } else {
        let keys: Vec<&str> = root.keys().map(String::as_str).collect();
        return Err(format!(
            "expected a TrueFoundry virtual model (`routing_config` with `type` and \
             `load_balance_targets`), found only: {}",
            keys.join(", ")
        ));
    }
    out.set_root(
        "header_names",
        json!({"metadata": "x-tfy-metadata", "resolved_model": "x-tfy-resolved-model"}),
    );
    out.note(
        "header_names: request metadata is read from `x-tfy-metadata` and the answering \
         model is named in `x-tfy-resolved-model`, as TrueFoundry's gateway does"
            .to_string(),
    );
    Ok(())
}

fn virtual_model(vm: &Map<String, Value>, path: &str, out: &mut Builder) -> Result<(), String> {
    let source_name = match vm.get("name") {
        Some(n) => Some(string(n, &join(path, "name"))?),
        None => None,
    };
    let name = out.vm_name(source_name, "the virtual model")?;
    let model_types = match vm.get("model_types") {
        Some(t) => t.clone(),
        None => {
            out.note(format!(
                "{}: not in the source; set to [\"chat\"] (chat completions and messages)",
                join(path, "model_types")
            ));
            json!(["chat"])
        }
    };
    let rc_path = join(path, "routing_config");
    let rc_value = vm
        .get("routing_config")
        .ok_or_else(|| format!("{rc_path}: is required"))?;
    let rc = object(rc_value, &rc_path)?;
    drop_unknown(out, &rc_path, rc, ROUTING_FIELDS, UNKNOWN);
    let mut routing: Map<String, Value> = rc
        .iter()
        .filter(|(k, _)| {
            ROUTING_FIELDS.contains(&k.as_str()) && k.as_str() != "load_balance_targets"
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let targets_path = join(&rc_path, "load_balance_targets");
    let targets = list(
        rc.get("load_balance_targets")
            .ok_or_else(|| format!("{targets_path}: is required"))?,
        &targets_path,
    )?;
    let mut out_targets = Vec::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        let tp = format!("{targets_path}[{i}]");
        out_targets.push(Value::Object(target(object(t, &tp)?, &tp, out)?));
    }
    routing.insert(
        "load_balance_targets".to_string(),
        Value::Array(out_targets),
    );
    drop_unknown(
        out,
        path,
        vm,
        &["name", "model_types", "routing_config"],
        UNKNOWN,
    );
    // TrueFoundry's `chat` model type serves `/chat/completions` and `/messages` over any
    // provider: a request in either API is translated for a target that speaks the other.
    let chat = model_types
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t == "chat"));
    let mut vm_out = json!({
        "name": name,
        "model_types": model_types,
        "routing_config": routing,
    });
    if chat {
        vm_out["translate"] = json!(["chat_completions", "messages"]);
        out.note(format!(
            "{}: translate set to [\"chat_completions\", \"messages\"]: TrueFoundry's chat \
             model type serves /chat/completions and /messages over any provider",
            join(path, "translate")
        ));
    }
    out.add_virtual_model(vm_out);
    Ok(())
}

fn target(
    t: &Map<String, Value>,
    path: &str,
    out: &mut Builder,
) -> Result<Map<String, Value>, String> {
    drop_unknown(out, path, t, TARGET_FIELDS, UNKNOWN);
    let mut o: Map<String, Value> = t
        .iter()
        .filter(|(k, _)| TARGET_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let name_path = join(path, "target");
    let name = string(
        t.get("target")
            .ok_or_else(|| format!("{name_path}: is required"))?,
        &name_path,
    )?;
    let name = out.provider_model(&name_path, name, false)?;
    o.insert("target".to_string(), Value::String(name));
    if let Some(Value::Object(mm)) = t.get("metadata_match") {
        let mut mapped = Map::new();
        for (k, v) in mm {
            let key = match k.as_str() {
                "tfy_gateway_region" => "gateway_region",
                "tfy_gateway_zone" => "gateway_zone",
                other => other,
            };
            if key != k {
                out.note(format!(
                    "{}: the gateway location key `{k}` is `{key}` here, from Envoy's \
                     node.locality",
                    join(path, "metadata_match")
                ));
            }
            mapped.insert(key.to_string(), v.clone());
        }
        o.insert("metadata_match".to_string(), Value::Object(mapped));
    }
    if let Some(Value::Object(params)) = t.get("override_params") {
        let mut kept = params.clone();
        if kept.remove("prompt_version_fqn").is_some() {
            out.dropped(
                &join(path, "override_params.prompt_version_fqn"),
                "prompt hydration is a TrueFoundry gateway feature; Switchboard sends the \
                 client's messages as they are",
            );
        }
        if kept.is_empty() {
            o.remove("override_params");
        } else {
            o.insert("override_params".to_string(), Value::Object(kept));
        }
    }
    Ok(o)
}
