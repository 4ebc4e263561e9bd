//! Reads the plugin config JSON into [`Config`], validating every field with its path.

use super::fields::{ConfigError, Fields};
use super::routing_config::compile_virtual_model;
use super::{
    Config, HeaderNames, Model, ModelId, NameEntry, Provider, Visibility,
    DEFAULT_MAX_REQUEST_BODY_BYTES,
};
use hashbrown::HashMap;
use serde_json::Value;

/// Seed fields of the config root that a later version implements.
const ROOT_NOT_YET: &[&str] = &["default_metadata"];

/// Upper bound for `max_request_body_bytes`: Envoy buffers the whole body in memory.
const MAX_BODY_LIMIT: u64 = 1 << 30;

pub(super) fn compile(json: &[u8]) -> Result<Config, ConfigError> {
    let root: Value = serde_json::from_slice(json)
        .map_err(|e| ConfigError::new("", format!("the plugin config is not valid JSON: {e}")))?;
    let mut root = Fields::new(String::new(), &root)?;

    let header_names = match root.opt_object("header_names")? {
        Some(obj) => compile_header_names(obj)?,
        None => HeaderNames::default(),
    };

    let mut names: HashMap<String, NameEntry> = HashMap::new();
    let mut models = Vec::new();
    let items = root
        .opt_array("models")?
        .ok_or_else(|| root.error("models", "is required: list the catalog models"))?;
    if items.is_empty() {
        return Err(root.error("models", "must list at least one model"));
    }
    for (path, value) in items {
        let model = compile_model(Fields::new(path.clone(), value)?, &header_names)?;
        let id = ModelId(models.len());
        if names
            .insert(model.name.clone(), NameEntry::Catalog(id))
            .is_some()
        {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("`{}` is already defined by another model", model.name),
            ));
        }
        models.push(model);
    }

    let mut virtual_models = Vec::new();
    let vm_items = root.opt_array("virtual_models")?.unwrap_or_default();
    // Known up front so a target naming a later virtual model gets the right message.
    let virtual_names: Vec<&str> = vm_items
        .iter()
        .filter_map(|(_, v)| v.get("name").and_then(Value::as_str))
        .collect();
    for (path, value) in vm_items.iter() {
        let f = Fields::new(path.clone(), value)?;
        let vm = compile_virtual_model(f, &models, &names, &virtual_names)?;
        if names
            .insert(vm.name.clone(), NameEntry::Virtual(virtual_models.len()))
            .is_some()
        {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!(
                    "`{}` is already the name of a model or virtual model",
                    vm.name
                ),
            ));
        }
        virtual_models.push(vm);
    }

    let max_request_body_bytes = match root.opt_u64("max_request_body_bytes", MAX_BODY_LIMIT)? {
        Some(0) => return Err(root.error("max_request_body_bytes", "must be greater than 0")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => DEFAULT_MAX_REQUEST_BODY_BYTES,
    };

    root.finish(ROOT_NOT_YET)?;
    Ok(Config {
        models,
        virtual_models,
        max_request_body_bytes,
        header_names,
        names,
    })
}

fn compile_model(mut f: Fields<'_>, header_names: &HeaderNames) -> Result<Model, ConfigError> {
    let name = f.str("name")?.to_string();
    let cluster = f.str("cluster")?;
    if !is_header_value(cluster) {
        return Err(f.error("cluster", "must not contain control characters"));
    }
    let upstream_model = f.str("model")?.to_string();
    let provider = match f.opt_str("provider")? {
        None => Provider::OpenAi,
        Some(p) => Provider::ALL
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
            })?,
    };
    let visibility = match f.opt_str("visibility")? {
        None | Some("public") => Visibility::Public,
        Some("internal") => Visibility::Internal,
        Some(other) => {
            return Err(f.error(
                "visibility",
                format!("expected `public` or `internal`, got `{other}`"),
            ))
        }
    };
    let mut headers = Vec::new();
    for entry in f.opt_string_map("headers")? {
        let name = checked_header_name(entry.key, header_names)
            .map_err(|m| ConfigError::new(entry.path.clone(), m))?;
        if !is_header_value(entry.value) {
            return Err(ConfigError::new(
                entry.path,
                "value must not contain control characters",
            ));
        }
        headers.push((name, entry.value.to_string()));
    }
    // Serialising a string cannot fail; the fallback is only to stay panic-free.
    let upstream_model_json =
        serde_json::to_string(&upstream_model).unwrap_or_else(|_| String::from("\"\""));
    f.finish(&["health", "params"])?;
    Ok(Model {
        name,
        cluster: cluster.to_string(),
        upstream_model,
        upstream_model_json,
        provider,
        visibility,
        headers,
    })
}

