"""What one caller may reach through the gateway, against strict OpenAI and Anthropic mock
providers: a Responses follow-up goes only where normal routing would let it (never to an
internal model), an id bound to its caller serves no one else, the gateway's account headers
neither go out with the client's requests nor come back in answers, and a config that would
mint ids with the public built-in key says so when it loads.
"""

from __future__ import annotations

import time

import openai
import pytest
import requests

VM = "team/responses"
OTHER_VM = "team/other"
INTERNAL = "openai/gpt-4o"
KEY = "sk-gateway-openai"
ANTHROPIC_KEY = "sk-ant-gateway"
ID_KEY = "tenant-isolation-response-id-key"


def openai_model(name: str, cluster: str, **extra) -> dict:
    return {"name": name, "cluster": cluster, "model": "gpt-4o", "provider": "openai",
            "authority": "api.openai.com", "headers": {"authorization": f"Bearer {KEY}"}, **extra}


def config(**extra) -> dict:
    return {
        "models": [openai_model(INTERNAL, "openai")],
        "response_id_keys": [ID_KEY],
        "virtual_models": [
            {"name": VM, "model_types": ["responses", "chat"],
             "routing_config": {"type": "weight-based-routing",
                                "load_balance_targets": [{"target": INTERNAL, "weight": 100}]}},
            {"name": OTHER_VM, "model_types": ["responses"],
             "routing_config": {"type": "weight-based-routing",
                                "load_balance_targets": [{"target": INTERNAL, "weight": 100}]}}],
        **extra,
    }


def strict_openai(stack, name: str = "openai", **flags):
    return stack.provider(name, strict="openai", host_name="api.openai.com", api_key=KEY, **flags)


def client(envoy, key: str = "client-key") -> openai.OpenAI:
    return openai.OpenAI(base_url=envoy.url + "/v1", api_key=key, max_retries=0)


def error_of(r: requests.Response) -> dict:
    return r.json()["error"]


