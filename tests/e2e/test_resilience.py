"""While at least one target can answer, the client does not see the failure.

Fault injection through a real Envoy (`--concurrency 2`) with the mock provider: failing,
rate-limited, stalled, refused and dropped targets, retries and fallback rules.
"""

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import openai
import requests

from harness import free_port

CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def model(name: str, cluster: str, **extra) -> dict:
    return {"name": name, "cluster": cluster, "model": f"{name}-upstream", "visibility": "internal", **extra}


def weighted(targets: list[dict], **vm_extra) -> dict:
    return {"name": "vm", "model_types": ["chat"], **vm_extra,
            "routing_config": {"type": "weight-based-routing", "load_balance_targets": targets}}


def priority(targets: list[dict], **vm_extra) -> dict:
    return {"name": "vm", "model_types": ["chat"], **vm_extra,
            "routing_config": {"type": "priority-based-routing", "load_balance_targets": targets}}


def post(url: str, session=requests, **body) -> requests.Response:
    return session.post(f"{url}/v1/chat/completions", json={"model": "vm", **CHAT, **body}, timeout=30)


def test_failing_target_is_invisible_to_clients_and_stops_getting_traffic(stack, figure):
    good = stack.provider("good")
    bad = stack.provider("bad", fail_status=503)
    config = {"models": [model("good", "good"), model("bad", "bad")],
              "virtual_models": [weighted([{"target": "good", "weight": 50}, {"target": "bad", "weight": 50}])]}
    envoy = stack.envoy(config, concurrency=2)

    def worker(n: int) -> list[tuple[int, str, str]]:
        out = []
        for i in range(n):
            with requests.Session() as s:  # a fresh connection now and then spreads over workers
                for _ in range(25):
                    r = post(envoy.url, s)
                    out.append((r.status_code, r.headers.get("x-switchboard-resolved-model"),
                                r.headers.get("x-switchboard-attempts", "1")))
        return out

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = [r for batch in pool.map(worker, [5] * 8) for r in batch]
    elapsed = time.monotonic() - start

    assert len(results) == 1000
    assert Counter(status for status, _, _ in results) == {200: 1000}, "zero client-visible errors"
    assert {resolved for _, resolved, _ in results} == {"good"}
    first_attempts_at_bad = len(bad.requests())
    assert len(good.requests()) == 1000
    # Without health, half (500) would go to the failing target first. After it is marked
    # unhealthy, only requests racing the first failures still try it.
    assert first_attempts_at_bad <= 30, first_attempts_at_bad
    assert sum(1 for *_, attempts in results if attempts == "2") == first_attempts_at_bad
    figure("requests", len(results))
    figure("client-visible errors", sum(1 for status, _, _ in results if status != 200))
    figure("first attempts at the failing target", first_attempts_at_bad, f"of {len(results)}")
    figure("attempts per request", round(sum(int(a) for *_, a in results) / len(results), 3))
    figure("requests per second, 8 clients", round(len(results) / elapsed))
    figure("per-worker connections", envoy.connections_per_worker())

    # Later traffic, after the window is established: not a single attempt at the bad target.
    bad.clear()
    with requests.Session() as s:
        assert all(post(envoy.url, s).status_code == 200 for _ in range(100))
    assert bad.requests() == []


def test_429_with_retry_after_evicts_for_that_long_then_the_target_returns(stack, figure):
    limited = stack.provider("limited", fail_status=429, retry_after=2)
    stack.provider("spare")
    config = {"models": [model("limited", "limited"), model("spare", "spare")],
              "virtual_models": [weighted([{"target": "limited", "weight": 100}, {"target": "spare", "weight": 0}])]}
    envoy = stack.envoy(config)

    with requests.Session() as s:
        first = post(envoy.url, s)
        evicted_at = time.monotonic()
        assert first.status_code == 200
        assert first.headers["x-switchboard-resolved-model"] == "spare"
        assert first.headers["x-switchboard-attempts"] == "2"
        limited.configure(fail_status=None)  # healthy again, but evicted for 2 s
        back_after = None
        while time.monotonic() - evicted_at < 5:
            r = post(envoy.url, s)
            assert r.status_code == 200
            if r.headers["x-switchboard-resolved-model"] == "limited":
                back_after = time.monotonic() - evicted_at
                break
            time.sleep(0.02)

    assert back_after is not None, "the target never came back"
    assert 1.8 <= back_after <= 2.6, back_after
    figure("time out of service after `429, Retry-After: 2`", round(back_after, 3), "s")
    assert len(limited.requests()) == 2  # the 429 and the first request after the eviction