fn compile_header_names(mut f: Fields<'_>) -> Result<HeaderNames, ConfigError> {
    let mut names = HeaderNames::default();
    for (key, slot) in [
        ("cluster", &mut names.cluster),
        ("resolved_model", &mut names.resolved_model),
    ] {
        if let Some(value) = f.opt_str(key)? {
            if !is_token(value) {
                return Err(f.error(key, "must be a valid lower-case HTTP header name"));
            }
            *slot = value.to_ascii_lowercase();
        }
    }
    f.finish(&["metadata"])?;
    Ok(names)
}

/// Lower-cases a configured header name and refuses names the filter must own.
pub(super) fn checked_header_name(
    name: &str,
    header_names: &HeaderNames,
) -> Result<String, String> {
    if !is_token(name) {
        return Err(format!("`{name}` is not a valid HTTP header name"));
    }
    let lower = name.to_ascii_lowercase();
    if lower == header_names.cluster
        || matches!(
            lower.as_str(),
            "content-length" | "transfer-encoding" | "host" | "connection"
        )
    {
        return Err(format!(
            "`{lower}` is managed by Envoy or Switchboard and cannot be set here"
        ));
    }
    Ok(lower)
}

/// RFC 9110 token characters: what a header name may hold.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value must not smuggle a line break or other control character.
fn is_header_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{Named, Routing};
    use crate::core::endpoint::ModelType;

    pub(crate) const SAMPLE: &str = r#"{
      "models": [
        {"name": "openai-main/gpt-4o", "cluster": "openai_main", "model": "gpt-4o",
         "provider": "openai", "visibility": "internal",
         "headers": {"Authorization": "Bearer sk-1"}},
        {"name": "azure-east/gpt-4o", "cluster": "azure_east", "model": "gpt-4o-2024",
         "provider": "azure", "visibility": "internal"},
        {"name": "openai-main/gpt-4o-mini", "cluster": "openai_main", "model": "gpt-4o-mini"}
      ],
      "virtual_models": [
        {"name": "my-group/production-chat", "model_types": ["chat"],
         "routing_config": {
           "type": "weight-based-routing",
           "load_balance_targets": [
             {"target": "openai-main/gpt-4o", "weight": 80},
             {"target": "azure-east/gpt-4o", "weight": 20}]}}
      ]
    }"#;

    fn err(json: &str) -> String {
        Config::parse(json.as_bytes()).unwrap_err().to_string()
    }

    /// SAMPLE with one substring replaced, to make one field wrong at a time.
    fn sample_with(from: &str, to: &str) -> String {
        assert!(SAMPLE.contains(from), "{from}");
        SAMPLE.replacen(from, to, 1)
    }

    #[test]
    fn sample_config_compiles_into_lookup_tables() {
        let c = Config::parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(c.models.len(), 3);
        assert_eq!(c.max_request_body_bytes, DEFAULT_MAX_REQUEST_BODY_BYTES);
        let Some(Named::Catalog(id, m)) = c.lookup("openai-main/gpt-4o") else {
            panic!("catalog model not found")
        };
        assert_eq!(id, ModelId(0));
        assert_eq!(m.visibility, Visibility::Internal);
        assert_eq!(
            m.headers,
            vec![("authorization".to_string(), "Bearer sk-1".to_string())]
        );
        assert_eq!(m.upstream_model_json, "\"gpt-4o\"");
        let Some(Named::Catalog(_, mini)) = c.lookup("openai-main/gpt-4o-mini") else {
            panic!("public model not found")
        };
        assert_eq!(
            mini.visibility,
            Visibility::Public,
            "visibility defaults to public"
        );
        assert_eq!(
            mini.provider,
            Provider::OpenAi,
            "provider defaults to openai"
        );
        let Some(Named::Virtual(vm)) = c.lookup("my-group/production-chat") else {
            panic!("virtual model not found")
        };
        assert!(vm.model_types.contains(ModelType::Chat));
        let Routing::Weighted(targets) = &vm.routing else {
            panic!("expected weighted routing")
        };
        assert_eq!(targets.len(), 2);
        assert_eq!((targets[0].model, targets[0].weight), (ModelId(0), 80));
        assert_eq!((targets[1].model, targets[1].weight), (ModelId(1), 20));
        assert!(c.lookup("gpt-4o").is_none());
    }

    #[test]
    fn rejects_invalid_json_and_non_object_root() {
        assert!(err("{").starts_with("the plugin config is not valid JSON"));
        assert_eq!(err("[]"), "expected an object, got an array");
        assert_eq!(err("{}"), "models: is required: list the catalog models");
        assert_eq!(
            err(r#"{"models": []}"#),
            "models: must list at least one model"
        );
    }

    #[test]
    fn model_field_errors_name_the_path() {
        assert_eq!(
            err(&sample_with(
                r#""cluster": "azure_east""#,
                r#""cluster": 5"#
            )),
            "models[1].cluster: expected a string, got a number"
        );
        assert_eq!(
            err(&sample_with(r#""model": "gpt-4o-2024","#, "")),
            "models[1].model: is required"
        );
        assert_eq!(
            err(&sample_with(
                r#""visibility": "internal"}"#,
                r#""visibility": "secret"}"#
            )),
            "models[1].visibility: expected `public` or `internal`, got `secret`"
        );
        assert!(err(&sample_with(
            r#""provider": "azure""#,
            r#""provider": "azur""#
        ))
        .starts_with("models[1].provider: unknown provider `azur`"));
        assert_eq!(
            err(&sample_with(
                r#""Authorization": "Bearer sk-1""#,
                r#""Authorization": "a\nb""#
            )),
            "models[0].headers.Authorization: value must not contain control characters"
        );
        assert!(
            err(&sample_with(r#""Authorization""#, r#""content-length""#))
                .starts_with("models[0].headers.content-length: `content-length` is managed")
        );
        assert!(err(&sample_with(
            r#""Authorization""#,
            r#""x-switchboard-cluster""#
        ))
        .starts_with("models[0].headers.x-switchboard-cluster:"));
        assert_eq!(
            err(&sample_with(
                r#""name": "azure-east/gpt-4o""#,
                r#""name": "openai-main/gpt-4o""#
            )),
            "models[1].name: `openai-main/gpt-4o` is already defined by another model"
        );
    }

    #[test]
    fn unknown_and_not_yet_supported_fields_are_rejected() {
        assert!(err(&sample_with(
            r#""provider": "azure","#,
            r#""provder": "azure","#
        ))
        .starts_with("models[1].provder: unknown field; expected one of:"));
        assert_eq!(
            err(&sample_with(r#""provider": "azure","#, r#""health": {},"#)),
            "models[1].health: is not supported yet by this version of Switchboard; remove it"
        );
        assert_eq!(
            err(&sample_with(
                r#""models": ["#,
                r#""default_metadata": {}, "models": ["#
            )),
            "default_metadata: is not supported yet by this version of Switchboard; remove it"
        );
    }

    #[test]
    fn body_limit_and_header_names_are_configurable() {
        let json = sample_with(
            r#""models": ["#,
            r#""max_request_body_bytes": 1000, "header_names": {"resolved_model": "X-Model"}, "models": ["#,
        );
        let c = Config::parse(json.as_bytes()).unwrap();
        assert_eq!(c.max_request_body_bytes, 1000);
        assert_eq!(c.header_names.resolved_model, "x-model");
        assert_eq!(c.header_names.cluster, "x-switchboard-cluster");
        assert_eq!(
            err(&sample_with(
                r#""models": ["#,
                r#""max_request_body_bytes": 0, "models": ["#
            )),
            "max_request_body_bytes: must be greater than 0"
        );
        assert_eq!(
            err(&sample_with(
                r#""models": ["#,
                r#""header_names": {"cluster": "a b"}, "models": ["#
            )),
            "header_names.cluster: must be a valid lower-case HTTP header name"
        );
    }
}
