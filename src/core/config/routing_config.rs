//! Compiles one `virtual_models[]` entry and its `routing_config`: the strategy and its own
//! fields (the targets' shared ones are read in `targets.rs`, the failure rules in
//! `failure_rules.rs`).
//!
//! Field names follow TrueFoundry virtual models ("Configuration structure") and, for the
//! strategies it does not have, agentgateway virtual models and Zuplo model load balancing. Every
//! strategy, per-target option and stickiness rule is read here with its field path; options this
//! version does not implement (the complexity classifier model) are rejected as "not supported
//! yet", never ignored.

use super::failure_rules::compile_failure_rules;
use super::fields::{ConfigError, Fields};
use super::identifiers::{body_path, compile_identifier, jwt_claim};
use super::root::{name_key, NameEntry};
use super::strategy::{
    Classifier, ComplexityTarget, ConditionalTarget, HashKey, PriorityTarget, Routing,
    SessionIdentifier, StickyRouting, StickySource, Thresholds, Tier, WeightedTarget,
};
use super::stream_rules::compile_stream_rules;
use super::targets::{compile_targets, Catalog};
use super::virtual_model::{TargetConfig, TargetPolicy, VirtualModel};
use crate::core::endpoint::{ModelType, ModelTypes};
use crate::core::health::sla::SlaCutoff;
use crate::core::when::Condition;

const SUPPORTED: &str = "supported: weight-based-routing, priority-based-routing, \
                         latency-based-routing, complexity-based-routing, conditional-routing, \
                         round-robin-routing, hash-based-routing";

/// One `virtual_models[]` entry: its model types, its `routing_config` (strategy, targets,
/// sticky sessions) and its failure rules, read in that order.
pub(super) fn compile_virtual_model(
    mut f: Fields<'_>,
    catalog: &Catalog<'_>,
) -> Result<VirtualModel, ConfigError> {
    let name = f.str("name")?.to_string();
    let model_types = compile_model_types(&mut f)?;
    let mut rc = f
        .opt_object("routing_config")?
        .ok_or_else(|| f.error("routing_config", "is required"))?;
    let mut targets = Vec::new();
    let routing = compile_routing(&mut rc, catalog, &mut targets, (&f, model_types))?;
    let sticky = compile_sticky_rule(&mut rc, &routing)?;
    rc.finish(&[])?;
    let failures = compile_failure_rules(&mut f)?;
    let streams = compile_stream_rules(&mut f)?;
    let translation = super::translation::compile_translation(&mut f)?;
    let answer_fallbacks = super::answer_fallbacks::compile_answer_fallbacks(&mut f)?;
    let max_evicted_share = f.opt_fraction("max_evicted_share")?;
    f.finish(&[])?;
    let has_sla = targets.iter().any(|t| t.policy.sla.is_some());
    let has_metadata_match = targets.iter().any(|t| !t.metadata_match.is_empty());
    Ok(VirtualModel {
        name,
        model_types,
        routing,
        targets,
        fallback_timeout_ms: failures.fallback_timeout_ms,
        max_targets: failures.max_targets,
        timeout_rules: failures.timeout_rules,
        fail_fast: failures.fail_fast,
        budget: failures.budget,
        streams,
        translation,
        answer_fallbacks,
        max_evicted_share,
        has_sla,
        has_metadata_match,
        sticky,
    })
}

/// `model_types`: the endpoints a virtual model serves (at least one).
fn compile_model_types(f: &mut Fields<'_>) -> Result<ModelTypes, ConfigError> {
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
    Ok(model_types)
}

