//! Reads the plugin config JSON into [`Config`], validating every field with its path.

use super::catalog::{Model, ModelId, Provider, Visibility};
use super::fields::{ConfigError, Fields};
use super::header_rules::{compile_header_names, is_header_value};
use super::models::compile_model;
use super::root::{name_key, Config, NameEntry, DEFAULT_MAX_REQUEST_BODY_BYTES};
use super::routing_config::compile_virtual_model;
use super::settings::HeaderNames;
use super::strategy::Routing;
use super::targets::Catalog;
use super::trace_settings::TraceSettings;
use super::upstream::{compile_env_keys, expand_env, Env};
use super::virtual_model::VirtualModel;
use super::{callers, metadata, responses};
use crate::core::endpoint::ModelType;
use crate::core::health::policy::FailureWindow;
use crate::core::health::record::MAX_FAILURES;
use crate::core::seal::Keys;
use hashbrown::HashMap;
use serde_json::Value;

/// Fields of the config root, from the vendor documents (docs/sources.md), that a later
/// version implements.
const ROOT_NOT_YET: &[&str] = &[];

/// Upper bound for `max_request_body_bytes`: the body is copied into the 32-bit Wasm memory
/// (once read, once rewritten), which must not run out.
const MAX_BODY_LIMIT: u64 = 128 * 1024 * 1024;

impl Config {
    /// Parses, validates and compiles the plugin config JSON, with no environment: a
    /// `${env:NAME}` reference is an error.
    pub fn parse(json: &[u8]) -> Result<Config, ConfigError> {
        compile(json, &|_| None)
    }

    /// [`Config::parse`], resolving `${env:NAME}` in header values with `env` (the Wasm VM's
    /// environment in the filter, the process's in the command line).
    pub fn parse_with_env(
        json: &[u8],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        compile(json, env)
    }
}

/// Reads the config root in its fields' order (so the first of several errors is always the
/// same one), then derives what the request path looks up: the model list, the warnings and
/// the metric table.
pub(super) fn compile(
    json: &[u8],
    read_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let root: Value = serde_json::from_slice(json)
        .map_err(|e| ConfigError::new("", format!("the plugin config is not valid JSON: {e}")))?;
    let mut root = Fields::new(String::new(), &root)?;
    // First: every `${env:NAME}` below is checked against it.
    let env = &Env::new(read_env, compile_env_keys(&mut root)?);
    let header_names = match root.opt_object("header_names")? {
        Some(obj) => compile_header_names(obj)?,
        None => HeaderNames::default(),
    };
    let fold_case = compile_name_case(&mut root)?;
    let (models, mut names) = compile_catalog(&mut root, &header_names, fold_case, env)?;
    let virtual_models = compile_virtual_models(
        &mut root,
        &models,
        &mut names,
        &header_names,
        fold_case,
        env,
    )?;
    // Read in the order the fields are written here; then the values derived from them.
    let mut config = Config {
        max_request_body_bytes: compile_body_limit(&mut root)?,
        failure_window: compile_failure_window(&mut root)?,
        health_view_ms: root.opt_u64("health_view_ms", 10_000)?.unwrap_or(100),
        attempt_timeout_ms: compile_attempt_timeout(&mut root)?,
        default_metadata: metadata::compile_default_metadata(&mut root)?,
        gateway_metadata: metadata::compile_gateway_location(&mut root, env)?,
        response_keys: compile_response_keys(&mut root, env)?,
        bind_ids_to_caller: callers::compile_id_binding(&mut root)?,
        caller_identity: callers::compile_caller_identity(&mut root)?,
        account_headers: callers::compile_account_headers(&mut root)?,
        trace: compile_trace(&mut root, env)?,
        filter_state: root.opt_bool("filter_state")?.unwrap_or(false),
        usage_metrics: root.opt_bool("usage_metrics")?.unwrap_or(false),
        request_histograms: root.opt_bool("request_histograms")?.unwrap_or(false),
        stored_responses_virtual_model: compile_stored_responses_vm(&mut root, &names)?,
        non_native_responses: responses::compile_non_native(&mut root)?,
        models_list_json: models_list(&models, &virtual_models),
        has_classifier: virtual_models.iter().any(asks_a_classifier),
        warnings: Vec::new(),
        header_names,
        fold_case,
        models,
        virtual_models,
        names,
        env_unlisted: env.unlisted(),
    };
    root.finish(ROOT_NOT_YET)?;
    config.warnings = warnings(&config);
    Ok(config)
}

