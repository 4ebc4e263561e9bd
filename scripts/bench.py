"""`make bench`: Switchboard against plain Envoy and a no-op Wasm filter, Envoy-bound, same run.

Envoy under test runs with `--concurrency 1` on CPU 0; wrk and a lean upstream
(`tools/lean-upstream`, fixed answers from one epoll loop) run on CPU 1, so Envoy is the
bottleneck and a filter's cost shows in throughput. For each scenario the configurations (plain
Envoy, the no-op Wasm filter and its two floors, Switchboard's `.wasm`, and Switchboard's native
module when `target/native/libswitchboard.so` exists, with its own floor, the no-op dynamic module
`libnoop_native.so`, in the 1.5 KB chat scenarios) are loaded in turns, round after round,
and the report gives medians of per-round ratios with their range, Envoy's and the upstream's
CPU per request, p50/p99, errors and RSS, and each target's verdict from this run. One scenario
is not timed: the memory per in-flight streamed fallback holds 128 streams open at once and
reads Envoy's memory while they are (scripts/stream_memory.py). Sections of docs/benchmarks.md after its
`BY_HAND` line (figures measured by hand, with their commands) are kept.

`BENCH_QUICK=1` (development): 3 rounds of 1 s, only the two 1.5 KB chat scenarios, written to
target/bench-quick.md instead of docs/benchmarks.md, without the callgrind instruction counts the
full run adds (`BENCH_INSTRUCTIONS=1` adds them). `BENCH_ONLY=text` keeps the scenarios whose
name contains it; `BENCH_ROUNDS`, `BENCH_VERDICT_ROUNDS` (the scenario the targets are judged
on) and `BENCH_SECONDS` override the round counts and length.
`BENCH_BASELINE_WASM=path` adds that build of Switchboard as `switchboard, baseline`, loaded in
the same rounds just before the current one: an A/B of a change, paired round by round.
Everything runs on 127.0.0.1; every wrk run is bounded in time and every process is stopped.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness import (ENVOY_BIN, NATIVE_MODULE, WASM, bootstrap, free_ports, start_envoy, stop_process,  # noqa: E402
                     wasm_filter, wasm_memory_kb)
from stream_memory import HOLD_MS, in_flight_memory, section as stream_memory_section  # noqa: E402

NOOP_WASM = ROOT / "target" / "wasm32-wasip1" / "release" / "noop_filter.wasm"
NATIVE_SO = NATIVE_MODULE  # target/native/libswitchboard.so (`make build`)
NOOP_NATIVE = NATIVE_SO.parent / "libnoop_native.so"  # tools/noop-native (`make bench`)
LEAN_UPSTREAM = ROOT / "target" / "release" / "lean-upstream"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
OUT = ROOT / "target" / "bench-quick.md" if QUICK else ROOT / "docs" / "benchmarks.md"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3" if QUICK else "5"))
# The scenario the targets are judged on gets more rounds: a median of per-round differences
# of two CPU figures needs them on a machine whose speed drifts.
VERDICT_ROUNDS = int(os.environ.get("BENCH_VERDICT_ROUNDS", str(ROUNDS if QUICK else 11)))
SECONDS = float(os.environ.get("BENCH_SECONDS", "1" if QUICK else "3"))
ONLY = os.environ.get("BENCH_ONLY", "")
BASELINE_WASM = Path(os.environ["BENCH_BASELINE_WASM"]).resolve() if os.environ.get("BENCH_BASELINE_WASM") else None
ENVOY_CPU, LOAD_CPU = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The targets, judged on the 1.5 KB chat at 16 connections.
WASM_CPU_OVER_FLOOR_US = 10.0
WASM_VS_NOOP = 0.80
NATIVE_VS_PLAIN = 0.90
NATIVE_CPU_OVER_PLAIN_US = 10.0


@dataclass(frozen=True)
class Scenario:
    name: str
    size: int  # request body bytes
    conns: int  # wrk connections
    targets: int = 2
    sticky: bool = False
    # chat | stream | fallback | stream-fallback | memory | stream-memory | translated |
    # translated-stream | responses-stream
    kind: str = "chat"
    quick: bool = False  # part of BENCH_QUICK's default set

    @property
    def streamed(self) -> bool:
        """The request asks for a stream and the good upstream answers one."""
        return self.kind in ("stream", "stream-fallback", "stream-memory", "translated-stream",
                             "responses-stream")

    @property
    def responses(self) -> bool:
        """A Responses API request (streamed) to a virtual model whose targets serve it: the
        answer's response ids go through Switchboard's id rewriter."""
        return self.kind == "responses-stream"

    @property
    def translated(self) -> bool:
        """An Anthropic Messages request to a virtual model translating it for its targets,
        which speak Chat Completions (the lean upstream): the request and the answer are
        translated."""
        return self.kind in ("translated", "translated-stream")

    @property
    def path(self) -> str:
        return "/v1/messages" if self.translated else "/v1/responses" if self.responses else "/v1/chat/completions"

    def body(self) -> bytes:
        if self.responses:
            return responses_body(self.size)
        return messages_body(self.size, self.streamed) if self.translated else chat_body(self.size, self.streamed)

    @property
    def falls_back(self) -> bool:
        """Switchboard's first target answers 503 and every request falls back."""
        return self.kind in ("fallback", "stream-fallback", "stream-memory")


MAIN = "1.5 KB chat, 16 connections"
ONE_CONN = "1.5 KB chat, 1 connection"
MB_ONE = "1 MB prompt, 1 connection"
MB_MEMORY = "1 MB prompt, 8 connections (memory)"
STREAM = "1.5 KB chat streamed (SSE), 16 connections"
STREAM_FALLBACK = "1.5 KB chat streamed, 16 connections, every request falls back after a 503"
STREAM_MEMORY = "Memory per in-flight streamed fallback (128 streams held open)"
TRANSLATED = "1.5 KB Messages request translated to Chat Completions, 16 connections"
TRANSLATED_STREAM = "1.5 KB Messages request translated, streamed, 16 connections"
# Not part of `make bench`'s runs: counted by scripts/instructions.py (`INSTR_SCENARIO=responses-stream`).
RESPONSES_STREAM = "1.5 KB Responses request streamed, its ids rewritten, 16 connections"
RESPONSES_STREAM_SCENARIO = Scenario(RESPONSES_STREAM, 1536, 16, kind="responses-stream")
SCENARIOS = [
    Scenario(MAIN, 1536, 16, quick=True),
    Scenario(ONE_CONN, 1536, 1, quick=True),
    Scenario("100 KB prompt, 1 connection", 100 * 1024, 1),
    Scenario(MB_ONE, 1024 * 1024, 1),
    Scenario(MB_MEMORY, 1024 * 1024, 8, kind="memory"),
    Scenario("1.5 KB chat, 16 connections, 32 targets, sticky routing", 1536, 16, targets=32, sticky=True),
    Scenario(STREAM, 1536, 16, kind="stream"),
    Scenario("1.5 KB chat, 16 connections, every request falls back after a 503", 1536, 16, kind="fallback"),
    Scenario(STREAM_FALLBACK, 1536, 16, kind="stream-fallback"),
    # Not timed: 128 streams held open at once, Envoy's memory read while they are
    # (stream_memory.py); enough that the allocator's steps are a small part of the growth.
    Scenario(STREAM_MEMORY, 1536, 128, kind="stream-memory"),
    Scenario(TRANSLATED, 1536, 16, kind="translated"),
    Scenario(TRANSLATED_STREAM, 1536, 16, kind="translated-stream"),
]


