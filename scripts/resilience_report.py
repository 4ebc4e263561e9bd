"""`make resilience-report`: runs the fault-injection tests and writes docs/resilience.md
with the figures they measured (each test asserts its bound; this only reports the values)."""

import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "resilience.md"
ENVOY = ROOT / ".venv" / "bin" / "envoy"

SCENARIOS = {
    "test_failing_target_is_invisible_to_clients_and_stops_getting_traffic":
        "1. One of two 50/50 targets answers 503 to everything; 1,000 requests from 8 clients",
    "test_429_with_retry_after_evicts_for_that_long_then_the_target_returns":
        "2. A 429 with `Retry-After: 2` evicts the target; it then answers again",
    "test_priority_group_spills_to_backup_only_when_both_members_are_evicted":
        "3. Priority group of two in front of a backup",
    "test_target_stalling_past_fallback_timeout_is_abandoned":
        "4. The primary stalls for 10 s; `fallback_timeout_ms: 500`",
    "test_retry_config_retries_the_same_target_with_its_delay":
        "5a. `retry_config {attempts: 2, delay: 150}` on an always-503 target",
    "test_fallback_never_goes_to_a_target_that_is_not_a_fallback_candidate":
        "5b. `fallback_candidate: false`",
    "test_when_every_target_fails_the_last_error_passes_through_with_the_attempt_count":
        "6. Every target down",
    "test_connection_refused_and_dropped_connections_fall_back":
        "Connection refused and a connection dropped before the response",
    "test_sla_cutoff_on_time_to_first_token_moves_a_slow_target_behind":
        "SLA cutoff on TTFT (3 slow streamed answers, then the backup)",
    "test_sla_cutoff_on_time_per_output_token":
        "SLA cutoff on TPOT (30-token minimum respected)",
    "test_unhealthy_target_recovers_once_its_failures_age_out":
        "Failure window ageing (window set to 2 s)",
    "test_repeated_evictions_back_off":
        "Eviction backoff (`duration: 500ms`, target fails on every return)",
    "test_hostile_upstreams_never_break_the_vm":
        "429 storm, 200 with an error body, stream cut mid-way",
}

# Measured on each build: the native module streams every attempt itself, the .wasm takes the
# router path (`stream_fallbacks: "router"`; README, "Which build to use").
STREAM_SCENARIOS = {
    "test_a_fallback_streams_as_it_arrives":
        "Streamed fallback (the .wasm on the router path, the native build): a 503, then a fallback "
        "streaming 20 chunks 250 ms apart, `fallback_timeout_ms: 1000`",
}

# What Switchboard does per failure class, and what each seed does (the seeds: TrueFoundry virtual
# models, agentgateway virtual models, Zuplo model load balancing). Each Switchboard cell is what
# tests/e2e/test_failure_classes.py, test_answer_fallbacks.py and test_request_deadline.py assert on
# both builds (the report runs them and prints their result lines).
CLASSES = [
    ("Quota spent (429, 403 or 400 whose body says so: OpenAI `insufficient_quota`, "
     "`billing_hard_limit_reached`, Anthropic's credit balance, Azure's quota; `health.quota_patterns`)",
     "not retried; the next target at once; evicted for `health.eviction.quota_duration` (1 h)",
     "a 429: retried (`on_status_codes`), then the fallback; counts toward unhealthy (2 in 2 min)",
     "a 429 with Retry-After evicts for it (with a health policy); otherwise a score change",
     "retried twice (250, 500 ms), then the retry model; nothing remembered (import: quota eviction off)"),
    ("Rate limited (429 with Retry-After, retry-after-ms or x-ratelimit-reset-*)",
     "retried / falls back by the target's codes; evicted for the hint (at most 10 min)",
     "retried, then the fallback; counts toward unhealthy",
     "evicted for Retry-After",
     "retried twice, then the retry model"),
    ("Rate limited, no hint (429 alone)",
     "as above; evicted 1, 2, 4 ... 60 s for each eviction in a row, reset by a success",
     "retried, then the fallback; counts toward unhealthy",
     "evicted for the retry policy's backoff, else 3 s (with `eviction`)",
     "retried twice, then the retry model"),
    ("Gateway credential refused (401/403 to the catalog's or `headers_override`'s key)",
     "the next target at once; evicted for `health.eviction.credential_duration` (5 min)",
     "falls back (401/403 in the default codes); counts toward unhealthy",
     "not unhealthy by default (5xx only)",
     "fails the request (import: credential eviction off)"),
    ("Client's own credential refused (401/403, no gateway key sent)",
     "falls back by `fallback_status_codes`; never counts against the target",
     "counts toward unhealthy", "not unhealthy by default", "fails the request"),
    ("Overloaded (Anthropic 529 `overloaded_error`)",
     "retried and falls back like a 503 (default codes)",
     "counts (5xx); not in the default retry or fallback codes",
     "unhealthy (5xx)", "the retry model (5xx)"),
    ("The client's bad request (400, 413, 422) or the client hanging up",
     "to the client as it is; never counts against the target",
     "passes through unchanged", "not unhealthy", "fails the request"),
    ("Prompt too long (400 `context_length_exceeded`, Anthropic \"prompt is too long\")",
     "with `fallback_on: [context_length]` the next target, not counted; else to the client",
     "passes through", "not unhealthy", "fails the request"),
    ("Refusal (200 `finish_reason: content_filter`, `stop_reason: refusal`; Azure 400 `content_filter`)",
     "with `fallback_on: [content_filter]` the next target, not counted; else to the client",
     "delivered", "delivered", "delivered"),
    ("Empty answer, or an error object in a 200",
     "with `fallback_on: [empty]` / `[error_body]` the next target, counted against the target",
     "delivered", "delivered", "delivered"),
    ("A slow failure (past `fallback_if_failed_within_ms`)",
     "returned to the client, no further attempt",
     "retried / falls back", "retried if configured", "the retry model"),
    ("The request's budget spent (`request_deadline_ms`)",
     "no attempt starts after it; the last failed answer, else a 504 `deadline_exceeded`; "
     "a held stream is committed, a sent one never cut",
     "no whole-request budget", "no whole-request budget (route timeouts)",
     "`fallbackTimeoutSeconds` per model only"),
    ("Most targets evicted (`max_evicted_share`)",
     "past the share, the least recently failed evicted targets count as unhealthy and serve first",
     "no cap", "no cap (a group spills only when all are evicted)", "nothing remembered"),
]
CLASS_TESTS = ["tests/e2e/test_failure_classes.py", "tests/e2e/test_answer_fallbacks.py",
               "tests/e2e/test_request_deadline.py"]


