//! `switchboard import` on every example config of the three vendor documents
//! (`tests/fixtures/seeds/<vendor>/`, docs/sources.md): each imports, passes `switchboard
//! check`, and `switchboard explain` (or `simulate`) shows the outcome the document states for
//! it; a fragment (session identifiers, a zone match) is put where the document puts it first.
//! Where the document states what failures do, [`Replay`] runs the imported config through the
//! filter's core with the health records its targets' answers leave. Fields that cannot be
//! carried over are reported on stderr; bad input is an error naming the file and field.

mod common;

use common::{run, temp};
use std::path::{Path, PathBuf};
use switchboard::core::admission::{admit, Admission, StoredPath};
use switchboard::core::config::{Config, Named};
use switchboard::core::decision::{decide, decide_stored_path};
use switchboard::core::endpoint::Endpoint;
use switchboard::core::fallback::AttemptOutcome;
use switchboard::core::flight::health_outcome;
use switchboard::core::headers::Headers;
use switchboard::core::health::failure_class::{classify, FailureClass};
use switchboard::core::health::record::HealthRecord;
use switchboard::core::routing::HealthInput;
use switchboard::core::routing::LocalState;

const FIXTURES: &str = "tools/cli/tests/fixtures/seeds";

/// Imports a fixture and checks the output; returns the config path and stderr.
fn import(vendor: &str, file: &str, extra: &[&str]) -> (PathBuf, String) {
    let src = format!("{FIXTURES}/{vendor}/{file}");
    let mut args = vec!["import", "--from", vendor, src.as_str()];
    args.extend_from_slice(extra);
    let (ok, out, err) = run(&args);
    assert!(ok, "{src}: {err}");
    let config = temp(&format!("{vendor}-{file}.json"), &out);
    let (ok, checked, err2) = run(&["check", config.to_str().unwrap()]);
    assert!(
        ok && checked.contains(": ok ("),
        "{src}: check failed: {err2}\n{out}"
    );
    (config, err)
}

/// `explain` for a chat request to `model`: the candidates, in order.
fn candidates(config: &Path, model: &str, path: &str, headers: &[&str]) -> Vec<String> {
    candidates_at(config, model, path, headers, &[])
}

