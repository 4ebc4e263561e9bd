//! Micro-benchmarks of the pure core (`cargo bench --bench core`, run by `make bench`).
//!
//! No framework: each case runs a warm-up, then enough iterations for about 0.3 s, and prints
//! the mean time per operation. Inputs are built once; `black_box` keeps the work from being
//! optimised away.

// A benchmark that cannot build its input should stop loudly; this is not the request path.
#![allow(clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};
use switchboard::core::config::{Config, Tier};
use switchboard::core::endpoint::Endpoint;
use switchboard::core::headers::Headers;
use switchboard::core::health::policy::{FailureWindow, HealthPolicy};
use switchboard::core::health::record::{HealthRecord, Outcome};
use switchboard::core::health::store::{self, MemoryStore};
use switchboard::core::metadata::Metadata;
use switchboard::core::request::{inspect, rewrite};
use switchboard::core::routing::LocalState;
use switchboard::core::routing::{plan, HealthInput, Request};

/// `CORE_BENCH_ONLY=text` runs only the cases whose name contains it; with
/// `CORE_BENCH_ITERATIONS=n` each runs exactly n times (for callgrind, where time means little).
fn bench(name: &str, mut f: impl FnMut()) {
    if std::env::var("CORE_BENCH_ONLY").is_ok_and(|only| !name.contains(&only)) {
        return;
    }
    if let Some(n) = std::env::var("CORE_BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        for _ in 0..n {
            f();
        }
        println!("{name:<58} {n} iterations");
        return;
    }
    for _ in 0..100 {
        f();
    }
    let mut iterations = 1u64;
    loop {
        let start = Instant::now();
        for _ in 0..iterations {
            f();
        }
        let elapsed = start.elapsed();
        if elapsed > Duration::from_millis(300) || iterations > 1 << 30 {
            let per = elapsed.as_nanos() as f64 / iterations as f64;
            let shown = if per >= 1e6 {
                format!("{:.2} ms", per / 1e6)
            } else if per >= 1e3 {
                format!("{:.2} µs", per / 1e3)
            } else {
                format!("{per:.0} ns")
            };
            println!("{name:<58} {shown:>12}  ({iterations} iterations)");
            return;
        }
        iterations *= 2;
    }
}

fn body(size: usize) -> Vec<u8> {
    let pad = "lorem ipsum dolor sit amet ".repeat(size / 27 + 1);
    let text = &pad[..size.saturating_sub(120)];
    format!(
        r#"{{"messages":[{{"role":"system","content":"You are helpful."}},{{"role":"user","content":"{text}"}}],"model":"bench/vm","stream":false}}"#
    )
    .into_bytes()
}

fn config(strategy: &str, targets: usize) -> Config {
    let models: Vec<String> = (0..targets)
        .map(|i| format!(r#"{{"name":"p{i}/m","cluster":"c{i}","model":"m{i}"}}"#))
        .collect();
    let field = |i: usize| match strategy {
        "weight-based-routing" | "sticky" => format!(
            r#""weight": {}"#,
            100 / targets + usize::from(i < 100 % targets)
        ),
        "priority-based-routing" => format!(r#""priority": {}"#, i / 4),
        "conditional-routing" => format!(r#""when": "request.headers[\"x-tier\"] == \"t{i}\"""#),
        "complexity-based-routing" => {
            let tier = match i % 3 {
                0 => "simple",
                1 => "medium",
                _ => "complex",
            };
            format!(r#""tier": "{tier}""#)
        }
        _ => r#""fallback_candidate": true"#.to_string(),
    };
    let (kind, extra) = match strategy {
        "sticky" => (
            "weight-based-routing",
            r#""sticky_routing": {"ttl_seconds": 3600, "session_identifiers": [{"key": "x-user-id", "source": "headers"}]},"#,
        ),
        "hash-based-routing" => (
            "hash-based-routing",
            r#""hash_key": {"source": "headers", "key": "x-user-id"},"#,
        ),
        other => (other, ""),
    };
    let lb: Vec<String> = (0..targets)
        .map(|i| format!(r#"{{"target":"p{i}/m",{}}}"#, field(i)))
        .collect();
    let json = format!(
        r#"{{"models":[{}],"virtual_models":[{{"name":"bench/vm","model_types":["chat"],
            "routing_config":{{"type":"{kind}",{extra}"load_balance_targets":[{}]}}}}]}}"#,
        models.join(","),
        lb.join(",")
    );
    match Config::parse(json.as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("bench config: {e}"),
    }
}

/// The request `make bench` sends (its 1.5 KB chat: `messages` before `model`) and its
/// config (2 weighted targets with an `authorization` header each): the whole decision the
/// filter makes for it, from the body to the outbound request.
fn bench_request() {
    use switchboard::core::decision::decide;
    let config = match Config::parse(
        br#"{"models": [
          {"name": "provider-0/gpt-4o", "cluster": "provider", "model": "gpt-4o-0",
           "headers": {"authorization": "Bearer sk-bench-0"}},
          {"name": "provider-1/gpt-4o", "cluster": "provider", "model": "gpt-4o-1",
           "headers": {"authorization": "Bearer sk-bench-1"}}],
        "virtual_models": [{"name": "bench/chat", "model_types": ["chat"], "routing_config": {
          "type": "weight-based-routing", "load_balance_targets": [
            {"target": "provider-0/gpt-4o", "weight": 50},
            {"target": "provider-1/gpt-4o", "weight": 50}]}}]}"#,
    ) {
        Ok(c) => c,
        Err(e) => panic!("bench config: {e}"),
    };
    let pad = "lorem ipsum dolor sit amet ".repeat(60);
    let body = format!(
        r#"{{"messages": [{{"role": "system", "content": "You are a helpful assistant."}}, {{"role": "user", "content": "{}"}}], "model": "bench/chat", "temperature": 0.2, "max_tokens": 8}}"#,
        &pad[..1400]
    )
    .into_bytes();
    // The headers Envoy hands the filter for wrk's request.
    let headers = Headers::from_pairs([
        (":authority", "127.0.0.1:10000"),
        (":path", "/v1/chat/completions"),
        (":method", "POST"),
        (":scheme", "http"),
        ("content-length", "1536"),
        ("content-type", "application/json"),
        ("x-user-id", "bench-user-42"),
        ("x-forwarded-proto", "http"),
        ("x-request-id", "9b1f6a3e-3c1d-4f0e-8a7b-2d9c5e4f1a6b"),
    ]);
    let records = vec![HealthRecord::default(); 2];
    let health = HealthInput {
        records: &records,
        now_ms: 10_000,
        window: FailureWindow::default(),
    };
    let state = LocalState::default();
    let mut rng = fastrand::Rng::with_seed(7);
    bench(
        "request: the bench's 1.5 KB chat, 2 weighted targets, whole decision",
        || {
            let d = decide(
                &config,
                Endpoint::ChatCompletions,
                black_box(&body),
                &headers,
                &health,
                &state,
                &mut rng,
            );
            black_box(d.is_ok());
        },
    );
}