def run_tests(path: str, figures_path: str, build: str | None = None, select: str | None = None):
    """Runs one test file with figures recorded; its pytest summary line and return code."""
    env = {**os.environ, "SWITCHBOARD_FIGURES": figures_path}
    if build:
        env["SWITCHBOARD_BUILD"] = build
    cmd = [sys.executable, "-m", "pytest", *path.split(), "-q", "-p", "no:cacheprovider"]
    if select:
        cmd += ["-k", select]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    return summary, run.returncode


def main() -> int:
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        figures_path = f.name
    summary, code = run_tests("tests/e2e/test_resilience.py", figures_path)
    streamed = " or ".join(STREAM_SCENARIOS)
    wasm_summary, wasm_code = run_tests("tests/e2e/test_router_path.py", figures_path, "wasm", streamed)
    native_summary, native_code = run_tests("tests/e2e/test_router_path.py", figures_path, "native", streamed)
    classes = {build: run_tests(" ".join(CLASS_TESTS), figures_path, build) for build in ("wasm", "native")}
    rows = [json.loads(line) for line in Path(figures_path).read_text().splitlines() if line.strip()]
    os.unlink(figures_path)
    envoy_version = subprocess.run([str(ENVOY), "--version"], capture_output=True, text=True).stdout.strip()

    lines = [
        "# Resilience report",
        "",
        "Generated by `make resilience-report` (runs `tests/e2e/test_resilience.py`, the failure-class tests and the",
        "streamed-fallback test of `tests/e2e/test_router_path.py` on each build; every",
        "figure below is a value one of those tests measured, and the test also asserts its bound).",
        "",
        f"- Date: {date.today().isoformat()}",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        f"- Envoy: `{envoy_version.split('version:')[-1].strip()}`, `--concurrency 2`, filter from this tree",
        "- Upstreams: `tools/mock-provider` processes on 127.0.0.1 with failure injection",
        f"- Result: `{summary}`; streamed fallback: .wasm `{wasm_summary}`, native `{native_summary}`",
        "",
        "Every scenario below passes with zero client-visible errors while at least one target can",
        "answer; scenario 6 is the case where none can.",
        "",
    ]
    for test, title in {**SCENARIOS, **STREAM_SCENARIOS}.items():
        lines += [f"## {title}", "", f"Test: `{test}`", ""]
        measured = [r for r in rows if r["test"] == test]
        if measured:
            lines += ["| Figure | Value |", "|---|---|"]
            for r in measured:
                value = r["value"] if not isinstance(r["value"], list) else ", ".join(map(str, r["value"]))
                lines.append(f"| {r['name']} | {value} {r['unit']} |".replace("  |", " |"))
            lines.append("")
        else:
            lines += ["Asserted exactly in the test (which target served each request).", ""]
    lines += [
        "## Failure classes: what Switchboard does, and what each seed does",
        "",
        "Asserted end to end on both builds by " + ", ".join(f"`{t}`" for t in CLASS_TESTS) + ": "
        + "; ".join(f"{build} `{summary}`" for build, (summary, _) in classes.items()) + ".",
        "",
        "| Failure | Switchboard | TrueFoundry | agentgateway | Zuplo |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in CLASSES]
    lines.append("")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {summary}")
    return code or wasm_code or native_code or any(c for _, c in classes.values())


if __name__ == "__main__":
    sys.exit(main())
