"""Failures told apart: Anthropic's 529 `overloaded_error` is retried and falls back
like a 503; a 401 answered to a client's own key, or a 400 for a client's bad request, is that
client's failure, not the target's: one tenant never moves another tenant's traffic. A spent
quota, a 429 with no Retry-After and a refused gateway key each evict for their own time; a
prompt too long for a window falls back without counting; the client's final 429 keeps the
provider's Retry-After."""

import time

import pytest
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
    a, b = (stack.provider(n, strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                           fail_status=429, retry_after=60) for n in ("a", "b"))
    models = [openai_model(n, visibility="public") for n in ("a", "b")]
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
    a, _ = (stack.provider(n, strict="openai", host_name="api.openai.com", api_key="sk-gateway")
            for n in ("a", "b"))
    models = [openai_model(n) for n in ("a", "b")]
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


GATEWAY_KEY = {"authorization": "Bearer sk-gateway"}


def openai_model(name: str, **extra) -> dict:
    return {"name": name, "cluster": name, "model": "gpt-4o", "authority": "api.openai.com",
            "visibility": "internal", "headers": GATEWAY_KEY, **extra}


def two_targets(first: dict, second: dict, **vm) -> dict:
    """Virtual model `vm` over `first` then `second` (priority), with no failure window, so only
    eviction moves a target."""
    return {"failure_window": {"failures": 0}, "models": [first, second], "virtual_models": [{
        "name": "vm", "model_types": ["chat"], **vm, "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": first["name"], "priority": 0,
                 "retry_config": {"attempts": 2, "delay": 0, "on_status_codes": ["429", "401"]}},
                {"target": second["name"], "priority": 1}]}}]}


def chat(envoy, stream: bool = False) -> requests.Response:
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                      json={"model": "vm", "messages": QUESTION, "stream": stream})
    _ = r.content
    return r


@pytest.mark.parametrize("stream", [False, True])
def test_a_spent_quota_falls_back_at_once_and_evicts_for_the_quota_duration(stack, stream):
    a = stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                       fail_status=429, fail_body="quota")
    b = stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    quota = openai_model("a", health={"eviction": {"quota_duration": "2s"}})
    envoy = stack.envoy(two_targets(quota, openai_model("b")))
    r = chat(envoy, stream)
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b", r.text
    assert len(a.requests()) == 1, "a spent quota is not retried, though 429 is a retry code"
    for _ in range(3):
        r = chat(envoy, stream)
        assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b"
    assert len(a.requests()) == 1, "evicted: the next requests did not touch it"
    time.sleep(1.2)  # past a rate limit's first eviction (1 s): a quota's is longer
    r = chat(envoy, stream)
    assert r.headers["x-switchboard-resolved-model"] == "b" and len(a.requests()) == 1
    time.sleep(1.1)
    a.configure(fail_status=None)
    r = chat(envoy, stream)
    assert r.headers["x-switchboard-resolved-model"] == "a", "back after its quota_duration"
    assert len(b.requests()) == 5


def test_a_429_without_retry_after_evicts_for_one_then_two_seconds(stack):
    a = stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                       fail_status=429, fail_body="rate_limit")
    stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    limited = openai_model("a")
    envoy = stack.envoy(two_targets(limited, openai_model("b")))
    seen = lambda: len(a.requests())
    assert chat(envoy).headers["x-switchboard-resolved-model"] == "b"
    tried = seen()
    assert tried == 3, "a rate limit is retried as configured (twice)"
    chat(envoy)
    assert seen() == tried, "evicted for 1 s"
    time.sleep(1.3)
    chat(envoy)
    assert seen() == tried + 3, "back after 1 s, and limited again"
    time.sleep(1.3)
    chat(envoy)
    assert seen() == tried + 3, "the second eviction in a row lasts 2 s"
    time.sleep(1.0)
    chat(envoy)
    assert seen() == tried + 6


def test_a_401_to_the_gateways_key_evicts_and_the_next_target_answers(stack):
    # The catalog's key for `a` is wrong: the strict provider answers 401 invalid_api_key.
    a = stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-other")
    stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    envoy = stack.envoy(two_targets(openai_model("a"), openai_model("b")))
    for _ in range(3):
        r = chat(envoy)
        assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b", r.text
    assert len(a.requests()) == 1, "not retried, then evicted (credential_duration: 5 min)"


def test_the_clients_final_429_keeps_the_providers_retry_after(stack):
    for name in ("a", "b"):
        stack.provider(name, strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                       fail_status=429, fail_body="rate_limit", retry_after="7")
    envoy = stack.envoy(two_targets(openai_model("a"), openai_model("b")))
    r = chat(envoy)
    assert r.status_code == 429 and r.headers.get("retry-after") == "7", (r.headers, r.text)
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


def test_when_every_target_is_evicted_the_final_429_carries_the_time_left(stack):
    # Both targets' quotas are spent: the first request evicts both for an hour. The next is
    # still tried on them (evicted targets are tried last, never refused), and its final 429,
    # which has no Retry-After of its own, carries the evictions' time left.
    for name in ("a", "b"):
        stack.provider(name, strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                       fail_status=429, fail_body="quota")
    envoy = stack.envoy(two_targets(openai_model("a"), openai_model("b")))
    first = chat(envoy)
    assert first.status_code == 429 and "retry-after" not in first.headers, first.headers
    time.sleep(0.3)  # past health_view_ms: every worker sees both evictions
    r = chat(envoy)
    assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota", r.text
    assert 3500 < int(r.headers["retry-after"]) <= 3600, r.headers


def test_a_prompt_too_long_falls_back_without_counting_against_the_target(stack):
    a = stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                       fail_status=400, fail_body="context_length")
    stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    config = two_targets(openai_model("a"), openai_model("b"), fallback_on=["context_length"])
    config.pop("failure_window")  # two failures in 2 minutes would make `a` unhealthy
    envoy = stack.envoy(config)
    for _ in range(3):
        r = chat(envoy)
        assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b", r.text
    assert len(a.requests()) == 3, "each request tried the first target (no retry of a 400)"
    a.configure(fail_status=None)
    r = chat(envoy)
    assert r.headers["x-switchboard-resolved-model"] == "a", "not counted: still the first choice"
