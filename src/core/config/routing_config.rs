//! Compiles one `virtual_models[]` entry and its `routing_config`.
//!
//! Field names follow the TrueFoundry seed ("Configuration structure"). This version implements
//! `weight-based-routing` and `priority-based-routing`; every other strategy and per-target option of the seed is rejected
//! with a "not supported yet" error rather than silently ignored.

use super::fields::{ConfigError, Fields};
use super::{Model, ModelId, NameEntry, PriorityTarget, Routing, VirtualModel, WeightedTarget};
use crate::core::endpoint::{ModelType, ModelTypes};
use hashbrown::HashMap;

/// Strategies of the seeds that a later version implements.
const TYPES_NOT_YET: &[&str] = &[
    "latency-based-routing",
    "complexity-based-routing",
    "round-robin-routing",
    "hash-based-routing",
    "conditional-routing",
];

const SUPPORTED: &str = "supported: weight-based-routing, priority-based-routing";

/// Per-target seed fields that a later version implements.
const TARGET_NOT_YET: &[&str] = &[
    "retry_config",
    "fallback_status_codes",
    "fallback_candidate",
    "sla_cutoff",
    "metadata_match",
    "headers_override",
    "override_params",
];

pub(super) fn compile_virtual_model(
    mut f: Fields<'_>,
    models: &[Model],
    names: &HashMap<String, NameEntry>,
    virtual_names: &[&str],
) -> Result<VirtualModel, ConfigError> {
    let name = f.str("name")?.to_string();

    let mut model_types = ModelTypes::default();
    let types = f
        .opt_array("model_types")?
        .ok_or_else(|| f.error("model_types", "is required, e.g. [\"chat\"]"))?;
    for (path, value) in types {
        let t = value
            .as_str()
            .and_then(ModelType::from_name)
            .ok_or_else(|| {
                let known: Vec<&str> = ModelType::ALL.iter().map(|(_, n)| *n).collect();
                ConfigError::new(path, format!("expected one of: {}", known.join(", ")))
            })?;
        model_types.insert(t);
    }
    if model_types.is_empty() {
        return Err(f.error("model_types", "must list at least one model type"));
    }

    let mut rc = f
        .opt_object("routing_config")?
        .ok_or_else(|| f.error("routing_config", "is required"))?;
    let routing = match rc.str("type")? {
        "weight-based-routing" => {
            Routing::Weighted(compile_weighted(&mut rc, models, names, virtual_names)?)
        }
        "priority-based-routing" => {
            Routing::Priority(compile_priority(&mut rc, models, names, virtual_names)?)
        }
        t if TYPES_NOT_YET.contains(&t) => {
            return Err(rc.error(
                "type",
                format!("`{t}` is not supported yet by this version of Switchboard; {SUPPORTED}"),
            ))
        }
        t => return Err(rc.error("type", format!("unknown routing type `{t}`; {SUPPORTED}"))),
    };
    rc.finish(&["sticky_routing"])?;
    f.finish(&[])?;
    Ok(VirtualModel {
        name,
        model_types,
        routing,
    })
}

