//! `switchboard`: the filter's routing core on the command line.
//!
//! - `switchboard check CONFIG` validates a plugin config and prints errors with field paths.
//! - `switchboard explain CONFIG REQUEST.json [--header k:v]... [--path P]` shows the ordered
//!   candidates for one request and why each target is in or out.
//! - `switchboard simulate CONFIG --requests N [--model M] [--header k:v]...` runs N decisions
//!   and prints the resulting split of first attempts.
//!
//! - `switchboard stats-config` prints the `stats_config` block every Envoy bootstrap needs to
//!   turn Switchboard's metric names into `virtual_model`, `target`, `class` and `reason` labels.
//!
//! - `switchboard import --from truefoundry|agentgateway|zuplo FILE [--name NAME]
//!   [--provider NAME=KIND]...` turns a TrueFoundry, agentgateway or Zuplo virtual-model config
//!   into a plugin config (stdout), reporting what it could not carry over (stderr).
//!
//! - `switchboard envoy-config CONFIG BOOTSTRAP` prints the Envoy bootstrap with what the
//!   `.wasm`'s router path (`stream_fallbacks: "router"`) needs added (clusters, filters, route).
//!
//! The same core crate as the filter decides; nothing here re-implements routing.

mod envoy_config;
mod import;

use std::collections::BTreeMap;
use std::process::ExitCode;
use switchboard::core::config::{
    Config, ModelId, Named, Routing, StickySource, TargetConfig, VirtualModel,
};
use switchboard::core::decision::decide;
use switchboard::core::endpoint::Endpoint;
use switchboard::core::headers::Headers;
use switchboard::core::metadata::request_metadata;
use switchboard::core::outbound::Outbound;
use switchboard::core::routing::{HealthInput, LocalState, Plan, Request, Skip};
use switchboard::core::translate::{direction, Direction};

const USAGE: &str = "usage:
  switchboard check CONFIG.json
  switchboard explain CONFIG.json REQUEST.json [--header name:value]... [--path /v1/chat/completions]
                      [--gateway-region R] [--gateway-zone Z]
  switchboard simulate CONFIG.json --requests N [--model NAME] [--header name:value]... [--path P]
                      [--gateway-region R] [--gateway-zone Z]
  switchboard import --from truefoundry|agentgateway|zuplo FILE.yaml|FILE.json [--name NAME] [--provider NAME=KIND]...
  switchboard stats-config
  switchboard envoy-config CONFIG.json BOOTSTRAP.yaml|BOOTSTRAP.json   (adds the router path for stream_fallbacks \"router\")";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("check") => check(&args[1..]),
        Some("explain") => explain(&args[1..]),
        Some("simulate") => simulate(&args[1..]),
        Some("import") => import::run(&args[1..]),
        Some("envoy-config") => envoy_config::run(&args[1..]),
        Some("stats-config") if args.len() == 1 => {
            Ok(switchboard::core::metrics::stats_config_yaml()
                .trim_end()
                .to_string())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// Options shared by `explain` and `simulate`.
struct Options {
    positional: Vec<String>,
    headers: Vec<(String, Vec<u8>)>,
    path: String,
    requests: usize,
    model: Option<String>,
    /// The location of the Envoy the request passes (its node locality): `gateway_region` and
    /// `gateway_zone`, which a client's metadata header cannot set.
    region: Option<String>,
    zone: Option<String>,
}

impl Options {
    /// The config as the Envoy the request passes would run it.
    fn at_gateway(&self, config: Config) -> Config {
        config.with_gateway_location(self.region.clone(), self.zone.clone())
    }
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        positional: Vec::new(),
        headers: Vec::new(),
        path: "/v1/chat/completions".to_string(),
        requests: 10_000,
        model: None,
        region: None,
        zone: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or(format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--header" => {
                let v = value()?;
                let (k, val) = v
                    .split_once(':')
                    .ok_or(format!("--header {v}: expected name:value"))?;
                o.headers.push((
                    k.trim().to_ascii_lowercase(),
                    val.trim().as_bytes().to_vec(),
                ));
            }
            "--path" => o.path = value()?,
            "--requests" => {
                o.requests = value()?
                    .parse()
                    .map_err(|_| "--requests: expected a number".to_string())?
            }
            "--model" => o.model = Some(value()?),
            "--gateway-region" => o.region = Some(value()?),
            "--gateway-zone" => o.zone = Some(value()?),
            flag if flag.starts_with("--") => {
                return Err(format!("unknown option {flag}\n{USAGE}"))
            }
            _ => o.positional.push(arg.clone()),
        }
    }
    o.headers
        .push((":path".to_string(), o.path.as_bytes().to_vec()));
    o.headers.push((":method".to_string(), b"POST".to_vec()));
    Ok(o)
}