/// `model_name_case`: `sensitive` (default) or `insensitive` (true: names fold ASCII case).
fn compile_name_case(root: &mut Fields<'_>) -> Result<bool, ConfigError> {
    match root.opt_str("model_name_case")? {
        None | Some("sensitive") => Ok(false),
        Some("insensitive") => Ok(true),
        Some(other) => Err(root.error(
            "model_name_case",
            format!("expected `sensitive` or `insensitive`, got `{other}`"),
        )),
    }
}

/// `models`: the catalog, and the name table holding each model's name.
fn compile_catalog(
    root: &mut Fields<'_>,
    header_names: &HeaderNames,
    fold_case: bool,
    env: &Env<'_>,
) -> Result<(Vec<Model>, HashMap<String, NameEntry>), ConfigError> {
    let mut names: HashMap<String, NameEntry> = HashMap::new();
    let mut models = Vec::new();
    let items = root
        .opt_array("models")?
        .ok_or_else(|| root.error("models", "is required: list the catalog models"))?;
    if items.is_empty() {
        return Err(root.error("models", "must list at least one model"));
    }
    for (path, value) in items {
        let model = compile_model(Fields::new(path.clone(), value)?, header_names, env)?;
        let id = ModelId(models.len());
        if names
            .insert(
                name_key(&model.name, fold_case).into_owned(),
                NameEntry::Catalog(id),
            )
            .is_some()
        {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("`{}` is already defined by another model", model.name),
            ));
        }
        models.push(model);
    }
    Ok((models, names))
}

