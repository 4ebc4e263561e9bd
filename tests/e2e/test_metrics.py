"""Switchboard's metrics on a real Envoy's /stats/prometheus, labelled by the shipped
stats_tags: exact counts after traffic through two targets with retries, fallbacks for each
reason, an eviction and streamed answers."""

import json
import time

import requests

from observability import PROMETHEUS_PREFIX, prometheus, prometheus_text, sample, start, wait_for


A = "prov-a/gpt-4.1:latest"  # '/', '.', ':' in a target name
B = "prov-b/model.v2"
VM = "team/chat-prod"
FAST = "team/fast.lane"  # a '.' in a virtual model name


def plugin() -> dict:
    def priority(name, **extra):
        return {"name": name, "model_types": ["chat"], **extra, "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": A, "priority": 0,
                 "retry_config": {"attempts": 1, "delay": 1, "on_status_codes": [429, 503]}},
                {"target": B, "priority": 1}]}}
    return {
        "models": [{"name": A, "cluster": "a", "model": "gpt-a"}, {"name": B, "cluster": "b", "model": "gpt-b"}],
        # Failures never make a target unhealthy here: only a Retry-After evicts, so the order
        # (and every count below) is fixed.
        "failure_window": {"failures": 0},
        "usage_metrics": True,
        "request_histograms": True,
        "virtual_models": [priority(VM), priority(FAST, fallback_timeout_ms=300)],
    }


def chat(envoy, model=VM, stream=False):
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    r = requests.post(f"{envoy.url}/v1/chat/completions", json=body, timeout=30, stream=stream)
    assert r.status_code == 200, r.text
    usage = None
    if stream:
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    else:
        usage = r.json()["usage"]
    return r.headers["x-switchboard-resolved-model"], usage


def test_prometheus_has_exact_labelled_counts_per_virtual_model_and_target(stack):
    a, b = stack.provider("a"), stack.provider("b")
    envoy = start(stack, plugin())
    tokens = {A: [0, 0], B: [0, 0]}

    def send(n, model=VM, **kw):
        for _ in range(n):
            target, usage = chat(envoy, model=model, **kw)
            if model == VM:
                tokens[target][0] += usage["prompt_tokens"]
                tokens[target][1] += usage["completion_tokens"]
            yield target

    # 1. Healthy: the first target answers (two of them streamed, with usage).
    assert set(send(3)) | set(send(2, stream=True)) == {A}
    # 2. 503: a, its retry, then the fallback to b.
    a.configure(fail_status=503)
    assert set(send(3)) == {B}
    # 3. Reset before any answer: a connection failure, retried, then the fallback.
    a.configure(fail_status=None, drop="before-response")
    assert set(send(2)) == {B}
    # 4. No answer within fallback_timeout_ms (300 ms): the next candidate, no retry.
    a.configure(drop=None, ttft_ms=2000)
    assert set(send(1, model=FAST)) == {B}
    # 5. A 429 with Retry-After evicts a for 60 s; its retry gets another 429, then b.
    a.configure(ttft_ms=0, fail_status=429, retry_after="60")
    assert set(send(1)) == {B}
    # 6. Once each worker's health view refreshes (100 ms), b comes first.
    time.sleep(0.3)
    assert set(send(2)) == {B}
    assert len(a.requests()) == 5 + 3 * 2 + 2 * 2 + 1 + 2
    assert len(b.requests()) == 3 + 2 + 1 + 1 + 2

    # 13 requests of VM: 1+1+1+2+2 attempts for the first five, 3 each for the next six
    # (3 + 2 + 1), 1 each for the last two.
    series = wait_for(envoy, "switchboard_attempts_count", 13, virtual_model=VM)
    pair = {"virtual_model": VM}
    expected = {
        ("switchboard_requests", A): 11, ("switchboard_requests", B): 2,
        ("switchboard_evictions", A): 1, ("switchboard_evictions", B): 0,
        ("switchboard_prompt_tokens", A): tokens[A][0], ("switchboard_prompt_tokens", B): tokens[B][0],
        ("switchboard_completion_tokens", A): tokens[A][1], ("switchboard_completion_tokens", B): tokens[B][1],
        ("switchboard_health", A): 2, ("switchboard_health", B): 0,
    }
    for (name, target), value in expected.items():
        assert sample(series, name, target=target, **pair) == value, (name, target, value)
    for cls, target, value in [("2xx", A, 5), ("2xx", B, 8), ("5xx", A, 0), ("4xx", B, 0)]:
        assert sample(series, "switchboard_answers", **{"class": cls}, target=target, **pair) == value
    for kind, reason, value in [("retries", "status", 4), ("retries", "connect_failure", 2),
                                ("retries", "timeout", 0), ("fallbacks", "status", 4),
                                ("fallbacks", "connect_failure", 2), ("fallbacks", "timeout", 0)]:
        got = sample(series, f"switchboard_{kind}", reason=reason, target=A, **pair)
        assert got == value, (kind, reason, got)
    assert sample(series, "switchboard_fallbacks", reason="status", target=B, **pair) == 0
    assert tokens[A][1] == 5 * 8 and tokens[B][1] == 8 * 8, "the mock's 8 tokens per answer"
    # Buckets count exactly; Envoy's histogram sum is approximate (its log-linear bins).
    assert [sample(series, "switchboard_attempts_bucket", le=le, **pair) for le in "123"] == [7, 7, 13]
    assert abs(sample(series, "switchboard_attempts_sum", **pair) - (5 + 9 + 6 + 3 + 2)) < 1.5
    assert sample(series, "switchboard_decision_us_count", **pair) == 13
    assert sample(series, "switchboard_no_answer", **pair) == 0
    # Time to first token: the two streamed answers only.
    assert sample(series, "switchboard_ttft_ms_count", target=A, **pair) == 2
    assert sample(series, "switchboard_tpot_us_count", target=A, **pair) == 5
    # The fallback_timeout_ms virtual model: one fallback for `timeout`, answered by b.
    fast = {"virtual_model": FAST}
    assert sample(series, "switchboard_fallbacks", reason="timeout", target=A, **fast) == 1
    assert sample(series, "switchboard_retries", reason="timeout", target=A, **fast) == 0
    assert sample(series, "switchboard_answers", **{"class": "2xx"}, target=B, **fast) == 1
    assert sample(series, "switchboard_requests", target=A, **fast) == 1
    # The config version: 48 bits, as the filter logged it in hex when the config loaded.
    version = int(sample(series, "switchboard_config_version"))
    assert 0 < version < 1 << 48
    assert f"loaded config {version:012x}" in envoy.log()