/// Loads a plugin config. `${env:NAME}` is read from this process's environment; a variable
/// not set here is reported on stderr and stands in as `<NAME>`, so a config can be checked
/// without its keys (the filter itself refuses a config whose variable is missing).
fn load(path: &str) -> Result<Config, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let missing = std::cell::RefCell::new(Vec::new());
    let env = |name: &str| {
        std::env::var(name).ok().or_else(|| {
            missing.borrow_mut().push(name.to_string());
            Some(format!("<{name}>"))
        })
    };
    let config = Config::parse_with_env(&bytes, &env)
        .map_err(|e| format!("{path}: invalid plugin configuration:\n  {e}"))?;
    let mut missing = missing.into_inner();
    missing.sort();
    missing.dedup();
    for name in missing {
        eprintln!(
            "note: environment variable {name} is not set here; Envoy must hand it to the \
             Wasm VM (vm_config.environment_variables.host_env_keys)"
        );
    }
    Ok(config)
}

fn check(args: &[String]) -> Result<String, String> {
    let [path] = args else {
        return Err(USAGE.to_string());
    };
    let c = load(path)?;
    // It loads, but the operator should know: on stderr, so the ok line stays one line. The
    // adapters log the same when Envoy loads the config; the native module adds its own.
    for warning in c.warnings.iter().chain(c.env_warning().as_ref()) {
        eprintln!("{path}: warning: {warning}");
    }
    Ok(format!(
        "{path}: ok ({} models, {} virtual models)",
        c.models.len(),
        c.virtual_models.len()
    ))
}

fn endpoint(path: &str) -> Result<Endpoint, String> {
    Endpoint::from_path(path).ok_or(format!("{path} is not an endpoint Switchboard routes"))
}

fn explain(args: &[String]) -> Result<String, String> {
    let o = options(args)?;
    let headers = Headers::from_pairs(o.headers.iter().map(|(k, v)| (k, v)));
    let [config_path, request_path] = o.positional.as_slice() else {
        return Err(USAGE.to_string());
    };
    let config = o.at_gateway(load(config_path)?);
    let body = std::fs::read(request_path).map_err(|e| format!("{request_path}: {e}"))?;
    let endpoint = endpoint(&o.path)?;
    let state = LocalState::default();
    let mut rng = fastrand::Rng::with_seed(1);
    let health = now();
    let decision = decide(
        &config,
        endpoint,
        &body,
        &headers,
        &health.input(),
        &state,
        &mut rng,
    )
    .map_err(|e| format!("the filter would answer {}: {}", e.status, e.body))?;
    let plan = &decision.plan;
    let mut out = match plan.virtual_model(&config) {
        Some(vm) => {
            let metadata = request_metadata(&config, &headers).map_err(|e| e.body)?;
            let request = Request::without_body(endpoint, &vm.name, &metadata, &headers, &state);
            explain_virtual(&config, vm, &request, plan)
        }
        None => plan
            .primary()
            .and_then(|m| config.model(m))
            .map(|m| {
                format!(
                    "`{}` is a public catalog model: it routes to itself",
                    m.name
                )
            })
            .into_iter()
            .collect(),
    };
    out.push("candidates, in the order they would be tried:".to_string());
    let vm = plan.virtual_model(&config);
    for (i, m) in plan.candidates.iter().enumerate() {
        let Some(model) = config.model(*m) else {
            out.push(format!("  {}. ?", i + 1));
            continue;
        };
        let way = direction(vm, endpoint, model)
            .map(|d| format!(" ({})", translated(d)))
            .unwrap_or_default();
        out.push(format!("  {}. {}{way}", i + 1, model.name));
    }
    out.extend(first_attempt(&decision.outbound, &body));
    Ok(out.join("\n"))
}