def test_priority_group_spills_to_backup_only_when_both_members_are_evicted(stack, figure):
    a = stack.provider("a")
    b = stack.provider("b")
    backup = stack.provider("backup")
    evict = {"health": {"eviction": {"consecutive_failures": 1, "duration": "30s"}}}
    config = {"models": [model("a", "a", **evict), model("b", "b", **evict), model("backup", "backup")],
              "virtual_models": [priority([{"target": "a", "priority": 0}, {"target": "b", "priority": 0},
                                           {"target": "backup", "priority": 1}])],
              # Isolate eviction: the rolling failure window alone must not move traffic here.
              "failure_window": {"failures": 16, "window_seconds": 120}}
    envoy = stack.envoy(config)
    with requests.Session() as s:
        served = Counter(post(envoy.url, s).headers["x-switchboard-resolved-model"] for _ in range(40))
        assert served.keys() == {"a", "b"} and backup.requests() == [], served

        a.configure(fail_status=503)
        a.clear(), b.clear()
        served = Counter(post(envoy.url, s).headers["x-switchboard-resolved-model"] for _ in range(40))
        # a fails once, is evicted, and that request falls back within the group.
        assert served == {"b": 40}, served
        assert (len(a.requests()), len(b.requests()), len(backup.requests())) == (1, 40, 0)
        figure("a evicted: attempts at a / b / backup for 40 requests", [1, 40, 0])

        b.configure(fail_status=503)
        a.clear(), b.clear()
        responses = [post(envoy.url, s) for _ in range(40)]
    assert all(r.status_code == 200 for r in responses)
    assert Counter(r.headers["x-switchboard-resolved-model"] for r in responses) == {"backup": 40}
    # b fails once and is evicted; with the whole group evicted the backup group takes over.
    assert (len(a.requests()), len(b.requests()), len(backup.requests())) == (0, 1, 40)
    figure("a and b evicted: attempts at a / b / backup for 40 requests", [0, 1, 40])
    figure("client-visible errors", 0, "of 120")


def test_target_stalling_past_fallback_timeout_is_abandoned(stack, figure):
    stack.provider("slow", stall_ms=10_000)
    stack.provider("fast", output_tokens=5)
    config = {"models": [model("slow", "slow"), model("fast", "fast")],
              "virtual_models": [weighted([{"target": "slow", "weight": 100}, {"target": "fast", "weight": 0}],
                                          fallback_timeout_ms=500)]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = post(envoy.url)
    elapsed = time.monotonic() - start
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "fast"
    assert r.headers["x-switchboard-attempts"] == "2"
    assert r.json()["model"] == "fast-upstream"
    assert 0.45 <= elapsed <= 2.0, elapsed
    figure("answer time with a stalled primary and fallback_timeout_ms 500", round(elapsed, 3), "s")

    # A streaming request that falls back still gets a valid SSE answer the SDK can read.
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="vm", stream=True, **CHAT)
    assert raw.headers["x-switchboard-resolved-model"] == "fast"
    assert raw.headers["x-switchboard-attempts"] == "2"
    assert raw.headers["content-type"].startswith("text/event-stream")
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text.split() == ["tok1", "tok2", "tok3", "tok4", "tok5"]


