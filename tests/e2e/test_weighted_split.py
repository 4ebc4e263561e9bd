"""An 80/20 weighted virtual model splits real traffic through Envoy as configured."""

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from configs import PRIMARY, SECONDARY, VIRTUAL, weighted_80_20

REQUESTS = 1000
WORKERS = 8


def send_many(url: str, n: int) -> list[requests.Response]:
    def worker(count: int) -> list[requests.Response]:
        out = []
        for start in range(0, count, 25):
            # A new connection every 25 requests, so both Envoy workers get traffic.
            with requests.Session() as s:
                out += [s.post(f"{url}/v1/chat/completions", timeout=10,
                               json={"model": VIRTUAL, "messages": [{"role": "user", "content": f"hi {i}"}]})
                        for i in range(start, min(count, start + 25))]
        return out

    per_worker = [n // WORKERS + (1 if i < n % WORKERS else 0) for i in range(WORKERS)]
    with ThreadPoolExecutor(WORKERS) as pool:
        return [r for batch in pool.map(worker, per_worker) for r in batch]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_80_20_split_lands_within_5_points(stack, concurrency):
    openai_main = stack.provider("openai_main")
    azure_east = stack.provider("azure_east")
    envoy = stack.envoy(weighted_80_20(), concurrency=concurrency)

    responses = send_many(envoy.url, REQUESTS)

    assert [r.status_code for r in responses] == [200] * REQUESTS
    resolved = Counter(r.headers["x-switchboard-resolved-model"] for r in responses)
    served = Counter(r.headers["x-mock-provider"] for r in responses)
    # The header names the target that really answered.
    assert resolved[PRIMARY] == served["openai_main"] == len(openai_main.requests())
    assert resolved[SECONDARY] == served["azure_east"] == len(azure_east.requests())
    share = 100 * resolved[PRIMARY] / REQUESTS
    assert 75 <= share <= 85, f"primary share {share:.1f}% ({resolved})"
    per_worker = envoy.connections_per_worker()
    assert len(per_worker) == concurrency and all(n > 0 for n in per_worker), per_worker


def test_each_worker_draws_its_own_picks(stack):
    """Envoy starts every worker's root context in the same millisecond with the same context
    id: the picks must still differ between workers, or the split's error doubles."""
    stack.provider("openai_main")
    stack.provider("azure_east")
    config = weighted_80_20()
    for target in config["virtual_models"][0]["routing_config"]["load_balance_targets"]:
        target["weight"] = 50
    envoy = stack.envoy(config, concurrency=2)
    picks: dict[int, list[str]] = {0: [], 1: []}
    sessions: dict[int, requests.Session] = {}

    def send(session: requests.Session) -> str:
        r = session.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                         json={"model": VIRTUAL, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        return r.headers["x-switchboard-resolved-model"]

    # Open connections until each worker holds one; every request's pick is kept in the order
    # its worker served it.
    for _ in range(40):
        if len(sessions) == 2:
            break
        before = envoy.connections_per_worker()
        session = requests.Session()
        model = send(session)
        worker = next(i for i, (a, b) in enumerate(zip(before, envoy.connections_per_worker())) if b > a)
        picks[worker].append(model)
        if worker in sessions:
            session.close()
        else:
            sessions[worker] = session
    assert len(sessions) == 2, picks
    for _ in range(64):
        for worker, session in sessions.items():
            picks[worker].append(send(session))
    for session in sessions.values():
        session.close()

    n = min(len(picks[0]), len(picks[1]))
    assert n >= 64
    # With independent draws at 50/50, 64 equal picks in a row has odds of 2^-64.
    assert picks[0][:n] != picks[1][:n], picks
    assert set(picks[0]) == set(picks[1]) == {PRIMARY, SECONDARY}


def test_healthy_targets_share_an_unhealthy_targets_traffic_by_their_weights(stack):
    """TrueFoundry virtual models, "Routing Strategies": strategies pick among healthy targets.
    50/30/20 with the first target unhealthy gives 60/40 to the other two (the old
    draw-then-demote gave 80/20)."""
    down = stack.provider("down", fail_status=500)
    stack.provider("b")
    stack.provider("c")
    models = [{"name": n, "cluster": n, "model": f"{n}-upstream", "visibility": "internal"} for n in ("down", "b", "c")]
    config = {"models": models, "virtual_models": [{
        "name": VIRTUAL, "model_types": ["chat"],
        "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
            {"target": "down", "weight": 50}, {"target": "b", "weight": 30}, {"target": "c", "weight": 20}]}}]}
    envoy = stack.envoy(config, concurrency=2)
    # Two failures within the window make `down` unhealthy (each of those requests falls back).
    with requests.Session() as s:
        for _ in range(100):
            if len(down.requests()) >= 2:
                break
            r = s.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                       json={"model": VIRTUAL, "messages": [{"role": "user", "content": "warm"}]})
            assert r.status_code == 200
    assert len(down.requests()) >= 2
    time.sleep(0.3)  # past health_view_ms: every worker sees the shared record
    down.clear()

    responses = send_many(envoy.url, REQUESTS)

    assert [r.status_code for r in responses] == [200] * REQUESTS
    assert len(down.requests()) == 0, "an unhealthy target is only a last resort"
    resolved = Counter(r.headers["x-switchboard-resolved-model"] for r in responses)
    share = 100 * resolved["b"] / REQUESTS
    assert 55 <= share <= 65, f"b's share {share:.1f}% ({resolved})"
