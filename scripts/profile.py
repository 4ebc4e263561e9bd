"""`make profile`: where Switchboard's time per request goes, host call by host call.

Runs the `profile` build of the filter (every callback and host call timed with the host clock,
see src/proxy_wasm/profile.rs) under wrk for the bench scenarios, collects the per-worker reports
from Envoy's log and writes docs/profile.md. The timing itself costs two clock reads per span,
so totals here are above `make bench`'s; the split between lines is what this is for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from bench import (LOAD_CPU, NOOP_WASM, SCENARIOS as BENCH_SCENARIOS, Upstream, chat_body, cpu_ns,  # noqa: E402
                   plugin_config, start_pinned_envoy, wrk)
from harness import WASM, bootstrap, free_ports, wasm_filter  # noqa: E402

PROFILE_WASM = ROOT / "target" / "profile" / "wasm32-wasip1" / "release" / "switchboard.wasm"
OUT = ROOT / "docs" / "profile.md"
SECONDS = 16  # three 5-second reports per worker; the first (warm-up) is dropped

# The bench's own scenarios (so both measure the same requests), the slow ones left out.
PROFILED = ("1.5 KB chat, 16 connections", "1 MB prompt, 1 connection",
            "1.5 KB chat, 16 connections, 32 targets, sticky routing")
SCENARIOS = [s for s in BENCH_SCENARIOS if s.name in PROFILED]

LINE = re.compile(r"profile (.+?) calls=([\d.]+) total_us=([\d.]+) self_us=([\d.]+)")
HEAD = re.compile(r"profile over (\d+) requests:")


def reports(log: str) -> list[tuple[int, dict[str, tuple[float, float, float]]]]:
    """Every report in the log: (requests, {name: (calls, total µs, self µs) per request})."""
    out = []
    for line in log.splitlines():
        if m := HEAD.search(line):
            out.append((int(m.group(1)), {}))
        elif (m := LINE.search(line)) and out:
            out[-1][1][m.group(1)] = tuple(float(x) for x in m.groups()[1:])
    return out


def merged(found: list[tuple[int, dict]]) -> tuple[int, dict[str, list[float]]]:
    """Request-weighted average of the reports."""
    total = sum(n for n, _ in found)
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for n, names in found:
        for name, values in names.items():
            for i, v in enumerate(values):
                acc[name][i] += v * n / total
    return total, dict(acc)


def run(s, upstream: Upstream) -> tuple[int, dict]:
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    body.write_bytes(chat_body(s.size))
    config = bootstrap(*free_ports(2), upstream.clusters(s),
                       [wasm_filter(plugin_config(s.targets, s.sticky), PROFILE_WASM)], passthrough="provider")
    envoy = start_pinned_envoy(config)
    try:
        wrk(envoy.url, str(body), s.conns, SECONDS)
        time.sleep(0.5)
        found = reports(envoy.log())
    finally:
        envoy.stop()
        body.unlink()
    # The worker's first report includes V8's warm-up: leave it out.
    found = found[1:] or found
    return merged(found)


PERF_HZ = 2000
PERF_SECONDS = 6


def where_envoy_runs(filters: list[dict], upstream: Upstream) -> dict[str, float] | None:
    """Envoy's CPU per request on the 1.5 KB chat at 16 connections, split by the code that ran
    it (sampled with `perf`): the filter's Wasm (V8's JIT code), Envoy and V8 themselves, the
    kernel, the C library. None if perf cannot sample here."""
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    body.write_bytes(chat_body(1536))
    data = Path(tempfile.mkstemp(suffix=".perf")[1])
    config = bootstrap(*free_ports(2), upstream.clusters(SCENARIOS[0]), filters, passthrough="provider")
    envoy = start_pinned_envoy(config)
    try:
        wrk(envoy.url, str(body), 16, 2)  # warm up
        result: dict = {}
        cpu_before = cpu_ns(envoy.proc.pid)
        load = threading.Thread(target=lambda: result.update(wrk(envoy.url, str(body), 16, PERF_SECONDS + 2)))
        load.start()
        time.sleep(1)
        rec = subprocess.run(["taskset", "-c", str(LOAD_CPU), "perf", "record", "-e", "cpu-clock", "-F", str(PERF_HZ),
                              "-o", str(data), "-p", str(envoy.proc.pid), "--", "sleep", str(PERF_SECONDS)],
                             capture_output=True, text=True)
        load.join()
        result["cpu_us"] = (cpu_ns(envoy.proc.pid) - cpu_before) / 1e3 / max(result.get("requests", 0), 1)
        if rec.returncode != 0:
            return None
        report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "-n", "--stdio"],
                                capture_output=True, text=True).stdout
    finally:
        envoy.stop()
        body.unlink()
        data.unlink(missing_ok=True)
    samples: dict[str, int] = defaultdict(int)
    for line in report.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(.+?)\s*$", line)
        if not m:
            continue
        dso = m.group(2)
        kind = ("Wasm (V8 JIT code)" if dso.startswith(("[JIT]", "[unknown]", "[anon")) else "Envoy and V8" if dso == "envoy"
                else "kernel" if dso.startswith("[kernel") else "C library and other")
        samples[kind] += int(m.group(1))
    requests = result.get("rps", 0) * PERF_SECONDS
    if not requests:
        return None
    return {k: n / PERF_HZ / requests * 1e6 for k, n in samples.items()}


def render_perf(split: dict[str, dict[str, float]]) -> list[str]:
    kinds = ["Wasm (V8 JIT code)", "Envoy and V8", "kernel", "C library and other"]
    labels = list(split)
    lines = ["## Envoy's CPU by the code that ran it (1.5 KB chat, 16 connections)", "",
             f"Sampled with `perf record -F {PERF_HZ}` on the Envoy process for {PERF_SECONDS} s under load,"
             " in µs of CPU per request; the filters are the release builds `make bench` runs. The Wasm"
             " line is the filter's own code; the crossings into Envoy for its host calls count under"
             " Envoy and V8.", "",
             "| code | " + " | ".join(labels) + " | difference |", "|---|" + "---|" * (len(labels) + 1)]
    for kind in kinds + ["total"]:
        values = [sum(split[l].values()) if kind == "total" else split[l].get(kind, 0.0) for l in labels]
        lines.append(f"| {kind} | " + " | ".join(f"{v:.1f}" for v in values) + f" | {values[-1] - values[0]:+.1f} |")
    return lines + [""]


def render(results: list[tuple[str, int, dict]]) -> str:
    lines = [
        "# Where the time goes",
        "",
        "Generated by `make profile`: the `profile` build of the filter times every callback and",
        "host call with the host clock; figures are per request. Envoy runs `--concurrency 1` on CPU 0,",
        "wrk and the lean upstream on CPU 1, as in `make bench`.",
        "`self` is time not spent in a nested span: for a host call, the crossing into Envoy and",
        "Envoy's work; for a callback, the filter's own Wasm code outside the host calls it makes.",
        "Each span adds two clock reads, so the totals run above `make bench`'s; read the split.",
        "",
    ]
    for name, requests, names in results:
        lines += [f"## {name}", "", f"{requests:,} requests profiled.", "",
                  "| span | calls / request | µs / request | self µs / request |", "|---|---|---|---|"]
        for span, (calls, total, own) in sorted(names.items(), key=lambda kv: -kv[1][2]):
            lines.append(f"| {span} | {calls:.2f} | {total:.2f} | {own:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    if not PROFILE_WASM.exists():
        print(f"missing {PROFILE_WASM}: run `make profile`", file=sys.stderr)
        return 1
    os.sched_setaffinity(0, {LOAD_CPU})
    upstream = Upstream()
    results = []
    try:
        only = os.environ.get("PROFILE_ONLY", "")
        for s in SCENARIOS:
            name = s.name
            if only not in name:
                continue
            print(f"profiling: {name}", flush=True)
            requests, names = run(s, upstream)
            if not names:
                print("no profile reports in Envoy's log", file=sys.stderr)
                return 1
            results.append((name, requests, names))
        split = {}
        if shutil.which("perf") and not only:
            print("sampling Envoy with perf", flush=True)
            for label, filters in [("plain", []),
                                   ("no-op", [{**wasm_filter("", NOOP_WASM), "name": "noop"}]),
                                   ("no-op, host calls", [{**wasm_filter("calls", NOOP_WASM), "name": "noop"}]),
                                   ("switchboard", [wasm_filter(plugin_config(2), WASM)])]:
                if (found := where_envoy_runs(filters, upstream)) is None:
                    split = {}
                    break
                split[label] = found
    finally:
        upstream.stop()
    report = render(results)
    if split:
        report += "\n" + "\n".join(render_perf(split))
    else:
        report += "\n(perf could not sample Envoy here: no CPU split by code.)\n"
    OUT.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
