"""Failures told apart (issue 29, in part): Anthropic's 529 `overloaded_error` is retried and
falls back like a 503, and a 401 answered to a client's own key, or a 400 for a client's bad
request, is that client's failure, not the target's: one tenant never moves another tenant's
traffic."""

import time

import requests

QUESTION = [{"role": "user", "content": "hello"}]


def test_an_overloaded_claude_falls_back(stack):
    stack.provider("a", strict="anthropic", host_name="api.anthropic.com", api_key="sk-ant", fail_status=529)
    b = stack.provider("b", strict="anthropic", host_name="api.anthropic.com", api_key="sk-ant")
    claude = lambda name: {"name": name, "cluster": name, "model": "claude-sonnet-4-5", "provider": "anthropic",
                           "authority": "api.anthropic.com", "visibility": "internal",
                           "headers": {"x-api-key": "sk-ant"}}
    envoy = stack.envoy({"models": [claude("a"), claude("b")], "virtual_models": [{
        "name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}]})
    r = requests.post(f"{envoy.url}/v1/messages", timeout=10, headers={"anthropic-version": "2023-06-01"},
                      json={"model": "vm", "max_tokens": 64, "messages": QUESTION})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text
    assert r.headers["x-switchboard-resolved-model"] == "b" and len(b.requests()) == 1


def test_one_tenants_bad_key_does_not_move_anothers_traffic(stack):
    # `a` forwards the client's own key (no catalog credential); `b` has the gateway's.
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-tenant-good")
    stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    models = [{"name": "a", "cluster": "a", "model": "gpt-4o", "authority": "api.openai.com",
               "visibility": "internal"},
              {"name": "b", "cluster": "b", "model": "gpt-4o", "authority": "api.openai.com",
               "visibility": "internal", "headers": {"authorization": "Bearer sk-gateway"}}]
    envoy = stack.envoy({"models": models, "virtual_models": [{
        "name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}]})

    def ask(key: str) -> requests.Response:
        return requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                             headers={"authorization": f"Bearer {key}"},
                             json={"model": "vm", "messages": QUESTION})

    for _ in range(4):  # more than the two failures that make a target unhealthy
        r = ask("sk-tenant-bad")
        assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b"
    good = ask("sk-tenant-good")
    assert good.status_code == 200
    assert good.headers["x-switchboard-resolved-model"] == "a", "a bad key made the target unhealthy"


def test_one_tenants_bad_requests_do_not_move_anothers_traffic(stack):
    # A strict provider refuses an unknown field with a 400, as OpenAI does: the client's fault.
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    model = lambda name: {"name": name, "cluster": name, "model": "gpt-4o", "authority": "api.openai.com",
                          "visibility": "internal", "headers": {"authorization": "Bearer sk-gateway"}}
    envoy = stack.envoy({"models": [model("a"), model("b")], "virtual_models": [{
        "name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}]})
    url = f"{envoy.url}/v1/chat/completions"
    for _ in range(4):
        bad = requests.post(url, timeout=10, json={"model": "vm", "messages": QUESTION, "not_a_field": 1})
        assert bad.status_code == 400 and bad.headers["x-switchboard-resolved-model"] == "a"
    good = requests.post(url, timeout=10, json={"model": "vm", "messages": QUESTION})
    assert good.status_code == 200
    assert good.headers["x-switchboard-resolved-model"] == "a", "bad requests made the target unhealthy"


def test_past_max_evicted_share_the_least_recently_failed_target_serves_first(stack):
    # Two virtual models over the same two targets, one with the cap. Each target is evicted by
    # a 429 with Retry-After, called directly: `b` first, then `a`, so `a` failed most recently.
    a = stack.provider("a", fail_status=429, retry_after=60)
    b = stack.provider("b", fail_status=429, retry_after=60)
    models = [{"name": n, "cluster": n, "model": "gpt-4o", "visibility": "public"} for n in ("a", "b")]
    vm = lambda name, extra: {"name": name, "model_types": ["chat"], **extra, "routing_config": {
        "type": "priority-based-routing", "load_balance_targets": [
            {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}
    envoy = stack.envoy({"models": models, "virtual_models": [
        vm("capped", {"max_evicted_share": 0.5}), vm("plain", {})]})
    url = f"{envoy.url}/v1/chat/completions"
    for name in ("b", "a"):
        r = requests.post(url, timeout=10, json={"model": name, "messages": QUESTION})
        assert r.status_code == 429, r.text
        time.sleep(0.05)
    a.configure(fail_status=None)
    b.configure(fail_status=None)
    time.sleep(0.3)  # past health_view_ms: every worker sees both evictions

    def served(model: str) -> str:
        r = requests.post(url, timeout=10, json={"model": model, "messages": QUESTION})
        assert r.status_code == 200, r.text
        return r.headers["x-switchboard-resolved-model"]

    # Both evicted: in priority order. Capped at half: `a` (failed last) stays evicted and `b`,
    # treated as unhealthy, serves first.
    assert served("plain") == "a"
    assert served("capped") == "b"


def test_a_413_a_422_or_a_client_hanging_up_leaves_the_target_healthy(stack):
    a = stack.provider("a")
    stack.provider("b")
    models = [{"name": n, "cluster": n, "model": "gpt-4o", "visibility": "internal"} for n in ("a", "b")]
    envoy = stack.envoy({"models": models, "virtual_models": [{
        "name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}]})
    url = f"{envoy.url}/v1/chat/completions"
    ask = lambda **kw: requests.post(url, json={"model": "vm", "messages": QUESTION}, **kw)
    for status in (413, 422):
        a.configure(fail_status=status)
        for _ in range(3):  # more than the two failures that make a target unhealthy
            r = ask(timeout=10)
            assert r.status_code == status and r.headers["x-switchboard-resolved-model"] == "a"
    # A client that gives up on a slow answer is not the target's failure either.
    a.configure(fail_status=None, stall_ms=2000)
    for _ in range(3):
        try:
            ask(timeout=0.3)
            raise AssertionError("the stalled answer came back")
        except requests.exceptions.ReadTimeout:
            pass
    a.configure(stall_ms=0)
    time.sleep(0.3)  # past health_view_ms
    good = ask(timeout=10)
    assert good.status_code == 200 and good.headers["x-switchboard-resolved-model"] == "a", good.text