def chat_body(size: int, stream: bool = False) -> bytes:
    """A chat request for the virtual model, padded to about `size` bytes. Fields in the order
    the OpenAI Python SDK sends them: `messages` before `model`, so the rewrite of the model
    re-sends the whole prompt (the worst case for the body edit)."""
    base = {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": ""}], "model": "bench/chat", "temperature": 0.2, "max_tokens": 8}
    if stream:
        base["stream"] = True
    pad = max(0, size - len(json.dumps(base)))
    base["messages"][1]["content"] = ("lorem ipsum dolor sit amet " * (pad // 27 + 1))[:pad]
    return json.dumps(base).encode()


def messages_body(size: int, stream: bool = False) -> bytes:
    """The Anthropic Messages request of `chat_body`'s size and prompt."""
    chat = json.loads(chat_body(size, stream))
    body = {"model": "bench/chat", "max_tokens": 8, "system": chat["messages"][0]["content"],
            "messages": [chat["messages"][1]], "temperature": 0.2}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def responses_body(size: int) -> bytes:
    """A streamed Responses API request of `chat_body`'s size and prompt."""
    chat = json.loads(chat_body(size))
    return json.dumps({"input": chat["messages"][1]["content"], "instructions": chat["messages"][0]["content"],
                       "model": "bench/chat", "stream": True}).encode()


# The key response ids are minted with in the Responses scenario (any 16 bytes or more).
RESPONSE_ID_KEY = "bench-response-id-key-0001"


def plugin_config(targets: int, sticky: bool = False, fallback: bool = False, translate: bool = False,
                  responses: bool = False) -> dict:
    """`targets` weighted targets with an `authorization` header each. With `fallback`, two
    targets: the first (weight 100) on the cluster that answers 503, whose failures are not
    counted against its health (so every request tries it, then falls back to the second).
    With `responses`, the targets are OpenAI's (they serve /v1/responses natively) and the
    virtual model serves Responses requests too: its answers' ids are minted."""
    models = [{"name": f"provider-{i}/gpt-4o", "cluster": "provider", "model": f"gpt-4o-{i}",
               "headers": {"authorization": f"Bearer sk-bench-{i}"}} for i in range(targets)]
    if responses:
        for m in models:
            m["provider"] = "openai"
    weights = [100 // targets + (1 if i < 100 % targets else 0) for i in range(targets)]
    if fallback:
        models[0].update(cluster="failing", health={"unhealthy_status_codes": []})
        weights = [100, 0]
    routing = {"type": "weight-based-routing", "load_balance_targets": [
        {"target": m["name"], "weight": w} for m, w in zip(models, weights)]}
    if sticky:
        routing["sticky_routing"] = {"ttl_seconds": 3600,
                                     "session_identifiers": [{"key": "x-user-id", "source": "headers"}]}
    vm = {"name": "bench/chat", "model_types": ["chat"], "routing_config": routing}
    if translate:
        vm["translate"] = ["chat_completions", "messages"]
    if responses:
        vm["model_types"] = ["chat", "responses"]
        return {"models": models, "virtual_models": [vm], "response_id_keys": [RESPONSE_ID_KEY]}
    return {"models": models, "virtual_models": [vm]}


def native_filter(config: dict) -> dict:
    """Switchboard's native build: Envoy's dynamic-modules HTTP filter loading
    `libswitchboard.so` (found through ENVOY_DYNAMIC_MODULES_SEARCH_PATH), same plugin JSON."""
    return {
        "name": "switchboard",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
            "dynamic_module_config": {"name": "switchboard"},
            "filter_name": "switchboard",
            "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                              "value": json.dumps(config)},
        },
    }


def native_noop(mode: str) -> dict:
    """The native no-op module (tools/noop-native): `calls` makes the calls any body-routing
    module makes, with no logic; empty does nothing."""
    f = native_filter({})
    f["name"] = "noop"
    f["typed_config"].update(dynamic_module_config={"name": "noop_native"}, filter_name="noop")
    f["typed_config"]["filter_config"]["value"] = mode
    return f


def noop(mode: str, vm_id: str) -> dict:
    f = {**wasm_filter(mode, NOOP_WASM), "name": "noop"}
    f["typed_config"]["config"]["vm_config"]["vm_id"] = vm_id
    return f


def configurations(s: Scenario) -> dict[str, list[dict]]:
    """The filters of each Envoy in the scenario, in the order they are loaded each round."""
    sb_config = plugin_config(s.targets, s.sticky, fallback=s.falls_back, translate=s.translated)
    configs = {
        "plain": [],
        "no-op": [noop("", "noop")],
        # The no-op filter holding headers until the body is in: what reading the body before
        # routing costs any filter, Switchboard included.
        "no-op, body held": [noop("buffer", "held")],
        # ... and also making the host calls a body-routing filter cannot avoid, with no logic:
        # what is left above it is Switchboard's own code.
        "no-op, host calls": [noop("calls", "calls")],
        "switchboard": [wasm_filter(sb_config)],
    }
    if BASELINE_WASM:
        baseline = wasm_filter(sb_config, BASELINE_WASM)
        baseline["typed_config"]["config"]["vm_config"]["vm_id"] = "baseline"
        configs = {**{k: v for k, v in configs.items() if k != "switchboard"},
                   "switchboard, baseline": [baseline], "switchboard": configs["switchboard"]}
    if NATIVE_SO.exists():
        if NOOP_NATIVE.exists() and s.quick:
            # The native build's floor (in the two 1.5 KB chat scenarios): what Envoy's
            # dynamic-module filter and the calls any body-routing module makes cost, with no
            # logic.
            configs["native no-op, host calls"] = [native_noop("calls")]
        configs["native"] = [native_filter(sb_config)]
    if s.kind == "memory":
        # One target and no fallback: the client's body is not kept, which shows what keeping
        # it for a fallback costs.
        configs["switchboard, 1 target"] = [wasm_filter(plugin_config(1))]
        if NATIVE_SO.exists():
            configs["native, 1 target"] = [native_filter(plugin_config(1))]
    return configs


# --- processes --------------------------------------------------------------------------------

@contextmanager
def on_cpu(cpu: int):
    """Runs the block with this thread on `cpu`, so processes it starts inherit that affinity
    (as `taskset -c CPU` would give them), then goes back to the load CPU."""
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, {LOAD_CPU})


def affinity(pid: int) -> set[str]:
    """The CPU lists every thread of `pid` may run on."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out.add(line.split(":", 1)[1].strip())
    return out


def start_pinned_envoy(config: dict):
    with on_cpu(ENVOY_CPU):
        envoy = start_envoy(config, concurrency=1)
    if affinity(envoy.proc.pid) != {str(ENVOY_CPU)}:
        envoy.stop()
        raise RuntimeError(f"Envoy's threads are not all on CPU {ENVOY_CPU}: {affinity(envoy.proc.pid)}")
    return envoy


class Upstream:
    """`lean-upstream chat stream slow-stream fail responses-stream` on the load CPU: one port per
    answer; `answer_kb` pads the two streams to that many KiB of content events."""

    MODES = {"chat", "stream", "slow-stream", "fail", "responses-stream"}

    def __init__(self, answer_kb: int = 0) -> None:
        self.answer_kb = answer_kb
        lifetime = str(int(3 * 3600))  # a bound even if this script dies without stopping it
        self.proc = subprocess.Popen(["taskset", "-c", str(LOAD_CPU), str(LEAN_UPSTREAM), *sorted(self.MODES),
                                      "--hold-ms", str(HOLD_MS), "--lifetime-s", lifetime,
                                      "--answer-kb", str(answer_kb)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ports: dict[str, int] = {}
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
            mode, port = line.split()
            self.ports[mode] = int(port)
        if set(self.ports) != self.MODES:
            stop_process(self.proc)
            raise RuntimeError(f"lean-upstream did not start: {self.proc.stderr.read()}")

    def clusters(self, s: Scenario) -> dict[str, int]:
        """`provider` answers well (with a stream in the stream scenarios, held open in the
        stream memory one: the no-op filter's host calls name that cluster too); `failing`
        answers 503."""
        good = self.ports["slow-stream" if s.kind == "stream-memory" else "responses-stream" if s.responses
                          else "stream" if s.streamed else "chat"]
        return {"provider": good, "failing": self.ports["fail"]}

    def stop(self) -> None:
        stop_process(self.proc)


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of `pid` so far, in ns (schedstat; /proc/PID/stat's utime +
    stime in clock ticks where schedstat is missing)."""
    total, seen = 0, False
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            pass
    if seen:
        return total
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK


def cpu_times(cpu: int) -> list[int]:
    """The `/proc/stat` counters of one CPU (user, nice, system, idle, iowait, irq, softirq,
    steal), in clock ticks."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return [int(v) for v in line.split()[1:9]]
    return [0] * 8


def stolen(before: list[int], after: list[int]) -> float:
    """The share of CPU time between two `cpu_times` readings that the hypervisor gave to other
    guests: a VM's CPU is slower for everything else it runs while its host is that busy."""
    d = [b - a for a, b in zip(before, after)]
    return d[7] / sum(d) if sum(d) > 0 else 0.0


def rss_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def to_us(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]


def wrk(url: str, body_path: str, connections: int, seconds: float, path: str = "/v1/chat/completions") -> dict:
    """One wrk run on the load CPU; its own CPU comes from the children's rusage."""
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["x-user-id"] = "bench-user-42"\n'
        f'local f = io.open("{body_path}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
        # The exact percentiles in µs: --latency prints them rounded to 10 µs.
        'done = function(summary, latency, requests)\n'
        '  io.write(string.format("exact p50 %d p99 %d\\n", latency:percentile(50), latency:percentile(99)))\n'
        'end\n')
    duration = f"{max(1, round(seconds))}s"
    before = children_cpu_s()
    try:
        out = subprocess.run(["taskset", "-c", str(LOAD_CPU), "wrk", "-t1", f"-c{connections}", f"-d{duration}",
                              "--timeout", "10s", "--latency", "-s", str(script), f"{url}{path}"],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
    finally:
        script.unlink()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    exact = re.search(r"^exact p50 (\d+) p99 (\d+)$", out, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    p50, p99 = (float(exact.group(1)), float(exact.group(2))) if exact else \
        (to_us(lat.get("50", "")), to_us(lat.get("99", "")))
    return {"rps": rps, "requests": total, "p50": p50, "p99": p99, "errors": errors,
            "wrk_us": (children_cpu_s() - before) / max(total, 1) * 1e6}


def check_answer(url: str, body: bytes, label: str, s: Scenario) -> None:
    """One request before measuring: a configuration that answers wrongly is not benchmarked."""
    r = requests.post(f"{url}{s.path}", data=body, timeout=10,
                      headers={"content-type": "application/json", "x-user-id": "bench-user-42"})
    switchboard = label.startswith(("switchboard", "native")) and "no-op" not in label
    problem = answer_problem(r, s, switchboard, fallback=switchboard and s.falls_back)
    if problem:
        raise RuntimeError(f"{s.name}, {label}: {problem}")


def answer_problem(r: requests.Response, s: Scenario, switchboard: bool, fallback: bool,
                   answer_kb: int = 0) -> str | None:
    """What is wrong with one answer in scenario `s`: `switchboard` if Switchboard routed it,
    `fallback` if it should have fallen back; `answer_kb` the lean upstream's `--answer-kb`."""
    if r.status_code != 200:
        return f"status {r.status_code}: {r.text[:200]}"
    if switchboard and not r.headers.get("x-switchboard-resolved-model"):
        return "no x-switchboard-resolved-model header"
    if fallback and r.headers.get("x-switchboard-attempts") != "2":
        return f"expected a fallback (attempts 2), got {r.headers.get('x-switchboard-attempts')}"
    if switchboard and s.translated:
        return translated_problem(r, s)
    if s.responses:
        return responses_stream_problem(r, answer_kb, minted=switchboard)
    return stream_problem(r, answer_kb) if s.streamed else None


def translated_problem(r: requests.Response, s: Scenario) -> str | None:
    """What is wrong with an answer translated back to Anthropic Messages: not a `message`, or a
    stream that does not end with `message_stop`."""
    if not s.streamed:
        return None if r.json().get("type") == "message" else f"not a message: {r.text[:200]}"
    if not r.text.rstrip().endswith('data: {"type":"message_stop"}'):
        return f"the translated stream did not end with message_stop: {r.text[-120:]!r}"
    return None


# The lean upstream's stream: five events, the last `data: [DONE]`.
STREAM_EVENTS = 5
# Its padded streams (`--answer-kb`, tools/lean-upstream): every content delta is this text.
DELTA_TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
PADDED_CONTENT_EVENT = ('data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
                        '"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"' + DELTA_TEXT +
                        '"},"finish_reason":null}]}')
# The Responses stream's events before its deltas, and after them.
RESPONSES_HEAD_EVENTS, RESPONSES_TAIL_EVENTS = 4, 4


def padded_count(kb: int, event_len: int) -> int:
    """How many content events of `event_len` bytes (framed `EVENT\\n\\n`) hold `kb` KiB, as
    lean-upstream counts them."""
    return -(-kb * 1024 // (event_len + 2))


def sse_events(r: requests.Response) -> list[str] | str:
    """The answer's events, or what is wrong: not SSE."""
    if "text/event-stream" not in r.headers.get("content-type", ""):
        return f"not a stream: {r.headers.get('content-type')}"
    return [e for e in r.text.split("\n\n") if e.strip()]


def stream_problem(r: requests.Response, answer_kb: int = 0) -> str | None:
    """What is wrong with a streamed answer, read whole: not SSE, or not every event of the
    lean upstream's stream through to its end (padded: each content event as sent)."""
    events = sse_events(r)
    if isinstance(events, str):
        return events
    content = padded_count(answer_kb, len(PADDED_CONTENT_EVENT)) if answer_kb else 0
    expected = STREAM_EVENTS + content - 2 if answer_kb else STREAM_EVENTS
    if len(events) != expected or events[-1].strip() != "data: [DONE]":
        return f"the stream did not arrive whole: {len(events)} events of {expected}, ending {r.text[-80:]!r}"
    if answer_kb and any(e.strip() != PADDED_CONTENT_EVENT for e in events[1:1 + content]):
        return "a padded content event arrived changed"
    return None


def responses_stream_problem(r: requests.Response, answer_kb: int, minted: bool) -> str | None:
    """What is wrong with the lean upstream's Responses stream, read whole: every event's data a
    JSON object of the type its `event:` line names, in sequence; the deltas' text as sent
    (`answer_kb` KiB of it, or the short stream's); `response.completed` last; and the response
    id Switchboard's own (`minted`) in every event that carries one."""
    events = sse_events(r)
    if isinstance(events, str):
        return events
    datas = []
    for i, e in enumerate(events):
        name, _, data = e.strip().partition("\ndata: ")
        try:
            event = json.loads(data)
        except ValueError:
            return f"event {i} is not JSON: {e[:120]!r}"
        if name != f"event: {event.get('type')}" or event.get("sequence_number") != i:
            return f"event {i} out of place: {e[:120]!r}"
        datas.append(event)
    deltas = [d["delta"] for d in datas if d["type"] == "response.output_text.delta"]
    if answer_kb:
        one = ('event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
               f'{RESPONSES_HEAD_EVENTS},"item_id":"msg_bench","output_index":0,"content_index":0,"delta":"{DELTA_TEXT}"}}')
        expected = [DELTA_TEXT] * padded_count(answer_kb, len(one))
    else:
        expected = ["Hello", " from the bench upstream."]
    if deltas != expected or len(datas) != RESPONSES_HEAD_EVENTS + len(expected) + RESPONSES_TAIL_EVENTS:
        return f"the stream did not arrive whole: {len(datas)} events, {len(deltas)} deltas"
    if datas[-1]["type"] != "response.completed":
        return f"the stream did not end with response.completed: {r.text[-120:]!r}"
    ids = {d["response"]["id"] for d in datas if "response" in d}
    if len(ids) != 1 or next(iter(ids)).startswith("resp_sb1-") != minted:
        return f"response ids {ids} (minted expected: {minted})"
    return None


def run_scenario(s: Scenario, upstream: Upstream) -> dict:
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    payload = s.body()
    body.write_bytes(payload)
    clusters = upstream.clusters(s)
    envoys = {}
    try:
        for label, filters in configurations(s).items():
            envoys[label] = start_pinned_envoy(bootstrap(*free_ports(2), clusters, filters, passthrough="provider"))
        idle_rss = {k: rss_kb(e.proc.pid, "VmRSS") for k, e in envoys.items()}
        idle_wasm = {k: wasm_memory_kb(e.proc.pid) for k, e in envoys.items()}
        for label, e in envoys.items():
            check_answer(e.url, payload, label, s)
            wrk(e.url, str(body), s.conns, 1, s.path)  # warm up: V8 compiles lazily, connections open
        runs = {k: [] for k in envoys}
        for _ in range(VERDICT_ROUNDS if s.name == MAIN else ROUNDS):
            for label, e in envoys.items():
                started = time.monotonic()
                envoy_before, up_before = cpu_ns(e.proc.pid), cpu_ns(upstream.proc.pid)
                core_before = cpu_times(ENVOY_CPU)
                r = wrk(e.url, str(body), s.conns, SECONDS, s.path)
                r["stolen"] = stolen(core_before, cpu_times(ENVOY_CPU))
                elapsed = time.monotonic() - started
                envoy_ns, up_ns = cpu_ns(e.proc.pid) - envoy_before, cpu_ns(upstream.proc.pid) - up_before
                n = max(r["requests"], 1)
                r["cpu_us"] = envoy_ns / n / 1e3
                r["upstream_us"] = up_ns / n / 1e3
                r["envoy_busy"] = envoy_ns / 1e9 / elapsed
                runs[label].append(r)
        result = {}
        for label, rs in runs.items():
            pid = envoys[label].proc.pid
            med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
            result[label] = {
                **{k: med(k) for k in ("rps", "p50", "p99", "cpu_us", "upstream_us", "wrk_us", "envoy_busy",
                                       "stolen")},
                "errors": sum(r["errors"] for r in rs),
                "requests": sum(r["requests"] for r in rs),
                "peak_rss_mb": rss_kb(pid, "VmHWM") / 1024,
                "rss_growth_mb": (rss_kb(pid, "VmHWM") - idle_rss[label]) / 1024,
                "wasm_mb": ((wasm_memory_kb(pid) or 0) - (idle_wasm[label] or 0)) / 1024
                if idle_wasm[label] is not None else None,
                "rounds": [r["rps"] for r in rs],
                "p50_rounds": [r["p50"] for r in rs],
                "cpu_rounds": [r["cpu_us"] for r in rs],
            }
        return result
    finally:
        for e in envoys.values():
            e.stop()
        body.unlink()


def stream_memory_configurations() -> dict[str, tuple[list[dict], bool, bool]]:
    """The stream memory scenario's Envoys: filters, whether Switchboard routes, whether every
    request falls back. Without the fallback, a healthy stream held open after its commit
    point: what the fallback adds per stream."""
    fallback, healthy = plugin_config(2, fallback=True), plugin_config(2)
    configs = {"plain": ([], False, False),
               "switchboard, no fallback": ([wasm_filter(healthy)], True, False),
               "switchboard": ([wasm_filter(fallback)], True, True)}
    if NATIVE_SO.exists():
        configs["native, no fallback"] = ([native_filter(healthy)], True, False)
        configs["native"] = ([native_filter(fallback)], True, True)
    return configs


def run_stream_memory(s: Scenario, upstream: Upstream) -> dict[str, dict]:
    """Each configuration in turn, one Envoy at a time: its RSS before and while `s.conns`
    streams are held open (stream_memory.py)."""
    payload = chat_body(s.size, stream=True)
    results = {}
    for label, (filters, switchboard, fallback) in stream_memory_configurations().items():
        envoy = start_pinned_envoy(bootstrap(*free_ports(2), upstream.clusters(s), filters, passthrough="provider"))
        try:
            results[label] = in_flight_memory(envoy, payload, s.conns,
                                              lambda r: answer_problem(r, s, switchboard, fallback))
        except (OSError, RuntimeError, requests.RequestException) as e:
            results[label] = {"error": str(e)[:200]}
        finally:
            envoy.stop()
        print(f"  {label}: {results[label]}", flush=True)
    return results


# --- figures ----------------------------------------------------------------------------------

def round_ratio(a: dict, b: dict) -> float:
    """Median of the per-round throughput ratios: each round runs the configurations back to
    back, so drift of the machine cancels."""
    return statistics.median(x / y for x, y in zip(a["rounds"], b["rounds"]))


def ratio_range(a: dict, b: dict) -> str:
    ratios = [x / y for x, y in zip(a["rounds"], b["rounds"])]
    return f"{min(ratios):.3f}–{max(ratios):.3f}"


def paired(a: dict, b: dict, key: str) -> list[float]:
    return [x - y for x, y in zip(a[key], b[key])]


def cpu_over(a: dict, b: dict) -> float:
    """Median of the per-round differences of Envoy CPU per request (µs)."""
    return statistics.median(paired(a, b, "cpu_rounds"))


def cpu_over_range(a: dict, b: dict) -> str:
    d = paired(a, b, "cpu_rounds")
    return f"{min(d):.1f} to {max(d):.1f}"


def added_p50(a: dict, b: dict) -> float:
    return statistics.median(paired(a, b, "p50_rounds"))


def fmt_us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


ORDER = ("plain", "no-op", "no-op, body held", "no-op, host calls", "switchboard, baseline", "switchboard",
         "native no-op, host calls", "native",
         "switchboard, 1 target", "native, 1 target")


def ratio_lines(r: dict) -> list[str]:
    sb, noop_, plain, floor = r["switchboard"], r["no-op"], r["plain"], r["no-op, host calls"]
    lines = [
        f"- Switchboard / no-op: **{round_ratio(sb, noop_):.3f}** ({ratio_range(sb, noop_)});"
        f" Switchboard / host-call floor: **{round_ratio(sb, floor):.3f}** ({ratio_range(sb, floor)});"
        f" no-op / plain: {round_ratio(noop_, plain):.3f} ({ratio_range(noop_, plain)});"
        f" Switchboard / plain: {round_ratio(sb, plain):.3f}",
        f"- Envoy CPU per request over the host-call floor: Switchboard **{cpu_over(sb, floor):+.1f} µs**"
        f" ({cpu_over_range(sb, floor)}); the floor over no-op {cpu_over(floor, noop_):+.1f} µs; no-op over"
        f" plain {cpu_over(noop_, plain):+.1f} µs; added p50 over no-op {fmt_us(added_p50(sb, noop_))}",
    ]
    if "native" in r:
        nat = r["native"]
        lines.append(f"- Native / plain: **{round_ratio(nat, plain):.3f}** ({ratio_range(nat, plain)}); Envoy CPU"
                     f" per request over plain **{cpu_over(nat, plain):+.1f} µs** ({cpu_over_range(nat, plain)});"
                     f" native / Switchboard .wasm {round_ratio(nat, sb):.3f}")
        if "native no-op, host calls" in r:
            nfloor = r["native no-op, host calls"]
            lines.append(f"- Native over the native floor (`native no-op, host calls`): Envoy CPU per request"
                         f" **{cpu_over(nat, nfloor):+.1f} µs** ({cpu_over_range(nat, nfloor)}); native / floor"
                         f" {round_ratio(nat, nfloor):.3f} ({ratio_range(nat, nfloor)}); the floor over plain"
                         f" {cpu_over(nfloor, plain):+.1f} µs, floor / plain {round_ratio(nfloor, plain):.3f}")
    else:
        lines.append("- native: not built (no target/native/libswitchboard.so)")
    if "switchboard, baseline" in r:
        base = r["switchboard, baseline"]
        lines.append(f"- A/B: Switchboard / baseline build {round_ratio(sb, base):.3f} ({ratio_range(sb, base)});"
                     f" Envoy CPU per request {cpu_over(sb, base):+.1f} µs ({cpu_over_range(sb, base)})")
    lines.append("- Per-round req/s: " + "; ".join(
        f"{label} {[round(v) for v in r[label]['rounds']]}" for label in ORDER if label in r))
    return lines


def scenario_section(s: Scenario, r: dict) -> list[str]:
    lines = [f"## {s.name}", ""]
    if s.falls_back:
        lines += ["Switchboard's first target answers 503 (its health ignores it, so every request"
                  " tries it) and each request falls back to the second target with a call-out:"
                  " two upstream exchanges per request. Plain Envoy and the no-op filters go straight"
                  " to the good upstream (one exchange), so the ratios show what a fallback costs"
                  " against a request that needs none.", ""]
    if s.streamed:
        lines += ["`\"stream\": true`; the upstream answers a fixed five-event SSE stream (chunked)"
                  + (", the fallback's included: on the `.wasm` a call-out's answer arrives whole, so the"
                     " client gets it when it has ended" if s.falls_back else "") + ".", ""]
    lines += ["| Envoy | req/s | p50 | p99 | errors | Envoy CPU / req | Envoy core busy | Envoy core stolen"
              " | upstream CPU / req | wrk CPU / req | peak RSS | RSS growth |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in ORDER:
        if label not in r:
            continue
        x = r[label]
        lines.append(f"| {label} | {x['rps']:,.0f} | {fmt_us(x['p50'])} | {fmt_us(x['p99'])} | {x['errors']} |"
                     f" {x['cpu_us']:.1f} µs | {x['envoy_busy']:.0%} | {x['stolen']:.0%} | {x['upstream_us']:.1f} µs |"
                     f" {x['wrk_us']:.1f} µs | {x['peak_rss_mb']:.1f} MB | {x['rss_growth_mb']:.1f} MB |")
    lines += [""] + ratio_lines(r)
    if s.kind == "memory":
        per = {label: x["rss_growth_mb"] / s.conns for label, x in r.items()}
        lines.append(f"- RSS growth per in-flight request for a 1 MB body: Switchboard {per['switchboard']:.2f} MB;"
                     f" with one target, so no body kept for a fallback, {per['switchboard, 1 target']:.2f} MB;"
                     f" no-op {per['no-op']:.2f} MB; no-op making the host calls {per['no-op, host calls']:.2f} MB"
                     + (f"; native {per['native']:.2f} MB" if "native" in per else "")
                     + (f", with one target {per['native, 1 target']:.2f} MB" if "native, 1 target" in per else ""))
        wasm = {label: x["wasm_mb"] for label, x in r.items() if x.get("wasm_mb") is not None}
        if "switchboard" in wasm and "switchboard, 1 target" in wasm:
            lines.append(f"- Of that, the worker's Wasm memory (from /proc/PID/smaps; it keeps its peak) grew by"
                         f" {wasm['switchboard']:.1f} MB for Switchboard and {wasm['switchboard, 1 target']:.1f} MB"
                         " with one target")
    return lines + [""]


def targets_section(results: dict[str, tuple[Scenario, dict]]) -> list[str]:
    out = ["## Against the targets", "",
           "Judged on the 1.5 KB chat at 16 connections of this same run (the plain weighted chat request),"
           " medians of per-round figures.", "",
           "| Target | Measured | Verdict |", "|---|---|---|"]

    def row(target: str, measured: str, ok: bool | None, why: str = "") -> None:
        verdict = "reported (no target)" if ok is None else "**met**" if ok else f"**missed**{': ' + why if why else ''}"
        out.append(f"| {target} | {measured} | {verdict} |")

    if MAIN in results:
        r = results[MAIN][1]
        sb, noop_, floor, plain = r["switchboard"], r["no-op"], r["no-op, host calls"], r["plain"]
        over = cpu_over(sb, floor)
        row(f"Wasm: ≤ {WASM_CPU_OVER_FLOOR_US:.0f} µs Envoy CPU / request over the host-call floor",
            f"{over:+.1f} µs ({cpu_over_range(sb, floor)})", over <= WASM_CPU_OVER_FLOOR_US,
            f"by {over - WASM_CPU_OVER_FLOOR_US:.1f} µs")
        ratio = round_ratio(sb, noop_)
        row(f"Wasm: ≥ {WASM_VS_NOOP:.2f} × no-op throughput", f"{ratio:.3f} ({ratio_range(sb, noop_)})",
            ratio >= WASM_VS_NOOP, f"by {WASM_VS_NOOP - ratio:.3f}")
        if "native" in r:
            nat = r["native"]
            ratio = round_ratio(nat, plain)
            row(f"Native: ≥ {NATIVE_VS_PLAIN:.2f} × plain throughput", f"{ratio:.3f} ({ratio_range(nat, plain)})",
                ratio >= NATIVE_VS_PLAIN, f"by {NATIVE_VS_PLAIN - ratio:.3f}")
            over = cpu_over(nat, plain)
            row(f"Native: ≤ {NATIVE_CPU_OVER_PLAIN_US:.0f} µs Envoy CPU / request over plain",
                f"{over:+.1f} µs ({cpu_over_range(nat, plain)})", over <= NATIVE_CPU_OVER_PLAIN_US,
                f"by {over - NATIVE_CPU_OVER_PLAIN_US:.1f} µs")
            if "native no-op, host calls" in r:
                nfloor = r["native no-op, host calls"]
                row("Native: Envoy CPU / request over the native floor (`native no-op, host calls`)",
                    f"{cpu_over(nat, nfloor):+.1f} µs ({cpu_over_range(nat, nfloor)}); the floor itself"
                    f" {cpu_over(nfloor, plain):+.1f} µs over plain", None)
        else:
            row("Native: ≥ 0.90 × plain, ≤ 10 µs over plain", "native: not built", None)
    if ONE_CONN in results:
        r = results[ONE_CONN][1]
        row("1 connection: added p50 over no-op", fmt_us(added_p50(r["switchboard"], r["no-op"])), None)
    if MB_ONE in results:
        r = results[MB_ONE][1]
        added = added_p50(r["switchboard"], r["no-op"])
        row("1 MB body: added p50 ≤ 3 ms over no-op", fmt_us(added), added <= 3000, "")
    if MB_MEMORY in results:
        s, r = results[MB_MEMORY]
        per = r["switchboard"]["rss_growth_mb"] / s.conns
        one = r["switchboard, 1 target"]["rss_growth_mb"] / s.conns
        # The .wasm's ABI copies the body into the VM: 2.2 × the body; the native module reads
        # Envoy's slices and keeps one copy for a fallback: 1.2 ×.
        row("1 MB body: .wasm Envoy memory per in-flight request ≤ 2.2 × body", f"{per:.2f} MB", per <= 2.2,
            f"by {per - 2.2:.2f} MB (one target, no body kept for a fallback: {one:.2f} MB)")
        if "native" in r:
            native = r["native"]["rss_growth_mb"] / s.conns
            one_native = r["native, 1 target"]["rss_growth_mb"] / s.conns
            row("1 MB body: native Envoy memory per in-flight request ≤ 1.2 × body", f"{native:.2f} MB",
                native <= 1.2, f"by {native - 1.2:.2f} MB (one target, no body kept for a fallback:"
                f" {one_native:.2f} MB; plain Envoy {r['plain']['rss_growth_mb'] / s.conns:.2f} MB)")
    return out + [""]


# The configurations counted under callgrind, with the rate that turns a difference into µs.
COUNTED = ["plain", "no-op", "held", "calls", "switchboard", "native-calls", "native"]


def instruction_section(upstream: Upstream, plain_cpu_us: float | None) -> list[str]:
    """Instructions Envoy executes per request for the 1.5 KB chat (scripts/instructions.py).
    Timed figures on a shared machine drift by tens of percent between rounds; these counts
    repeat to about ±2k and do not depend on load, so the report gives both."""
    from instructions import measure  # imports this file: import it only when needed

    built = {"native": NATIVE_SO.exists(), "native-calls": NATIVE_SO.exists() and NOOP_NATIVE.exists()}
    counted = [n for n in COUNTED if built.get(n, True)]
    try:
        totals = {n: sum(measure(n, upstream).values()) for n in counted}
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return ["## Instructions per request (callgrind)", "", f"Not measured: {e}", ""]
    plain = totals["plain"]
    # Plain Envoy's own rate in this run turns an instruction difference into CPU time; it is
    # only a guide (a cache miss costs no instruction).
    rate = plain / plain_cpu_us if plain_cpu_us else 0.0
    names = {"held": "no-op, body held", "calls": "no-op, host calls", "switchboard": "Switchboard .wasm",
             "native-calls": "native no-op, host calls", "native": "Switchboard native"}
    out = ["## Instructions per request (callgrind)", "",
           "Envoy (`--concurrency 1`) under valgrind's callgrind, 200 requests of the 1.5 KB chat over one"
           " keep-alive connection after 30 of warm-up (`scripts/instructions.py`): what Envoy executes per"
           " request, whatever the machine's load. They repeat to about ±2k between runs.", "",
           "| Envoy | instructions / request | over plain |", "|---|---|---|"]
    for n, total in totals.items():
        out.append(f"| {names.get(n, n)} | {total:,.0f} | {total - plain:+,.0f} |")
    out.append("")
    if rate:
        def us(d: float) -> str:
            return f"{d:+,.0f} instructions, {d / rate:+.1f} µs"
        out.append(f"At plain Envoy's rate in this run ({rate / 1000:.2f}k instructions per µs of CPU):")
        out.append(f"- Switchboard .wasm over the host-call floor: {us(totals['switchboard'] - totals['calls'])}")
        out.append(f"- The host-call floor over no-op: {us(totals['calls'] - totals['no-op'])}; holding the body is"
                   f" {us(totals['held'] - totals['no-op'])} of it")
        out.append("- Throughput as the inverse of instructions, against no-op: the host-call floor"
                   f" {totals['no-op'] / totals['calls']:.3f}, Switchboard .wasm {totals['no-op'] / totals['switchboard']:.3f}")
        if "native" in totals:
            out.append(f"- Switchboard native over plain: {us(totals['native'] - plain)}")
        if "native-calls" in totals:
            out.append(f"- Switchboard native over the native floor: {us(totals['native'] - totals['native-calls'])};"
                       f" the native floor over plain: {us(totals['native-calls'] - plain)}")
            out.append("- Throughput as the inverse of instructions, against plain: the native floor"
                       f" {plain / totals['native-calls']:.3f}, Switchboard native {plain / totals['native']:.3f}")
        out.append("")
    if not all(built.values()):
        return out
    try:
        sizes, per = prompt_size_rows(upstream)
        answers, per_answer = answer_rows()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return out + [f"Prompt sizes and answers not measured: {e}", ""]
    return out + instruction_targets(totals, per, per_answer) + sizes + answers


# The prompt sizes agents send (the bench chat padded, `messages` before `model`), each with
# the requests counted and the warm-up before them: a 1 MB body takes seconds under valgrind.
PROMPT_SIZES = [(100, 30, 10), (1024, 10, 3)]
PER_KB = ["plain", "calls", "switchboard", "native-calls", "native"]
COPIES = "C library: memcpy, memmove"


def prompt_size_rows(upstream: Upstream) -> tuple[list[str], dict[tuple[int, bool], dict[str, float]]]:
    """Instructions per KB of prompt over plain Envoy and over each build's floor, at 100 KB and
    1 MB, and at 100 KB again with copies counted as glibc's vector loop (callgrind counts a
    `rep movsb` copy as one instruction per byte: see scripts/instructions.py)."""
    from instructions import measure

    main = next(s for s in SCENARIOS if s.name == MAIN)
    runs = [(kb, n, warm, False) for kb, n, warm in PROMPT_SIZES] + [(*PROMPT_SIZES[0], True)]
    per: dict[tuple[int, bool], dict[str, float]] = {}
    out = ["### Instructions per KB of prompt", "",
           "The same chat padded to 100 KB and 1 MB (`INSTR_BODY_KB`; 30 requests after 10 of warm-up at"
           " 100 KB, 10 after 3 at 1 MB). Per KB: (with the filter − reference) ÷ KB. `copies` is what"
           " glibc's memcpy/memmove executed, per KB; `vector copies` counts them as glibc's AVX loop"
           " (`INSTR_VECTOR_COPIES=1`) instead of `rep movsb`, which callgrind counts at one instruction"
           " per byte.", "",
           "| prompt | plain | .wasm floor | .wasm | native floor | native | .wasm / KB over plain (over floor; copies)"
           " | native / KB over plain (over floor; copies) |", "|---|---|---|---|---|---|---|---|"]
    for kb, n, warm, vector in runs:
        sized = replace(main, size=kb * 1024)
        kinds = {name: measure(name, upstream, sized, requests_n=n, warmup=warm, vector_copies=vector)
                 for name in PER_KB}
        t = {name: sum(k.values()) for name, k in kinds.items()}
        per[kb, vector] = {"wasm": (t["switchboard"] - t["plain"]) / kb,
                           "native": (t["native"] - t["plain"]) / kb,
                           "wasm-floor": (t["switchboard"] - t["calls"]) / kb,
                           "native-floor": (t["native"] - t["native-calls"]) / kb}

        def cell(build: str, floor: str, name: str) -> str:
            copies = (kinds[name].get(COPIES, 0) - kinds["plain"].get(COPIES, 0)) / kb
            return (f"{(t[name] - t['plain']) / kb / 1000:.2f}k ({(t[name] - t[floor]) / kb / 1000:+.2f}k;"
                    f" {copies / 1000:.2f}k)")
        label = f"{kb:,} KB" + (", vector copies" if vector else "")
        out.append(f"| {label} | " + " | ".join(f"{t[x]:,.0f}" for x in PER_KB)
                   + f" | {cell('wasm', 'calls', 'switchboard')} | {cell('native', 'native-calls', 'native')} |")
    return out + [""], per


# The streamed answers (100 KiB of content events) counted per KB of answer: the chat stream,
# the same with `usage_metrics`, and a Responses stream through the id rewriter.
ANSWER_KB = 100
ANSWERS = [("chat stream", STREAM, False), ("chat stream, usage_metrics", STREAM, True),
           ("Responses stream, ids rewritten", RESPONSES_STREAM, False)]


def answer_rows() -> tuple[list[str], dict[str, tuple[float, float]]]:
    """Instructions per KB of a long streamed answer over each build's floor and over plain
    Envoy; every answer is read whole and checked (scripts/instructions.py)."""
    import instructions
    from instructions import measure

    upstream = Upstream(ANSWER_KB)
    per: dict[str, tuple[float, float]] = {}
    out = ["### Instructions per KB of streamed answer", "",
           f"A streamed answer of {ANSWER_KB} KiB of content events (`INSTR_ANSWER_KB`, 30 requests after 10"
           " of warm-up; `INSTR_USAGE=1` for `usage_metrics`, `INSTR_SCENARIO=responses-stream` for the"
           " rewriter). Per KB: (with the filter − reference) ÷ KB, over the build's floor, then over plain.", "",
           "| answer | plain | .wasm floor | .wasm | native floor | native | .wasm / KB (over plain)"
           " | native / KB (over plain) |", "|---|---|---|---|---|---|---|---|"]
    try:
        for label, scenario, usage in ANSWERS:
            chosen = next(x for x in [*SCENARIOS, RESPONSES_STREAM_SCENARIO] if x.name == scenario)
            instructions.USAGE, instructions.ANSWER_KB = usage, ANSWER_KB
            t = {name: sum(measure(name, upstream, chosen, requests_n=30, warmup=10).values()) for name in PER_KB}
            per[label] = ((t["switchboard"] - t["calls"]) / ANSWER_KB, (t["native"] - t["native-calls"]) / ANSWER_KB)

            def cell(name: str, floor: str) -> str:
                return f"{(t[name] - t[floor]) / ANSWER_KB / 1000:.2f}k ({(t[name] - t['plain']) / ANSWER_KB / 1000:.2f}k)"
            out.append(f"| {label} | " + " | ".join(f"{t[x]:,.0f}" for x in PER_KB)
                       + f" | {cell('switchboard', 'calls')} | {cell('native', 'native-calls')} |")
    finally:
        instructions.USAGE, instructions.ANSWER_KB = False, 0
        upstream.stop()
    return out + [""], per


# The figures this work started from (docs/benchmarks.md of 2026-12-01, and the 100 KB
# counts it quotes), beside its targets: (label, before, target, unit).
INSTRUCTION_TARGETS = [
    (".wasm over its host-call floor, 1.5 KB", 23_604, 10_000, "instr"),
    ("native over the native floor, 1.5 KB", 21_622, 8_000, "instr"),
    ("the native floor over plain, 1.5 KB", 23_576, 15_000, "instr"),
    ("native per KB of prompt over plain, 100 KB", 5_000, 600, "per KB"),
    ("native per KB of prompt over plain, 1 MB", None, 600, "per KB"),
    (".wasm per KB of prompt over plain, 100 KB", 6_100, 1_000, "per KB"),
    (".wasm per KB of prompt over plain, 1 MB", None, 1_000, "per KB"),
    # The answer side, measured first at 3a02514 (30 requests after 10 of warm-up).
    (".wasm per KB of answer over its floor, chat stream", 8_134, 1_000, "per KB"),
    ("native per KB of answer over its floor, chat stream", 8_109, 1_000, "per KB"),
    (".wasm per KB of answer over its floor, chat stream, usage_metrics", 146_556, 1_000, "per KB"),
    ("native per KB of answer over its floor, chat stream, usage_metrics", 166_804, 1_000, "per KB"),
    (".wasm per KB of answer over its floor, Responses stream, ids rewritten", 88_678, 1_000, "per KB"),
    ("native per KB of answer over its floor, Responses stream, ids rewritten", 59_694, 1_000, "per KB"),
]


def instruction_targets(totals: dict[str, float], per: dict[tuple[int, bool], dict[str, float]],
                        answers: dict[str, tuple[float, float]]) -> list[str]:
    now = {
        INSTRUCTION_TARGETS[0][0]: totals["switchboard"] - totals["calls"],
        INSTRUCTION_TARGETS[1][0]: totals["native"] - totals["native-calls"],
        INSTRUCTION_TARGETS[2][0]: totals["native-calls"] - totals["plain"],
    }
    for kb in (100, 1024):
        size = "100 KB" if kb == 100 else "1 MB"
        for build, name in (("native", "native"), ("wasm", ".wasm")):
            if (kb, False) in per:
                now[f"{name} per KB of prompt over plain, {size}"] = per[kb, False][build]
    for label, (wasm, native) in answers.items():
        now[f".wasm per KB of answer over its floor, {label}"] = wasm
        now[f"native per KB of answer over its floor, {label}"] = native
    out = ["### Against the instruction targets", "",
           "| measure | before | now | target | verdict |", "|---|---|---|---|---|"]
    for label, before, target, unit in INSTRUCTION_TARGETS:
        if label not in now:
            continue
        value = now[label]
        shown = f"{value / 1000:+.1f}k" if unit == "instr" else f"{value / 1000:.2f}k"
        was = "—" if before is None else (f"{before / 1000:+.1f}k" if unit == "instr" else f"{before / 1000:.2f}k")
        verdict = "**met**" if value <= target else f"**missed**: by {(value - target) / 1000:.1f}k"
        out.append(f"| {label} | {was} | {shown} | ≤ {target / 1000:.1f}k | {verdict} |")
    return out + [""]


def method_lines(upstream_cost: list[str]) -> list[str]:
    envoy_version = subprocess.run([str(ENVOY_BIN), "--version"], capture_output=True, text=True).stdout
    envoy_version = envoy_version.split("version:")[-1].strip()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    native = (f"Switchboard native `libswitchboard.so`: {NATIVE_SO.stat().st_size:,} bytes (Envoy's dynamic-modules"
              " HTTP filter, same plugin JSON)" if NATIVE_SO.exists() else "native: not built")
    return [
        f"- Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; load average"
        f" when the run started: {LOAD_AT_START}",
        f"- Envoy `{envoy_version}`, `--concurrency 1`, V8, pinned to CPU {ENVOY_CPU} (its affinity is set"
        f" before it starts, as `taskset -c {ENVOY_CPU}` does, and checked on every thread). wrk 4.1 (`-t1`)"
        f" and the lean upstream run on CPU {LOAD_CPU} (`taskset -c {LOAD_CPU}`), so Envoy is the bottleneck:"
        " the `Envoy core busy` column is its CPU time over the wall time of each run. `Envoy core stolen` is"
        f" the share of CPU {ENVOY_CPU}'s time the hypervisor gave to other guests during the run (`steal` in"
        " /proc/stat; the kernel leaves it out of a process's CPU time): while the host is that busy, this"
        " VM's CPU runs everything slower, plain Envoy included",
        "- The upstream is `tools/lean-upstream`: one epoll loop answering precomputed bytes over HTTP/1.1"
        " keep-alive (a 278-byte chat completion, a five-event SSE stream, the same stream held open after"
        f" its first content event for {HOLD_MS / 1000:g} s, or a 503), reading and dropping"
        " request bodies as they arrive. Its own CPU per request is in the tables:",
        *upstream_cost,
        f"- {ROUNDS} rounds ({VERDICT_ROUNDS} for \"{MAIN}\", whose figures the targets are judged on)"
        f" of {SECONDS:g} s per configuration, in turns (plain, no-op, ..., Switchboard,"
        " native) after a check request and a 1 s warm-up each; ratios and CPU differences are medians of"
        " per-round figures (a round runs the configurations back to back, so drift cancels), with their range",
        "- CPU per request: the process's CPU time over the run (sum of its threads' schedstat run time),"
        " divided by the requests wrk completed; wrk's own from the children's rusage",
        f"- Switchboard `.wasm`: {WASM.stat().st_size:,} bytes; no-op filter: {NOOP_WASM.stat().st_size:,} bytes;"
        f" {native}",
        "- `no-op, body held` is the no-op filter told to hold the request until its body is in, the floor of"
        " any filter that routes on the body; `no-op, host calls` also makes the host calls such a filter"
        " cannot avoid (read the headers and body, edit the body without changing its length, set a credential"
        " and the cluster, read the status, add a response header) with no logic between them: the host-call"
        " floor",
        "- `native no-op, host calls` is the native build's floor: a dynamic module (`tools/noop-native`)"
        " making the same calls through Envoy's dynamic-modules ABI with no logic between them (its body"
        " edit is written over Envoy's own slices, as Switchboard's is), and clearing the cached route as a"
        " module must after setting the cluster header",
        "- The virtual model has 2 weighted targets (32 with sticky routing on `x-user-id` in that scenario),"
        " each with an `authorization` header; the body's `model` is rewritten for the target",
        "",
    ]


def upstream_cost_lines(results: dict[str, tuple[Scenario, dict]]) -> list[str]:
    out = []
    for name, (s, r) in results.items():
        if s.conns < 16:
            continue
        up = statistics.median(x["upstream_us"] for x in r.values())
        plain = r["plain"]["cpu_us"]
        out.append(f"  - {name}: upstream {up:.1f} µs per request (median over the configurations), against"
                   f" plain Envoy's {plain:.1f} µs ({up / plain:.0%})")
    return out


def quick_row(r: dict) -> str:
    sb, noop_, floor, plain = r["switchboard"], r["no-op"], r["no-op, host calls"], r["plain"]
    cells = [f"{label} {r[label]['rps']:.0f}/s {r[label]['cpu_us']:.1f}µs" for label in ORDER if label in r]
    if "switchboard, baseline" in r:
        base = r["switchboard, baseline"]
        cells.append(f"A/B sb/baseline {round_ratio(sb, base):.3f}, CPU {cpu_over(sb, base):+.1f} µs"
                     f" ({cpu_over_range(sb, base)})")
    native = (f", native/plain {round_ratio(r['native'], plain):.3f} (+{cpu_over(r['native'], plain):.1f} µs)"
              if "native" in r else ", native: not built")
    return ("  " + "; ".join(cells) +
            f"\n  sb/no-op {round_ratio(sb, noop_):.3f}, sb over floor {cpu_over(sb, floor):+.1f} µs,"
            f" upstream {statistics.median(x['upstream_us'] for x in r.values()):.1f} µs/req{native}")


def core_benchmarks() -> list[str]:
    """`cargo bench --bench core`: the core's own costs, natively."""
    run = subprocess.run(["cargo", "bench", "--bench", "core"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    rows = [line for line in run.stdout.splitlines() if re.match(r"^(inspect|rewrite|decide|health):", line)]
    return ["", "Core micro-benchmarks of this run (`cargo bench --bench core`, natively; target: a decision"
            " over 32 targets under 2 µs):", "", "```", *rows, "```", ""]


# Sections of docs/benchmarks.md below this line are measured by hand (scripts/instructions.py
# runs with their commands): `make bench` keeps them.
BY_HAND = "<!-- Measured by hand below this line: `make bench` keeps it. -->"


def kept_by_hand(report: Path) -> str:
    """What the report holds from the BY_HAND line on, if anything."""
    text = report.read_text() if report.exists() else ""
    at = text.find(BY_HAND)
    return "\n" + text[at:] if at >= 0 else ""


LOAD_AT_START = ""


def main() -> int:
    global LOAD_AT_START
    if (os.cpu_count() or 1) < 2:
        print("make bench needs two CPUs: Envoy on one, wrk and the upstream on the other", file=sys.stderr)
        return 1
    for path in (LEAN_UPSTREAM, NOOP_WASM, WASM):
        if not path.exists():
            print(f"missing {path}: run `make bench`", file=sys.stderr)
            return 1
    if NATIVE_SO.exists():
        os.environ["ENVOY_DYNAMIC_MODULES_SEARCH_PATH"] = str(NATIVE_SO.parent)
    started = time.monotonic()
    LOAD_AT_START = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    os.sched_setaffinity(0, {LOAD_CPU})
    core = [] if QUICK else core_benchmarks()
    print("\n".join(core), flush=True)
    chosen = [s for s in SCENARIOS if (ONLY in s.name if ONLY else (s.quick or not QUICK))]
    upstream = Upstream()
    results: dict[str, tuple[Scenario, dict]] = {}
    counted: list[str] = []
    held: list[str] = []  # the streams held open: a section of their own, not timed
    try:
        for s in chosen:
            print(f"running: {s.name}", flush=True)
            if s.kind == "stream-memory":
                held += stream_memory_section(s.name, s.conns, run_stream_memory(s, upstream))
                continue
            results[s.name] = (s, run_scenario(s, upstream))
            print(quick_row(results[s.name][1]), flush=True)
        if not QUICK or os.environ.get("BENCH_INSTRUCTIONS"):
            print("counting instructions under callgrind", flush=True)
            plain_cpu_us = results[MAIN][1]["plain"]["cpu_us"] if MAIN in results else None
            counted = instruction_section(upstream, plain_cpu_us)
    finally:
        upstream.stop()
    command = "BENCH_QUICK=1 make bench" if QUICK else "make bench"
    lines = ["# Benchmarks", "",
             f"Generated by `{command}` on {date.today().isoformat()} in {time.monotonic() - started:.0f} s."
             + (" Quick mode: few short rounds, for development only." if QUICK else ""), "",
             *method_lines(upstream_cost_lines(results))]
    lines += targets_section(results)
    lines += counted
    for s, r in results.values():
        lines += scenario_section(s, r)
    lines += held
    report = "\n".join(lines + core) + "\n" + kept_by_hand(OUT)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(report)
    print(report)
    print(f"written to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