/// `virtual_models`, each name added to the name table.
fn compile_virtual_models(
    root: &mut Fields<'_>,
    models: &[Model],
    names: &mut HashMap<String, NameEntry>,
    header_names: &HeaderNames,
    fold_case: bool,
    env: &Env<'_>,
) -> Result<Vec<VirtualModel>, ConfigError> {
    let mut virtual_models = Vec::new();
    let vm_items = root.opt_array("virtual_models")?.unwrap_or_default();
    // Known up front so a target naming a later virtual model gets the right message.
    let virtual_names: Vec<&str> = vm_items
        .iter()
        .filter_map(|(_, v)| v.get("name").and_then(Value::as_str))
        .collect();
    for (path, value) in vm_items.iter() {
        let f = Fields::new(path.clone(), value)?;
        let catalog = Catalog {
            models,
            names,
            virtual_names: &virtual_names,
            header_names,
            fold_case,
            env,
        };
        let vm = compile_virtual_model(f, &catalog)?;
        if names
            .insert(
                name_key(&vm.name, fold_case).into_owned(),
                NameEntry::Virtual(virtual_models.len()),
            )
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
    Ok(virtual_models)
}

/// `max_request_body_bytes`: from 1 byte to [`MAX_BODY_LIMIT`].
fn compile_body_limit(root: &mut Fields<'_>) -> Result<usize, ConfigError> {
    match root.opt_u64("max_request_body_bytes", MAX_BODY_LIMIT)? {
        Some(0) => Err(root.error("max_request_body_bytes", "must be greater than 0")),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        None => Ok(DEFAULT_MAX_REQUEST_BODY_BYTES),
    }
}

/// `attempt_timeout_ms`: from 1 ms to an hour (default five minutes).
fn compile_attempt_timeout(root: &mut Fields<'_>) -> Result<u64, ConfigError> {
    match root.opt_u64("attempt_timeout_ms", 3_600_000)? {
        Some(0) => Err(root.error("attempt_timeout_ms", "must be greater than 0")),
        Some(n) => Ok(n),
        None => Ok(300_000),
    }
}

/// `stored_responses_virtual_model`: the name of a virtual model.
fn compile_stored_responses_vm(
    root: &mut Fields<'_>,
    names: &HashMap<String, NameEntry>,
) -> Result<Option<usize>, ConfigError> {
    let Some(name) = root.opt_str("stored_responses_virtual_model")? else {
        return Ok(None);
    };
    match names.get(name) {
        Some(NameEntry::Virtual(i)) => Ok(Some(*i)),
        _ => Err(root.error(
            "stored_responses_virtual_model",
            format!("`{name}` is not a virtual model"),
        )),
    }
}

/// Whether a virtual model asks a classifier model (so requests may need a second look).
fn asks_a_classifier(vm: &VirtualModel) -> bool {
    matches!(
        vm.routing,
        Routing::Complexity {
            classifier: Some(_),
            ..
        }
    )
}

/// What the operator should know about a config that loads: the built-in response id key,
/// Responses targets that do not serve the API natively.
fn warnings(config: &Config) -> Vec<String> {
    built_in_key_warning(&config.response_keys, &config.virtual_models)
        .into_iter()
        .chain(responses::non_native_warnings(
            &config.models,
            &config.virtual_models,
            config.non_native_responses,
        ))
        .collect()
}

/// Shortest `response_id_keys` entry: a MAC key must not be guessable.
const MIN_RESPONSE_KEY_BYTES: usize = 16;

/// `response_id_keys`: secrets for the response ids Switchboard mints (the first signs, all
/// verify); each may be `${env:NAME}`. None: the built-in key.
fn compile_response_keys(root: &mut Fields<'_>, env: &Env<'_>) -> Result<Keys, ConfigError> {
    let mut secrets = Vec::new();
    for (path, value) in root.opt_array("response_id_keys")?.unwrap_or_default() {
        let Some(text) = value.as_str() else {
            return Err(ConfigError::new(path, "expected a string"));
        };
        let secret = expand_env(text, &path, env)?;
        if secret.len() < MIN_RESPONSE_KEY_BYTES {
            return Err(ConfigError::new(
                path,
                format!("a key must be at least {MIN_RESPONSE_KEY_BYTES} bytes long"),
            ));
        }
        secrets.push(secret);
    }
    Ok(Keys::new(&secrets))
}

/// The warning for a config that mints response ids with the built-in key: that key is in
/// Switchboard's public source, so anyone can read the target out of an id and forge ids for
/// `GET`/`DELETE /v1/responses/{id}`, sent with the gateway's credential.
fn built_in_key_warning(keys: &Keys, virtual_models: &[VirtualModel]) -> Option<String> {
    let responses = virtual_models
        .iter()
        .find(|vm| vm.model_types.contains(ModelType::Responses))?;
    keys.built_in.then(|| {
        format!(
            "response_id_keys is not set: the response ids of `{}` are minted with Switchboard's \
             public built-in key, so anyone can read their targets and forge ids; set \
             response_id_keys, e.g. [\"${{env:SWITCHBOARD_RESPONSE_ID_KEY}}\"]",
            responses.name
        )
    })
}

/// Shortest `trace.token`: the trace names internal targets, so the token must not be
/// guessable.
const MIN_TRACE_TOKEN_BYTES: usize = 16;

/// `trace`: when answers carry the `x-switchboard-trace` header. `always` for every request;
/// else `token` (may be `${env:NAME}`) for requests that present it in the trace-token header.
fn compile_trace(root: &mut Fields<'_>, env: &Env<'_>) -> Result<TraceSettings, ConfigError> {
    let Some(mut f) = root.opt_object("trace")? else {
        return Ok(TraceSettings::default());
    };
    let always = f.opt_bool("always")?.unwrap_or(false);
    let token = match f.opt_str("token")? {
        None => None,
        Some(text) => {
            let token = expand_env(text, &f.field_path("token"), env)?;
            if token.len() < MIN_TRACE_TOKEN_BYTES {
                return Err(f.error(
                    "token",
                    format!("must be at least {MIN_TRACE_TOKEN_BYTES} bytes long"),
                ));
            }
            if !is_header_value(&token) {
                return Err(f.error("token", "must not contain control characters"));
            }
            Some(token)
        }
    };
    f.finish(&[])?;
    Ok(TraceSettings::new(always, token.as_deref()))
}

/// `GET /v1/models` in OpenAI's list shape: what a client may call by name.
fn models_list(models: &[Model], virtual_models: &[VirtualModel]) -> String {
    let provider_name = |p: Provider| {
        Provider::ALL
            .iter()
            .find(|(v, _)| *v == p)
            .map_or("", |(_, n)| *n)
    };
    let public = models
        .iter()
        .filter(|m| m.visibility == Visibility::Public)
        .map(|m| (m.name.as_str(), provider_name(m.provider)));
    let virtuals = virtual_models
        .iter()
        .map(|vm| (vm.name.as_str(), "switchboard"));
    let data: Vec<serde_json::Value> = public
        .chain(virtuals)
        .map(|(id, owner)| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
        .collect();
    serde_json::json!({"object": "list", "data": data}).to_string()
}

/// `failure_window`: how many failures in how long make a target unhealthy.
fn compile_failure_window(root: &mut Fields<'_>) -> Result<FailureWindow, ConfigError> {
    let d = FailureWindow::default();
    let Some(mut f) = root.opt_object("failure_window")? else {
        return Ok(d);
    };
    // Only the most recent MAX_FAILURES failure times are kept per target.
    let failures = f
        .opt_u64("failures", MAX_FAILURES as u64)?
        .map_or(d.failures, |n| n as u32);
    let window_ms = f
        .opt_u64("window_seconds", 86_400)?
        .map_or(d.window_ms, |s| s * 1000);
    f.finish(&[])?;
    Ok(FailureWindow {
        failures,
        window_ms,
    })
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
    fn trace_settings_and_filter_state_are_validated_with_their_field_paths() {
        let with = |extra: &str| {
            sample_with(
                r#""virtual_models": ["#,
                &format!(r#"{extra}, "virtual_models": ["#),
            )
        };
        let c = Config::parse(SAMPLE.as_bytes()).unwrap();
        assert!(!c.trace.always && !c.trace.has_token() && !c.filter_state);
        assert_eq!(c.header_names.trace, "x-switchboard-trace");
        assert_eq!(c.header_names.trace_token, "x-switchboard-trace-token");
        let c =
            Config::parse(with(r#""trace": {"always": true}, "filter_state": true"#).as_bytes())
                .unwrap();
        assert!(c.trace.always && c.filter_state && !c.usage_metrics && !c.request_histograms);
        let c = Config::parse(with(r#""usage_metrics": true"#).as_bytes()).unwrap();
        assert!(c.usage_metrics && !c.request_histograms);
        let c = Config::parse(with(r#""request_histograms": true"#).as_bytes()).unwrap();
        assert!(c.request_histograms && !c.usage_metrics);
        let env = |name: &str| (name == "TRACE").then(|| "0123456789abcdef-trace".to_string());
        let c = Config::parse_with_env(
            with(r#""trace": {"token": "${env:TRACE}"}"#).as_bytes(),
            &env,
        )
        .unwrap();
        assert!(c.trace.wanted(Some(b"0123456789abcdef-trace")));
        assert!(!c.trace.wanted(Some(b"${env:TRACE}")));
        assert_eq!(
            err(&with(r#""trace": {"token": "short"}"#)),
            "trace.token: must be at least 16 bytes long"
        );
        assert!(err(&with(r#""trace": {"token": "${env:NOPE}"}"#))
            .starts_with("trace.token: environment variable `NOPE` is not set"));
        assert_eq!(
            err(&with(r#""trace": {"always": "yes"}"#)),
            "trace.always: expected true or false, got a string"
        );
        assert!(err(&with(r#""trace": {"alway": true}"#)).starts_with("trace.alway: unknown field"));
        assert_eq!(
            err(&with(r#""filter_state": 1"#)),
            "filter_state: expected true or false, got a number"
        );
        assert_eq!(
            err(&with(
                r#""header_names": {"trace_token": "x-switchboard-metadata"}"#
            )),
            "header_names.trace_token: must differ from `metadata`"
        );
        let c = Config::parse(with(r#""header_names": {"trace": "X-Route-Trace"}"#).as_bytes())
            .unwrap();
        assert_eq!(c.header_names.trace, "x-route-trace");
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
            panic!("model not found")
        };
        assert_eq!(
            mini.visibility,
            Visibility::Internal,
            "visibility defaults to internal"
        );
        assert_eq!(
            mini.provider,
            Provider::OpenAi,
            "provider defaults to openai"
        );
        let Some(Named::Virtual(_, vm)) = c.lookup("my-group/production-chat") else {
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
    fn models_list_shows_public_and_virtual_models_only() {
        let c = Config::parse(
            SAMPLE
                .replace(
                    r#""model": "gpt-4o-mini""#,
                    r#""model": "gpt-4o-mini", "visibility": "public""#,
                )
                .as_bytes(),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&c.models_list_json).unwrap();
        assert_eq!(v["object"], "list");
        let ids: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["openai-main/gpt-4o-mini", "my-group/production-chat"]);
        assert_eq!(v["data"][1]["owned_by"], "switchboard");
        assert_eq!(v["data"][0]["object"], "model");
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
        assert!(err(&sample_with(
            r#""provider": "azure""#,
            r#""provider": "azure", "apis": ["messages", "chat"]"#
        ))
        .starts_with("models[1].apis[1]: expected one of: chat_completions, completions,"));
        assert_eq!(
            err(&sample_with(
                r#""provider": "azure""#,
                r#""provider": "azure", "apis": []"#
            )),
            "models[1].apis: must list at least one API"
        );
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
            err(&sample_with(r#""provider": "azure","#, r#""params": {},"#)),
            "models[1].params: is not supported yet by this version of Switchboard; remove it"
        );
        assert_eq!(
            err(&sample_with(
                r#""models": ["#,
                r#""default_metadata": {"a": 1}, "models": ["#
            )),
            "default_metadata.a: expected a string, got a number"
        );
    }

    #[test]
    fn model_health_and_failure_window_parse_with_paths() {
        let json = sample_with(
            r#""provider": "azure","#,
            r#""provider": "azure", "health": {"unhealthy_status_codes": [500, "429"],
                "eviction": {"duration": "1m30s", "consecutive_failures": 2,
                             "health_threshold": 0.5, "restore_health": 0.7}},"#,
        );
        let json = json.replacen(
            r#""models": ["#,
            r#""failure_window": {"failures": 3, "window_seconds": 60}, "models": ["#,
            1,
        );
        let c = Config::parse(json.as_bytes()).unwrap();
        let h = c.models[1].health.clone();
        assert!(h.is_failure(500) && h.is_failure(429) && !h.is_failure(503));
        let e = h.eviction.unwrap();
        assert_eq!(
            (e.duration_ms, e.consecutive_failures),
            (Some(90_000), Some(2))
        );
        assert_eq!(
            (e.health_threshold, e.restore_health),
            (Some(0.5), Some(0.7))
        );
        assert_eq!(
            (c.failure_window.failures, c.failure_window.window_ms),
            (3, 60_000)
        );
        assert!(c.models[0].health.is_failure(503) && c.models[0].health.is_failure(401));
        assert!(!c.models[0].health.is_failure(404) && c.models[0].health.eviction.is_none());

        assert_eq!(
            err(&sample_with(r#""provider": "azure","#, r#""provider": "azure", "health": {"eviction": {"duration": "3 secs"}},"#)),
            "models[1].health.eviction.duration: expected a duration such as \"3s\" or \"500ms\", got \"3 secs\""
        );
        assert_eq!(
            err(&sample_with(
                r#""provider": "azure","#,
                r#""provider": "azure", "health": {"eviction": {"health_threshold": 2}},"#
            )),
            "models[1].health.eviction.health_threshold: expected a number from 0.0 to 1.0, got 2"
        );
    }

    #[test]
    fn failure_class_durations_and_quota_patterns_parse_with_paths() {
        let with = |health: &str| {
            sample_with(
                r#""provider": "azure","#,
                &format!(r#""provider": "azure", "health": {health},"#),
            )
        };
        let c = Config::parse(
            with(r#"{"quota_patterns": ["Budget Spent"], "eviction": {"quota_duration": "0s", "credential_duration": "90s"}}"#)
                .as_bytes(),
        )
        .unwrap();
        let h = &c.models[1].health;
        assert_eq!((h.quota_ms, h.credential_ms), (0, 90_000));
        assert_eq!(h.quota_patterns, ["budget spent"]);
        assert!(
            h.eviction.is_none(),
            "the class durations alone do not turn eviction by status on"
        );
        let d = &c.models[0].health;
        assert_eq!(
            (d.quota_ms, d.credential_ms),
            (3_600_000, 300_000),
            "defaults"
        );
        assert_eq!(
            err(&with(r#"{"eviction": {"quota_duration": "1 hour"}}"#)),
            "models[1].health.eviction.quota_duration: expected a duration such as \"3s\" or \"500ms\", got \"1 hour\""
        );
        assert_eq!(
            err(&with(r#"{"quota_patterns": ["ok", ""]}"#)),
            "models[1].health.quota_patterns[1]: expected a non-empty string"
        );
        let c = Config::parse(
            with(r#"{"eviction": {"credential_duration": "1s", "duration": "2s"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            c.models[1].health.eviction.and_then(|e| e.duration_ms),
            Some(2_000)
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
            "header_names.cluster: must be a valid HTTP header name starting with `x-`"
        );
        for bad in [
            r#"{"cluster": "authorization"}"#,
            r#"{"resolved_model": "x-switchboard-cluster"}"#,
        ] {
            let json = sample_with(
                r#""models": ["#,
                &format!(r#""header_names": {bad}, "models": ["#),
            );
            assert!(err(&json).starts_with("header_names."), "{bad}");
        }
    }

    #[test]
    fn env_keys_limit_which_variables_env_references_may_read() {
        let read = |name: &str| Some(format!("value of {name}"));
        let parse = |env_keys: &str, header: &str| {
            let json = sample_with(
                r#""Authorization": "Bearer sk-1""#,
                &format!(r#""Authorization": "{header}""#),
            )
            .replacen('{', &format!("{{{env_keys}"), 1);
            Config::parse_with_env(json.as_bytes(), &read).map_err(|e| e.to_string())
        };
        let listed = r#""env_keys": ["OPENAI_KEY", "OTHER"], "#;
        let c = parse(listed, "Bearer ${env:OPENAI_KEY}").unwrap();
        assert_eq!(c.models[0].headers[0].1, "Bearer value of OPENAI_KEY");
        assert_eq!((c.env_unlisted.len(), c.env_warning()), (0, None));
        assert_eq!(
            parse(listed, "Bearer ${env:AWS_SECRET_ACCESS_KEY}").unwrap_err(),
            "models[0].headers.Authorization: environment variable `AWS_SECRET_ACCESS_KEY` \
             is not listed in `env_keys`"
        );
        // Every `${env:}` field is held to it, `trace.token` among them.
        let trace = sample_with(
            r#""virtual_models": ["#,
            r#""env_keys": [], "trace": {"token": "${env:TOKEN}"}, "virtual_models": ["#,
        );
        let e = Config::parse_with_env(trace.as_bytes(), &read).unwrap_err();
        assert_eq!(
            e.to_string(),
            "trace.token: environment variable `TOKEN` is not listed in `env_keys`"
        );
        assert_eq!(
            parse(r#""env_keys": ["A", "not-a-name"], "#, "x").unwrap_err(),
            "env_keys[1]: expected an environment variable name (letters, digits, `_`)"
        );
        // Without the list: any variable, as before, and the native module's warning names it.
        let c = parse("", "Bearer ${env:OPENAI_KEY}").unwrap();
        assert_eq!(c.env_unlisted, ["OPENAI_KEY"]);
        let warning = c.env_warning().unwrap();
        assert!(
            warning.contains("OPENAI_KEY") && warning.contains("`env_keys`"),
            "{warning}"
        );
        // No reference, nothing to warn about.
        assert_eq!(parse("", "Bearer sk-1").unwrap().env_warning(), None);
    }
}
