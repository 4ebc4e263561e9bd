//! `switchboard import --from truefoundry|agentgateway|zuplo FILE [--name NAME] [--provider
//! NAME=KIND]...`: reads a virtual-model config written in one of the three vendors' dialects
//! (docs/sources.md; YAML or JSON) and prints the Switchboard plugin config that reproduces it.
//! Every field that cannot be carried over, and every derived value the operator must provide for
//! (the Envoy clusters), is reported on stderr; nothing is dropped silently. The output is compiled
//! by the filter's own config code before it is printed, so it always passes `switchboard check`.

mod agentgateway;
mod truefoundry;
mod zuplo;

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

const USAGE: &str = "usage: switchboard import --from truefoundry|agentgateway|zuplo FILE \
     [--name NAME] [--provider NAME=openai|azure|anthropic|openai-compatible]...";

/// The provider kinds a catalog entry can have.
const KINDS: [&str; 4] = ["openai", "azure", "anthropic", "openai-compatible"];

/// Runs the command: the config on `Ok`, the notes already written to stderr.
pub fn run(args: &[String]) -> Result<String, String> {
    let mut from = None;
    let mut name = None;
    let mut file = None;
    let mut kinds = BTreeMap::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--from" => from = Some(it.next().ok_or(USAGE)?.clone()),
            "--name" => name = Some(it.next().ok_or(USAGE)?.clone()),
            "--provider" => {
                let (provider, kind) = provider_option(it.next().ok_or(USAGE)?)?;
                kinds.insert(provider, kind);
            }
            flag if flag.starts_with("--") => {
                return Err(format!("unknown option {flag}\n{USAGE}"))
            }
            _ if file.is_none() => file = Some(arg.clone()),
            _ => return Err(USAGE.to_string()),
        }
    }
    let (Some(from), Some(file)) = (from, file) else {
        return Err(USAGE.to_string());
    };
    let source = load(&file)?;
    let mut out = Builder::new(&file, name, kinds);
    match from.as_str() {
        "truefoundry" => truefoundry::import(&source, &mut out),
        "agentgateway" => agentgateway::import(&source, &mut out),
        "zuplo" => zuplo::import(&source, &mut out),
        other => Err(format!(
            "--from {other}: expected truefoundry, agentgateway or zuplo"
        )),
    }
    .map_err(|e| format!("{file}: {e}"))?;
    let (config, notes) = out.finish()?;
    for n in notes {
        eprintln!("{n}");
    }
    Ok(config)
}

/// `--provider NAME=KIND`: the provider kind of every model under provider name `NAME`
/// (compared without case), where the name alone does not tell it.
fn provider_option(value: &str) -> Result<(String, &'static str), String> {
    let bad = || {
        format!(
            "--provider {value}: expected NAME=KIND, KIND one of {}",
            KINDS.join(", ")
        )
    };
    let (provider, kind) = value.split_once('=').ok_or_else(bad)?;
    let kind = KINDS.iter().find(|k| **k == kind).ok_or_else(bad)?;
    if provider.is_empty() {
        return Err(bad());
    }
    Ok((provider.to_ascii_lowercase(), kind))
}

/// Reads a YAML or JSON file into a JSON value.
pub(crate) fn load(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    if path.ends_with(".json") {
        return serde_json::from_str(&text).map_err(|e| format!("{path}: not valid JSON: {e}"));
    }
    let value: Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("{path}: not valid YAML: {e}"))?;
    match value {
        Value::Null => Err(format!("{path}: the file is empty")),
        v => Ok(v),
    }
}

/// The config being built, and what could not be carried over.
pub struct Builder {
    file: String,
    /// `--name`.
    pub name: Option<String>,
    models: Vec<Value>,
    virtual_models: Vec<Value>,
    root: Map<String, Value>,
    /// Cluster name → the providers that use it.
    clusters: BTreeMap<String, String>,
    /// `--provider`: provider name in lower case → its kind.
    kinds: BTreeMap<String, &'static str>,
    notes: Vec<String>,
}