/// A virtual model's strategy, each target with why it is in or out (the plan's own reasons,
/// as the trace header's `skipped` gives them) and what the strategy knows of it, and the
/// sticky session.
fn explain_virtual(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
    plan: &Plan,
) -> Vec<String> {
    let note = match &vm.routing {
        Routing::Weighted(_) if vm.sticky.is_some() => " with sticky_routing",
        Routing::Latency { .. } => " (no samples here: every target counts as average)",
        _ => "",
    };
    let mut out = vec![format!(
        "`{}` is a virtual model using {}{note} on {}",
        vm.name,
        vm.routing.type_name(),
        request.endpoint.display_path()
    )];
    let skipped = plan.skipped(config, request);
    for t in &vm.targets {
        let Some(m) = config.model(t.model) else {
            continue;
        };
        let why = skipped.iter().find(|(s, _)| *s == t.model).map(|(_, w)| *w);
        let way = direction(Some(vm), request.endpoint, m).map(translated);
        let notes: Vec<String> = why
            .map(|why| out_note(why, request.endpoint, vm, t))
            .into_iter()
            .chain(strategy_note(&vm.routing, t.model, why))
            .chain((!t.policy.fallback_candidate).then(|| "never a fallback".to_string()))
            .chain(way.filter(|_| why.is_none()))
            .collect();
        out.push(format!(
            "  target {} (cluster {}): {}",
            m.name,
            m.cluster,
            notes.join(", ")
        ));
    }
    if let Some(s) = plan.sticky {
        out.push(format!(
            "  sticky session {:016x}, window {}",
            s.hash, s.window
        ));
    }
    out
}

/// Which way a candidate's request and answer are translated (a virtual model's `translate`).
fn translated(d: Direction) -> String {
    match d {
        Direction::ChatToMessages => {
            "translated: sent as Anthropic Messages, answered as Chat Completions".to_string()
        }
        Direction::MessagesToChat => {
            "translated: sent as Chat Completions, answered as Anthropic Messages".to_string()
        }
    }
}

/// Why a target is out, in words.
fn out_note(why: Skip, endpoint: Endpoint, vm: &VirtualModel, t: &TargetConfig) -> String {
    match why {
        Skip::Apis => {
            let api = endpoint.api();
            let translatable = matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Messages);
            let not_listed = if translatable && !vm.translation.apis.contains(api) {
                format!(", and `translate` does not list `{}`", api.name())
            } else {
                String::new()
            };
            format!(
                "out: its apis do not include `{}`, which serves {}{not_listed}",
                api.name(),
                endpoint.display_path()
            )
        }
        Skip::MetadataMatch => format!("out: metadata_match {:?} does not hold", t.metadata_match),
        Skip::When => "out: its when is false".to_string(),
        why => format!("out: {}", why.name()),
    }
}

/// What the strategy knows of target `m`: its `when` held (it is in), its weight, its tier or
/// its priority.
fn strategy_note(routing: &Routing, m: ModelId, why: Option<Skip>) -> Option<String> {
    match routing {
        Routing::Conditional(_) if why.is_none() => Some("when holds".to_string()),
        Routing::Weighted(ws) => ws
            .iter()
            .find(|w| w.model == m)
            .map(|w| format!("weight {}", w.weight)),
        Routing::Complexity { targets, .. } => targets
            .iter()
            .find(|c| c.model == m)
            .map(|c| format!("tier {}", c.tier.name())),
        Routing::Priority(ps) => ps
            .iter()
            .find(|p| p.model == m)
            .map(|p| format!("priority {}", p.priority)),
        _ => None,
    }
}

