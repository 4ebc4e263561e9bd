"""Serving requests does not grow the filter's memory: what one request allocates (its kept
body, its flight, its timers and calls, its health and latency samples) is freed or reused.

The filter's Wasm memory only grows (V8 never shrinks it), so a leak of even a few bytes a
request shows as resident pages added between two checkpoints of steady traffic.
"""

import pytest
import requests

from configs import PRIMARY, SECONDARY, VIRTUAL, weighted_80_20
from harness import wasm_memory_kb

FASTEST = "my-group/fastest"
WARM_UP = 600
BETWEEN_CHECKPOINTS = 2400
# One 64 KiB Wasm page: dlmalloc may still split a free block somewhere new, but a leak of
# 28 bytes a request or more would exceed this over BETWEEN_CHECKPOINTS requests.
SLACK_KB = 64


def config() -> dict:
    """80/20 with sticky sessions, a retried primary that fails a fifth of the time, a fallback
    that takes overrides and eviction, plus a latency-based virtual model that records time to
    first token and per output token: every per-request path that keeps state."""
    c = weighted_80_20()
    c["models"][0]["health"] = {"eviction": {"consecutive_failures": 5, "duration": "1s"}}
    c["virtual_models"][0]["fallback_timeout_ms"] = 5000
    # The rolling window must not take the primary out for long: retries should keep happening.
    c["failure_window"] = {"failures": 16, "window_seconds": 1}
    c["virtual_models"][0]["routing_config"] = {
        "type": "weight-based-routing",
        "sticky_routing": {"ttl_seconds": 3600,
                           "session_identifiers": [{"key": "x-user-id", "source": "headers"}]},
        "load_balance_targets": [
            {"target": PRIMARY, "weight": 80, "retry_config": {"attempts": 1, "delay": 0}},
            {"target": SECONDARY, "weight": 20, "fallback_candidate": True,
             "override_params": {"max_tokens": 64}},
        ]}
    c["virtual_models"].append(
        {"name": FASTEST, "model_types": ["chat"],
         "routing_config": {"type": "latency-based-routing",
                            "load_balance_targets": [{"target": PRIMARY}, {"target": SECONDARY}]}})
    return c


def send(session: requests.Session, url: str, i: int) -> tuple[int, int]:
    """Sends request `i` (every other one streamed, every third to the latency-based model);
    returns its status and attempts."""
    stream = i % 2 == 0
    model = FASTEST if i % 3 == 0 else VIRTUAL
    r = session.post(f"{url}/v1/chat/completions", timeout=10, headers={"x-user-id": f"user-{i % 3000}"},
                     json={"model": model, "stream": stream,
                           "messages": [{"role": "user", "content": f"question {i} " + "x" * (i % 700)}]})
    r.content  # noqa: B018 - read the whole answer, streamed or not
    return r.status_code, int(r.headers.get("x-switchboard-attempts", "1"))


@pytest.mark.wasm_only(reason="reads the Wasm VM's linear memory, which the native module does not have")
def test_serving_requests_does_not_grow_the_filters_memory(stack):
    stack.provider("openai_main", fail_status=503, fail_rate=0.2)
    stack.provider("azure_east")
    envoy = stack.envoy(config(), concurrency=1)
    answers = []
    checkpoints = []
    with requests.Session() as session:
        for i in range(WARM_UP + 2 * BETWEEN_CHECKPOINTS):
            if i >= WARM_UP and (i - WARM_UP) % BETWEEN_CHECKPOINTS == 0:
                checkpoints.append(wasm_memory_kb(envoy.proc.pid))
            answers.append(send(session, envoy.url, i))
    checkpoints.append(wasm_memory_kb(envoy.proc.pid))
    retried = sum(1 for _, attempts in answers if attempts > 1)
    print("Wasm memory KB at checkpoints:", checkpoints, "multi-attempt answers:", retried)

    # Clients never saw the failures, and retries and fallbacks really ran.
    assert {status for status, _ in answers} == {200}
    # (Fewer than a fifth of the primary's answers: its rolling failure window takes it out of
    # rotation for a while after 16 failures in a second.)
    assert retried >= 50, f"only {retried} answers took more than one attempt"
    assert None not in checkpoints, "no Wasm memory found in /proc/PID/smaps"
    first, second, third = checkpoints
    assert second - first <= SLACK_KB and third - second <= SLACK_KB, checkpoints