def test_a_follow_up_naming_an_internal_model_is_a_404_and_reaches_no_provider(stack):
    provider = strict_openai(stack)
    envoy = stack.envoy(config())
    first = client(envoy).responses.create(model=VM, input="hi")
    assert first.id.startswith("resp_sb1-")
    provider.clear()
    # The catalog model the id was minted for is internal: unknown to a client, whatever the
    # body carries (before the fix: a 200 from it, with the provider's raw id).
    r = requests.post(f"{envoy.url}/v1/responses", timeout=10,
                      json={"model": INTERNAL, "input": "more", "previous_response_id": first.id})
    assert r.status_code == 404, r.text
    assert error_of(r)["code"] == "model_not_found"
    # Another virtual model than the id's: a 409.
    r = requests.post(f"{envoy.url}/v1/responses", timeout=10,
                      json={"model": OTHER_VM, "input": "more", "previous_response_id": first.id})
    assert r.status_code == 409, r.text
    assert error_of(r)["code"] == "conversation_model_mismatch"
    assert provider.requests() == []
    # The id's own virtual model continues the conversation.
    second = client(envoy).responses.create(model=VM, input="more", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert [q["strict_status"] for q in provider.requests()] == [None]


def test_ids_bound_to_their_caller_serve_no_other_caller(stack):
    provider = strict_openai(stack)
    envoy = stack.envoy(config(response_id_binding="caller"))
    alice, mallory = client(envoy, "alice-key"), client(envoy, "mallory-key")
    first = alice.responses.create(model=VM, input="hi")
    provider.clear()
    with pytest.raises(openai.ConflictError) as e:
        mallory.responses.create(model=VM, input="more", previous_response_id=first.id)
    assert e.value.code == "foreign_response_id"
    for call in (mallory.responses.retrieve, mallory.responses.delete):
        with pytest.raises(openai.ConflictError) as e:
            call(first.id)
        assert e.value.code == "foreign_response_id"
    assert provider.requests() == [], "another caller's id reaches no provider"
    # Its own caller continues, reads and deletes it; ids minted for it stay bound to it.
    second = alice.responses.create(model=VM, input="more", previous_response_id=first.id)
    assert alice.responses.retrieve(second.id).id == second.id
    with pytest.raises(openai.ConflictError):
        mallory.responses.retrieve(second.id)
    alice.responses.delete(first.id)


def test_a_responses_config_without_keys_warns_at_load_and_names_the_field(stack):
    strict_openai(stack)
    plugin = config()
    del plugin["response_id_keys"]
    envoy = stack.envoy(plugin)
    assert client(envoy).responses.create(model=VM, input="hi").id.startswith("resp_sb1-")
    assert wait_for_line(envoy, "loaded config")
    log = envoy.log()
    assert "response_id_keys is not set" in log and "built-in key" in log, log[-2000:]
    assert "[warning]" in log.split("response_id_keys is not set")[0].rsplit("\n", 1)[-1]
    # With keys, no such line.
    keyed = stack.envoy(config())
    assert wait_for_line(keyed, "loaded config")
    assert "response_id_keys is not set" not in keyed.log()


def wait_for_line(envoy, text: str, timeout: float = 5.0) -> bool:
    """Whether Envoy's log shows `text` within `timeout` (the log is flushed every 100 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in envoy.log():
            return True
        time.sleep(0.05)
    return False


ACCOUNT_REQUEST = {"openai-organization": "org-client", "openai-project": "proj_client",
                   "cookie": "session=client", "proxy-authorization": "Basic Y2xpZW50"}
ACCOUNT_ANSWER = ["openai-organization", "openai-project", "anthropic-organization-id"]


def account_config() -> dict:
    anthropic = {"name": "anthropic/claude", "cluster": "anthropic", "model": "claude-sonnet-4-5",
                 "provider": "anthropic", "authority": "api.anthropic.com",
                 "headers": {"x-api-key": ANTHROPIC_KEY}}
    return {
        "models": [openai_model(INTERNAL, "openai"), openai_model("openai/backup", "backup"), anthropic,
                   # No credential of its own: the client's key, and account, go to it.
                   {"name": "self/llama", "cluster": "selfhosted", "model": "llama", "visibility": "public"}],
        "virtual_models": [
            {"name": "team/chat", "model_types": ["chat"],
             "routing_config": {"type": "priority-based-routing", "load_balance_targets": [
                 {"target": INTERNAL, "priority": 0}, {"target": "openai/backup", "priority": 1}]}},
            {"name": "team/claude", "model_types": ["chat"],
             "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
                 {"target": "anthropic/claude", "weight": 100}]}}],
    }


def sent_headers(provider) -> dict:
    [request] = provider.requests()
    return {k.lower(): v for k, v in request["headers"].items()}


def test_account_headers_stay_on_their_side_of_the_gateways_key(stack):
    openai_p = strict_openai(stack)
    backup = strict_openai(stack, "backup")
    anthropic = stack.provider("anthropic", strict="anthropic", host_name="api.anthropic.com",
                               api_key=ANTHROPIC_KEY)
    selfhosted = stack.provider("selfhosted")
    envoy = stack.envoy(account_config())
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    headers = {"authorization": "Bearer client-key", **ACCOUNT_REQUEST}

    def post(model: str, path: str = "/v1/chat/completions") -> requests.Response:
        r = requests.post(f"{envoy.url}{path}", json={"model": model, **chat},
                          headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        return r

    # The router's attempt, at a target with the gateway's key.
    r = post("team/chat")
    sent = sent_headers(openai_p)
    assert not set(ACCOUNT_REQUEST) & set(sent), sent
    assert not set(ACCOUNT_ANSWER) & set(r.headers), dict(r.headers)
    # Anthropic's organisation header, likewise.
    r = post("team/claude", "/v1/messages")
    assert not set(ACCOUNT_REQUEST) & set(sent_headers(anthropic))
    assert "anthropic-organization-id" not in r.headers
    # A fallback made as a call-out: its answer's headers are hidden too.
    openai_p.configure(fail_status=503)
    r = post("team/chat")
    assert r.headers["x-switchboard-resolved-model"] == "openai/backup"
    assert not set(ACCOUNT_REQUEST) & set(sent_headers(backup))
    assert not set(ACCOUNT_ANSWER) & set(r.headers), dict(r.headers)
    # A target that takes the client's own key gets the client's account headers as sent.
    post("self/llama")
    sent = sent_headers(selfhosted)
    assert {k: sent.get(k) for k in ACCOUNT_REQUEST} == ACCOUNT_REQUEST