def test_retry_config_retries_the_same_target_with_its_delay(stack, figure):
    flaky = stack.provider("flaky", fail_status=503)
    spare = stack.provider("spare")
    config = {"models": [model("flaky", "flaky"), model("spare", "spare")],
              "virtual_models": [weighted([
                  {"target": "flaky", "weight": 100,
                   "retry_config": {"attempts": 2, "delay": 150, "on_status_codes": ["503"]}},
                  {"target": "spare", "weight": 0}])],
              "failure_window": {"failures": 16, "window_seconds": 120}}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = post(envoy.url)
    elapsed = time.monotonic() - start

    assert r.status_code == 200
    assert r.headers["x-switchboard-resolved-model"] == "spare"
    assert r.headers["x-switchboard-attempts"] == "4"
    assert len(flaky.requests()) == 3, "one attempt and two retries"
    assert len(spare.requests()) == 1
    assert elapsed >= 0.3, f"two retry delays of 150 ms, took {elapsed:.3f}s"
    figure("answer time, 2 retries of 150 ms then fallback", round(elapsed, 3), "s")
    # Retries carry the request as the client sent it, rewritten for the target.
    bodies = [json.loads(x["body"]) for x in flaky.requests()]
    assert [b["model"] for b in bodies] == ["flaky-upstream"] * 3
    assert json.loads(spare.requests()[0]["body"])["model"] == "spare-upstream"


def test_fallback_never_goes_to_a_target_that_is_not_a_fallback_candidate(stack, figure):
    primary = stack.provider("primary", fail_status=500)
    reserved = stack.provider("reserved")
    last = stack.provider("last")
    config = {"models": [model("primary", "primary"), model("reserved", "reserved"), model("last", "last")],
              "virtual_models": [weighted([
                  {"target": "primary", "weight": 100},
                  {"target": "reserved", "weight": 0, "fallback_candidate": False},
                  {"target": "last", "weight": 0}])]}
    envoy = stack.envoy(config)

    r = post(envoy.url)

    assert r.status_code == 200
    assert r.headers["x-switchboard-resolved-model"] == "last"
    assert (len(primary.requests()), len(reserved.requests()), len(last.requests())) == (1, 0, 1)
    figure("attempts at failing primary / non-candidate / next candidate", [1, 0, 1])


def test_when_every_target_fails_the_last_error_passes_through_with_the_attempt_count(stack, figure):
    stack.provider("one", fail_status=503)
    stack.provider("two", fail_status=502)
    config = {"models": [model("one", "one"), model("two", "two")],
              "virtual_models": [weighted([{"target": "one", "weight": 100}, {"target": "two", "weight": 0}])]}
    envoy = stack.envoy(config)

    r = post(envoy.url)

    assert r.status_code == 502
    assert r.headers["x-switchboard-attempts"] == "2"
    assert r.headers["x-switchboard-resolved-model"] == "two"
    assert r.headers["x-mock-provider"] == "two", "the provider's own headers pass through"
    assert r.json()["error"]["message"] == "injected failure from two"
    figure("client sees", f"{r.status_code} from the last target, x-switchboard-attempts: 2")


def test_connection_refused_and_dropped_connections_fall_back(stack, figure):
    stack.provider("dropper", drop="before-response")
    good = stack.provider("good")
    refused_port = free_port()  # nothing listens here
    config = {"models": [model("refused", "refused"), model("dropper", "dropper"), model("good", "good")],
              "virtual_models": [priority([{"target": "refused", "priority": 0}, {"target": "dropper", "priority": 1},
                                           {"target": "good", "priority": 2}])]}
    envoy = stack.envoy(config, extra_clusters={"refused": refused_port})

    r = post(envoy.url)

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "good"
    assert r.headers["x-switchboard-attempts"] == "3"
    assert len(good.requests()) == 1
    figure("refused, then dropped before response, then good", f"{r.status_code} after 3 attempts")