/// [`candidates`], with more `explain` options (`--gateway-region`, say).
fn candidates_at(
    config: &Path,
    model: &str,
    path: &str,
    headers: &[&str],
    options: &[&str],
) -> Vec<String> {
    let body = if path == "/v1/embeddings" {
        format!(r#"{{"model": "{model}", "input": "hello"}}"#)
    } else {
        format!(
            r#"{{"model": "{model}", "max_tokens": 16, "messages": [{{"role": "system", "content": "Be brief."}}, {{"role": "user", "content": "Hello"}}]}}"#
        )
    };
    let out = explain_with(config, &body, path, headers, options)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    listed(&out)
}

/// The candidates `explain` printed, in order.
fn listed(explained: &str) -> Vec<String> {
    explained
        .lines()
        .skip_while(|l| !l.starts_with("candidates"))
        .skip(1)
        .take_while(|l| {
            l.starts_with("  ")
                && l.trim_start()
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
        })
        .map(|l| l.split_once(". ").map_or("", |(_, n)| n))
        // A translated candidate's way follows its name: `name (translated: ...)`.
        .map(|n| n.split_once(" (").map_or(n, |(name, _)| name).to_string())
        .collect()
}

/// A chat request's body for `model`.
fn chat_body(model: &str) -> String {
    format!(r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}"#)
}

/// A file holding [`chat_body`].
fn chat_request(model: &str) -> PathBuf {
    request_file(&chat_body(model))
}

/// A request body in a file of its own: tests run in parallel in one process.
fn request_file(body: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    temp(&format!("req-{n}.json"), body)
}

/// `explain` for a request with this body: its output, or its error (the filter's answer).
fn explain(config: &Path, body: &str, path: &str, headers: &[&str]) -> Result<String, String> {
    explain_with(config, body, path, headers, &[])
}

/// [`explain`], with more `explain` options (`--gateway-region`, say).
fn explain_with(
    config: &Path,
    body: &str,
    path: &str,
    headers: &[&str],
    options: &[&str],
) -> Result<String, String> {
    let req = request_file(body);
    let mut args = vec![
        "explain",
        config.to_str().unwrap(),
        req.to_str().unwrap(),
        "--path",
        path,
    ];
    for h in headers {
        args.extend(["--header", h]);
    }
    args.extend(options);
    let (ok, out, err) = run(&args);
    if ok {
        Ok(out)
    } else {
        Err(err)
    }
}

/// `simulate`: each target's share of 10,000 first attempts, in percent, by name.
fn first_attempts(config: &Path, model: &str, path: &str) -> Vec<(String, f64)> {
    let c = config.to_str().unwrap();
    let (ok, out, err) = run(&["simulate", c, "--model", model, "--path", path]);
    assert!(ok, "simulate {model}: {err}");
    out.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let pct = f[2].trim_end_matches('%').parse().unwrap();
            (f[0].to_string(), pct)
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const CHAT: &str = "/v1/chat/completions";
const VM: &str = "my-group/production-chat";

/// An imported config run by the filter's own core, with the health records its targets'
/// answers leave: each answer goes through the model's health policy, as the filter records
/// it, and decisions see the records under the config's `failure_window`.
struct Replay {
    config: Config,
    records: Vec<HealthRecord>,
    /// Each decision draws with the next RNG seed.
    seed: std::cell::Cell<u64>,
}

impl Replay {
    fn load(path: &Path) -> Replay {
        let text = std::fs::read(path).unwrap();
        let config = Config::parse_with_env(&text, &|n| Some(format!("<{n}>"))).unwrap();
        let records = vec![HealthRecord::default(); config.models.len()];
        Replay {
            config,
            records,
            seed: std::cell::Cell::new(7),
        }
    }

    /// `model` answered `outcome` at `now_ms`; a 429's Retry-After is `hint_ms`.
    fn answer(&mut self, model: &str, outcome: AttemptOutcome, hint_ms: Option<u64>, now_ms: u64) {
        let Some(Named::Catalog(_, m)) = self.config.lookup(model) else {
            panic!("{model} is not a catalog model");
        };
        // The replay checks the seeds' eviction rules: a 401 or 403 counts, as to the gateway's key.
        // Its class is told from its status alone (no body here): a 429 is a rate limit.
        let class = match outcome {
            AttemptOutcome::Status(s) => classify(s, &[], &m.health.quota_patterns, true),
            _ => FailureClass::Other,
        };
        self.answer_as(model, (outcome, class), hint_ms, now_ms);
    }

    /// `model` answered `outcome` of `class` (told from a body) at `now_ms`.
    fn answer_as(
        &mut self,
        model: &str,
        (outcome, class): (AttemptOutcome, FailureClass),
        hint_ms: Option<u64>,
        now_ms: u64,
    ) {
        let Some(Named::Catalog(id, m)) = self.config.lookup(model) else {
            panic!("{model} is not a catalog model");
        };
        if let Some(o) = health_outcome(m, outcome, true, class, || hint_ms) {
            self.records[id.0].record(o, now_ms, &m.health);
        }
    }

    /// The first candidate of a chat request to `model` from the caller whose verified JWT
    /// has `sub`.
    fn candidates_as(&self, sub: &str, model: &str) -> String {
        let headers = Headers::from_pairs([(":path", CHAT), (":method", "POST")]);
        let state = LocalState::default().with_claim("jwt_payload", "sub", sub);
        let d = decide(
            &self.config,
            Endpoint::ChatCompletions,
            chat_body(model).as_bytes(),
            &headers,
            &HealthInput::NONE,
            &state,
            &mut fastrand::Rng::with_seed(self.seed.replace(self.seed.get() + 1)),
        )
        .unwrap();
        self.config.model(d.target).unwrap().name.clone()
    }

    /// The candidates of a chat request to `model` at `now_ms`, in order.
    fn candidates(&self, model: &str, headers: &[(&str, &str)], now_ms: u64) -> Vec<String> {
        let body = format!(
            r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}"#
        );
        let mut pairs = vec![(":path", CHAT), (":method", "POST")];
        pairs.extend_from_slice(headers);
        let health = HealthInput {
            records: &self.records,
            now_ms,
            window: self.config.failure_window,
        };
        let d = decide(
            &self.config,
            Endpoint::ChatCompletions,
            body.as_bytes(),
            &Headers::from_pairs(pairs),
            &health,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(self.seed.replace(self.seed.get() + 1)),
        )
        .unwrap();
        d.plan
            .candidates
            .iter()
            .map(|m| self.config.model(*m).unwrap().name.clone())
            .collect()
    }
}

const FAILED_503: AttemptOutcome = AttemptOutcome::Status(503);

/// Where `GET /v1/responses/{a provider's id}` goes: the target, or the filter's error.
fn stored_read(config: &Path) -> Result<String, String> {
    let c = Replay::load(config).config;
    let h = Headers::from_pairs([(":path", "/v1/responses/resp_abc123"), (":method", "GET")]);
    let Admission::Stored(StoredPath::Raw { index, .. }) = admit(&c, &h, true) else {
        return Err("passed through, not routed".to_string());
    };
    let state = LocalState::default();
    let mut rng = fastrand::Rng::with_seed(3);
    decide_stored_path(&c, index, &h, &HealthInput::NONE, &state, &mut rng)
        .map(|m| c.model(m).unwrap().name.clone())
        .map_err(|e| format!("{} {}", e.status, e.body))
}

#[test]
fn truefoundry_sticky_routing_example_keeps_a_session_on_one_target_and_splits_70_30() {
    let n = ["--name", VM];
    let (c, err) = import("truefoundry", "sticky-routing.yaml", &n);
    assert!(err.contains("cluster `provider-a` (derived from provider `provider-a`, provider kind `openai-compatible`, guessed from the name; --provider provider-a=KIND sets it)"), "{err}");
    let first = candidates(&c, VM, CHAT, &["x-user-id:alice"]);
    assert_eq!(
        sorted(first.clone()),
        names(&["provider-a/model-a", "provider-b/model-b"])
    );
    assert_eq!(
        candidates(&c, VM, CHAT, &["x-user-id:alice"]),
        first,
        "a session keeps its target"
    );
    // Sessions spread 70/30 (each simulated request is its own session).
    let split = first_attempts(&c, VM, CHAT);
    assert!((split[0].1 - 70.0).abs() < 2.0, "{split:?}");
}

#[test]
fn truefoundry_retries_and_fallbacks_example_goes_by_priority_and_never_falls_back_to_claude() {
    let n = ["--name", VM];
    // azure/gpt-4o first, then openai/gpt-4o; anthropic/claude-sonnet "is only used when it
    // is itself the highest-priority healthy target".
    let (c, _) = import("truefoundry", "retries-and-fallbacks.yaml", &n);
    assert_eq!(
        candidates(&c, VM, CHAT, &[]),
        names(&["azure/gpt-4o", "openai/gpt-4o", "anthropic/claude-sonnet"])
    );
    let (ok, out, _) = run(&[
        "explain",
        c.to_str().unwrap(),
        chat_request(VM).to_str().unwrap(),
    ]);
    assert!(
        ok && out.contains(
            "target anthropic/claude-sonnet (cluster anthropic): priority 2, never a fallback"
        ),
        "{out}"
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""attempts": 3"#) && config.contains(r#""fallback_candidate": false"#),
        "{config}"
    );
    // TrueFoundry's `chat` type serves /chat/completions and /messages over any provider.
    let messages = explain(&c, &chat_body(VM), "/v1/messages", &[]).unwrap();
    assert!(
        messages.contains("1. azure/gpt-4o (translated: sent as Chat Completions"),
        "{messages}"
    );
    assert!(
        messages.contains("3. anthropic/claude-sonnet\n"),
        "{messages}"
    );
    // "Unhealthy target detection": 2 failures in 2 minutes; the healthy target leads.
    let mut r = Replay::load(&c);
    for t in ["azure/gpt-4o", "openai/gpt-4o"] {
        r.answer(t, FAILED_503, None, 0);
        r.answer(t, AttemptOutcome::Status(429), None, 1_000);
    }
    assert_eq!(r.candidates(VM, &[], 2_000)[0], "anthropic/claude-sonnet");
}

#[test]
fn truefoundry_header_overrides_example_sets_each_targets_own_headers() {
    let n = ["--name", VM];
    // Each target's own headers, applied last: provider-a sets x-region and drops
    // x-internal-debug; 80/20.
    let (c, _) = import("truefoundry", "header-overrides.yaml", &n);
    let split = first_attempts(&c, VM, CHAT);
    assert_eq!(split[0].0, "provider-a/model-a");
    assert!((split[0].1 - 80.0).abs() < 2.0, "{split:?}");
    let body = chat_body(VM);
    let a = explain(&c, &body, CHAT, &["x-internal-debug:1"]).unwrap();
    assert!(
        a.contains("first attempt: cluster provider-a\n  sets headers: x-region\n  removes headers: x-internal-debug"),
        "{a}"
    );
}

#[test]
fn truefoundry_metadata_match_example_filters_targets_by_request_metadata() {
    let n = ["--name", VM];
    // TrueFoundry's metadata header keeps its name ("Metadata-based target filtering"): region eu
    // leaves only openai/gpt-4o.
    let (c, err) = import("truefoundry", "metadata-match.yaml", &n);
    assert!(err.contains("x-tfy-metadata"), "{err}");
    assert_eq!(
        sorted(candidates(
            &c,
            VM,
            CHAT,
            &[r#"x-tfy-metadata:{"region":"us","tier":"enterprise"}"#]
        )),
        names(&["azure/gpt-4o", "openai/gpt-4o"])
    );
    assert_eq!(
        candidates(
            &c,
            VM,
            CHAT,
            &[r#"x-tfy-metadata:{"region":"eu","tier":"enterprise"}"#]
        ),
        names(&["openai/gpt-4o"])
    );
}

#[test]
fn truefoundry_gateway_region_example_sends_each_region_to_its_deployment() {
    let n = ["--name", VM];
    // tfy_gateway_region is gateway_region here.
    let (c, err) = import("truefoundry", "gateway-region.yaml", &n);
    assert!(
        err.contains("`tfy_gateway_region` is `gateway_region`"),
        "{err}"
    );
    // TrueFoundry's gateways by region ("Metadata-based target filtering"): their location, which a
    // client's metadata cannot claim.
    for (region, first) in [("US", "azure-us"), ("EU", "azure-eu"), ("IN", "azure-in")] {
        assert_eq!(
            candidates_at(&c, VM, CHAT, &[], &["--gateway-region", region]),
            names(&[&format!("{first}/gpt-4o"), "openai/gpt-4o"])
        );
        let header = format!(r#"x-tfy-metadata:{{"gateway_region":"{region}"}}"#);
        assert_eq!(
            candidates(&c, VM, CHAT, &[&header]),
            names(&["openai/gpt-4o"])
        );
    }
    // "Users from any other region ... fall through to openai/gpt-4o".
    let au = ["--gateway-region", "AU"];
    assert_eq!(
        candidates_at(&c, VM, CHAT, &[], &au),
        names(&["openai/gpt-4o"])
    );
    assert_eq!(candidates(&c, VM, CHAT, &[]), names(&["openai/gpt-4o"]));
}

#[test]
fn truefoundry_prompt_overrides_example_reports_hydration_and_splits_70_30() {
    let n = ["--name", VM];
    // No prompt hydration here (reported); the 70/30 split is kept.
    let (c, err) = import("truefoundry", "prompt-overrides.yaml", &n);
    assert!(err.contains("not carried over: routing_config.load_balance_targets[0].override_params.prompt_version_fqn: prompt hydration"), "{err}");
    let split = first_attempts(&c, VM, CHAT);
    assert_eq!(split[1].0, "openai/gpt-4o");
    assert!((split[1].1 - 70.0).abs() < 2.0, "{split:?}");
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""resolved_model": "x-tfy-resolved-model""#),
        "{config}"
    );
}

#[test]
fn truefoundry_fragments_and_the_field_template_are_refused_naming_file_and_field() {
    for (file, says) in [
        ("session-identifiers-headers.yaml", "found only: session_identifiers"),
        ("session-identifiers-metadata.yaml", "found only: session_identifiers"),
        ("gateway-zone.yaml", "found only: metadata_match"),
        (
            "configuration-structure.yaml",
            "routing_config.load_balance_targets[0].target: `string` is not a model written as providerName/model",
        ),
    ] {
        let src = format!("{FIXTURES}/truefoundry/{file}");
        let (ok, out, err) = run(&["import", "--from", "truefoundry", &src, "--name", VM]);
        assert!(!ok && out.is_empty(), "{file}");
        assert!(err.starts_with(&format!("{src}: ")) && err.contains(says), "{file}: {err}");
    }
}

/// `fragment`'s lines, each indented by `by` spaces.
fn indented(fragment: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    fragment.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// The `sticky session ...` line of `explain`.
fn session(config: &Path, headers: &[&str]) -> String {
    let out = explain(config, &chat_body(VM), CHAT, headers).unwrap();
    out.lines()
        .find(|l| l.trim_start().starts_with("sticky session"))
        .unwrap_or_else(|| panic!("no session: {out}"))
        .to_string()
}

/// A TrueFoundry fixture's text.
fn fixture(file: &str) -> String {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/seeds/truefoundry"
    );
    std::fs::read_to_string(format!("{dir}/{file}")).unwrap()
}

/// The session-identifier fragments, put in the sticky routing example where TrueFoundry
/// virtual models, "Sticky routing", puts them.
#[test]
fn truefoundry_session_identifier_fragments_combine_into_one_session_key() {
    let sticky = fixture("sticky-routing.yaml");
    let (head, rest) = sticky.split_once("    session_identifiers:\n").unwrap();
    let tail = &rest[rest.find("  load_balance_targets:").unwrap()..];
    let n = ["--name", VM];
    for (file, same, other, missing) in [
        (
            "session-identifiers-headers.yaml",
            ["x-user-id:alice", "x-conversation-id:c1"],
            ["x-user-id:alice", "x-conversation-id:c2"],
            ["x-user-id:alice", "x-conversation-id:"],
        ),
        (
            "session-identifiers-metadata.yaml",
            [
                r#"x-tfy-metadata:{"tenant-id":"t1","user-id":"u1"}"#,
                "x-unused:1",
            ],
            [
                r#"x-tfy-metadata:{"tenant-id":"t1","user-id":"u2"}"#,
                "x-unused:1",
            ],
            [
                r#"x-tfy-metadata:{"tenant-id":"t1","user-id":""}"#,
                "x-unused:1",
            ],
        ),
    ] {
        let src = temp(
            file,
            &format!("{head}{}{tail}", indented(&fixture(file), 4)),
        );
        let (ok, out, err) = run(&[
            "import",
            "--from",
            "truefoundry",
            src.to_str().unwrap(),
            n[0],
            n[1],
        ]);
        assert!(ok, "{file}: {err}");
        let c = temp(&format!("{file}.json"), &out);
        // "All configured identifiers are combined into a single session key".
        assert_eq!(session(&c, &same), session(&c, &same), "{file}");
        assert_ne!(session(&c, &same), session(&c, &other), "{file}");
        // "If a configured identifier is missing from the request, it contributes an empty
        // string to the session key."
        let without: Vec<&str> = match file {
            "session-identifiers-headers.yaml" => vec!["x-user-id:alice"],
            _ => vec![r#"x-tfy-metadata:{"tenant-id":"t1"}"#],
        };
        assert_eq!(session(&c, &without), session(&c, &missing), "{file}");
    }
}

/// The zone fragment, on a target of a priority virtual model like the gateway-region example.
#[test]
fn truefoundry_gateway_zone_fragment_matches_only_traffic_from_that_zone() {
    let n = ["--name", VM];
    // "only match traffic from the San Francisco gateway".
    let zone = format!(
        "routing_config:\n  type: priority-based-routing\n  load_balance_targets:\n    - target: azure-sfo/gpt-4o\n      priority: 0\n{}    - target: openai/gpt-4o\n      priority: 1\n",
        indented(&fixture("gateway-zone.yaml"), 6)
    );
    let src = temp("gateway-zone-in-place.yaml", &zone);
    let (ok, out, err) = run(&[
        "import",
        "--from",
        "truefoundry",
        src.to_str().unwrap(),
        n[0],
        n[1],
    ]);
    assert!(
        ok && err.contains("`tfy_gateway_zone` is `gateway_zone`"),
        "{err}"
    );
    let c = temp("gateway-zone-in-place.json", &out);
    // "only match traffic from the San Francisco gateway": the gateway's zone, not a client's.
    let (sfo, lax) = (["--gateway-zone", "SFO"], ["--gateway-zone", "LAX"]);
    assert_eq!(
        candidates_at(&c, VM, CHAT, &[], &sfo),
        names(&["azure-sfo/gpt-4o", "openai/gpt-4o"])
    );
    assert_eq!(
        candidates_at(&c, VM, CHAT, &[], &lax),
        names(&["openai/gpt-4o"])
    );
    let claims = r#"x-tfy-metadata:{"gateway_zone":"SFO"}"#;
    assert_eq!(
        candidates(&c, VM, CHAT, &[claims]),
        names(&["openai/gpt-4o"])
    );
}

#[test]
fn agentgateway_examples_import_check_and_explain() {
    let (c, err) = import("agentgateway", "weighted-routing.yaml", &[]);
    assert!(
        err.contains("apiKey $OPENAI_API_KEY: sent as `authorization"),
        "{err}"
    );
    // "split traffic between targets with weight": 90 to 10.
    let split = first_attempts(&c, "smart", CHAT);
    assert_eq!(split.len(), 2, "{split:?}");
    assert!((split[0].1 - 10.0).abs() < 1.0, "{split:?}");
    assert!((split[1].1 - 90.0).abs() < 1.0, "{split:?}");
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(config.contains(r#""weight": 90"#), "{config}");
    // "public: The model can be requested directly by clients"; "internal: ... is not
    // exposed as a direct client model".
    let public = explain(&c, &chat_body("gpt-4o-public"), CHAT, &[]).unwrap();
    assert!(
        public.contains("`gpt-4o-public` is a public catalog model"),
        "{public}"
    );
    let internal = explain(&c, &chat_body("gpt-4o-primary"), CHAT, &[]).unwrap_err();
    assert!(
        internal.contains("404") && internal.contains("model_not_found"),
        "{internal}"
    );

    // "Requests prefer claude-primary"; a failed request is not moved to the backups.
    let (c, _) = import("agentgateway", "failover-routing.yaml", &[]);
    assert_eq!(
        candidates(&c, "resilient", "/v1/messages", &[]),
        names(&["claude-primary"])
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        config.contains(r#""consecutive_failures": 1"#) && config.contains(r#""duration": "60s""#),
        "{config}"
    );

    let (c, _) = import("agentgateway", "conditional-routing.yaml", &[]);
    assert_eq!(
        candidates(&c, "adaptive", CHAT, &["x-tier:free"]),
        names(&["openai-fast"])
    );
    assert_eq!(
        candidates(&c, "adaptive", CHAT, &["x-tier:pro"]),
        names(&["openai-smart"])
    );
}

/// agentgateway virtual models, "Failover routing": "traffic moves to the next group only after
/// every target in the current group is evicted. Lowering a health score alone is not enough"; and
/// "Health vs eviction": with no health policy "endpoints are never evicted, so traffic never fails
/// over to the next priority".
#[test]
fn agentgateway_priority_groups_spill_only_when_every_target_is_evicted() {
    let src = temp(
        "failover-no-eviction.yaml",
        r#"llm:
  models:
    - {name: primary, provider: openAI, params: {model: gpt-4o}}
    - {name: backup, provider: openAI, params: {model: gpt-4o-mini}}
  virtualModels:
    - name: resilient
      routing:
        failover:
          targets: [{model: primary, priority: 0}, {model: backup, priority: 1}]
"#,
    );
    let (ok, out, err) = run(&["import", "--from", "agentgateway", src.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(err.contains("failure_window: {failures: 0}"), "{err}");
    let mut r = Replay::load(&temp("failover-no-eviction.json", &out));
    for at in [0, 1_000, 2_000] {
        r.answer("primary", FAILED_503, None, at);
        r.answer("primary", AttemptOutcome::ConnectFailure, None, at);
    }
    assert_eq!(
        r.candidates("resilient", &[], 3_000)[0],
        "primary",
        "failing but never evicted: the priority 0 group keeps its traffic"
    );

    // agentgateway virtual models, "Health vs eviction": one unhealthy response evicts
    // claude-primary for 60 s.
    let (c, _) = import("agentgateway", "failover-routing.yaml", &[]);
    let mut r = Replay::load(&c);
    r.answer("claude-primary", FAILED_503, None, 0);
    // "Later requests fail over to the priority: 1 group and load balance between
    // claude-backup-a and claude-backup-b".
    let firsts: Vec<String> = (0..200)
        .map(|_| r.candidates("resilient", &[], 1_000).remove(0))
        .collect();
    for backup in ["claude-backup-a", "claude-backup-b"] {
        let n = firsts.iter().filter(|f| *f == backup).count();
        assert!((60..=140).contains(&n), "{backup}: {n} of 200");
    }
    // "a degraded target is weighted down; the other backup continues to receive more
    // traffic until the degraded target recovers or is also evicted": evicted here, as
    // consecutiveFailures is 1.
    r.answer("claude-backup-a", FAILED_503, None, 1_000);
    assert_eq!(
        r.candidates("resilient", &[], 2_000),
        names(&["claude-backup-b"])
    );
    // Back after the 60 s duration.
    assert_eq!(r.candidates("resilient", &[], 60_000)[0], "claude-primary");
}

/// Zuplo model load balancing, "Failures and retries": "The policy doesn't remember failures
/// between requests. While a model is down, every request that picks it tries it first ... With
/// `sticky` routing, the same callers pick the failing model every time." agentgateway virtual
/// models, "Failover routing": "Failover is driven by eviction of the active set, not by rewriting
/// a single in-flight request to another target. The request that triggers eviction still fails": a
/// connection failure or timeout included.
#[test]
fn agentgateway_a_failed_request_is_never_moved_to_another_target() {
    for (file, vm, path) in [
        ("failover-routing.yaml", "resilient", "/v1/messages"),
        ("weighted-routing.yaml", "smart", CHAT),
    ] {
        let (c, err) = import("agentgateway", file, &[]);
        assert!(err.contains("max_targets_per_request: 1"), "{err}");
        let got = candidates(&c, vm, path, &[]);
        assert_eq!(got.len(), 1, "{file}: one target per request: {got:?}");
    }
}

/// Zuplo model load balancing, "Endpoints": `GET`/`DELETE /v1/responses/{id}` are "routed to the
/// account that holds the response, when the policy can tell which one it is"; "Stored responses":
/// when every model that stores responses has one provider name they go there, and otherwise (no
/// user or expression key) they fail with 400.
#[test]
fn zuplo_stored_response_reads_are_routed_by_the_imported_policy() {
    let (c, err) = import(
        "zuplo",
        "keep-each-customer-on-one-model.json",
        &["--name", "chat"],
    );
    assert!(
        err.contains("stored_responses_virtual_model: `chat`"),
        "{err}"
    );
    assert_eq!(stored_read(&c), Ok("openai/gpt-5".to_string()));
    // "with this list, its requests to read or continue a response fail".
    let (c, _) = import(
        "zuplo",
        "keep-conversations-on-one-deployment.json",
        &["--name", "chat"],
    );
    let e = stored_read(&c).unwrap_err();
    assert!(
        e.starts_with("400 ") && e.contains("stored_response_unroutable"),
        "{e}"
    );

    // Two policies serving Responses: which one reads stored responses depends on the route.
    let two = temp(
        "two-policies.json",
        r#"{"policies": [
            {"name": "a", "policyType": "ai-gateway-load-balancing-inbound",
             "handler": {"options": {"models": {"completions": ["openai/gpt-5"]}}}},
            {"name": "b", "policyType": "ai-gateway-load-balancing-inbound",
             "handler": {"options": {"models": {"completions": ["openai/gpt-5-mini"]}}}}]}"#,
    );
    let (ok, out, err) = run(&["import", "--from", "zuplo", two.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        err.contains(
            "not carried over: (stored-response reads): 2 policies serve Responses (a, b)"
        ),
        "{err}"
    );
    assert!(!out.contains("stored_responses_virtual_model"), "{out}");
}

/// Zuplo model load balancing, "Endpoints": "OpenRouter stores no responses. When the list also has
/// a model that does, OpenRouter gets only creates that set `store` to `false`"; Bedrock Mantle
/// serves the Responses API for models other than Claude, and stores what it creates.
#[test]
fn zuplo_bedrock_mantle_stores_responses_and_openrouter_does_not() {
    let src = temp(
        "mantle.json",
        r#"{"models": {"completions": ["bedrockmantle/openai.gpt-oss-120b", "openrouter/openai/gpt-5"]}}"#,
    );
    let (ok, out, err) = run(&[
        "import",
        "--from",
        "zuplo",
        src.to_str().unwrap(),
        "--name",
        "r",
    ]);
    assert!(ok, "{err}");
    let c = temp("mantle-config.json", &out);
    let create = |store: &str| {
        let body = format!(r#"{{"model": "r", "input": "Hello"{store}}}"#);
        sorted(listed(&explain(&c, &body, "/v1/responses", &[]).unwrap()))
    };
    assert_eq!(create(""), names(&["bedrockmantle/openai.gpt-oss-120b"]));
    assert_eq!(
        create(r#", "store": false"#),
        names(&[
            "bedrockmantle/openai.gpt-oss-120b",
            "openrouter/openai/gpt-5"
        ])
    );
}

/// An `openai` account under its own provider name, as the README's `openai-east/gpt-4o`, is an
/// OpenAI model: it serves the Responses API (Zuplo model load balancing, "Endpoints": "OpenAI
/// models"; TrueFoundry virtual models, "Supported API Types": every target must serve the
/// operation natively). Where a name does not tell, `--provider NAME=KIND` does.
#[test]
fn a_provider_named_for_openai_is_openai_and_provider_sets_any_kind() {
    let src = temp(
        "openai-accounts.json",
        r#"{"models": {"completions": ["openai-east/gpt-5", "OpenAI_West/gpt-5", "team-gpt/gpt-5"]}}"#,
    );
    let src = src.to_str().unwrap();
    let (ok, out, err) = run(&["import", "--from", "zuplo", src, "--name", "r"]);
    assert!(ok, "{err}");
    let c = temp("openai-accounts-config.json", &out);
    assert_eq!(
        sorted(candidates(&c, "r", "/v1/responses", &[])),
        names(&["OpenAI_West/gpt-5", "openai-east/gpt-5"])
    );
    assert!(
        err.contains("provider kind `openai-compatible`, guessed from the name; --provider team-gpt=KIND sets it"),
        "{err}"
    );

    let args = ["import", "--from", "zuplo", src, "--name", "r"];
    let (ok, out, err) = run(&[&args[..], &["--provider", "Team-GPT=openai"]].concat());
    assert!(ok, "{err}");
    assert!(
        err.contains("provider kind `openai`, from --provider"),
        "{err}"
    );
    let c = temp("openai-accounts-given.json", &out);
    assert_eq!(
        candidates(&c, "r", "/v1/responses", &[]).len(),
        2,
        "at most two models"
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert_eq!(
        config.matches(r#""provider": "openai""#).count(),
        3,
        "{config}"
    );

    // An unknown kind is an error naming the option.
    let (ok, _, err) = run(&[&args[..], &["--provider", "team-gpt=gemini"]].concat());
    assert!(
        !ok && err.contains("--provider team-gpt=gemini: expected NAME=KIND"),
        "{err}"
    );
    // A name that says openai-compatible is taken at its word.
    let (ok, out, err) = run(&[
        "import",
        "--from",
        "zuplo",
        temp(
            "compat.json",
            r#"{"models": {"completions": ["openai-compatible/llama"]}}"#,
        )
        .to_str()
        .unwrap(),
        "--name",
        "r",
    ]);
    assert!(
        ok && out.contains(r#""provider": "openai-compatible""#),
        "{err}"
    );
}

#[test]
fn zuplo_imports_remember_no_failures_between_requests() {
    let (c, err) = import("zuplo", "sticky-by-expression.json", &["--name", "chat"]);
    assert!(err.contains("Zuplo remembers no failures"), "{err}");
    let mut r = Replay::load(&c);
    let alice = [("x-end-user-id", "alice")];
    let picked = r.candidates("chat", &alice, 0);
    for at in [1_000, 2_000, 3_000] {
        r.answer(&picked[0], FAILED_503, None, at);
        r.answer(&picked[0], AttemptOutcome::ConnectFailure, None, at);
    }
    r.answer(&picked[0], AttemptOutcome::Status(429), Some(30_000), 4_000);
    assert_eq!(
        r.candidates("chat", &alice, 5_000),
        picked,
        "the model that failed is still the one alice's requests try first"
    );
    // One rate-limited answer asking for 30 s away is not remembered either.
    let mut r = Replay::load(&c);
    r.answer(&picked[0], AttemptOutcome::Status(429), Some(30_000), 0);
    assert_eq!(r.candidates("chat", &alice, 1_000), picked);
    // Nor a spent quota or a refused key, which Switchboard evicts by default.
    assert!(err.contains("quota_duration: \"0s\""), "{err}");
    let mut r = Replay::load(&c);
    let quota = (AttemptOutcome::Status(429), FailureClass::Quota);
    r.answer_as(&picked[0], quota, None, 0);
    r.answer(&picked[0], AttemptOutcome::Status(401), None, 0);
    assert_eq!(r.candidates("chat", &alice, 1_000), picked);
}

#[test]
fn zuplo_policy_entry_example_round_robins_with_the_next_model_as_retry_model() {
    let (c, err) = import("zuplo", "policy-entry.json", &[]);
    assert!(err.contains("model_name_case: insensitive"), "{err}");
    let vm = "my-ai-gateway-load-balancing-inbound-policy";
    let got = candidates(&c, vm, CHAT, &[]);
    assert_eq!(got.len(), 2, "at most two models per request: {got:?}");
    // "a retry model: the model the strategy would pick next", in list order.
    let list = ["azure-eastus/gpt-5", "azure-westus/gpt-5", "openai/gpt-5"];
    let at = list.iter().position(|m| *m == got[0]).unwrap();
    assert_eq!(got[1], list[(at + 1) % 3], "{got:?}");
    // "Round robin gives every model in the list an equal share of requests." Each simulated
    // request is its own app, and each app's place starts at random ("Round robin": "a
    // separate place in the list for each app"): equal within about 4 standard deviations of
    // 10,000 random starts (0.47 points each).
    for (model, share) in first_attempts(&c, vm, CHAT) {
        assert!((share - 100.0 / 3.0).abs() < 2.0, "{model}: {share}");
    }
    // Names compare without case.
    assert_eq!(candidates(&c, &vm.to_ascii_uppercase(), CHAT, &[]).len(), 2);
    let config = std::fs::read_to_string(&c).unwrap();
    for field in [
        r#""backoff_multiplier": 2"#,
        r#""delay": 250"#,
        r#""fallback_timeout_ms": 60000"#,
        r#""on_connection_failure": false"#,
        r#""5xx""#,
    ] {
        assert!(config.contains(field), "{field}: {config}");
    }
}

#[test]
fn zuplo_serve_one_model_example_serves_claude_on_chat_and_messages_only() {
    let (c, _) = import(
        "zuplo",
        "serve-one-model-from-several-providers.json",
        &["--name", "sonnet"],
    );
    let both = names(&[
        "anthropic/claude-sonnet-4-6",
        "bedrockmantle/anthropic.claude-sonnet-4-6",
    ]);
    assert_eq!(sorted(candidates(&c, "sonnet", CHAT, &[])), both);
    assert_eq!(
        sorted(candidates(&c, "sonnet", "/v1/messages", &[])),
        both,
        "Claude serves Messages on any provider"
    );
    // Anthropic itself serves Messages: chat is translated for it ("A list mixes vendors"),
    // not sent to its OpenAI-compatibility endpoint; Messages is never translated.
    let chat = explain(&c, &chat_body("sonnet"), CHAT, &[]).unwrap();
    assert!(
        chat.contains("anthropic/claude-sonnet-4-6 (translated: sent as Anthropic Messages"),
        "{chat}"
    );
    assert!(
        !chat.contains("bedrockmantle/anthropic.claude-sonnet-4-6 (translated"),
        "{chat}"
    );
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(
        !config.contains(r#""translate""#),
        "Zuplo's is the default: {config}"
    );
    // "/v1/responses: ... other than Claude": neither model can serve it.
    let e = explain(&c, &chat_body("sonnet"), "/v1/responses", &[]).unwrap_err();
    assert!(
        e.contains("400") && e.contains("unsupported_endpoint"),
        "{e}"
    );
}

#[test]
fn zuplo_keep_conversations_example_keeps_a_conversation_and_refuses_raw_continuations() {
    let (c, _) = import(
        "zuplo",
        "keep-conversations-on-one-deployment.json",
        &["--name", "chat"],
    );
    let first = candidates(&c, "chat", CHAT, &[]);
    assert_eq!(first.len(), 2);
    assert_eq!(
        candidates(&c, "chat", CHAT, &[]),
        first,
        "one conversation, one model"
    );
    // "A Responses API client that continues a stored response with previous_response_id
    // ... its requests to read or continue a response fail".
    let body = r#"{"model": "chat", "input": "And then?", "previous_response_id": "resp_abc123"}"#;
    let e = explain(&c, body, "/v1/responses", &[]).unwrap_err();
    assert!(
        e.contains("400") && e.contains("stored_response_unroutable"),
        "{e}"
    );
}

#[test]
fn zuplo_keep_each_customer_example_keeps_each_caller_on_one_model() {
    let (c, err) = import(
        "zuplo",
        "keep-each-customer-on-one-model.json",
        &["--name", "chat"],
    );
    assert!(err.contains("`sub` claim of the JWT"), "{err}");
    // No verified JWT here: round robin over both; only OpenAI serves /v1/responses.
    assert_eq!(candidates(&c, "chat", CHAT, &[]).len(), 2);
    assert_eq!(
        candidates(&c, "chat", "/v1/responses", &[]),
        names(&["openai/gpt-5"])
    );
    assert_eq!(
        candidates(&c, "chat", "/v1/messages", &[]),
        names(&["anthropic/claude-sonnet-4-6"])
    );
    // With a verified caller: "keeps every customer on one model while customers spread
    // across the list".
    let r = Replay::load(&c);
    let picks: Vec<String> = (0..40)
        .map(|i| {
            let user = format!("app-{i}");
            let first = r.candidates_as(&user, "chat");
            assert_eq!(r.candidates_as(&user, "chat"), first, "{user}");
            first
        })
        .collect();
    assert!(picks.iter().any(|p| p == "openai/gpt-5"));
    assert!(picks.iter().any(|p| p == "anthropic/claude-sonnet-4-6"));
}

#[test]
fn zuplo_balance_embeddings_example_spreads_over_both_accounts() {
    let (c, _) = import("zuplo", "balance-embeddings.json", &["--name", "embed"]);
    assert_eq!(
        sorted(candidates(&c, "embed", "/v1/embeddings", &[])),
        names(&[
            "azure-eastus/text-embedding-3-large",
            "openai/text-embedding-3-large"
        ])
    );
}

#[test]
fn zuplo_sticky_by_expression_example_keys_on_the_header() {
    // The expression's header stays the key: one end user, one model.
    let (c, _) = import("zuplo", "sticky-by-expression.json", &["--name", "chat"]);
    let config = std::fs::read_to_string(&c).unwrap();
    assert!(config.contains(r#""key": "x-end-user-id""#), "{config}");
    let alice = candidates(&c, "chat", CHAT, &["x-end-user-id:alice"]);
    assert_eq!(alice.len(), 2);
    assert_eq!(
        candidates(&c, "chat", CHAT, &["x-end-user-id:alice"]),
        alice
    );
    // End users spread over the list.
    let users: Vec<String> = (0..12)
        .map(|i| candidates(&c, "chat", CHAT, &[&format!("x-end-user-id:user-{i}")]).remove(0))
        .collect();
    assert!(users.iter().any(|u| u != &users[0]), "{users:?}");
    // "When the expression resolves to nothing ... the request goes round robin": each
    // simulated request its own app, at a random place (within 4 standard deviations).
    for (model, share) in first_attempts(&c, "chat", CHAT) {
        assert!((share - 50.0).abs() < 2.0, "{model}: {share}");
    }
}

#[test]
fn zuplo_policy_order_example_gets_the_default_declared_options() {
    // A chain entry without options: Zuplo's default declared options.
    let (c, err) = import("zuplo", "policy-order.json", &[]);
    assert!(
        err.contains("not carried over: inboundPolicyChain[2]: Fallback Model's"),
        "{err}"
    );
    assert_eq!(
        candidates(&c, "ai-gateway-load-balancing-inbound", CHAT, &[]),
        names(&["openai/gpt-4o-mini"])
    );
    // "... and fails Messages and System One requests with 400, because that model can't
    // serve them".
    let e = explain(
        &c,
        &chat_body("ai-gateway-load-balancing-inbound"),
        "/v1/messages",
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("400") && e.contains("unsupported_endpoint"),
        "{e}"
    );
}

#[test]
fn zuplo_configure_lists_per_app_example_keeps_every_turn_together() {
    let (c, _) = import("zuplo", "configure-lists-per-app.json", &[]);
    assert_eq!(
        sorted(candidates(
            &c,
            "ai-gateway-load-balancing-inbound",
            CHAT,
            &[]
        )),
        names(&["azure-eastus/gpt-5", "azure-westus/gpt-5"])
    );
    // Sticky by conversation: every turn of a conversation goes where its first did, and
    // conversations spread over the list.
    let vm = "ai-gateway-load-balancing-inbound";
    let turn = |conversation: usize, n: usize| {
        let later = (1..n)
            .map(|i| format!(r#", {{"role": "assistant", "content": "a{i}"}}, {{"role": "user", "content": "q{i}"}}"#))
            .collect::<String>();
        let body = format!(
            r#"{{"model": "{vm}", "messages": [{{"role": "system", "content": "Be brief."}}, {{"role": "user", "content": "Hello {conversation}"}}{later}]}}"#
        );
        listed(&explain(&c, &body, CHAT, &[]).unwrap()).remove(0)
    };
    let firsts: Vec<String> = (0..12).map(|i| turn(i, 1)).collect();
    for (i, first) in firsts.iter().enumerate() {
        assert_eq!(&turn(i, 3), first, "conversation {i}");
    }
    assert!(firsts.iter().any(|f| f != &firsts[0]), "{firsts:?}");
}

#[test]
fn fields_that_cannot_be_carried_over_are_reported_on_stderr() {
    let ag = temp(
        "unsupported.yaml",
        r#"llm:
  models:
    - name: gem
      provider: gemini
      params: {model: gemini-2.0, apiKey: sk-literal, hostOverride: example.com:443}
      health:
        unhealthyExpression: response.code >= 500
        eviction: {duration: 10s}
      rateLimit: 5
  virtualModels:
    - name: v
      description: not a field
      routing:
        weighted:
          targets:
            - {model: gem, weight: 3, params: {temperature: 0.1, model: other}}
"#,
    );
    let (ok, out, err) = run(&["import", "--from", "agentgateway", ag.to_str().unwrap()]);
    assert!(ok, "{err}");
    for line in [
        "not carried over: llm.models[0].rateLimit:",
        "not carried over: llm.models[0].params.hostOverride:",
        "not carried over: llm.models[0].params.apiKey: a literal key is never copied",
        "not carried over: llm.models[0].health.unhealthyExpression:",
        "not carried over: llm.virtualModels[0].description:",
        "not carried over: llm.virtualModels[0].routing.weighted.targets[0].params.model:",
        "note: llm.models[0].provider: `gemini` is not openai, azure or anthropic",
        "weights [3] scaled to [100]",
    ] {
        assert!(err.contains(line), "{line}\n{err}");
    }
    assert!(
        !out.contains("sk-literal") && out.contains(r#""temperature": 0.1"#),
        "{out}"
    );

    let zu = temp(
        "unsupported.json",
        r#"{"strategy": "sticky", "stickyBy": "expression", "expression": "context.custom.tenant",
            "cacheTtl": 5, "models": {"completions": ["openai/gpt-5", "OpenAI/gpt-5-mini"]}}"#,
    );
    let (ok, out, err) = run(&[
        "import",
        "--from",
        "zuplo",
        zu.to_str().unwrap(),
        "--name",
        "x",
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("not carried over: cacheTtl:"), "{err}");
    assert!(
        err.contains(
            "not carried over: expression: `context.custom.tenant` reads what Envoy cannot see"
        ),
        "{err}"
    );
    assert!(out.contains("round-robin-routing"), "{out}");

    let tf = temp(
        "unsupported.yaml",
        "name: a/b\nmodel_types: [chat]\nowner: me\nrouting_config:\n  type: weight-based-routing\n  load_balance_targets:\n    - target: openai/gpt-4o\n      weight: 100\n      budget: 5\n",
    );
    let (ok, _, err) = run(&["import", "--from", "truefoundry", tf.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        err.contains("not carried over: owner:")
            && err.contains("not carried over: routing_config.load_balance_targets[0].budget:"),
        "{err}"
    );
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_field() {
    let cases = [
        ("zuplo", "t1.json", r#"{"fallbackTimeoutSeconds": 301, "models": {"completions": ["openai/gpt-5"]}}"#, "fallbackTimeoutSeconds: expected a whole number of seconds from 1 through 300, got 301"),
        ("zuplo", "t2.json", r#"{"models": {"completions": ["openai/gpt-5", "OPENAI/gpt-5"]}}"#, "models.completions[1]: `OPENAI/gpt-5` is listed twice"),
        ("zuplo", "t3.json", r#"{"strategy": "sticky", "models": {"completions": ["openai/gpt-5"]}}"#, "stickyBy: is required when strategy is sticky"),
        ("zuplo", "t4.json", r#"{"models": {"completions": ["gpt-5"]}}"#, "models.completions[0]: `gpt-5` is not a model written as providerName/model"),
        ("zuplo", "t5.json", r#"{"models": {}}"#, "models: set at least one list"),
        ("agentgateway", "t6.yaml", "llm:\n  virtualModels:\n    - name: v\n      routing: {weighted: {targets: [{model: nope, weight: 1}]}}\n", "llm.virtualModels[0].routing.weighted.targets[0].model: `nope` is not a model in llm.models"),
        ("agentgateway", "t7.yaml", "llm: [1, 2\n", "not valid YAML"),
        ("truefoundry", "t8.yaml", "routing_config:\n  type: weight-based-routing\n  load_balance_targets:\n    - target: openai/gpt-4o\n      weight: 90\n", "weights sum to 90"),
    ];
    let many: Vec<String> = (0..33).map(|i| format!("\"p{i}/m\"")).collect();
    let t9 = format!(r#"{{"models": {{"completions": [{}]}}}}"#, many.join(","));
    for (from, name, text, says) in cases.iter().copied().chain([(
        "zuplo",
        "t9.json",
        t9.as_str(),
        "must list from 1 through 32 models, got 33",
    )]) {
        let f = temp(name, text);
        let (ok, out, err) = run(&["import", "--from", from, f.to_str().unwrap(), "--name", "x"]);
        assert!(!ok && out.is_empty(), "{name}: {out}");
        assert!(
            err.starts_with(f.to_str().unwrap()) && err.contains(says),
            "{name}: {err}"
        );
    }
    let (ok, _, err) = run(&["import", "--from", "kong", "x.yaml"]);
    assert!(!ok && err.contains("x.yaml"), "{err}");
}

/// Every virtual model of a Zuplo import, from the config it wrote.
fn zuplo_virtual_models(file: &str) -> (Vec<serde_json::Value>, String) {
    let src = format!("{FIXTURES}/zuplo/{file}");
    let (ok, out, err) = run(&["import", "--from", "zuplo", &src, "--name", "vm"]);
    assert!(ok, "{src}: {err}");
    // A file of its own: tests run in parallel.
    let written = temp(&format!("zuplo-failures-{file}"), &out);
    let (ok, _, check) = run(&["check", written.to_str().unwrap()]);
    assert!(ok, "{src}: {check}");
    let config: serde_json::Value = serde_json::from_str(&out).unwrap();
    let vms = config["virtual_models"].as_array().unwrap().clone();
    assert!(!vms.is_empty());
    (vms, err)
}

#[test]
fn zuplo_imports_carry_the_per_endpoint_failure_rules() {
    // Zuplo model load balancing, "Failures and retries": Responses and Messages fail on a
    // 5xx, 408, 425 or an unreachable model, and keep waiting for a slow one.
    for file in ["policy-entry.json", "configure-lists-per-app.json"] {
        let (vms, err) = zuplo_virtual_models(file);
        for vm in &vms {
            assert_eq!(
                vm["fail_fast_endpoints"],
                serde_json::json!(["responses", "messages"]),
                "{file}: {vm}"
            );
            // The retry model "starts over with twice the time".
            assert_eq!(vm["fallback_timeout_growth"], 2, "{file}: {vm}");
            // "... and the request fails if that runs out too".
            assert_eq!(vm["fallback_timeout_at_last"], "fail", "{file}: {vm}");
            // "A response that doesn't stream starts only when it's complete, so the timeout
            // covers the whole response."
            assert_eq!(vm["fallback_timeout_scope"], "whole_answer", "{file}: {vm}");
        }
        assert!(
            err.contains("fail_fast_endpoints: responses, messages"),
            "{err}"
        );
        assert!(
            err.contains("fallback_timeout_growth: 2, fallback_timeout_at_last: fail"),
            "{err}"
        );
        assert!(!err.contains("Responses and Messages failures"), "{err}");
        assert!(
            !err.contains("fallbackTimeoutSeconds on the retry model"),
            "{err}"
        );
    }
}
