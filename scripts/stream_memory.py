"""Envoy's memory per in-flight streamed request, for `make bench`'s streamed-fallback memory
scenario.

wrk cannot say how many requests are in flight at a moment, so this holds a known number open:
N streaming requests at once (one connection each) to an Envoy whose good upstream is the lean
upstream's `slow-stream` (its first content event at once, the rest only after a hold). Once
Envoy's `upstream_rq_active` gauge of that cluster shows all N in flight, its memory is read and
compared with before (after one request of the same kind); the difference over N is the memory
each in-flight stream costs, connections included: RSS, which moves in the allocator's steps
(a process whose heap has slack grows less), and the bytes Envoy's allocator has handed out
(admin `/memory`, `allocated`), which do not; V8's Wasm memory is outside that heap and read
from smaps. Every answer is then read to its end and checked. Bounded: N requests, each within
the hold plus a timeout; loopback only.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import requests
from harness import wasm_memory_kb  # tests/e2e, on the path `make bench` sets

# How long the slow stream holds its rest: all N streams must be opened within it.
HOLD_MS = 4000
# The share of the hold the streams may take to be all in flight before the measurement fails.
OPEN_WITHIN = 0.75
# After the gauge shows them all, a moment for Envoy to finish the work each one started.
SETTLE_S = 0.3
CLUSTER_GAUGE = "cluster.provider.upstream_rq_active"

Check = Callable[[requests.Response], str | None]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def heap_kb(envoy) -> float:
    """Bytes Envoy's allocator has handed out (admin `/memory`), in KB."""
    memory = requests.get(f"http://127.0.0.1:{envoy.admin_port}/memory", timeout=5).json()
    return int(memory["allocated"]) / 1024


def post(url: str, payload: bytes) -> requests.Response:
    """One streaming request on its own connection, read to its end."""
    with requests.Session() as session:
        return session.post(f"{url}/v1/chat/completions", data=payload, timeout=HOLD_MS / 1000 + 30,
                            headers={"content-type": "application/json", "x-user-id": "bench-user-42"})


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def in_flight_memory(envoy, payload: bytes, streams: int, check: Check) -> dict:
    """RSS of `envoy` before and while `streams` streaming requests are in flight."""
    pid = envoy.proc.pid
    problem = check(post(envoy.url, payload))  # also the warm-up: V8 compiles lazily
    if problem:
        raise RuntimeError(problem)
    before, heap_before, wasm_before = rss_kb(pid), heap_kb(envoy), wasm_memory_kb(pid)
    with ThreadPoolExecutor(streams) as pool:
        answers = [pool.submit(post, envoy.url, payload) for _ in range(streams)]
        opened = wait_for(lambda: envoy.stat(CLUSTER_GAUGE) >= streams, HOLD_MS / 1000 * OPEN_WITHIN)
        time.sleep(SETTLE_S)
        during, heap_during, wasm_during = rss_kb(pid), heap_kb(envoy), wasm_memory_kb(pid)
        in_flight = envoy.stat(CLUSTER_GAUGE)
        problems = {p for a in answers if (p := check(a.result(timeout=HOLD_MS / 1000 + 60)))}
    if problems:
        raise RuntimeError("; ".join(sorted(problems))[:500])
    if not opened or in_flight < streams:
        raise RuntimeError(f"only {in_flight} of {streams} streams were in flight when RSS was read")
    return {"before_mb": before / 1024, "during_mb": during / 1024,
            "per_stream_kb": (during - before) / streams, "heap_per_stream_kb": (heap_during - heap_before) / streams,
            "wasm_per_stream_kb": (wasm_during - wasm_before) / streams
            if wasm_before is not None and wasm_during is not None else None}


def section(title: str, streams: int, results: dict[str, dict]) -> list[str]:
    lines = [f"## {title}", "",
             f"{streams} streaming requests of the 1.5 KB chat at once, one connection each, to an Envoy whose"
             f" good upstream sends the stream's first content event at once and the rest {HOLD_MS / 1000:g} s"
             " later. Envoy's RSS (VmRSS) is read after one request of the same kind, then once its"
             f" `{CLUSTER_GAUGE}` shows all {streams} in flight; every answer is then read whole and checked."
             " With the fallback, each request's first target answers 503 first (its connection stays in"
             " Envoy's pool) and the stream comes from the fallback: on the `.wasm` a call-out, whose"
             " answer Envoy holds until it ends. Per stream is (during − before) / streams, connections"
             " included: of RSS, which grows in the allocator's steps (an Envoy whose heap has slack grows"
             " less), of the bytes Envoy's allocator handed out (admin `/memory`, `allocated`: steady), and"
             " of V8's Wasm memory (from smaps; outside Envoy's heap, it keeps its peak).", "",
             "| Envoy | RSS before | RSS during | RSS per in-flight stream | Envoy heap per stream"
             " | Wasm memory per stream |",
             "|---|---|---|---|---|---|"]
    for label, x in results.items():
        if "error" in x:
            lines.append(f"| {label} | not measured: {x['error']} | | | | |")
            continue
        wasm = f"{x['wasm_per_stream_kb']:.1f} KB" if x["wasm_per_stream_kb"] is not None else "–"
        lines.append(f"| {label} | {x['before_mb']:.1f} MB | {x['during_mb']:.1f} MB |"
                     f" {x['per_stream_kb']:.1f} KB | {x['heap_per_stream_kb']:.1f} KB | {wasm} |")
    return lines + [""]