def test_hostile_upstreams_never_break_the_vm(stack, figure):
    """200 with an error body, a stream cut mid-way and a 429 storm: each request gets an
    answer, and every worker keeps serving afterwards."""
    liar = stack.provider("liar", error_body_on_200=True)
    cutter = stack.provider("cutter", drop="mid-stream", output_tokens=6, token_delay_ms=20)
    stormy = stack.provider("stormy", fail_status=429)
    good = stack.provider("good")
    config = {"models": [model(n, n) for n in ("liar", "cutter", "stormy", "good")],
              "virtual_models": [
                  {**weighted([{"target": "liar", "weight": 100}]), "name": "liar-vm"},
                  {**weighted([{"target": "cutter", "weight": 100}]), "name": "cutter-vm"},
                  {**weighted([{"target": "stormy", "weight": 50}, {"target": "good", "weight": 50}]),
                   "name": "stormy-vm"},
              ]}
    envoy = stack.envoy(config)

    r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "liar-vm", **CHAT}, timeout=10)
    assert r.status_code == 200 and "error" in r.json(), "a 200 is delivered as the provider sent it"

    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)
    received, error = [], None
    try:
        for chunk in client.chat.completions.create(model="cutter-vm", stream=True, **CHAT):
            received.append(chunk)
    except Exception as e:  # the SDK surfaces a cut stream as an httpx or openai error
        error = e
    assert received, "the stream started through Envoy"
    assert error is not None, "a stream dropped mid-way must reach the client as an error, not as a clean end"
    assert not any(c.choices and c.choices[0].finish_reason for c in received), "it never finished"

    with ThreadPoolExecutor(4) as pool:
        storm = list(pool.map(lambda _: requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                                                      json={"model": "stormy-vm", **CHAT}).status_code,
                              range(200)))
    assert Counter(storm) == {200: 200}
    assert len(stormy.requests()) <= 20
    figure("429 storm: client errors", 200 - Counter(storm)[200], "of 200")
    figure("429 storm: first attempts at the rate-limited target", len(stormy.requests()), "of 200")

    for _ in range(40):
        assert requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                             json={"model": "stormy-vm", **CHAT}).status_code == 200
    assert len(good.requests()) >= 240


def test_sla_cutoff_on_time_to_first_token_moves_a_slow_target_behind(stack):
    stack.provider("slow", ttft_ms=300, output_tokens=3)
    stack.provider("fast", output_tokens=3)
    config = {"models": [model("slow", "slow"), model("fast", "fast")],
              "virtual_models": [priority([
                  {"target": "slow", "priority": 0, "sla_cutoff": {"time_to_first_token_ms": 150}},
                  {"target": "fast", "priority": 1}])]}
    envoy = stack.envoy(config)
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)

    def served_by(stream: bool) -> str:
        raw = client.chat.completions.with_raw_response.create(model="vm", stream=stream, **CHAT)
        resolved = raw.headers["x-switchboard-resolved-model"]
        if stream:
            for _ in raw.parse():
                pass
        return resolved

    # Non-streaming answers give no TTFT sample; three slow streaming ones breach the SLA.
    assert [served_by(False) for _ in range(3)] == ["slow"] * 3
    assert [served_by(True) for _ in range(3)] == ["slow"] * 3
    assert [served_by(True) for _ in range(5)] == ["fast"] * 5


def test_sla_cutoff_on_time_per_output_token(stack):
    # 40 tokens at 10 ms each: about 10 ms per output token, over a 5 ms cutoff.
    stack.provider("sluggish", token_delay_ms=10, output_tokens=40)
    stack.provider("short", token_delay_ms=10, output_tokens=10)
    stack.provider("backup")
    config = {"models": [model("sluggish", "sluggish"), model("short", "short"), model("backup", "backup")],
              "virtual_models": [
                  {**priority([{"target": "sluggish", "priority": 0, "sla_cutoff": {"time_per_output_token_ms": 5}},
                               {"target": "backup", "priority": 1}]), "name": "vm"},
                  {**priority([{"target": "short", "priority": 0, "sla_cutoff": {"time_per_output_token_ms": 5}},
                               {"target": "backup", "priority": 1}]), "name": "vm-short"}]}
    envoy = stack.envoy(config)
    with requests.Session() as s:
        first = [post(envoy.url, s).headers["x-switchboard-resolved-model"] for _ in range(3)]
        after = [post(envoy.url, s).headers["x-switchboard-resolved-model"] for _ in range(3)]
        # Answers under 30 output tokens give no TPOT sample, however slow per token.
        short = [s.post(f"{envoy.url}/v1/chat/completions", json={"model": "vm-short", **CHAT}, timeout=10)
                 .headers["x-switchboard-resolved-model"] for _ in range(5)]
    assert first == ["sluggish"] * 3
    assert after == ["backup"] * 3
    assert short == ["short"] * 5