/// The first attempt's request as the filter would send it. Header values are not shown:
/// they may be keys.
fn first_attempt(o: &Outbound<'_>, body: &[u8]) -> Vec<String> {
    let mut out = vec![format!("first attempt: cluster {}", o.cluster)];
    if let Some(a) = o.authority {
        out.push(format!("  :authority {a}"));
    }
    if let Some(p) = &o.path {
        out.push(format!("  :path {p}"));
    }
    let set: Vec<&str> = o.set.iter().map(|(n, _)| *n).collect();
    if !set.is_empty() {
        out.push(format!("  sets headers: {}", set.join(", ")));
    }
    if !o.remove.is_empty() {
        out.push(format!("  removes headers: {}", o.remove.join(", ")));
    }
    if let Some(new_body) = o.edits.as_ref().and_then(|e| e.apply(body)) {
        out.push(format!("  body: {}", String::from_utf8_lossy(&new_body)));
    }
    out
}

/// The current time, as the filter would see it, with no health records.
struct Clock(u64);

impl Clock {
    fn input(&self) -> HealthInput<'static> {
        HealthInput {
            now_ms: self.0,
            ..HealthInput::NONE
        }
    }
}

fn now() -> Clock {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Clock(ms)
}

fn simulate(args: &[String]) -> Result<String, String> {
    let o = options(args)?;
    let [config_path] = o.positional.as_slice() else {
        return Err(USAGE.to_string());
    };
    let config = o.at_gateway(load(config_path)?);
    let model = simulated_model(&o, &config)?;
    let endpoint = endpoint(&o.path)?;
    let state = LocalState::default();
    let mut rng = fastrand::Rng::with_seed(42);
    let sessions = session_headers(&config, &model, &o.headers);
    let clock = now();
    let mut split: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..o.requests {
        // Each simulated request is its own conversation.
        let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": format!("question {i}")}]})
            .to_string();
        let d = decide(
            &config,
            endpoint,
            body.as_bytes(),
            &simulated_headers(&o.headers, &sessions, i),
            &clock.input(),
            &state,
            &mut rng,
        )
        .map_err(|e| format!("the filter would answer {}: {}", e.status, e.body))?;
        let name = config
            .model(d.target)
            .map_or("?", |m| m.name.as_str())
            .to_string();
        *split.entry(name).or_default() += 1;
    }
    Ok(split_lines(&model, o.requests, &split))
}

/// The model `simulate` asks for: `--model`, else the config's first virtual model.
fn simulated_model(o: &Options, config: &Config) -> Result<String, String> {
    match &o.model {
        Some(m) => Ok(m.clone()),
        None => config
            .virtual_models
            .first()
            .map(|vm| vm.name.clone())
            .ok_or("the config has no virtual model; pass --model".to_string()),
    }
}

/// The sticky-session headers of `model` that `--header` does not fix: a sticky virtual model
/// keeps a session on one target, so each simulated request gets its own session.
fn session_headers(config: &Config, model: &str, fixed: &[(String, Vec<u8>)]) -> Vec<String> {
    match config.lookup(model) {
        Some(Named::Virtual(_, vm)) => vm
            .sticky
            .iter()
            .flat_map(|s| &s.session_identifiers)
            .filter(|id| id.source == StickySource::Headers)
            .map(|id| id.key.clone())
            .filter(|k| !fixed.iter().any(|(h, _)| h == k))
            .collect(),
        _ => Vec::new(),
    }
}

/// The headers of simulated request `i`: `--header`'s, its own caller unless `--header` fixed
/// the `authorization`, and its own session.
fn simulated_headers(fixed: &[(String, Vec<u8>)], sessions: &[String], i: usize) -> Headers {
    let mut headers = fixed.to_vec();
    if !fixed.iter().any(|(k, _)| k == "authorization") {
        headers.push((
            "authorization".to_string(),
            format!("Bearer caller-{i}").into_bytes(),
        ));
    }
    headers.extend(
        sessions
            .iter()
            .map(|k| (k.clone(), format!("session-{i}").into_bytes())),
    );
    Headers::from_pairs(headers)
}

/// Each target's share of first attempts.
fn split_lines(model: &str, requests: usize, split: &BTreeMap<String, usize>) -> String {
    let mut out = vec![format!("{requests} requests to `{model}`, first attempts:")];
    for (name, n) in split {
        out.push(format!(
            "  {name:<40} {n:>8}  {:>6.2}%",
            100.0 * *n as f64 / requests.max(1) as f64
        ));
    }
    out.join("\n")
}
