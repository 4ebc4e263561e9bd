"""The soak: requests without pause through Envoy (`--concurrency 2`, the filter from a watched
ECDS file) over three targets, one of which flaps through 503 bursts, connection resets,
stalls and 429s with `Retry-After`, with a config reload half-way. `make soak`
(scripts/soak.py) runs it at full size and writes docs/reliability.md; tests/e2e/test_soak.py
runs a short form in `make test`.

The load driver is Python threads with `http.client`, one keep-alive connection per client,
rather than wrk with a Lua script: every answer is checked whole (its status, a streamed body
read to `data: [DONE]`, the attempts and resolved-model headers), a request that got no answer
at all is told apart from one that got an error answer, and the reload and the flap schedule
follow the request count. The figures here are about correctness, not throughput, so a client
that manages a few hundred requests a second is enough.

Every loop is bounded by a request count and a deadline; everything runs on loopback.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness import Envoy, Stack, wasm_memory_kb

VIRTUAL = "soak/chat"
HEALTHY_TARGETS = ("alpha", "beta")
FLAKY = "flaky"
ATTEMPTS = "x-switchboard-attempts"
RESOLVED = "x-switchboard-resolved-model"
# A crashed VM is reloaded on the next request (and counted in wasm.<plugin>.vm_reload_*)
# instead of failing every later request: so a crash shows as a restart here.
FAILURE_POLICY = "FAIL_RELOAD"
# The flaky target stalls longer than this before answering: the filter gives up on it.
FALLBACK_TIMEOUT_MS = 1000
STALL_MS = 3000
CLIENT_TIMEOUT_S = 30
# However fast the clients are, a run stops at this many times the requested count. The flap
# schedule follows the clock: the short soak's 6 s at 3,450 requests a second (seen in CI) took
# 10 times its 2,000 before the last phase, so the bound leaves room for a fast machine.
MAX_FACTOR = 40

# What the flaky target does, phase after phase (each applied over HEALTHY), and for how many
# `phase_s` units: healthy spells are long enough for its health record to recover (one-second
# evictions, failures counted over one second), so every fault meets a target back in rotation.
HEALTHY = {"fail_status": None, "fail_rate": 1.0, "retry_after": None, "drop": None, "stall_ms": 0}
FLAP = [
    ("healthy", {}, 2),
    ("503 burst", {"fail_status": 503}, 1),
    ("healthy", {}, 2),
    ("connection resets", {"drop": "before-response"}, 1),
    ("healthy", {}, 2),
    (f"stalls of {STALL_MS / 1000:g} s", {"stall_ms": STALL_MS}, 1),
    ("healthy", {}, 2),
    ("429 with Retry-After: 1", {"fail_status": 429, "retry_after": "1"}, 1),
    ("healthy", {}, 2),
    ("503 on half the requests", {"fail_status": 503, "fail_rate": 0.5}, 1),
]
# Log lines of a Wasm VM that crashed (a trap, a panic) or of a stream failed because of it,
# and the native module's line for a panic its hook caught.
CRASH = re.compile(r"panicked at|Uncaught|wasm_fail_stream|Function: proxy_on_\w+ failed|"
                   r"a Switchboard hook panicked")


def plugin_config(weights: dict[str, int]) -> dict:
    """Three weighted targets; the flaky one is retried once, evicted for a second after two
    failures in a row (doubling while it keeps failing), and abandoned when it stalls."""
    models = []
    for name in weights:
        m = {"name": f"{name}/gpt-4o", "cluster": name, "model": "gpt-4o", "provider": "openai",
             "visibility": "internal"}
        if name == FLAKY:
            m["health"] = {"eviction": {"consecutive_failures": 2, "duration": "1s"}}
        models.append(m)
    targets = [{"target": f"{name}/gpt-4o", "weight": w} for name, w in weights.items()]
    for t in targets:
        if t["target"].startswith(FLAKY):
            t["retry_config"] = {"attempts": 1, "delay": 50}
    return {"models": models,
            "failure_window": {"failures": 3, "window_seconds": 1},
            "virtual_models": [{"name": VIRTUAL, "model_types": ["chat"], "fallback_timeout_ms": FALLBACK_TIMEOUT_MS,
                                "routing_config": {"type": "weight-based-routing", "load_balance_targets": targets}}]}


BEFORE = plugin_config({"alpha": 30, "beta": 30, FLAKY: 40})
AFTER = plugin_config({"alpha": 15, "beta": 35, FLAKY: 50})


@dataclass
class Outcome:
    """One request as its client saw it."""

    stream: bool
    status: int | None  # None: no answer at all
    complete: bool  # a whole answer: JSON with choices, or SSE up to `data: [DONE]`
    attempts: int
    resolved: str | None
    phase: str
    after_reload: bool
    error: str | None = None


def envoy_stats(envoy: Envoy) -> dict[str, int]:
    out = {}
    for line in envoy.stats().splitlines():
        name, _, value = line.partition(": ")
        if value.strip().lstrip("-").isdigit():
            out[name] = int(value)
    return out


def envoy_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def ask(conn: http.client.HTTPConnection, i: int, stream: bool) -> tuple[int, bool, int, str | None, bool]:
    """Sends request `i` and reads its whole answer: (status, complete, attempts, resolved,
    broken). Raises when no answer came; an answer whose body breaks off is incomplete and
    `broken` (its connection is unusable)."""
    body = json.dumps({"model": VIRTUAL, "stream": stream,
                       "messages": [{"role": "user", "content": f"soak request {i}"}]})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
    r = conn.getresponse()
    attempts, resolved = int(r.getheader(ATTEMPTS) or 1), r.getheader(RESOLVED)
    try:
        data = r.read()
    except (OSError, http.client.HTTPException):
        return r.status, False, attempts, resolved, True
    if r.status != 200:
        complete = False
    elif stream:
        complete = data.rstrip().endswith(b"data: [DONE]")
    else:
        try:
            complete = bool(json.loads(data).get("choices"))
        except ValueError:
            complete = False
    return r.status, complete, attempts, resolved, False


@dataclass
class Soak:
    """One run: at least `total` requests from `clients` threads, and at least `cycles` turns
    of the flap schedule, whose phases last `phase_s` (health decisions, such as a one-second
    eviction, follow the clock, so the schedule does too). The config reloads when half the
    planned phases are over. Never more than `MAX_FACTOR` × `total` requests, nor past
    `max_seconds`."""

    stack: Stack
    total: int
    cycles: int = 1
    phase_s: float = 1.0
    clients: int = 8
    max_seconds: float = 600.0
    outcomes: list[Outcome] = field(default_factory=list)
    issued: int = 0
    # The phase requests are sent in; the conductor sets each (the first before any request).
    phase: str = FLAP[0][0]
    reloaded: bool = False
    reload_result: bool | None = None
    reload_at: int | None = None
    created_by_reload: int = 0
    phases_done: int = 0
    # Requests the flaky target received, by the phase it was in.
    flaky_received: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def next_request(self, deadline: float) -> tuple[int, str, bool] | None:
        with self.lock:
            enough = self.issued >= self.total and self.phases_done >= self.cycles * len(FLAP)
            if enough or self.issued >= MAX_FACTOR * self.total or time.monotonic() > deadline:
                return None
            self.issued += 1
            return self.issued - 1, self.phase, self.reloaded

    def client(self, port: int, deadline: float) -> None:
        conn = None
        while (job := self.next_request(deadline)) is not None:
            i, phase, after_reload = job
            stream = i % 2 == 0
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
            try:
                status, complete, attempts, resolved, broken = ask(conn, i, stream)
                outcome = Outcome(stream, status, complete, attempts, resolved, phase, after_reload)
            except (OSError, http.client.HTTPException) as e:
                outcome = Outcome(stream, None, False, 0, None, phase, after_reload, type(e).__name__)
                broken = True
            if broken:
                conn.close()
                conn = None
            with self.lock:
                self.outcomes.append(outcome)
        if conn:
            conn.close()

    def conduct(self, envoy: Envoy, deadline: float) -> None:
        """Moves the flaky target through the flap phases as requests go out, and reloads the
        config once half of them have been sent."""
        flaky = self.stack.providers[FLAKY]
        step, phase_end, received = -1, 0.0, 0
        while not self.done.is_set() and time.monotonic() < deadline:
            if time.monotonic() >= phase_end:
                if step >= 0:
                    now_received = flaky.stats()["requests"]
                    self.flaky_received[self.phase] += now_received - received
                    received = now_received
                step += 1
                name, settings, units = FLAP[step % len(FLAP)]
                phase_end = time.monotonic() + units * self.phase_s
                flaky.configure(**{**HEALTHY, **settings})
                with self.lock:
                    self.phase, self.phases_done = name, step
            if self.reload_result is None and step >= self.cycles * len(FLAP) // 2:
                created = envoy.stat("wasm.envoy.wasm.runtime.v8.created")
                self.reload_at = self.issued
                self.reload_result = envoy.reload(AFTER)
                self.created_by_reload = envoy.stat("wasm.envoy.wasm.runtime.v8.created") - created
                with self.lock:
                    self.reloaded = True
            time.sleep(0.01)
        flaky.configure(**HEALTHY)

    def run(self) -> dict:
        for name in (*HEALTHY_TARGETS, FLAKY):
            self.stack.provider(name, max_records=0)
        envoy = self.stack.envoy(BEFORE, concurrency=2, ecds=True, failure_policy=FAILURE_POLICY)
        pid = envoy.proc.pid
        start = {"stats": envoy_stats(envoy), "rss_kb": envoy_rss_kb(pid), "wasm_kb": wasm_memory_kb(pid)}
        began = time.monotonic()
        deadline = began + self.max_seconds
        threads = [threading.Thread(target=self.client, args=(envoy.port, deadline)) for _ in range(self.clients)]
        conductor = threading.Thread(target=self.conduct, args=(envoy, deadline))
        for t in [conductor, *threads]:
            t.start()
        for t in threads:
            t.join(timeout=self.max_seconds + CLIENT_TIMEOUT_S + 10)
        seconds = time.monotonic() - began
        self.done.set()
        conductor.join(timeout=30)
        end = {"stats": envoy_stats(envoy), "rss_kb": envoy_rss_kb(pid), "wasm_kb": wasm_memory_kb(pid)}
        return self.figures(envoy, start, end, seconds)

    def figures(self, envoy: Envoy, start: dict, end: dict, seconds: float) -> dict:
        out = self.outcomes
        delta = {k: end["stats"].get(k, 0) - start["stats"].get(k, 0) for k in end["stats"]}
        reloads = sum(v for k, v in delta.items() if re.fullmatch(r"wasm\.[^.]+\.vm_reload_(success|failure)", k))
        log = envoy.log()
        errors = [o for o in out if o.status is not None and not (o.status == 200 and o.complete)]
        by_config = {label: Counter(o.resolved for o in out if o.status == 200 and o.after_reload == after)
                     for label, after in (("before", False), ("after", True))}
        return {
            "requested": self.total,
            "sent": len(out),
            "streamed": sum(o.stream for o in out),
            "seconds": round(seconds, 1),
            "answered_200": sum(o.status == 200 and o.complete for o in out),
            "client_errors": len(errors),
            "client_error_kinds": dict(Counter(f"{o.status} in {o.phase}" + ("" if o.status != 200 else " (cut)")
                                               for o in errors)),
            "no_answer": sum(o.status is None for o in out),
            "no_answer_kinds": dict(Counter(f"{o.error} in {o.phase}" for o in out if o.status is None)),
            "attempts": dict(sorted(Counter(o.attempts for o in out if o.status is not None).items())),
            "phases": dict(Counter(o.phase for o in out)),
            "flap_phases": self.phases_done,
            "flaky_received": dict(self.flaky_received),
            "reload_applied": self.reload_result,
            "reload_at_request": self.reload_at,
            "resolved_before_reload": dict(by_config["before"]),
            "resolved_after_reload": dict(by_config["after"]),
            "vm_restarts": reloads,
            "vm_reload_stats": {k: v for k, v in delta.items() if ".vm_reload" in k},
            "vm_crash_log_lines": len(CRASH.findall(log)),
            "vms_created": delta.get("wasm.envoy.wasm.runtime.v8.created", 0),
            "vms_created_by_reload": self.created_by_reload,
            "vms_active": (start["stats"].get("wasm.envoy.wasm.runtime.v8.active"),
                           end["stats"].get("wasm.envoy.wasm.runtime.v8.active")),
            "envoy_rss_kb": (start["rss_kb"], end["rss_kb"]),
            "wasm_memory_kb": (start["wasm_kb"], end["wasm_kb"]),
            "ecds_updates": (delta.get("extension_config_discovery.http_filter.switchboard.update_success", 0),
                             delta.get("extension_config_discovery.http_filter.switchboard.update_rejected", 0)),
        }


def run(total: int, cycles: int, phase_s: float, clients: int = 8, max_seconds: float = 600.0) -> dict:
    """A whole soak on its own stack (stopped afterwards); returns its figures."""
    stack = Stack()
    try:
        return Soak(stack, total, cycles, phase_s, clients, max_seconds).run()
    finally:
        stack.close()