def test_unhealthy_target_recovers_once_its_failures_age_out(stack, figure):
    flaky = stack.provider("flaky", fail_status=500)
    stack.provider("steady")
    config = {"models": [model("flaky", "flaky"), model("steady", "steady")],
              "virtual_models": [weighted([{"target": "flaky", "weight": 100}, {"target": "steady", "weight": 0}])],
              "failure_window": {"failures": 2, "window_seconds": 2}}
    envoy = stack.envoy(config)
    with requests.Session() as s:
        unhealthy_at = time.monotonic()  # before the first failure: recovery is 2 s after it
        assert [post(envoy.url, s).headers["x-switchboard-resolved-model"] for _ in range(2)] == ["steady"] * 2
        flaky.configure(fail_status=None)
        assert post(envoy.url, s).headers["x-switchboard-resolved-model"] == "steady", "unhealthy: last resort"
        back_after = None
        while time.monotonic() - unhealthy_at < 5:
            if post(envoy.url, s).headers["x-switchboard-resolved-model"] == "flaky":
                back_after = time.monotonic() - unhealthy_at
                break
            time.sleep(0.02)
    assert back_after is not None and 2.0 <= back_after <= 3.0, back_after
    assert len(flaky.requests()) == 3, "two failures, then nothing until the window let it back"
    figure("recovery after 2 failures with a 2 s failure window", round(back_after, 3), "s")


def test_repeated_evictions_back_off(stack, figure):
    broken = stack.provider("broken", fail_status=503)
    stack.provider("spare")
    evict = {"health": {"eviction": {"consecutive_failures": 1, "duration": "500ms"}}}
    config = {"models": [model("broken", "broken", **evict), model("spare", "spare")],
              "virtual_models": [weighted([{"target": "broken", "weight": 100}, {"target": "spare", "weight": 0}])],
              "failure_window": {"failures": 16, "window_seconds": 1}}
    envoy = stack.envoy(config)
    arrivals = []
    start = time.monotonic()
    with requests.Session() as s:
        while time.monotonic() - start < 4.0:
            seen = len(broken.requests())
            assert post(envoy.url, s).status_code == 200
            if len(broken.requests()) > seen:
                arrivals.append(time.monotonic() - start)
            time.sleep(0.01)
    gaps = [round(b - a, 2) for a, b in zip(arrivals, arrivals[1:])]
    # Evicted 0.5 s, then 1 s, then 2 s: each failure after a return doubles the time out.
    assert len(gaps) >= 2, arrivals
    assert 0.4 <= gaps[0] <= 0.8 and 0.9 <= gaps[1] <= 1.4, gaps
    figure("gaps between attempts at a target failing on every return", gaps, "s")


def test_a_503_with_retry_after_does_not_evict_only_a_429_does(stack):
    busy = stack.provider("busy", fail_status=503, retry_after=30)
    stack.provider("spare")
    config = {"models": [model("busy", "busy"), model("spare", "spare")],
              "virtual_models": [weighted([{"target": "busy", "weight": 100}, {"target": "spare", "weight": 0}])],
              "failure_window": {"failures": 16, "window_seconds": 120}}
    envoy = stack.envoy(config)
    with requests.Session() as s:
        assert post(envoy.url, s).headers["x-switchboard-resolved-model"] == "spare"
        busy.configure(fail_status=None)
        # Not evicted for 30 s: the very next request goes back to the primary.
        assert post(envoy.url, s).headers["x-switchboard-resolved-model"] == "busy"