fn main() {
    bench_request();
    for (label, size) in [
        ("1.5 KB", 1536),
        ("100 KB", 100 * 1024),
        ("1 MB", 1024 * 1024),
    ] {
        let b = body(size);
        bench(
            &format!("inspect: top-level model of a {label} body"),
            || {
                black_box(inspect(black_box(&b)).is_ok());
            },
        );
        let layout = match inspect(&b) {
            Ok(i) => i.layout(false),
            Err(_) => panic!("inspect failed"),
        };
        let model = b"\"gpt-4o-2024-08-06\"";
        bench(
            &format!("rewrite: the model edit of a {label} body (router attempt)"),
            || {
                black_box(rewrite(black_box(&b), &layout, model, &[]));
            },
        );
        let Some(Some(edits)) = rewrite(&b, &layout, model, &[]) else {
            panic!("rewrite failed")
        };
        bench(
            &format!("rewrite: the whole edited {label} body (fallback)"),
            || {
                black_box(edits.apply(black_box(&b)));
            },
        );
    }

    let records: Vec<HealthRecord> = (0..32)
        .map(|i| HealthRecord {
            failures: if i % 5 == 0 {
                vec![1_000, 2_000]
            } else {
                vec![]
            },
            ..HealthRecord::default()
        })
        .collect();
    let headers = Headers::from_pairs([
        ("x-user-id", "user-1234"),
        ("x-tier", "t31"),
        ("authorization", "Bearer sk-caller-1"),
    ]);
    let state = LocalState::default();
    // The complexity classifier reads the request's text: a 1.5 KB chat.
    let chat = body(1536);
    let fields = match inspect(&chat) {
        Ok(i) => i.fields,
        Err(_) => panic!("inspect failed"),
    };
    for strategy in [
        "weight-based-routing",
        "sticky",
        "priority-based-routing",
        "latency-based-routing",
        "complexity-based-routing",
        "round-robin-routing",
        "hash-based-routing",
        "conditional-routing",
    ] {
        let c = config(strategy, 32);
        let mut rng = fastrand::Rng::with_seed(7);
        let health = HealthInput {
            records: &records,
            now_ms: 10_000,
            window: FailureWindow::default(),
        };
        let metadata = Metadata::default();
        let request = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "bench/vm",
            metadata: &metadata,
            headers: &headers,
            state: &state,
            body: &chat,
            fields: &fields,
            tier_hint: None,
        };
        // The complexity classifier reads the chat's text: that part is request inspection.
        let note = if strategy == "complexity-based-routing" {
            " (scores 1.5 KB of text)"
        } else {
            ""
        };
        bench(
            &format!("decide: {strategy}, 32 targets, with health{note}"),
            || {
                black_box(plan(&c, &request, &health, &mut rng).is_ok());
            },
        );
        if strategy == "complexity-based-routing" {
            // The decision alone: the classifier model named the tier, so no text is read.
            let told = Request {
                tier_hint: Some(Tier::Medium),
                ..request
            };
            bench(
                &format!("decide: {strategy}, 32 targets, with health (tier given)"),
                || {
                    black_box(plan(&c, &told, &health, &mut rng).is_ok());
                },
            );
        }
    }

    let policy = HealthPolicy::default();
    let mut record = HealthRecord::default();
    let mut now = 0u64;
    bench("health: record an outcome", || {
        now += 1;
        record.record(black_box(Outcome::Success), now, &policy);
    });
    let memory = MemoryStore::default();
    bench(
        "health: CAS update of an encoded record (memory store)",
        || {
            now += 1;
            black_box(store::update(&memory, "k", |r| {
                r.record(Outcome::FAILED, now, &policy)
            }));
        },
    );
}
