"""`switchboard_overhead_us`, Switchboard's own time per request, on a real Envoy: the
configured retry delay is not in it, it is recorded once per request, a request without
retries records about its decision time, and it never claims more than the latency
Switchboard adds end to end, measured as `make bench` does (Switchboard's p50 less a
filterless Envoy's, over the same requests)."""

import statistics
import time

import requests

from configs import STRICT
from harness import bootstrap, free_ports, start_envoy
from observability import sample, start, wait_for

A, B, VM = "prov-a/m", "prov-b/m", "team/chat"
DELAY_MS = 200
UPSTREAM = {"authority": "api.openai.com", "headers": {"authorization": "Bearer sk-gateway"}}


def plugin(retry_delay_ms: int = DELAY_MS) -> dict:
    return {
        "models": [{"name": A, "cluster": "a", "model": "m-a", **UPSTREAM},
                   {"name": B, "cluster": "b", "model": "m-b", **UPSTREAM}],
        "failure_window": {"failures": 0},  # a stays first: every request takes the same path
        "request_histograms": True,
        "virtual_models": [{"name": VM, "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": A, "priority": 0, "retry_config": {
                    "attempts": 1, "delay": retry_delay_ms, "on_status_codes": [503]}},
                {"target": B, "priority": 1}]}}],
    }


BODY = {"model": VM, "messages": [{"role": "user", "content": "hello there"}]}


def chat(url: str) -> requests.Response:
    r = requests.post(f"{url}/v1/chat/completions", json=BODY, timeout=30)
    assert r.status_code == 200, r.text
    return r


def hist(series: dict, name: str) -> tuple[float, float]:
    """(count, sum) of a per-virtual-model histogram."""
    return (sample(series, f"switchboard_{name}_count", virtual_model=VM) or 0,
            sample(series, f"switchboard_{name}_sum", virtual_model=VM) or 0)


def test_a_retry_delay_is_not_switchboards_time_and_each_request_records_once(stack):
    a, _ = stack.provider("a", **STRICT), stack.provider("b", **STRICT)
    envoy = start(stack, plugin())
    a.configure(fail_status=503)
    n = 4
    started = time.monotonic()
    for _ in range(n):
        r = chat(envoy.url)  # a 503, 200 ms, a 503 again, then b
        assert r.headers["x-switchboard-attempts"] == "3", r.headers
    assert time.monotonic() - started >= n * DELAY_MS / 1000, "each request waited its delay"
    series = wait_for(envoy, "switchboard_overhead_us_count", n, virtual_model=VM)
    count, total = hist(series, "overhead_us")
    assert count == n, series
    # Far below one delay per request: the wait is configured, not counted (the .wasm's
    # timers run on a 10 ms tick, which a late tick may add).
    assert total < n * DELAY_MS * 1000 / 10, total
    decisions, decided = hist(series, "decision_us")
    assert decisions == n and 0 < decided <= total * 1.1, (decided, total)


def test_a_request_without_retries_records_about_its_decision_time(stack):
    stack.provider("a", **STRICT)
    stack.provider("b", **STRICT)
    envoy = start(stack, plugin())
    n = 30
    for _ in range(n - 5):
        chat(envoy.url)
    for _ in range(5):  # streamed: on the native build each attempt is the module's own stream
        r = requests.post(f"{envoy.url}/v1/chat/completions", json={**BODY, "stream": True}, timeout=30)
        assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
    series = wait_for(envoy, "switchboard_overhead_us_count", n, virtual_model=VM)
    (count, total), (decisions, decided) = hist(series, "overhead_us"), hist(series, "decision_us")
    assert count == decisions == n, series
    # The decision plus writing the first attempt into the request: a little more than the
    # decision, never less (Envoy's sums are approximate: its log-linear bins).
    assert decided * 0.9 <= total <= decided + n * 1000, (decided, total)


def test_the_overhead_agrees_with_the_latency_bench_measures(stack):
    """`make bench` reports Switchboard's added latency as its p50 less a baseline Envoy's over
    the same requests. The histogram holds a part of that (not the body's buffering, nor
    Envoy's own work for the filter): its mean is at most the added p50, within the
    client's timer resolution."""
    stack.provider("a", **STRICT)
    stack.provider("b", **STRICT)
    envoy = start(stack, plugin())
    clusters = {name: p.port for name, p in stack.providers.items()}
    listen, admin = free_ports(2)
    plain = start_envoy(bootstrap(listen, admin, clusters, [], "a"))
    stack.envoys.append(plain)
    times: dict[str, list[float]] = {"switchboard": [], "plain": []}
    session = {k: requests.Session() for k in times}
    urls = {"switchboard": envoy.url, "plain": plain.url}
    # The filterless Envoy forwards what it gets, so its client sends the Host and key the strict
    # mock wants; Switchboard's client does not (Switchboard must write them). The requests are
    # otherwise the same; two headers more only slow the baseline, which makes the bound tighter.
    extra = {"switchboard": {}, "plain": {"host": "api.openai.com", "authorization": "Bearer sk-gateway"}}
    n = 200
    for i in range(n + 20):  # the first 20 warm up (V8 compiles lazily, connections open)
        for label in times:
            t0 = time.perf_counter()
            r = session[label].post(f"{urls[label]}/v1/chat/completions", json=BODY,
                                   headers=extra[label], timeout=30)
            elapsed = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            if i >= 20:
                times[label].append(elapsed * 1e6)
    added_p50 = statistics.median(times["switchboard"]) - statistics.median(times["plain"])
    series = wait_for(envoy, "switchboard_overhead_us_count", n + 20, virtual_model=VM)
    count, total = hist(series, "overhead_us")
    assert count == n + 20
    mean = total / count
    resolution_us = 100  # the client's timing of a loopback request repeats to about this
    print(f"overhead_us mean {mean:.0f} µs; added p50 {added_p50:.0f} µs")
    assert 0 < mean <= added_p50 + resolution_us, (mean, added_p50)