def test_a_late_good_answer_from_an_abandoned_target_is_still_delivered(stack):
    stack.provider("late", stall_ms=700)
    stack.provider("stuck", stall_ms=5_000)
    config = {"models": [model("late", "late"), model("stuck", "stuck")],
              "virtual_models": [weighted([{"target": "late", "weight": 100}, {"target": "stuck", "weight": 0}],
                                          fallback_timeout_ms=200)]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = post(envoy.url)
    elapsed = time.monotonic() - start

    # Abandoned at 200 ms for a fallback that stalls longer; the first answer, at 700 ms, wins.
    assert r.status_code == 200
    assert r.headers["x-switchboard-resolved-model"] == "late"
    assert r.json()["model"] == "late-upstream"
    assert 0.6 <= elapsed < 3.0, elapsed


def test_a_client_leaving_during_a_fallback_leaves_the_vm_serving(stack):
    stack.provider("down", fail_status=500)
    slow = stack.provider("slow", stall_ms=1_500)
    config = {"models": [model("down", "down"), model("slow", "slow")],
              "virtual_models": [weighted([{"target": "down", "weight": 100}, {"target": "slow", "weight": 0}])]}
    envoy = stack.envoy(config)
    for _ in range(5):
        try:
            post_timeout = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "vm", **CHAT},
                                         timeout=0.3)
            raise AssertionError(f"expected the client to give up, got {post_timeout.status_code}")
        except requests.Timeout:
            pass
    slow.configure(stall_ms=0)
    time.sleep(1.6)  # the abandoned fallback calls finish with nobody waiting
    with requests.Session() as s:
        replies = [post(envoy.url, s) for _ in range(20)]
    assert all(r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "slow" for r in replies)


def test_narrowed_fallback_status_codes_return_a_retry_code_to_the_client(stack):
    """TrueFoundry virtual models, "Retries and fallbacks": with no retry configured none is
    exhausted, so a 500 that is not in `fallback_status_codes: ["429"]` goes to the client."""
    down = stack.provider("down", fail_status=500)
    spare = stack.provider("spare")
    config = {"models": [model("down", "down"), model("spare", "spare")],
              "virtual_models": [weighted([{"target": "down", "weight": 100, "fallback_status_codes": ["429"]},
                                           {"target": "spare", "weight": 0}])]}
    envoy = stack.envoy(config)

    r = post(envoy.url)

    assert r.status_code == 500
    assert r.headers["x-switchboard-resolved-model"] == "down"
    assert (len(down.requests()), len(spare.requests())) == (1, 0)


def test_a_dropped_connection_is_retried_when_retries_are_configured(stack):
    dropper = stack.provider("dropper", drop="before-response")
    good = stack.provider("good")
    config = {"models": [model("dropper", "dropper"), model("good", "good")],
              "virtual_models": [priority([{"target": "dropper", "priority": 0,
                                            "retry_config": {"attempts": 1, "delay": 50}},
                                           {"target": "good", "priority": 1}])],
              "failure_window": {"failures": 16, "window_seconds": 120}}
    envoy = stack.envoy(config)

    r = post(envoy.url)

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "good"
    assert r.headers["x-switchboard-attempts"] == "3", "the first try, one retry, then the fallback"
    assert len(dropper.requests()) == 2
    assert len(good.requests()) == 1


def test_a_fallback_that_does_not_answer_within_fallback_timeout_is_abandoned_too(stack, figure):
    """`fallback_timeout_ms` covers the filter's own attempts, not only the router's: the
    stalled fallback is left for the next candidate, and its late answer is ignored."""
    stack.provider("down", fail_status=500)
    stalled = stack.provider("stalled", stall_ms=2_000)
    stack.provider("fast")
    config = {"models": [model("down", "down"), model("stalled", "stalled"), model("fast", "fast")],
              "virtual_models": [priority([{"target": "down", "priority": 0}, {"target": "stalled", "priority": 1},
                                           {"target": "fast", "priority": 2}], fallback_timeout_ms=300)]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = post(envoy.url)
    elapsed = time.monotonic() - start

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "fast"
    assert r.headers["x-switchboard-attempts"] == "3"
    assert len(stalled.requests()) == 1
    assert 0.25 <= elapsed < 2.0, elapsed
    figure("answer time with a stalled fallback and fallback_timeout_ms 300", round(elapsed, 3), "s")
    # The abandoned call's answer arrives later with nobody waiting; the VM keeps serving.
    time.sleep(2)
    stalled.configure(stall_ms=0)
    with requests.Session() as s:
        assert all(post(envoy.url, s).status_code == 200 for _ in range(5))