/// `routing_config.type` and the strategy's fields; each target's settings go to `targets`.
/// `vm` is the virtual model's own object and model types, which complexity routing checks.
fn compile_routing(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
    vm: (&Fields<'_>, ModelTypes),
) -> Result<Routing, ConfigError> {
    Ok(match rc.str("type")? {
        "weight-based-routing" => Routing::Weighted(compile_weighted(rc, catalog, targets)?),
        "priority-based-routing" => Routing::Priority(compile_priority(rc, catalog, targets)?),
        "conditional-routing" => Routing::Conditional(compile_conditional(rc, catalog, targets)?),
        "latency-based-routing" => compile_latency(rc, catalog, targets)?,
        "complexity-based-routing" => compile_complexity_routing(rc, catalog, targets, vm)?,
        "hash-based-routing" => compile_hash(rc, catalog, targets)?,
        "round-robin-routing" => {
            let strategy = ("round-robin-routing", &["weight", "priority", "when"][..]);
            let read = |_: &mut Fields<'_>, m, _: &mut TargetPolicy| Ok(m);
            Routing::RoundRobin(compile_targets(rc, catalog, strategy, targets, read)?)
        }
        t => return Err(rc.error("type", format!("unknown routing type `{t}`; {SUPPORTED}"))),
    })
}

/// `sticky_routing`, for the strategies that keep sessions.
fn compile_sticky_rule(
    rc: &mut Fields<'_>,
    routing: &Routing,
) -> Result<Option<StickyRouting>, ConfigError> {
    match rc.opt_object("sticky_routing")? {
        Some(obj) if matches!(routing, Routing::Weighted(_)) => {
            Ok(Some(compile_sticky(obj, 1..=30 * 86_400)?))
        }
        // A complexity pin holds a session on a price tier: 5 minutes to 1 hour (TrueFoundry virtual models, "Complexity-based routing").
        Some(obj) if matches!(routing, Routing::Complexity { .. }) => {
            Ok(Some(compile_sticky(obj, 300..=3_600)?))
        }
        Some(_) => Err(rc.error(
            "sticky_routing",
            "only applies to weight-based-routing and complexity-based-routing (TrueFoundry virtual models)",
        )),
        None => Ok(None),
    }
}

/// `latency-based-routing`: its targets and `caller_identifier`.
fn compile_latency(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
) -> Result<Routing, ConfigError> {
    let strategy = ("latency-based-routing", &["weight", "priority", "when"][..]);
    let targets = compile_targets(rc, catalog, strategy, targets, |_, m, _| Ok(m))?;
    let caller = match rc.opt_object("caller_identifier")? {
        Some(obj) => Some(compile_identifier(obj)?),
        None => None,
    };
    Ok(Routing::Latency { targets, caller })
}

/// `complexity-based-routing`: each target's `tier`, the model types it may serve, and the
/// `complexity` thresholds and classifier.
fn compile_complexity_routing(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
    (vm, model_types): (&Fields<'_>, ModelTypes),
) -> Result<Routing, ConfigError> {
    let strategy = (
        "complexity-based-routing",
        &["weight", "priority", "when"][..],
    );
    let targets = compile_targets(rc, catalog, strategy, targets, |t, model, _| {
        let name = t.str("tier")?;
        let tier = Tier::from_name(name).ok_or_else(|| {
            t.error(
                "tier",
                format!("expected `simple`, `medium` or `complex`, got `{name}`"),
            )
        })?;
        Ok(ComplexityTarget { model, tier })
    })?;
    // The seed: the one strategy that reads the body applies to these model types only.
    let allowed = [ModelType::Chat, ModelType::Completion, ModelType::Responses];
    if ModelType::ALL
        .iter()
        .any(|(t, _)| model_types.contains(*t) && !allowed.contains(t))
    {
        return Err(vm.error(
            "model_types",
            "complexity-based-routing serves only chat, completion and responses",
        ));
    }
    let (thresholds, classifier) = match rc.opt_object("complexity")? {
        Some(obj) => compile_complexity(obj, catalog)?,
        None => (
            Thresholds {
                medium: 2,
                complex: 5,
            },
            None,
        ),
    };
    Ok(Routing::Complexity {
        targets,
        thresholds,
        classifier,
    })
}

/// `hash-based-routing`: its targets and the required `hash_key`.
fn compile_hash(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
) -> Result<Routing, ConfigError> {
    let strategy = ("hash-based-routing", &["weight", "priority", "when"][..]);
    let targets = compile_targets(rc, catalog, strategy, targets, |_, m, _| Ok(m))?;
    let by = match rc.opt_object("hash_key")? {
        Some(obj) => compile_hash_key(obj)?,
        None => return Err(rc.error("hash_key", "is required: {\"source\": \"user\" | \"conversation\" | \"headers\" | \"metadata\", \"key\": ...}")),
    };
    Ok(Routing::Hash { targets, by })
}

fn compile_weighted(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
) -> Result<Vec<WeightedTarget>, ConfigError> {
    let strategy = ("weight-based-routing", &["priority", "when"][..]);
    let targets = compile_targets(rc, catalog, strategy, targets, |t, model, _| {
        if t.has("sla_cutoff") {
            return Err(t.error("sla_cutoff", "only applies to priority-based-routing"));
        }
        let weight = t
            .opt_u64("weight", 100)?
            .ok_or_else(|| t.error("weight", "is required for weight-based-routing (0-100)"))?;
        Ok(WeightedTarget {
            model,
            weight: u32::try_from(weight).unwrap_or(100),
        })
    })?;
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
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
) -> Result<Vec<PriorityTarget>, ConfigError> {
    let strategy = ("priority-based-routing", &["weight", "when"][..]);
    compile_targets(rc, catalog, strategy, targets, |t, model, policy| {
        if let Some(sla) = t.opt_object("sla_cutoff")? {
            policy.sla = Some(compile_sla(sla)?);
        }
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
    })
}

fn compile_conditional(
    rc: &mut Fields<'_>,
    catalog: &Catalog<'_>,
    targets: &mut Vec<TargetConfig>,
) -> Result<Vec<ConditionalTarget>, ConfigError> {
    let strategy = ("conditional-routing", &["weight", "priority"][..]);
    compile_targets(rc, catalog, strategy, targets, |t, model, _| {
        let src = t.str("when")?;
        let when = Condition::parse(src).map_err(|e| t.error("when", e.to_string()))?;
        Ok(ConditionalTarget { model, when })
    })
}

/// `sticky_routing {ttl_seconds, idle_ttl_seconds, session_identifiers: [{key, source}],
/// missing_identifier}`; `idle_ttl_seconds` is at most `ttl_seconds`.
fn compile_sticky(
    mut f: Fields<'_>,
    ttl_range: std::ops::RangeInclusive<u64>,
) -> Result<StickyRouting, ConfigError> {
    let ttl = f
        .opt_u64("ttl_seconds", *ttl_range.end())?
        .ok_or_else(|| f.error("ttl_seconds", "is required"))?;
    if !ttl_range.contains(&ttl) {
        return Err(f.error(
            "ttl_seconds",
            format!(
                "must be from {} to {} here",
                ttl_range.start(),
                ttl_range.end()
            ),
        ));
    }
    // Provider prompt caches live minutes (Anthropic's default 5, OpenAI's 5 to 10 idle), so
    // an idle TTL of that order frees a moved session once its cache is cold anyway.
    let idle_ms = match f.opt_u64("idle_ttl_seconds", ttl)? {
        Some(0) => return Err(f.error("idle_ttl_seconds", "must be at least 1")),
        idle => idle.map(|s| s * 1000),
    };
    let items = f
        .opt_array("session_identifiers")?
        .ok_or_else(|| f.error("session_identifiers", "is required"))?;
    if items.is_empty() {
        return Err(f.error("session_identifiers", "must list at least one identifier"));
    }
    let mut session_identifiers = Vec::with_capacity(items.len());
    for (path, value) in items {
        session_identifiers.push(compile_identifier(Fields::new(path, value)?)?);
    }
    let shared_when_missing = match f.opt_str("missing_identifier")? {
        None | Some("shared") => true,
        Some("none") => false,
        Some(other) => {
            return Err(f.error(
                "missing_identifier",
                format!("expected `shared` or `none`, got `{other}`"),
            ))
        }
    };
    f.finish(&[])?;
    Ok(StickyRouting {
        ttl_ms: ttl * 1000,
        idle_ms,
        session_identifiers,
        shared_when_missing,
    })
}

/// `complexity {medium_threshold, complex_threshold}`: heuristic scores that start each tier,
/// and `classifier_model`, a catalog chat model asked for the tier, with `classifier_timeout_ms`.
fn compile_complexity(
    mut f: Fields<'_>,
    catalog: &Catalog<'_>,
) -> Result<(Thresholds, Option<Classifier>), ConfigError> {
    let medium = f.opt_u64("medium_threshold", 100)?.unwrap_or(2) as u32;
    let complex = f.opt_u64("complex_threshold", 100)?.unwrap_or(5) as u32;
    if complex <= medium {
        return Err(f.error("complex_threshold", "must be greater than medium_threshold"));
    }
    let timeout_ms = f
        .opt_u64("classifier_timeout_ms", 60_000)?
        .unwrap_or(1_500)
        .max(1);
    let classifier = match f.opt_str("classifier_model")? {
        None => None,
        Some(name) => match catalog
            .names
            .get(name_key(name, catalog.fold_case).as_ref())
        {
            Some(NameEntry::Catalog(id)) => Some(Classifier {
                model: *id,
                timeout_ms,
            }),
            _ => {
                return Err(f.error(
                    "classifier_model",
                    format!("`{name}` is not a catalog model in `models`"),
                ))
            }
        },
    };
    f.finish(&[])?;
    Ok((Thresholds { medium, complex }, classifier))
}

/// `hash_key {source: user|conversation|headers|metadata|jwt|body|agent_session, key}`;
/// `jwt` takes `claim`
/// (default `sub`) and `payload_in_metadata` (default `jwt_payload`).
fn compile_hash_key(mut f: Fields<'_>) -> Result<HashKey, ConfigError> {
    let by = match f.str("source")? {
        "user" => HashKey::User,
        "conversation" => HashKey::Conversation,
        "headers" => HashKey::Header(f.str("key")?.to_ascii_lowercase()),
        "metadata" => HashKey::Metadata(f.str("key")?.to_string()),
        "jwt" => {
            let (payload, claim) = jwt_claim(&mut f)?;
            HashKey::Jwt { payload, claim }
        }
        "body" => HashKey::Identifier(SessionIdentifier {
            key: body_path(&mut f)?,
            source: StickySource::Body,
            payload: String::new(),
        }),
        "agent_session" => HashKey::Identifier(SessionIdentifier {
            key: String::new(),
            source: StickySource::AgentSession,
            payload: String::new(),
        }),
        other => {
            return Err(f.error(
                "source",
                format!(
                    "expected `user`, `conversation`, `headers`, `metadata`, `jwt`, `body` or `agent_session`, got `{other}`"
                ),
            ))
        }
    };
    f.finish(&[])?;
    Ok(by)
}

/// `sla_cutoff` (TrueFoundry virtual models, "SLA cutoff"): either threshold or both.
fn compile_sla(mut f: Fields<'_>) -> Result<SlaCutoff, ConfigError> {
    let ms = |v: Option<u64>| v.map(|n| n as u32);
    let cutoff = SlaCutoff {
        time_to_first_token_ms: ms(f.opt_u64("time_to_first_token_ms", 3_600_000)?),
        time_per_output_token_ms: ms(f.opt_u64("time_per_output_token_ms", 3_600_000)?),
    };
    if cutoff == SlaCutoff::default() {
        return Err(ConfigError::new(
            f.field_path("time_to_first_token_ms"),
            "set time_to_first_token_ms, time_per_output_token_ms or both",
        ));
    }
    f.finish(&[])?;
    Ok(cutoff)
}

#[cfg(test)]
mod tests {
    use crate::core::config::{Config, StickySource, TimeoutRules};

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
    fn retry_and_fallback_fields_have_the_seed_defaults_and_parse() {
        use crate::core::config::{ModelId, TargetPolicy};
        let c = Config::parse(
            weighted(
                r#"{"target": "a", "weight": 50,
                    "retry_config": {"attempts": 3, "delay": 200, "on_status_codes": ["429", 500]},
                    "fallback_status_codes": ["429"], "fallback_candidate": false},
                   {"target": "b", "weight": 50}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let vm = &c.virtual_models[0];
        let a = vm.policy(ModelId(0));
        assert_eq!(
            (a.retry_attempts, a.retry_delay_ms, a.fallback_candidate),
            (3, 200, false)
        );
        assert!(a.retry_on.contains(429) && a.retry_on.contains(500) && !a.retry_on.contains(503));
        assert!(a.fallback_on.contains(429) && !a.fallback_on.contains(500));
        assert_eq!(*vm.policy(ModelId(1)), TargetPolicy::default());
        let d = TargetPolicy::default();
        assert_eq!(
            (d.retry_attempts, d.retry_delay_ms, d.fallback_candidate),
            (0, 100, true)
        );
        for code in [401, 403, 404, 408, 429, 500, 502, 503, 529] {
            assert!(d.fallback_on.contains(code), "{code}");
        }
        assert!(
            d.retry_on.contains(529),
            "Anthropic's overloaded_error is retried"
        );
        assert!(!d.fallback_on.contains(504));
        assert_eq!(vm.fallback_timeout_ms, None);
    }

    #[test]
    fn backoff_connection_retries_status_classes_and_max_targets_parse() {
        use crate::core::config::ModelId;
        let c = Config::parse(
            with_vm(
                r#"{"name": "vm", "model_types": ["chat"], "max_targets_per_request": 2,
                "routing_config": {"type": "round-robin-routing", "load_balance_targets": [
                  {"target": "a", "retry_config": {"attempts": 2, "delay": 250, "backoff_multiplier": 2,
                     "on_connection_failure": false, "on_status_codes": ["429"]},
                   "fallback_status_codes": ["408", "425", "5xx"]},
                  {"target": "b"}]}}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let vm = &c.virtual_models[0];
        assert_eq!(vm.max_targets, Some(2));
        let p = vm.policy(ModelId(0));
        assert_eq!((p.retry_backoff, p.retry_no_answer), (2, false));
        for code in [408, 425, 500, 504, 599] {
            assert!(p.fallback_on.contains(code), "{code}");
        }
        assert!(!p.fallback_on.contains(429) && !p.fallback_on.contains(499));
        let q = vm.policy(ModelId(1));
        assert_eq!((q.retry_backoff, q.retry_no_answer), (1, true));
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "retry_config": {"backoff_multiplier": 0}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].retry_config.backoff_multiplier: must be from 1 to 10"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "fallback_status_codes": ["6xx"]}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].fallback_status_codes[0]: expected an HTTP status code such as \"429\", got \"6xx\""
        );
        assert_eq!(
            err(&with_vm(
                r#"{"name": "vm", "model_types": ["chat"], "max_targets_per_request": 0, "routing_config": {"type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}}"#
            )),
            "virtual_models[0].max_targets_per_request: must be at least 1"
        );
    }

    /// A virtual model over `a` with `fields` added.
    fn vm_with(fields: &str) -> String {
        with_vm(&format!(
            r#"{{"name": "vm", "model_types": ["chat"], {fields},
                "routing_config": {{"type": "weight-based-routing",
                  "load_balance_targets": [{{"target": "a", "weight": 100}}]}}}}"#
        ))
    }

    #[test]
    fn fail_fast_endpoints_name_apis_and_default_to_none() {
        use crate::core::endpoint::Api;
        let c = Config::parse(
            vm_with(r#""fail_fast_endpoints": ["responses", "messages"]"#).as_bytes(),
        )
        .unwrap();
        let fast = c.virtual_models[0].fail_fast;
        assert!(fast.contains(Api::Responses) && fast.contains(Api::Messages));
        assert!(!fast.contains(Api::ChatCompletions) && !fast.contains(Api::Embeddings));
        let c = Config::parse(vm_with(r#""fail_fast_endpoints": []"#).as_bytes()).unwrap();
        assert!(c.virtual_models[0].fail_fast.is_empty());
        assert!(
            Config::parse(weighted(r#"{"target": "a", "weight": 100}"#).as_bytes())
                .unwrap()
                .virtual_models[0]
                .fail_fast
                .is_empty()
        );
        assert_eq!(
            err(&vm_with(
                r#""fail_fast_endpoints": ["responses", "/v1/messages"]"#
            )),
            "virtual_models[0].fail_fast_endpoints[1]: expected one of: chat_completions, \
             completions, embeddings, responses, messages, rerank, moderations, images, audio"
        );
        assert_eq!(
            err(&vm_with(r#""fail_fast_endpoints": "responses""#)),
            "virtual_models[0].fail_fast_endpoints: expected an array, got a string"
        );
    }

    #[test]
    fn stream_commit_and_the_idle_timeout_default_and_name_their_field_when_wrong() {
        let c = Config::parse(vm_with(r#""fallback_timeout_ms": 500"#).as_bytes()).unwrap();
        assert_eq!(
            c.virtual_models[0].streams,
            super::super::StreamRules::default()
        );
        let fields = r#""stream_commit": {"max_bytes": 4096, "max_events": 8},
            "stream_idle_timeout_ms": 30000"#;
        let c = Config::parse(vm_with(fields).as_bytes()).unwrap();
        let rules = c.virtual_models[0].streams;
        assert_eq!(
            (
                rules.commit_max_bytes,
                rules.commit_max_events,
                rules.idle_timeout_ms
            ),
            (4096, 8, 30000)
        );
        assert_eq!(rules.fallbacks, super::super::StreamFallbacks::CallOut);
        let c = Config::parse(vm_with(r#""stream_fallbacks": "router""#).as_bytes()).unwrap();
        assert_eq!(
            c.virtual_models[0].streams.fallbacks,
            super::super::StreamFallbacks::Router
        );
        for (fields, message) in [
            (
                r#""stream_commit": {"max_bytes": 0}"#,
                "virtual_models[0].stream_commit.max_bytes: must be greater than 0",
            ),
            (
                r#""stream_commit": {"max_events": 8, "bytes": 1}"#,
                "virtual_models[0].stream_commit.bytes: unknown field",
            ),
            (
                r#""stream_idle_timeout_ms": 0"#,
                "virtual_models[0].stream_idle_timeout_ms: must be greater than 0",
            ),
            (
                r#""stream_fallbacks": "envoy""#,
                r#"virtual_models[0].stream_fallbacks: must be "call_out" or "router""#,
            ),
        ] {
            let e = err(&vm_with(fields));
            assert!(e.starts_with(message), "{e}");
        }
    }

    #[test]
    fn fallback_timeout_growth_multiplies_each_next_targets_timeout() {
        let c = Config::parse(
            vm_with(r#""fallback_timeout_ms": 500, "fallback_timeout_growth": 2"#).as_bytes(),
        )
        .unwrap();
        let rules = c.virtual_models[0].timeout_rules;
        assert_eq!(rules.growth, 2);
        let times: Vec<u64> = (0..4).map(|n| rules.timeout_ms(500, n)).collect();
        assert_eq!(times, [500, 1000, 2000, 4000]);
        let flat = Config::parse(vm_with(r#""fallback_timeout_ms": 500"#).as_bytes()).unwrap();
        let flat = flat.virtual_models[0].timeout_rules;
        assert_eq!(flat, TimeoutRules::default());
        assert_eq!(
            flat.timeout_ms(500, 3),
            500,
            "default 1: every target gets the same"
        );
        let huge = TimeoutRules {
            growth: 10,
            ..TimeoutRules::default()
        };
        assert_eq!(huge.timeout_ms(3_600_000, 40), u64::MAX, "saturates");
        for bad in ["0", "11", "1.5", "\"2\""] {
            let e = err(&vm_with(&format!(
                r#""fallback_timeout_ms": 500, "fallback_timeout_growth": {bad}"#
            )));
            assert!(
                e.starts_with("virtual_models[0].fallback_timeout_growth: "),
                "{e}"
            );
        }
        assert_eq!(
            err(&vm_with(r#""fallback_timeout_growth": 2"#)),
            "virtual_models[0].fallback_timeout_growth: has no effect without fallback_timeout_ms"
        );
    }

    #[test]
    fn fallback_timeout_at_last_is_wait_or_fail() {
        use crate::core::config::AtLast;
        let at_last = |fields: &str| {
            Config::parse(vm_with(fields).as_bytes())
                .unwrap()
                .virtual_models[0]
                .timeout_rules
                .at_last
        };
        assert_eq!(at_last(r#""fallback_timeout_ms": 500"#), AtLast::Wait);
        let fail = r#""fallback_timeout_ms": 500, "fallback_timeout_at_last": "fail""#;
        assert_eq!(at_last(fail), AtLast::Fail);
        let wait = r#""fallback_timeout_ms": 500, "fallback_timeout_at_last": "wait""#;
        assert_eq!(at_last(wait), AtLast::Wait);
        assert_eq!(
            err(&vm_with(
                r#""fallback_timeout_ms": 500, "fallback_timeout_at_last": "504""#
            )),
            "virtual_models[0].fallback_timeout_at_last: expected `wait` or `fail`, got `504`"
        );
        assert_eq!(
            err(&vm_with(r#""fallback_timeout_at_last": "fail""#)),
            "virtual_models[0].fallback_timeout_at_last: has no effect without fallback_timeout_ms"
        );
    }

    #[test]
    fn fallback_timeout_scope_is_the_whole_answer_unless_it_says_answer_start() {
        use crate::core::config::TimeoutScope;
        let scope = |fields: &str| {
            Config::parse(vm_with(fields).as_bytes())
                .unwrap()
                .virtual_models[0]
                .timeout_rules
                .scope
        };
        assert_eq!(
            scope(r#""fallback_timeout_ms": 500"#),
            TimeoutScope::WholeAnswer
        );
        let start = r#""fallback_timeout_ms": 500, "fallback_timeout_scope": "answer_start""#;
        assert_eq!(scope(start), TimeoutScope::AnswerStart);
        let whole = r#""fallback_timeout_ms": 500, "fallback_timeout_scope": "whole_answer""#;
        assert_eq!(scope(whole), TimeoutScope::WholeAnswer);
        assert_eq!(
            err(&vm_with(
                r#""fallback_timeout_ms": 500, "fallback_timeout_scope": "first_byte""#
            )),
            "virtual_models[0].fallback_timeout_scope: expected `whole_answer` or `answer_start`, got `first_byte`"
        );
        assert_eq!(
            err(&vm_with(r#""fallback_timeout_scope": "answer_start""#)),
            "virtual_models[0].fallback_timeout_scope: has no effect without fallback_timeout_ms"
        );
    }

    #[test]
    fn bad_retry_fallback_and_sla_fields_name_their_path() {
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "fallback_status_codes": ["45x"]}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].fallback_status_codes[0]: expected an HTTP status code such as \"429\", got \"45x\""
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "retry_config": {"attempts": 2, "backoff": 1}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].retry_config.backoff: unknown field; expected one of: attempts, delay, backoff_multiplier, on_connection_failure, on_status_codes"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "fallback_candidate": "no"}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].fallback_candidate: expected true or false, got a string"
        );
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "sla_cutoff": {"time_to_first_token_ms": 1}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].sla_cutoff: only applies to priority-based-routing"
        );
        assert_eq!(
            err(&priority(r#"{"target": "a", "priority": 0, "sla_cutoff": {}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].sla_cutoff.time_to_first_token_ms: set time_to_first_token_ms, time_per_output_token_ms or both"
        );
        let c = Config::parse(
            priority(
                r#"{"target": "a", "priority": 0, "sla_cutoff": {"time_per_output_token_ms": 40}}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let sla = c.virtual_models[0].targets[0].policy.sla.unwrap();
        assert_eq!(
            (sla.time_to_first_token_ms, sla.time_per_output_token_ms),
            (None, Some(40))
        );
        assert_eq!(
            err(&with_vm(
                r#"{"name": "vm", "model_types": ["chat"], "fallback_timeout_ms": 0, "routing_config": {"type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}}"#
            )),
            "virtual_models[0].fallback_timeout_ms: must be greater than 0"
        );
    }

    #[test]
    fn target_overrides_and_metadata_match_parse_and_are_checked() {
        let c = Config::parse(
            weighted(
                r#"{"target": "a", "weight": 100, "metadata_match": {"region": "us"},
                    "headers_override": {"set": {"X-Region": "us-east-1"}, "remove": ["X-Debug"]},
                    "override_params": {"temperature": 0.2, "stop": ["\n"]}}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let t = &c.virtual_models[0].targets[0];
        assert_eq!(
            t.metadata_match,
            vec![("region".to_string(), "us".to_string())]
        );
        assert_eq!(
            t.headers_override.set,
            vec![("x-region".to_string(), "us-east-1".to_string())]
        );
        assert_eq!(t.headers_override.remove, vec!["x-debug".to_string()]);
        assert_eq!(
            t.override_params,
            vec![
                ("stop".to_string(), r#"["\n"]"#.to_string()),
                ("temperature".to_string(), "0.2".to_string())
            ]
        );
        assert!(c.virtual_models[0].has_metadata_match);
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "override_params": {"model": "x"}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].override_params.model: is decided by Switchboard and the client; it cannot be overridden"
        );
        assert!(err(&weighted(r#"{"target": "a", "weight": 100, "headers_override": {"set": {"content-length": "1"}}}"#))
            .starts_with("virtual_models[0].routing_config.load_balance_targets[0].headers_override.set.content-length:"));
        assert_eq!(
            err(&weighted(r#"{"target": "a", "weight": 100, "metadata_match": {"region": 1}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].metadata_match.region: expected a string, got a number"
        );
    }

    #[test]
    fn conditional_targets_need_a_when_that_parses() {
        let cond = |targets: &str| {
            with_vm(&format!(
                r#"{{"name": "vm", "model_types": ["chat"],
                    "routing_config": {{"type": "conditional-routing", "load_balance_targets": [{targets}]}}}}"#
            ))
        };
        let c = Config::parse(
            cond(r#"{"target": "a", "when": "request.headers[\"x-tier\"] == \"free\""}"#)
                .as_bytes(),
        )
        .unwrap();
        assert!(matches!(
            c.virtual_models[0].routing,
            crate::core::config::Routing::Conditional(_)
        ));
        assert_eq!(
            err(&cond(r#"{"target": "a", "when": "request.headers[\"x-tier\"] = \"free\""}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].when: column 27: unexpected `=`; did you mean `==`?"
        );
        assert_eq!(
            err(&cond(r#"{"target": "a"}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].when: is required"
        );
        assert_eq!(
            err(&cond(r#"{"target": "a", "when": "model == \"x\"", "weight": 5}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].weight: does not apply to `conditional-routing`"
        );
    }

    /// A weighted virtual model with `sticky` as its `sticky_routing`.
    fn sticky_vm(sticky: &str) -> String {
        with_vm(&format!(
            r#"{{"name": "vm", "model_types": ["chat"], "routing_config": {{"type": "weight-based-routing",
                "sticky_routing": {sticky},
                "load_balance_targets": [{{"target": "a", "weight": 100}}]}}}}"#
        ))
    }

    #[test]
    fn body_and_agent_session_sources_and_the_idle_ttl_parse_with_named_errors() {
        let c = Config::parse(
            sticky_vm(
                r#"{"ttl_seconds": 3600, "idle_ttl_seconds": 300, "session_identifiers": [
                {"source": "body", "key": "metadata.user_id"}, {"source": "agent_session"}]}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let sticky = c.virtual_models[0].sticky.as_ref().unwrap();
        assert_eq!(sticky.idle_ms, Some(300_000));
        assert_eq!(sticky.session_identifiers[0].source, StickySource::Body);
        assert_eq!(sticky.session_identifiers[0].key, "metadata.user_id");
        assert_eq!(
            sticky.session_identifiers[1].source,
            StickySource::AgentSession
        );
        let path = "virtual_models[0].routing_config.sticky_routing";
        for (ids, field, message) in [
            (
                r#"{"source": "body", "key": "a.b.c"}"#,
                "session_identifiers[0].key",
                "`a.b.c` is 3 levels deep; at most two (`parent.child`)",
            ),
            (
                r#"{"source": "body", "key": ""}"#,
                "session_identifiers[0].key",
                "must not be empty",
            ),
            (
                r#"{"source": "body", "key": "metadata."}"#,
                "session_identifiers[0].key",
                "`metadata.` must name a body member: `field` or `parent.child`, no empty part",
            ),
            (
                r#"{"source": "body"}"#,
                "session_identifiers[0].key",
                "is required",
            ),
        ] {
            let json = sticky_vm(&format!(
                r#"{{"ttl_seconds": 60, "session_identifiers": [{ids}]}}"#
            ));
            assert_eq!(err(&json), format!("{path}.{field}: {message}"));
        }
        let idle = |n: &str| {
            err(&sticky_vm(&format!(
                r#"{{"ttl_seconds": 60, "idle_ttl_seconds": {n}, "session_identifiers": [{{"source": "agent_session"}}]}}"#
            )))
        };
        assert_eq!(
            idle("0"),
            format!("{path}.idle_ttl_seconds: must be at least 1")
        );
        assert_eq!(
            idle("61"),
            format!("{path}.idle_ttl_seconds: expected an integer from 0 to 60, got 61")
        );
        let hash = |key: &str| {
            with_vm(&format!(
                r#"{{"name": "vm", "model_types": ["chat"], "routing_config": {{"type": "hash-based-routing",
                    "hash_key": {key}, "load_balance_targets": [{{"target": "a"}}]}}}}"#
            ))
        };
        assert!(
            Config::parse(hash(r#"{"source": "body", "key": "prompt_cache_key"}"#).as_bytes())
                .is_ok()
        );
        assert!(Config::parse(hash(r#"{"source": "agent_session"}"#).as_bytes()).is_ok());
        assert_eq!(
            err(&hash(r#"{"source": "body", "key": "a.b.c"}"#)),
            "virtual_models[0].routing_config.hash_key.key: `a.b.c` is 3 levels deep; at most two (`parent.child`)"
        );
    }

    #[test]
    fn sticky_routing_parses_for_weighted_only() {
        let json = with_vm(
            r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "weight-based-routing",
                "sticky_routing": {"ttl_seconds": 3600, "session_identifiers": [
                    {"key": "X-User-Id", "source": "headers"}, {"key": "tenant", "source": "metadata"}]},
                "load_balance_targets": [{"target": "a", "weight": 100}]}}"#,
        );
        let c = Config::parse(json.as_bytes()).unwrap();
        let sticky = c.virtual_models[0].sticky.as_ref().unwrap();
        assert_eq!(sticky.ttl_ms, 3_600_000);
        assert_eq!(sticky.session_identifiers[0].key, "x-user-id");
        assert_eq!(
            sticky.session_identifiers[1].source,
            crate::core::config::StickySource::Metadata
        );
        assert_eq!(
            err(&json.replace(r#""source": "metadata""#, r#""source": "cookie""#)),
            "virtual_models[0].routing_config.sticky_routing.session_identifiers[1].source: expected `headers`, `metadata`, `jwt`, `body` or `agent_session`, got `cookie`"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "round-robin-routing",
                "sticky_routing": {"ttl_seconds": 1, "session_identifiers": [{"key": "a", "source": "headers"}]},
                "load_balance_targets": [{"target": "a"}]}}"#)),
            "virtual_models[0].routing_config.sticky_routing: only applies to weight-based-routing and complexity-based-routing (TrueFoundry virtual models)"
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
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "hash-based-routing", "load_balance_targets": [{"target": "a"}]}}"#)),
            "virtual_models[0].routing_config.hash_key: is required: {\"source\": \"user\" | \"conversation\" | \"headers\" | \"metadata\", \"key\": ...}"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "complexity-based-routing", "complexity": {"classifier_model": "zz"}, "load_balance_targets": [{"target": "a", "tier": "simple"}]}}"#)),
            "virtual_models[0].routing_config.complexity.classifier_model: `zz` is not a catalog model in `models`"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat", "embedding"], "routing_config": {"type": "complexity-based-routing", "load_balance_targets": [{"target": "a", "tier": "simple"}]}}"#)),
            "virtual_models[0].model_types: complexity-based-routing serves only chat, completion and responses"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "complexity-based-routing", "load_balance_targets": [{"target": "a", "tier": "hard"}]}}"#)),
            "virtual_models[0].routing_config.load_balance_targets[0].tier: expected `simple`, `medium` or `complex`, got `hard`"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "complexity-based-routing", "sticky_routing": {"ttl_seconds": 60, "session_identifiers": [{"key": "a", "source": "headers"}]}, "load_balance_targets": [{"target": "a", "tier": "simple"}]}}"#)),
            "virtual_models[0].routing_config.sticky_routing.ttl_seconds: must be from 300 to 3600 here"
        );
        assert_eq!(
            err(&with_vm(r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "random"}}"#)),
            "virtual_models[0].routing_config.type: unknown routing type `random`; supported: weight-based-routing, priority-based-routing, latency-based-routing, complexity-based-routing, conditional-routing, round-robin-routing, hash-based-routing"
        );
        assert_eq!(
            err(&with_vm(
                r#"{"name": "vm", "model_types": ["chat"], "routing_config": {"type": "weight-based-routing", "sticky_routing": {}, "load_balance_targets": [{"target": "a", "weight": 100}]}}"#
            )),
            "virtual_models[0].routing_config.sticky_routing.ttl_seconds: is required"
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
