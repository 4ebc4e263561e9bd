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
use switchboard::core::routing::state::LocalState;
use switchboard::core::routing::{plan, HealthInput, Request};

fn bench(name: &str, mut f: impl FnMut()) {
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

fn main() {
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
                r.record(Outcome::Failure { hint_ms: None }, now, &policy)
            }));
        },
    );
}
