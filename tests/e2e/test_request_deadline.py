"""A budget for the whole request: `request_deadline_ms` starts no attempt
after it is spent and abandons the one in flight (the client gets the last failed answer, else a
504 `deadline_exceeded`, Anthropic's `timeout_error` on /v1/messages);
`fallback_if_failed_within_ms` returns a slow failure instead of doubling the wait with another
attempt. Every case on both builds, streamed and not."""

import time

import pytest
import requests

from harness import BUILD

QUESTION = [{"role": "user", "content": "hello"}]


def openai(name: str) -> dict:
    return {"name": name, "cluster": name, "model": "gpt-4o", "authority": "api.openai.com",
            "visibility": "internal", "headers": {"authorization": "Bearer sk-gateway"}}


def two_targets(stack, budget: dict, models=openai) -> str:
    envoy = stack.envoy({"models": [models("a"), models("b")], "virtual_models": [{
        "name": "vm", "model_types": ["chat"], **budget, "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}]})
    return envoy.url


def ask(url: str, stream: bool) -> requests.Response:
    body = {"model": "vm", "messages": QUESTION}
    if stream:
        body["stream"] = True
    return requests.post(f"{url}/v1/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_slow_first_target_spends_the_deadline_504_and_no_fallback_starts(stack, stream):
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway", stall_ms=3000)
    b = stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    url = two_targets(stack, {"request_deadline_ms": 400})
    began = time.monotonic()
    r = ask(url, stream)
    took = time.monotonic() - began
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "deadline_exceeded"
    assert took < 2.5, f"answered at the deadline, not when the slow target did: {took:.2f}s"
    assert b.requests() == [], "a fallback started after the deadline"


def test_on_the_messages_api_the_deadline_is_anthropics_timeout_error(stack):
    for name in ("a", "b"):
        stack.provider(name, strict="anthropic", host_name="api.anthropic.com", api_key="sk-ant",
                       stall_ms=3000 if name == "a" else None)
    claude = lambda name: {"name": name, "cluster": name, "model": "claude-sonnet-4-5",
                           "provider": "anthropic", "authority": "api.anthropic.com",
                           "visibility": "internal", "headers": {"x-api-key": "sk-ant"}}
    url = two_targets(stack, {"request_deadline_ms": 400}, models=claude)
    r = requests.post(f"{url}/v1/messages", timeout=10, headers={"anthropic-version": "2023-06-01"},
                      json={"model": "vm", "max_tokens": 64, "messages": QUESTION})
    assert r.status_code == 504, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "timeout_error"
    assert stack.providers["b"].requests() == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_failed_first_answer_then_the_deadline_during_the_fallback_gives_the_first_failure(stack, stream):
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway", fail_status=503)
    b = stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway", stall_ms=3000)
    url = two_targets(stack, {"request_deadline_ms": 600})
    r = ask(url, stream)
    if stream and BUILD == "native":
        # The native module streams every attempt as a call-out and keeps one at a time: the
        # failed one is let go, its body unread, when the fallback starts; no whole failed
        # answer is left to give.
        assert r.status_code == 504, r.text
        assert r.json()["error"]["code"] == "deadline_exceeded"
    else:
        assert r.status_code == 503, r.text
        assert "injected failure from a" in r.text
        assert r.headers["x-switchboard-resolved-model"] == "a"
    assert r.headers["x-switchboard-attempts"] == "2"
    assert len(b.requests()) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_failure_slower_than_fallback_if_failed_within_ms_is_returned_without_a_fallback(stack, stream):
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway",
                   fail_status=503, stall_ms=700)
    b = stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    url = two_targets(stack, {"fallback_if_failed_within_ms": 300})
    r = ask(url, stream)
    assert r.status_code == 503, r.text
    assert "injected failure from a" in r.text
    assert r.headers["x-switchboard-attempts"] == "1"
    assert b.requests() == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_fast_failure_falls_back(stack, stream):
    stack.provider("a", strict="openai", host_name="api.openai.com", api_key="sk-gateway", fail_status=503)
    b = stack.provider("b", strict="openai", host_name="api.openai.com", api_key="sk-gateway")
    url = two_targets(stack, {"fallback_if_failed_within_ms": 2000, "request_deadline_ms": 5000})
    r = ask(url, stream)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "b"
    assert len(b.requests()) == 1