def test_every_series_is_labelled_and_only_config_names_become_labels(stack):
    stack.provider("a")
    stack.provider("b")
    envoy = start(stack, plugin())
    for model in ["no-such-model", "team/chat-prod.target.x", A]:
        requests.post(f"{envoy.url}/v1/chat/completions", json={"model": model, "messages": []}, timeout=10)
    chat(envoy)
    series = prometheus(envoy)
    # The names as Envoy prints them: with the native build's prefix (observability.py).
    assert f"\n{PROMETHEUS_PREFIX}switchboard_requests{{" in prometheus_text(envoy)
    ours = {k: v for k, v in series.items() if k[0].startswith("switchboard_")}
    # 1 version gauge; per virtual model 7 metrics (attempts and decision_us have 10 + 3 and
    # 11 + 3 samples: buckets, +Inf, sum, count; overhead_us Envoy's default buckets), for the
    # two virtual models and `(direct)`;
    # per pair 17 metrics (ttft_ms and tpot_us with 20 + 3 and 9 + 3 samples) for 4 pairs.
    names = {name for name, _ in ours}
    assert "switchboard_requests" in names and not any("_vm_" in n or "target" in n for n in names), names
    labels = {dict(k[1]).get("virtual_model") for k in ours} - {None}
    assert labels == {VM, FAST, "(direct)"}, labels
    targets = {dict(k[1]).get("target") for k in ours} - {None}
    assert targets == {A, B}, targets
    assert sample(series, "switchboard_requests", virtual_model=VM, target=A) == 1


def test_request_histograms_are_off_unless_the_config_asks(stack):
    """`attempts` and `decision_us` cost Envoy a histogram value each per request: by default
    the counters count and those two take nothing."""
    stack.provider("a")
    stack.provider("b")
    config = plugin()
    del config["request_histograms"]  # the default
    envoy = start(stack, config)
    for _ in range(3):
        chat(envoy)
    series = wait_for(envoy, "switchboard_answers", 3, virtual_model=VM, target=A, **{"class": "2xx"})
    assert sample(series, "switchboard_requests", virtual_model=VM, target=A) == 3
    # A stats flush later, the histograms still have no sample.
    time.sleep(1.5)
    series = prometheus(envoy)
    # (Envoy lists a histogram that never took a value with a count of 0, or not at all.)
    assert sample(series, "switchboard_attempts_count", virtual_model=VM) in (0, None)
    assert sample(series, "switchboard_decision_us_count", virtual_model=VM) in (0, None)
