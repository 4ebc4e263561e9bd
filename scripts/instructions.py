"""Instructions Envoy executes per request, by the code that ran them, under callgrind.

`make bench` measures time, which a busy machine blurs. This counts what Envoy executes for a
request (valgrind's callgrind, instrumentation switched on only after a warm-up), the same on a
quiet or a loaded machine, so an A/B of a change can be read while other work runs:

    .venv/bin/python scripts/instructions.py [plain] [no-op] [held] [calls] [calls:LIST] [switchboard] [switchboard-router] [native-held] [native-calls] [native-calls:LIST] [native] [PATH.wasm ...]

`switchboard-router` is the `.wasm` with `"stream_fallbacks": "router"` and the Envoy config
`switchboard envoy-config` adds for it (the router path: a pass of the `.wasm` per attempt, and
one after `header_to_metadata`); it differs from `switchboard` only on a streaming request.
`held` is the no-op filter holding the request until its body is in; `calls` also makes the host
calls a body-routing filter cannot avoid (the host-call floor). `native-calls` is the native
build's floor: the no-op dynamic module (tools/noop-native) making the same calls.
`calls:LIST` and `native-calls:LIST` make only the calls LIST names (comma separated: `headers`,
`body-read`, `body-set`, `credential`, `cluster`, `status`, `response-header`, and natively
`clear-route-cache`; an empty LIST holds the body and makes none; beyond the floor, what
Switchboard also calls: `remove-absent` on both, `clock` and `counters` on the `.wasm`);
`native-held` is the native module holding the body with no call, as `held` is for the `.wasm`.
Adding one call at a time prices each (docs/benchmarks.md, "What each floor is made of").

`INSTR_SCENARIO` picks the request and the upstream: `chat` (default) the 1.5 KB chat;
`stream` the same chat with `"stream": true`, answered by the lean upstream's five-event SSE
stream; `translated` and `translated-stream` an Anthropic Messages request of the same prompt to a
virtual model that translates it for its Chat Completions targets (the request and the answer
translated); `stream-fallback` that stream after a 503: Switchboard's first target (the `failing`
cluster) answers 503 to every request, which falls back to the stream. Every configuration's
`provider` cluster, the floors' included, is the port that answers the scenario's good answer.

`responses-stream` is a streamed Responses API request to a virtual model whose targets serve it
(OpenAI's), so the answer's response ids go through Switchboard's id rewriter, answered by the
lean upstream's Responses event stream.

`INSTR_HISTOGRAMS=1` turns Switchboard's `request_histograms` on, to count what its own timing
costs; `INSTR_USAGE=1` its `usage_metrics` (every good answer's usage read as it passes).
`INSTR_ANSWER_KB=N` pads the lean upstream's two streams (`stream`, `responses-stream`) to N KiB of
~100-byte content deltas, one per SSE event, for instructions per KB of answer (lean-upstream
`--answer-kb`); every answer is still checked whole, each content event as sent. `INSTR_BODY_KB=N` pads the scenario's request to N KiB (the bench chat's prompt, `messages`
before `model`), for instructions per KB of prompt. `native` loads `libswitchboard.so` (and `native-calls` `libnoop_native.so`) from
`INSTR_NATIVE_DIR` (default target/native); for attribution by function build it with symbols
in its own directory and point there:
`CARGO_PROFILE_NATIVE_DEBUG=1 CARGO_PROFILE_NATIVE_STRIP=none cargo build --profile native
--lib --target-dir target/callgrind-native`, `INSTR_NATIVE_DIR=target/callgrind-native/native`,
then `callgrind_annotate` the output file the script names (`INSTR_KEEP=1` keeps it).

Each configuration is one Envoy (`--concurrency 1`) under callgrind in front of the lean
upstream; the scenario's request (2 weighted targets) is sent N times over one keep-alive
connection (`INSTR_REQUESTS`, default 200), every answer checked (status 200; a stream read
whole, every event to its `[DONE]`; a fallback's `x-switchboard-attempts: 2`). Instructions
are split by object: the Envoy binary (Envoy and V8's runtime, host calls included), code
without an object (V8's generated code: the filter's Wasm and its trampolines), the kernel's
vDSO and the C library.
Instruction counts are not time (a cache miss costs nothing here), but they move with the
work a change adds or removes, and they repeat to a fraction of a percent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from bench import (MAIN, NOOP_WASM, RESPONSES_STREAM_SCENARIO, SCENARIOS, STREAM,  # noqa: E402
                   STREAM_FALLBACK, TRANSLATED, TRANSLATED_STREAM, Scenario, Upstream,
                   answer_problem, native_filter, native_noop, plugin_config)
from harness import (ENVOY_BIN, NATIVE_DIR, WASM, bootstrap, envoy_config, free_ports,  # noqa: E402
                     plugin_config_of, stop_process, wasm_filter, with_router_fallbacks)

REQUESTS = int(os.environ.get("INSTR_REQUESTS", "200"))
WARMUP = int(os.environ.get("INSTR_WARMUP", "30"))
NATIVE_SO_DIR = Path(os.environ.get("INSTR_NATIVE_DIR", str(NATIVE_DIR))).resolve()
# INSTR_HISTOGRAMS=1: Switchboard's per-request histograms on (`request_histograms`), to count
# what measuring (attempts, decision_us, overhead_us) costs.
HISTOGRAMS = os.environ.get("INSTR_HISTOGRAMS") == "1"
# INSTR_USAGE=1: `usage_metrics` on (every good answer's usage read as it streams).
USAGE = os.environ.get("INSTR_USAGE") == "1"
# `INSTR_ANSWER_KB=100`: the streamed answers padded to that many KiB of content events.
ANSWER_KB = int(os.environ.get("INSTR_ANSWER_KB", "0"))
# `INSTR_BODY_KB=100`: the scenario's request body padded to that many KiB (the prompt sizes
# agents send), for instructions per KB of prompt.
BODY_KB = int(os.environ.get("INSTR_BODY_KB", "0"))
# `INSTR_VECTOR_COPIES=1`: glibc told never to copy with `rep movsb` (its tunable), for every
# configuration alike. Callgrind counts `rep movsb` as one instruction per byte, ~10.6 times the
# ~0.094 per byte of glibc's AVX loop for the same 100 KB copy, so by default a body copy
# outweighs all the code that reads the body; this shows the code's share beside the copies.
VECTOR_COPIES = os.environ.get("INSTR_VECTOR_COPIES") == "1"
START_TIMEOUT_S = 900  # V8 compiles the module under valgrind: minutes on a busy machine
# INSTR_SCENARIO's choices: the `make bench` scenario whose request and upstream are counted.
SCENARIO_NAMES = {"chat": MAIN, "stream": STREAM, "stream-fallback": STREAM_FALLBACK,
                  "translated": TRANSLATED, "translated-stream": TRANSLATED_STREAM,
                  "responses-stream": RESPONSES_STREAM_SCENARIO.name}
# The configurations without Switchboard: they neither route nor fall back.
FLOORS = {"plain", "no-op", "held", "calls", "native-calls", "native-held"}


def is_floor(name: str) -> bool:
    return name in FLOORS or name.startswith(("calls:", "native-calls:"))


def scenario_of(choice: str) -> Scenario:
    if choice not in SCENARIO_NAMES:
        raise ValueError(f"INSTR_SCENARIO={choice}: one of {', '.join(SCENARIO_NAMES)}")
    return next(s for s in [*SCENARIOS, RESPONSES_STREAM_SCENARIO] if s.name == SCENARIO_NAMES[choice])


def real_envoy() -> str:
    """The Envoy binary itself: `.venv/bin/envoy` is a Python launcher."""
    out = subprocess.run([sys.executable, "-c", "import envoy, os; print(os.path.dirname(envoy.__file__))"],
                         capture_output=True, text=True, cwd=ROOT)
    candidate = Path(out.stdout.strip()) / "_bin" / "envoy"
    return str(candidate if candidate.exists() else ENVOY_BIN)


def filters_for(name: str, s: Scenario) -> list[dict]:
    def noop(mode: str) -> dict:
        return {**wasm_filter(mode, NOOP_WASM), "name": "noop"}
    if name == "plain":
        return []
    if name == "no-op":
        return [noop("")]
    if name == "held":
        return [noop("buffer")]
    if name == "calls":
        return [noop("calls")]
    if name.startswith("calls:"):
        return [noop(name)]
    if name == "native-calls":
        return [native_noop("calls")]
    if name == "native-held":
        return [native_noop("held")]
    if name.startswith("native-calls:"):
        return [native_noop(name.removeprefix("native-"))]
    # Under valgrind a request takes 100 ms or more, so the worker's health view (kept 100 ms
    # by default) would be re-read from shared data on every request instead of once per
    # thousand or so: keep it for the run, as a fast Envoy effectively does.
    config = {**plugin_config(2, fallback=s.falls_back, translate=s.translated, responses=s.responses),
              "health_view_ms": 10_000}
    if HISTOGRAMS:
        config["request_histograms"] = True
    if USAGE:
        config["usage_metrics"] = True
    if name == "switchboard":
        return [wasm_filter(config)]
    if name == "switchboard-router":
        return [wasm_filter(with_router_fallbacks(config))]
    if name == "native":
        return [native_filter(config)]
    return [wasm_filter(config, Path(name).resolve())]


def self_cost_by_object(path: Path) -> dict[str, int]:
    """Sums callgrind's self cost (Ir) by the kind of code that ran it, from its output file:
    cost lines after a `calls=` line are inclusive costs of the call and are skipped. Compressed
    names are numbered per kind (objects, functions), so `ob=(2)` and `fn=(2)` are two names."""
    names: dict[tuple[str, str], str] = {}
    by_kind: dict[str, int] = defaultdict(int)
    obj, fn = "?", "?"
    skip_next = False

    def name_of(space: str, value: str) -> str:
        m = re.match(r"\((\d+)\)(?: (.*))?", value)
        if not m:
            return value
        if m.group(2) is not None:
            names[space, m.group(1)] = m.group(2)
        return names.get((space, m.group(1)), "?")

    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("ob="):
            obj = name_of("ob", line[3:])
        elif line.startswith("fn="):
            fn = name_of("fn", line[3:])
        elif line.startswith("cob="):
            name_of("ob", line[4:])  # records the compressed name
        elif line.startswith("cfn="):
            name_of("fn", line[4:])
        elif line.startswith("calls="):
            skip_next = True
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            if skip_next:
                skip_next = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                by_kind[kind(obj, fn)] += int(parts[1])
    return by_kind


def kind(obj: str, fn: str) -> str:
    base = os.path.basename(obj)
    if base == "envoy":
        return "Envoy binary (Envoy, V8 runtime, host calls)"
    if obj in ("???", "?", ""):
        # Code callgrind finds in no file: V8's generated code (the filter's Wasm and V8's
        # stubs) lives far above the binary; low addresses are part of Envoy's own image
        # (its allocator and copies) that has no file mapping name.
        address = int(fn, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", fn) else 0
        return ("V8 generated code (the filter's Wasm, stubs)" if address >= 1 << 32
                else "Envoy binary, unnamed part (allocator, copies)")
    if base == "libswitchboard.so":
        return "Switchboard native module"
    if base == "libnoop_native.so":
        return "no-op native module"
    if base.startswith(("libc.", "libc-", "ld-linux", "libm.", "libpthread")):
        # Copies apart: above a few KB glibc's memcpy is `rep movsb`, which callgrind counts as
        # one instruction per byte (a CPU moves 32 or more bytes a cycle that way), so a copy of
        # a 100 KB body counts ~102k here.
        return "C library: memcpy, memmove" if re.search(r"mem(cpy|move)", fn) else "C library"
    return "other"


def measure(name: str, upstream: Upstream, s: Scenario = SCENARIOS[0], requests_n: int | None = None,
            warmup: int | None = None, vector_copies: bool = VECTOR_COPIES) -> dict[str, float]:
    """Instructions per request of configuration `name` by kind of code, over `requests_n`
    requests (default INSTR_REQUESTS) after `warmup` (default INSTR_WARMUP)."""
    requests_n = REQUESTS if requests_n is None else requests_n
    warmup = WARMUP if warmup is None else warmup
    listen, admin = free_ports(2)
    config = bootstrap(listen, admin, upstream.clusters(s), filters_for(name, s), passthrough="provider")
    work = Path(tempfile.mkdtemp(prefix="switchboard-instr-"))
    if name == "switchboard-router":
        plugin = plugin_config_of(config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
                                  ["typed_config"]["http_filters"][0]["typed_config"])["value"]
        config = envoy_config(config, plugin, work)
    # Envoy's periodic work (stats flush every 5 s by default) would add more per request the
    # slower valgrind runs: push it out of the measured window.
    config["stats_flush_interval"] = "299s"
    (work / "envoy.json").write_text(json.dumps(config))
    out = work / "callgrind.out"
    env = {**os.environ, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH": str(NATIVE_SO_DIR)}
    if vector_copies:
        env["GLIBC_TUNABLES"] = "glibc.cpu.x86_rep_movsb_threshold=4294967295"
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--smc-check=all-non-file",
                             f"--callgrind-out-file={out}", real_envoy(), "-c", str(work / "envoy.json"),
                             "--concurrency", "1", "--disable-hot-restart", "--log-level", "warning",
                             "--log-path", str(work / "envoy.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"Envoy under valgrind exited: {(work / 'envoy.log').read_text()[-2000:]}")
            try:
                if requests.get(f"http://127.0.0.1:{admin}/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        else:
            raise RuntimeError("Envoy under valgrind did not become ready")
        body = s.body()
        session = requests.Session()

        def send(n: int) -> None:
            for _ in range(n):
                r = session.post(f"http://127.0.0.1:{listen}{s.path}", data=body, timeout=120,
                                 headers={"content-type": "application/json", "x-user-id": "bench-user-42"})
                routed = not is_floor(name)
                problem = answer_problem(r, s, switchboard=routed, fallback=routed and s.falls_back,
                                         answer_kb=ANSWER_KB)
                if problem:
                    raise RuntimeError(f"{name}: {problem}")
        send(warmup)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, check=True,
                       timeout=300)
        send(requests_n)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True, timeout=300)
        dumps = sorted(work.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
        print(f"  callgrind output: {dumps[-1]}", flush=True)
        return {k: ir / requests_n for k, ir in self_cost_by_object(dumps[-1]).items()}
    finally:
        stop_process(proc)


def main() -> int:
    choice = os.environ.get("INSTR_SCENARIO", "chat")
    try:
        scenario = scenario_of(choice)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    if BODY_KB:
        # The prompt padded to this size, the fields' order kept (`messages` before `model`).
        scenario = dataclasses.replace(scenario, size=BODY_KB * 1024)
    names = sys.argv[1:] or ["plain", "no-op", "calls", "switchboard"]
    needed = [p for p, used in ((NOOP_WASM, {"no-op", "held", "calls"}), (WASM, {"switchboard", "switchboard-router"}))
              if used & set(names)]
    if any(n.startswith("calls:") for n in names):
        needed.append(NOOP_WASM)
    if "native" in names:
        needed.append(NATIVE_SO_DIR / "libswitchboard.so")
    if any(n in ("native-calls", "native-held") or n.startswith("native-calls:") for n in names):
        needed.append(NATIVE_SO_DIR / "libnoop_native.so")
    needed += [Path(n) for n in names if n.endswith(".wasm")]
    for path in needed:
        if not path.exists():
            print(f"missing {path}: run `make bench` first", file=sys.stderr)
            return 1
    upstream = Upstream(ANSWER_KB)
    results = {}
    try:
        for name in names:
            print(f"measuring {name} ...", flush=True)
            results[name] = measure(name, upstream, scenario)
            total = sum(results[name].values())
            print(f"  {total:,.0f} instructions per request", flush=True)
    finally:
        upstream.stop()
    kinds = sorted({k for r in results.values() for k in r})
    sized = f", body {scenario.size:,} bytes" if BODY_KB else ""
    sized += ", copies as vector loops (INSTR_VECTOR_COPIES=1)" if VECTOR_COPIES else ""
    sized += f", answer {ANSWER_KB} KiB of content events" if ANSWER_KB else ""
    sized += ", usage_metrics on" if USAGE else ""
    print(f"\nInstructions per request ({REQUESTS} requests after {WARMUP} of warm-up, scenario {choice}:"
          f" {scenario.name}{sized}):\n")
    print("| code | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for k in kinds + ["total"]:
        cells = [sum(r.values()) if k == "total" else r.get(k, 0.0) for r in results.values()]
        print(f"| {k} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
