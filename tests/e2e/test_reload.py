"""Hot reload of the plugin config through ECDS (a watched file replaced by a rename, as
envoy/ecds.yaml ships it) under continuous load.

Three reloads, one of them invalid, while two clients (one streaming) send requests without
pause: no request is lost or fails; requests that start after a valid reload follow the new
config; the invalid one is refused with its field path and the old config keeps serving; a
request in flight during a reload finishes on the plan it started with; and a target evicted
before a reload stays evicted after it (health records live in the VM's shared data, keyed by
model name).
"""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from harness import (BUILD, ECDS_REJECTED, ROOT, WASM, HarnessError, config_version, for_build, free_ports,
                     plugin_config_of, replace_file,
                     start_envoy)

CHAT = "reload/chat"
SLOW = "reload/slow"
RESOLVED = "x-switchboard-resolved-model"
ATTEMPTS = "x-switchboard-attempts"
# Bounds of the load loop, whatever happens: the phases below take about 6 s.
MAX_LOAD_SECONDS = 40
MAX_REQUESTS_PER_CLIENT = 4000
# The in-flight request: `s` holds each attempt this long, then fails it, so the request
# retries (on a timer) and falls back while the config it started under has already been
# replaced (a reload here takes ~0.1 s).
SLOW_STALL_MS = 2000


def model(cluster: str, **extra) -> dict:
    return {"name": f"{cluster}/gpt-4o", "cluster": cluster, "model": "gpt-4o", "provider": "openai",
            "visibility": "internal", **extra}


def priority(*targets: tuple[str, int]) -> dict:
    return {"type": "priority-based-routing",
            "load_balance_targets": [{"target": f"{t}/gpt-4o", "priority": p} for t, p in targets]}


def config(chat: dict, slow: dict, catalog: str = "abcs") -> dict:
    # b is evicted for a minute after two failures in a row: longer than the test runs.
    models = [model(c, health={"eviction": {"consecutive_failures": 2, "duration": "60s"}}) if c == "b"
              else model(c) for c in catalog]
    return {"models": models,
            "virtual_models": [{"name": CHAT, "model_types": ["chat"], "routing_config": chat},
                               {"name": SLOW, "model_types": ["chat"], "routing_config": slow}]}


# 1. Everything to a; the slow model's plan is s, s again after 300 ms, then a.
FIRST = config({"type": "weight-based-routing", "load_balance_targets": [{"target": "a/gpt-4o", "weight": 100}]},
               priority(("s", 0), ("a", 1)))
FIRST["virtual_models"][1]["routing_config"]["load_balance_targets"][0]["retry_config"] = {"attempts": 1, "delay": 300}
# 2. b first, c as backup; the slow model falls back to c now.
SECOND = config(priority(("b", 0), ("c", 1)), priority(("s", 0), ("c", 1)))
# Refused: it would send everything to c, but one field is out of range.
INVALID = copy.deepcopy(SECOND)
INVALID["virtual_models"][0]["routing_config"] = priority(("c", 0), ("b", 1))
INVALID["virtual_models"][0]["routing_config"]["load_balance_targets"][0]["retry_config"] = {"attempts": -1}
INVALID_PATH = "virtual_models[0].routing_config.load_balance_targets[0].retry_config.attempts"
# 3. A new target d joins b in the first group.
THIRD = config(priority(("b", 0), ("d", 0), ("c", 1)), priority(("s", 0), ("c", 1)), catalog="abcds")


@dataclass
class Answer:
    started: float
    ended: float
    status: int | None
    resolved: str | None
    attempts: int
    complete: bool
    error: str | None = None