/// Reads `load_balance_targets`, each target's strategy field by `read`, and rejects the
/// field of the other strategy (the seed makes `weight` and `priority` mutually exclusive).
fn compile_targets<T>(
    rc: &mut Fields<'_>,
    models: &[Model],
    names: &HashMap<String, NameEntry>,
    virtual_names: &[&str],
    (strategy, other_strategy_field): (&str, &str),
    mut read: impl FnMut(&mut Fields<'_>, ModelId) -> Result<T, ConfigError>,
) -> Result<Vec<T>, ConfigError> {
    let items = rc
        .opt_array("load_balance_targets")?
        .ok_or_else(|| rc.error("load_balance_targets", "is required"))?;
    if items.is_empty() {
        return Err(rc.error("load_balance_targets", "must list at least one target"));
    }
    let mut seen: Vec<ModelId> = Vec::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (path, value) in items {
        let mut t = Fields::new(path, value)?;
        let model = resolve_target(&mut t, models, names, virtual_names)?;
        if seen.contains(&model) {
            return Err(t.error("target", "is listed twice in this virtual model"));
        }
        seen.push(model);
        out.push(read(&mut t, model)?);
        if t.has(other_strategy_field) {
            return Err(t.error(
                other_strategy_field,
                format!("does not apply to `{strategy}`"),
            ));
        }
        t.finish(TARGET_NOT_YET)?;
    }
    Ok(out)
}

fn compile_weighted(
    rc: &mut Fields<'_>,
    models: &[Model],
    names: &HashMap<String, NameEntry>,
    virtual_names: &[&str],
) -> Result<Vec<WeightedTarget>, ConfigError> {
    let targets = compile_targets(
        rc,
        models,
        names,
        virtual_names,
        ("weight-based-routing", "priority"),
        |t, model| {
            let weight = t
                .opt_u64("weight", 100)?
                .ok_or_else(|| t.error("weight", "is required for weight-based-routing (0-100)"))?;
            Ok(WeightedTarget {
                model,
                weight: u32::try_from(weight).unwrap_or(100),
            })
        },
    )?;
    let sum: u32 = targets.iter().map(|t| t.weight).sum();
    if sum != 100 {
        return Err(rc.error(
            "load_balance_targets",
            format!("weights sum to {sum}; they must sum to 100"),
        ));
    }
    Ok(targets)
}

fn compile_priority(
    rc: &mut Fields<'_>,
    models: &[Model],
    names: &HashMap<String, NameEntry>,
    virtual_names: &[&str],
) -> Result<Vec<PriorityTarget>, ConfigError> {
    compile_targets(
        rc,
        models,
        names,
        virtual_names,
        ("priority-based-routing", "weight"),
        |t, model| {
            let priority = t.opt_u64("priority", u64::from(u32::MAX))?.ok_or_else(|| {
                t.error(
                    "priority",
                    "is required for priority-based-routing (0 is highest)",
                )
            })?;
            Ok(PriorityTarget {
                model,
                priority: u32::try_from(priority).unwrap_or(u32::MAX),
            })
        },
    )
}

/// Reads `target` and resolves it to a catalog model; virtual models are not allowed
/// (TrueFoundry seed FAQ: targets must be real catalog models).
fn resolve_target(
    t: &mut Fields<'_>,
    models: &[Model],
    names: &HashMap<String, NameEntry>,
    virtual_names: &[&str],
) -> Result<ModelId, ConfigError> {
    let name = t.str("target")?;
    match names.get(name) {
        Some(NameEntry::Catalog(id)) if id.0 < models.len() => Ok(*id),
        _ if virtual_names.contains(&name) => Err(t.error(
            "target",
            format!("`{name}` is a virtual model; targets must be catalog models"),
        )),
        _ => Err(t.error("target", format!("`{name}` is not a model in `models`"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::core::config::Config;

    fn err(json: &str) -> String {
        Config::parse(json.as_bytes()).unwrap_err().to_string()
    }

    fn with_vm(vm: &str) -> String {
        format!(
            r#"{{"models": [
                {{"name": "a", "cluster": "ca", "model": "ma"}},
                {{"name": "b", "cluster": "cb", "model": "mb"}}],
              "virtual_models": [{vm}]}}"#
        )
    }

    fn weighted(targets: &str) -> String {
        with_vm(&format!(
            r#"{{"name": "vm", "model_types": ["chat"],
                "routing_config": {{"type": "weight-based-routing", "load_balance_targets": [{targets}]}}}}"#
        ))
    }

    #[test]
    fn weights_must_be_integers_from_0_to_100_summing_to_100() {
        assert!(Config::parse(
            weighted(r#"{"target": "a", "weight": 100}, {"target": "b", "weight": 0}"#).as_bytes()
        )
        .is_ok());
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 80}, {"target": "b", "weight": "20"}"#)),
            "virtual_models[0].routing_config.load_balance_targets[1].weight: expected an integer from 0 to 100, got \"20\""
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 80}, {"target": "b", "weight": 120}"#)),
            "virtual_models[0].routing_config.load_balance_targets[1].weight: expected an integer from 0 to 100, got 120"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 80}, {"target": "b", "weight": 10}"#)),
            "virtual_models[0].routing_config.load_balance_targets: weights sum to 90; they must sum to 100"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100}, {"target": "b"}"#)),
            "virtual_models[0].routing_config.load_balance_targets[1].weight: is required for weight-based-routing (0-100)"
        );
    }

    fn priority(targets: &str) -> String {
        with_vm(&format!(
            r#"{{"name": "vm", "model_types": ["chat"],
                "routing_config": {{"type": "priority-based-routing", "load_balance_targets": [{targets}]}}}}"#
        ))
    }

    #[test]
    fn priority_targets_need_a_priority_and_no_weight() {
        let c = Config::parse(
            priority(r#"{"target": "a", "priority": 1}, {"target": "b", "priority": 0}"#)
                .as_bytes(),
        )
        .unwrap();
        let crate::core::config::Routing::Priority(t) = &c.virtual_models[0].routing else {
            panic!("expected priority routing")
        };
        assert_eq!((t[0].priority, t[1].priority), (1, 0));
        assert_eq!(
            err(&priority(r#"{"target": "a"}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].priority: is required for priority-based-routing (0 is highest)"
        );
        assert_eq!(
            err(&priority(r#"{"target": "a", "priority": -1}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].priority: expected an integer from 0 to 4294967295, got -1"
        );
        assert_eq!(
            err(&priority(r#"{"target": "a", "priority": 0, "weight": 100}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].weight: does not apply to `priority-based-routing`"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "priority": 0}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].priority: does not apply to `weight-based-routing`"
        );
    }

    #[test]
    fn targets_must_be_known_distinct_catalog_models() {
        assert_eq!(
            err(&weighted(r#"{"target": "zzz", "weight": 100}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].target: `zzz` is not a model in `models`"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 50}, {"target": "a", "weight": 50}"#)),
            "virtual_models[0].routing_config.load_balance_targets[1].target: is listed twice in this virtual model"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "vm", "weight": 100}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].target: `vm` is a virtual model; targets must be catalog models"
        );
    }

    #[test]
    fn unimplemented_seed_fields_are_rejected_not_ignored() {
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "retry_config": {"attempts": 2}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].retry_config: is not supported yet by this version of Switchboard; remove it"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "latency-based-routing", "load_balance_targets": []}}"#)),
            "virtual_models[0].routing_config.type: `latency-based-routing` is not supported yet by this version of Switchboard; supported: weight-based-routing, priority-based-routing"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "random"}}"#)),
            "virtual_models[0].routing_config.type: unknown routing type `random`; supported: weight-based-routing, priority-based-routing"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "weight-based-routing", "sticky_routing": {}, "load_balance_targets": [{"target": "a", "weight": 100}]}}"#)),
            "virtual_models[0].routing_config.sticky_routing: is not supported yet by this version of Switchboard; remove it"
        );
    }

    #[test]
    fn virtual_model_needs_model_types_and_a_unique_name() {
        assert_eq!(
            err(&with_vm(
                r#"{"name": "vm", "routing_config": {"type": "weight-based-routing"}}"#
            )),
            "virtual_models[0].model_types: is required, e.g. [\"chat\"]"
        );
        assert!(err(&with_vm(
            r#"{"name": "vm", "model_types": ["chatt"], "routing_config": {}}"#
        ))
        .starts_with("virtual_models[0].model_types[0]: expected one of: chat, responses"));
        assert_eq!(
            err(&with_vm(
                r#"{"name": "a", "model_types": ["chat"], "routing_config": {"type": "weight-based-routing", "load_balance_targets": [{"target": "b", "weight": 100}]}}"#
            )),
            "virtual_models[0].name: `a` is already the name of a model or virtual model"
        );
    }
}
