"""The rest of Anthropic's Messages API through a virtual model, with the real `anthropic` SDK:
`count_tokens` routes like `/v1/messages` (Zuplo model load balancing, "Endpoints": only
models that speak Anthropic's API are eligible, and "Failures and retries": no retry model),
and errors the filter answers itself on these endpoints come in Anthropic's shape, which the
SDK parses into its typed errors."""

from __future__ import annotations

import json

import anthropic
import pytest
import requests

VM = "team/claude"


def config() -> dict:
    return {
        "models": [
            {"name": "anthropic-a/claude", "cluster": "anthropic_a", "model": "claude-sonnet-4-5",
             "provider": "anthropic", "headers": {"x-api-key": "sk-ant-a"}},
            {"name": "anthropic-b/claude", "cluster": "anthropic_b", "model": "claude-sonnet-4-5",
             "provider": "anthropic", "headers": {"x-api-key": "sk-ant-b"}},
            {"name": "openai/gpt-4o", "cluster": "openai", "model": "gpt-4o"},
        ],
        "max_request_body_bytes": 4096,
        "virtual_models": [{"name": VM, "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "anthropic-a/claude", "priority": 0},
                {"target": "anthropic-b/claude", "priority": 1},
                {"target": "openai/gpt-4o", "priority": 2}]}}],
    }


@pytest.fixture
def gateway(stack):
    for name in ("anthropic_a", "anthropic_b", "openai"):
        stack.provider(name)
    envoy = stack.envoy(config())
    return stack, envoy, anthropic.Anthropic(base_url=envoy.url, api_key="client", max_retries=0)


def test_count_tokens_routes_to_an_anthropic_target_with_its_model_and_key(gateway):
    stack, envoy, client = gateway
    counted = client.messages.count_tokens(model=VM, messages=[{"role": "user", "content": "Hello there"}])
    assert counted.input_tokens >= 1
    [seen] = stack.providers["anthropic_a"].requests()
    assert seen["path"] == "/v1/messages/count_tokens"
    assert json.loads(seen["body"])["model"] == "claude-sonnet-4-5"
    assert seen["headers"]["x-api-key"] == "sk-ant-a"
    assert stack.providers["openai"].requests() == [], "OpenAI does not speak Anthropic's API"


def test_count_tokens_gets_no_retry_model(gateway):
    stack, envoy, client = gateway
    stack.providers["anthropic_a"].configure(fail_status=503, fail_rate=1.0)
    with pytest.raises(anthropic.InternalServerError):
        client.messages.count_tokens(model=VM, messages=[{"role": "user", "content": "Hi"}])
    assert stack.providers["anthropic_b"].requests() == []
    # /v1/messages itself does fall back.
    message = client.messages.create(model=VM, max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert message.content[0].text
    assert len(stack.providers["anthropic_b"].requests()) == 1


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_errors_on_anthropic_endpoints_come_in_anthropics_shape(gateway, path):
    _, envoy, client = gateway
    r = requests.post(envoy.url + path, timeout=10,
                      json={"model": "nobody", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "nobody" in body["error"]["message"]
    r = requests.post(envoy.url + path, data=b"{", timeout=10, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["type"]) == (400, "invalid_request_error")
    r = requests.post(envoy.url + path, data=b"{" + b" " * 5000 + b"}", timeout=10)
    assert (r.status_code, r.json()["error"]["type"]) == (413, "request_too_large")


def test_the_anthropic_sdk_parses_the_filters_errors_into_its_typed_errors(gateway):
    _, envoy, client = gateway
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="nobody", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert raised.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nobody", messages=[{"role": "user", "content": "x"}])
    # OpenAI-shaped endpoints keep OpenAI's shape.
    r = requests.post(envoy.url + "/v1/chat/completions", timeout=10, json={"model": "nobody"})
    assert r.json()["error"]["code"] == "model_not_found"