def ask(session: requests.Session, url: str, model: str, stream: bool) -> Answer:
    """One chat request, read to its end; `complete` when the body is a whole answer."""
    started = time.monotonic()
    try:
        r = session.post(f"{url}/v1/chat/completions", timeout=15, stream=stream,
                         json={"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
        if stream:
            complete = r.status_code == 200 and any(line == b"data: [DONE]" for line in r.iter_lines())
        else:
            complete = r.status_code == 200 and bool(r.json().get("choices"))
        return Answer(started, time.monotonic(), r.status_code, r.headers.get(RESOLVED),
                      int(r.headers.get(ATTEMPTS, "1")), complete)
    except (requests.RequestException, ValueError) as e:
        return Answer(started, time.monotonic(), None, None, 0, False, repr(e))


class Load:
    """Two clients, one streaming, each sending requests back to back until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[Answer] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(stream,)) for stream in (False, True)]

    def client(self, stream: bool) -> None:
        deadline = time.monotonic() + MAX_LOAD_SECONDS
        with requests.Session() as session:
            for _ in range(MAX_REQUESTS_PER_CLIENT):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                answer = ask(session, self.url, CHAT, stream)
                with self.lock:
                    self.answers.append(answer)

    def started_between(self, start: float, end: float) -> list[Answer]:
        with self.lock:
            return [a for a in self.answers if start <= a.started < end]

    def within(self, start: float, end: float) -> list[Answer]:
        """The answers to requests sent after `start` and answered before `end`."""
        with self.lock:
            return [a for a in self.answers if start <= a.started and a.ended < end]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def resolved(answers: list[Answer]) -> set[str | None]:
    return {a.resolved for a in answers}


def test_three_reloads_under_load_lose_no_request(stack):
    for name in "abcd":
        stack.provider(name)
    s = stack.provider("s", stall_ms=SLOW_STALL_MS, fail_status=503)
    envoy = stack.envoy(FIRST, ecds=True)

    slow: list[Answer] = []
    with Load(envoy.url) as load:
        time.sleep(1.0)
        # A request in flight across the first reload: s holds it, then fails it.
        slow_thread = threading.Thread(target=lambda: slow.append(ask(requests.Session(), envoy.url, SLOW, False)))
        slow_thread.start()
        wait_for(lambda: s.requests(), 5, "the slow request to reach s")

        written = time.monotonic()
        assert envoy.reload(SECOND), envoy.log()[-3000:]
        second_at = time.monotonic()
        time.sleep(1.0)

        assert not envoy.reload(INVALID), "Envoy took a config the filter refused"
        refused_at = time.monotonic()
        time.sleep(1.0)

        # b starts failing: the fallback (c) answers, and after two failures b is evicted.
        b = stack.providers["b"]
        failing_at = time.monotonic()
        b.configure(fail_status=503)

        def evicted():
            recent = load.started_between(failing_at + 0.3, time.monotonic())
            return len(recent) >= 10 and all(a.resolved == "c/gpt-4o" and a.attempts == 1 for a in recent[-10:])
        wait_for(evicted, 10, "b to be evicted (10 answers in a row from c at the first attempt)")
        # b is healthy again, but its record says evicted for the next minute.
        b.configure(fail_status=None)
        b_seen = len(b.requests())

        assert envoy.reload(THIRD), envoy.log()[-3000:]
        third_at = time.monotonic()
        time.sleep(1.0)
    slow_thread.join(timeout=20)
    end = time.monotonic()
    log = envoy.log()

    # Nothing lost, nothing failed.
    answers = load.answers
    assert len(answers) >= 40, f"only {len(answers)} requests in the run"
    bad = [a for a in answers if a.status != 200 or not a.complete]
    assert not bad, f"{len(bad)} of {len(answers)} requests failed or were cut: {bad[:5]}"

    # Before the first reload: config 1 (a only).
    first = load.started_between(0, written)
    assert first and resolved(first) == {"a/gpt-4o"}
    # After it: config 2 (b first), at once.
    second = load.within(second_at, failing_at)
    assert len(second) >= 10 and resolved(second) == {"b/gpt-4o"}, resolved(second)

    # The invalid config: refused with its field path, and config 2 kept serving.
    assert (f"invalid plugin configuration: {INVALID_PATH}: expected an integer from 0 to 10, got -1 "
            f"(config {config_version(INVALID)} refused)") in log
    wait_for(lambda: ECDS_REJECTED in envoy.log(),
             2, "Envoy's rejection line")
    after_refusal = load.within(refused_at, failing_at)
    assert len(after_refusal) >= 10 and resolved(after_refusal) == {"b/gpt-4o"}

    # After the third reload: d took b's place in the first group, and b stayed evicted although
    # it answers again (a fresh record would give it about half of the requests).
    third = load.started_between(third_at, end)
    assert len(third) >= 10 and resolved(third) == {"d/gpt-4o"}, resolved(third)
    assert len(b.requests()) == b_seen, "the evicted target got requests after the reload"

    # The request in flight across the first reload finished on its own plan: s, s again, then
    # a (the new config has no retry and falls back to c).
    assert len(slow) == 1, "the slow request did not finish"
    (inflight,) = slow
    assert (inflight.status, inflight.complete) == (200, True), inflight
    assert inflight.started < written and inflight.ended > second_at
    assert (inflight.resolved, inflight.attempts) == ("a/gpt-4o", 3)
    assert len(s.requests()) == 2


def shipped_ecds(tmp_path: Path, ports: dict[str, int]) -> tuple[str, int, int, Path]:
    """envoy/ecds.yaml on free loopback ports with each cluster at `ports`, reading a copy of
    envoy/ecds/switchboard.yaml (with the .wasm path made absolute) in `tmp_path`. Returns the
    bootstrap text, listener and admin ports, and the extension config's path."""
    bootstrap = yaml.safe_load((ROOT / "envoy" / "ecds.yaml").read_text())
    listen, admin = free_ports(2)
    bootstrap["admin"]["address"]["socket_address"]["port_value"] = admin
    listener = bootstrap["static_resources"]["listeners"][0]
    listener["address"]["socket_address"]["port_value"] = listen
    for c in bootstrap["static_resources"]["clusters"]:
        endpoint = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        endpoint["address"]["socket_address"]["port_value"] = ports[c["name"]]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    (switchboard,) = [f for f in hcm["http_filters"] if f["name"] == "switchboard"]
    source = switchboard["config_discovery"]["config_source"]["path_config_source"]
    assert source["path"] == "envoy/ecds/switchboard.yaml" and source["watched_directory"]["path"] == "envoy/ecds"
    ecds = tmp_path / "ecds" / "switchboard.yaml"
    ecds.parent.mkdir()
    shutil.copy(ROOT / source["path"], ecds)
    source.update(path=str(ecds), watched_directory={"path": str(ecds.parent)})
    text = ecds.read_text().replace("target/wasm32-wasip1/release/switchboard.wasm", str(WASM))
    ecds.write_text(json.dumps(for_build(yaml.safe_load(text))) if BUILD == "native" else text)
    return json.dumps(bootstrap), listen, admin, ecds


def test_shipped_ecds_example_serves_and_reloads(stack, tmp_path: Path):
    """envoy/ecds.yaml with envoy/ecds/switchboard.yaml, changed only in ports and paths: it
    serves the demo models, and a replaced file moves production-chat to azure-east."""
    for name in ("openai_east", "openai_west", "azure_east", "anthropic"):
        stack.provider(name)
    text, listen, admin, ecds = shipped_ecds(tmp_path, {n: p.port for n, p in stack.providers.items()})
    try:
        envoy = start_envoy(text, ports=(listen, admin))
    except HarnessError as e:
        raise AssertionError(f"the shipped ECDS example did not start: {e}") from e
    stack.envoys.append(envoy)

    def chat() -> str | None:
        r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                          json={"model": "my-group/production-chat", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, envoy.log()[-3000:]
        return r.headers.get(RESOLVED)

    assert {chat() for _ in range(20)} <= {"openai-east/gpt-4o", "azure-east/gpt-4o"}
    resource = yaml.safe_load(ecds.read_text())
    value = plugin_config_of(resource["resources"][0]["typed_config"])["value"]
    plugin = json.loads(value)
    targets = plugin["virtual_models"][0]["routing_config"]["load_balance_targets"]
    assert [(t["target"], t["weight"]) for t in targets] == [("openai-east/gpt-4o", 80), ("azure-east/gpt-4o", 20)]
    targets[0]["weight"], targets[1]["weight"] = 0, 100
    value = json.dumps(plugin)
    plugin_config_of(resource["resources"][0]["typed_config"])["value"] = value
    log_from = len(envoy.log())
    replace_file(ecds, yaml.safe_dump(resource))
    # Every thread has the new config once each logged its version (a request alone could land
    # on a worker that has it while the other one does not yet).
    envoy.wait_loaded(config_version(value), log_from, timeout=10)
    assert {chat() for _ in range(20)} == {"azure-east/gpt-4o"}