/// The provider kind a provider name suggests: `openai` and `anthropic` alone or as the first
/// word of an account name (`openai-east`, `anthropic_eu`), any name starting with `azure`,
/// else `openai-compatible` (as is a name that says so, `openai-compatible`).
pub fn guessed_kind(provider: &str) -> &'static str {
    let p = provider.to_ascii_lowercase();
    let mut words = p.split(['-', '_', '.']);
    let first = words.next().unwrap_or_default();
    let compatible = words.next() == Some("compatible");
    if p.starts_with("azure") {
        "azure"
    } else if first == "openai" && !compatible {
        "openai"
    } else if first == "anthropic" {
        "anthropic"
    } else {
        "openai-compatible"
    }
}

/// The Envoy cluster name derived from a provider name: lower case, anything but letters,
/// digits, `-`, `_` and `.` made `_`.
pub fn cluster_name(provider: &str) -> String {
    provider
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Builder {
    fn new(file: &str, name: Option<String>, kinds: BTreeMap<String, &'static str>) -> Self {
        Builder {
            file: file.to_string(),
            name,
            models: Vec::new(),
            virtual_models: Vec::new(),
            root: Map::new(),
            clusters: BTreeMap::new(),
            kinds,
            notes: Vec::new(),
        }
    }

    /// The provider kind of a provider name: `--provider`'s, else the name's guess.
    pub fn provider_kind(&self, provider: &str) -> &'static str {
        self.kinds
            .get(&provider.to_ascii_lowercase())
            .copied()
            .unwrap_or_else(|| guessed_kind(provider))
    }

    /// A field of the source that has no place in the output, and why.
    pub fn dropped(&mut self, path: &str, why: &str) {
        self.notes.push(format!("not carried over: {path}: {why}"));
    }

    /// Something the import derived or changed that the operator should know.
    pub fn note(&mut self, what: String) {
        let line = format!("note: {what}");
        if !self.notes.contains(&line) {
            self.notes.push(line);
        }
    }

    /// Sets a root field of the plugin config.
    pub fn set_root(&mut self, key: &str, value: Value) {
        self.root.insert(key.to_string(), value);
    }

    /// Whether a catalog model of this name exists (exactly, or ignoring ASCII case).
    fn find_model(&self, name: &str, fold_case: bool) -> Option<usize> {
        self.models.iter().position(|m| {
            m.get("name").and_then(Value::as_str).is_some_and(|n| {
                if fold_case {
                    n.eq_ignore_ascii_case(name)
                } else {
                    n == name
                }
            })
        })
    }

    /// A catalog entry for `providerName/model`: the name as written, `model` the part after
    /// the first slash, the provider kind and cluster from the provider name. Returns the
    /// catalog name (an existing entry's, when `fold_case` finds one in another case).
    pub fn provider_model(
        &mut self,
        path: &str,
        name: &str,
        fold_case: bool,
    ) -> Result<String, String> {
        if let Some(i) = self.find_model(name, fold_case) {
            return Ok(self.models[i]["name"].as_str().unwrap_or(name).to_string());
        }
        let (provider, model) = name
            .split_once('/')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
            .ok_or_else(|| {
                format!("{path}: `{name}` is not a model written as providerName/model")
            })?;
        let cluster = cluster_name(provider);
        let entry = json!({
            "name": name,
            "cluster": cluster,
            "model": model,
            "provider": self.provider_kind(provider),
        });
        self.add_model(entry, provider);
        Ok(name.to_string())
    }

    /// Adds a catalog entry whose cluster was derived from `provider`.
    pub fn add_model(&mut self, entry: Value, provider: &str) {
        if let Some(cluster) = entry.get("cluster").and_then(Value::as_str) {
            self.clusters
                .entry(cluster.to_string())
                .or_insert_with(|| provider.to_string());
        }
        self.models.push(entry);
    }

    /// The catalog entry of this name, to add fields to.
    pub fn model_mut(&mut self, name: &str) -> Option<&mut Map<String, Value>> {
        let i = self.find_model(name, false)?;
        self.models.get_mut(i).and_then(Value::as_object_mut)
    }

    /// Every catalog entry, to add fields to.
    pub fn models_mut(&mut self) -> impl Iterator<Item = &mut Map<String, Value>> {
        self.models.iter_mut().filter_map(Value::as_object_mut)
    }

    /// Adds a virtual model.
    pub fn add_virtual_model(&mut self, vm: Value) {
        self.virtual_models.push(vm);
    }

    /// `--name` names one virtual model: refuses it when the source holds several.
    pub fn expect_virtual_models(&self, n: usize) -> Result<(), String> {
        match n {
            0 => Err("the file defines no virtual model".to_string()),
            1 => Ok(()),
            _ if self.name.is_some() => Err(format!(
                "--name names one virtual model, but the file defines {n}: drop --name to keep \
                 the source's names"
            )),
            _ => Ok(()),
        }
    }

    /// The name of the virtual model: `--name` first, else the source's.
    pub fn vm_name(&self, from_source: Option<&str>, what: &str) -> Result<String, String> {
        self.name
            .clone()
            .or_else(|| from_source.map(str::to_string))
            .ok_or_else(|| format!("{what} has no name: pass --name NAME"))
    }

    /// The finished plugin config, checked by the filter's own config code, and the notes.
    fn finish(mut self) -> Result<(String, Vec<String>), String> {
        for (cluster, provider) in &self.clusters {
            let given = self.kinds.contains_key(&provider.to_ascii_lowercase());
            let how = if given {
                "from --provider".to_string()
            } else {
                format!("guessed from the name; --provider {provider}=KIND sets it")
            };
            self.notes.push(format!(
                "note: cluster `{cluster}` (derived from provider `{provider}`, provider kind \
                 `{}`, {how}) must exist in Envoy; the route sends requests there by the \
                 cluster header",
                self.provider_kind(provider)
            ));
        }
        let mut root = self.root;
        root.insert("models".to_string(), Value::Array(self.models));
        root.insert(
            "virtual_models".to_string(),
            Value::Array(self.virtual_models),
        );
        let text = serde_json::to_string_pretty(&Value::Object(root))
            .map_err(|e| format!("{}: {e}", self.file))?;
        // ${env:NAME} is resolved by Envoy's Wasm VM; any value does to check the shape.
        switchboard::core::config::Config::parse_with_env(text.as_bytes(), &|n| {
            Some(format!("<{n}>"))
        })
        .map_err(|e| {
            format!(
                "{}: the imported config would not pass `switchboard check`:\n  {e}",
                self.file
            )
        })?;
        Ok((text, self.notes))
    }
}

/// The keys of an object the import does not know, each reported as dropped.
pub fn drop_unknown(
    out: &mut Builder,
    path: &str,
    obj: &Map<String, Value>,
    known: &[&str],
    why: &str,
) {
    for key in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        out.dropped(&join(path, key), why);
    }
}

/// `a.b`, or `b` at the root.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The source's name for a JSON type, for error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// An object field, or an error naming its path.
pub fn object<'v>(v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{path}: expected an object, got {}", type_name(v)))
}

/// A list field, or an error naming its path.
pub fn list<'v>(v: &'v Value, path: &str) -> Result<&'v Vec<Value>, String> {
    v.as_array()
        .ok_or_else(|| format!("{path}: expected a list, got {}", type_name(v)))
}

/// A string field, or an error naming its path.
pub fn string<'v>(v: &'v Value, path: &str) -> Result<&'v str, String> {
    v.as_str()
        .ok_or_else(|| format!("{path}: expected a string, got {}", type_name(v)))
}
