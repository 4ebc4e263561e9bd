"""Responses API conversations through Envoy with the real `openai` SDK: the mock providers
store the responses they mint and refuse a conversation that is not theirs (404 for a
previous_response_id they do not hold, 400 for reasoning they did not seal), exactly as a real
provider does, so a follow-up that reached the wrong target would fail here.

TrueFoundry virtual models, "Responses API conversations": ids are Switchboard's own, every
follow-up goes only to its origin, and that section's error table.
"""

from __future__ import annotations

import json
import time

import openai
import pytest
import requests

VM = "team/responses"
TARGETS = ["openai-a/gpt-4o", "openai-b/gpt-4o", "openai-c/gpt-4o"]
KEYS = ["first-response-id-key-0001"]


def config(**extra) -> dict:
    models = [{"name": name, "cluster": name.split("/")[0].replace("-", "_"), "model": "gpt-4o",
               "provider": "openai"} for name in TARGETS]
    targets = [{"target": name, "weight": w, "retry_config": {"attempts": 1, "delay": 50}}
               for name, w in zip(TARGETS, [34, 33, 33])]
    return {
        "models": models,
        "response_id_keys": KEYS,
        "virtual_models": [{"name": VM, "model_types": ["responses", "chat"],
                            "routing_config": {"type": "weight-based-routing",
                                               "load_balance_targets": targets}}],
        **extra,
    }


@pytest.fixture
def gateway(stack):
    for name in TARGETS:
        stack.provider(name.split("/")[0].replace("-", "_"))
    envoy = stack.envoy(config())
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="client-key", max_retries=0)
    return stack, envoy, client


def provider_of(stack, model: str):
    return stack.providers[model.split("/")[0].replace("-", "_")]


def seen_by(stack) -> dict[str, list[dict]]:
    return {name: provider_of(stack, name).requests() for name in TARGETS}


def create(client, stream: bool, **kwargs):
    """A create; returns (response id, resolved target)."""
    if not stream:
        raw = client.responses.with_raw_response.create(model=VM, **kwargs)
        return raw.parse().id, raw.headers["x-switchboard-resolved-model"]
    with client.responses.with_streaming_response.create(model=VM, stream=True, **kwargs) as raw:
        ids = set()
        for line in raw.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if "response" in event:
                    ids.add(event["response"]["id"])
        assert len(ids) == 1, ids
        return ids.pop(), raw.headers["x-switchboard-resolved-model"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_five_turn_chain_stays_on_its_origin_with_one_attempt_a_turn(gateway, stream):
    stack, envoy, client = gateway
    response_id, origin = create(client, stream, input="Turn 1")
    assert response_id.startswith("resp_sb1-")
    for p in TARGETS:
        provider_of(stack, p).clear()
    for turn in range(2, 6):
        response_id_next, served = create(client, stream, input=f"Turn {turn}",
                                          previous_response_id=response_id)
        assert served == origin
        assert response_id_next.startswith("resp_sb1-") and response_id_next != response_id
        response_id = response_id_next
    seen = seen_by(stack)
    assert len(seen[origin]) == 4, "exactly one attempt per follow-up"
    for other in set(TARGETS) - {origin}:
        assert seen[other] == [], f"{other} saw a follow-up"
    # The provider got its own ids back, never Switchboard's.
    for r in seen[origin]:
        assert json.loads(r["body"])["previous_response_id"].startswith("resp_")
        assert "resp_sb1-" not in r["body"]

    retrieved = client.responses.retrieve(response_id)
    assert retrieved.id == response_id
    items = client.responses.input_items.list(response_id)
    assert items.data
    client.responses.delete(response_id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response_id)
    paths = [(r["method"], r["path"]) for r in provider_of(stack, origin).requests()[4:]]
    assert [m for m, _ in paths] == ["GET", "GET", "DELETE", "GET"]
    assert all(p.startswith("/v1/responses/resp_") and "sb1" not in p for _, p in paths)


def test_ids_that_look_like_ours_but_do_not_decode_get_409(gateway, stack):
    _, envoy, client = gateway
    response_id, _ = create(client, False, input="hi")
    changed = response_id[:-3] + ("A" if response_id[-3] != "A" else "B") + response_id[-2:]
    other_key = start_other_gateway_id(stack)
    for bad in [changed, response_id[:-5], other_key]:
        r = requests.post(envoy.url + "/v1/responses", timeout=10,
                          json={"model": VM, "input": "x", "previous_response_id": bad})
        assert r.status_code == 409, (bad, r.text)
        assert r.json()["error"]["code"] == "invalid_response_id"
        # Whatever the endpoint: a retrieve or a delete too.
        for method in ("GET", "DELETE"):
            r = requests.request(method, f"{envoy.url}/v1/responses/{bad}", timeout=10)
            assert r.status_code == 409, (method, r.text)


def start_other_gateway_id(stack) -> str:
    """An id minted by a gateway with another key, for the same names."""
    other = stack.envoy(config(response_id_keys=["another-gateways-key-0002"]))
    client = openai.OpenAI(base_url=other.url + "/v1", api_key="x", max_retries=0)
    return client.responses.create(model=VM, input="hi").id


def first_turn(stack):
    """The three providers, a gateway, and one first turn: (gateway, response id, origin)."""
    for name in TARGETS:
        stack.provider(name.split("/")[0].replace("-", "_"))
    envoy = stack.envoy(config())
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    raw = client.responses.with_raw_response.create(model=VM, input="hi")
    return envoy, raw.parse().id, raw.headers["x-switchboard-resolved-model"]


def test_an_origin_no_longer_a_target_gets_409(stack):
    _, response_id, origin = first_turn(stack)
    edited = config()
    targets = edited["virtual_models"][0]["routing_config"]["load_balance_targets"]
    kept = [t for t in targets if t["target"] != origin]
    for t, w in zip(kept, [50, 50]):
        t["weight"] = w
    edited["virtual_models"][0]["routing_config"]["load_balance_targets"] = kept
    second = stack.envoy(edited)
    r = requests.post(second.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conversation_origin_removed"
    r = requests.get(f"{second.url}/v1/responses/{response_id}", timeout=10)
    assert r.status_code == 409


def test_an_origin_that_fails_gets_409_after_its_retries_and_a_429_is_returned(gateway):
    stack, envoy, client = gateway
    response_id, origin = create(client, False, input="hi")
    for p in TARGETS:
        provider_of(stack, p).clear()
    provider_of(stack, origin).configure(fail_status=503, fail_rate=1.0)
    r = requests.post(envoy.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "conversation_origin_unavailable"
    seen = seen_by(stack)
    assert len(seen[origin]) == 2, "the attempt and its one retry, at the origin only"
    assert all(seen[o] == [] for o in TARGETS if o != origin), "no fallback"

    provider_of(stack, origin).configure(fail_status=429, fail_rate=1.0)
    r = requests.post(envoy.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 429, "a pinned 429 is returned, not rerouted"
    # A retrieve is retried as it was sent: a GET with no body.
    provider_of(stack, origin).clear()
    r = requests.get(f"{envoy.url}/v1/responses/{response_id}", timeout=10)
    assert r.status_code == 429
    retried = provider_of(stack, origin).requests()
    assert [(x["method"], x["body"]) for x in retried] == [("GET", ""), ("GET", "")]

    # A 5xx in neither status list (504) is still the origin failing: 409, not the 504.
    provider_of(stack, origin).configure(fail_status=504, fail_rate=1.0)
    r = requests.post(envoy.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 409, r.text


def test_a_provider_4xx_passes_through_unchanged(gateway):
    stack, envoy, client = gateway
    response_id, origin = create(client, False, input="hi")
    client.responses.delete(response_id)
    r = requests.post(envoy.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "previous_response_not_found"


def test_replayed_reasoning_stays_on_its_origin_and_the_provider_gets_its_own_value(gateway):
    stack, envoy, client = gateway
    first = client.responses.with_raw_response.create(
        model=VM, input="think", store=False, include=["reasoning.encrypted_content"])
    origin = first.headers["x-switchboard-resolved-model"]
    reasoning = [item for item in first.parse().output if item.type == "reasoning"]
    assert reasoning and reasoning[0].encrypted_content.startswith("sbrc1.")
    history = [{"role": "user", "content": "think"}, reasoning[0].model_dump(exclude_none=True),
               {"role": "user", "content": "and then?"}]
    for p in TARGETS:
        provider_of(stack, p).clear()
    for _ in range(6):
        raw = client.responses.with_raw_response.create(
            model=VM, input=history, store=False, include=["reasoning.encrypted_content"])
        assert raw.headers["x-switchboard-resolved-model"] == origin
    [sent, *_] = provider_of(stack, origin).requests()
    replayed = json.loads(sent["body"])["input"][1]["encrypted_content"]
    assert not replayed.startswith("sbrc1."), "the provider sees only its own value"
    assert reasoning[0].encrypted_content.endswith("." + replayed)

    # Plain-text history load-balances like a chat completion.
    served = {client.responses.with_raw_response.create(
        model=VM, input=history[:1] + history[2:], store=False).headers["x-switchboard-resolved-model"]
        for _ in range(30)}
    assert len(served) > 1


def stored_config() -> dict:
    """One provider account (openai-a, two catalog models) that stores responses, a router that
    stores nothing, and a virtual model over two accounts that cannot tell them apart."""
    return {
        "models": [
            {"name": "openai-a/gpt-4o", "cluster": "openai_a", "model": "gpt-4o"},
            {"name": "openai-a/gpt-4o-mini", "cluster": "openai_a", "model": "gpt-4o-mini",
             "visibility": "public"},
            {"name": "openai-b/gpt-4o", "cluster": "openai_b", "model": "gpt-4o"},
            {"name": "router/gpt-4o", "cluster": "router", "model": "gpt-4o", "stores_responses": False},
        ],
        "stored_responses_virtual_model": "team/stored",
        "virtual_models": [
            {"name": "team/stored", "model_types": ["responses"], "routing_config": {
                "type": "round-robin-routing",
                "load_balance_targets": [{"target": "openai-a/gpt-4o"}, {"target": "router/gpt-4o"}]}},
            {"name": "team/two-accounts", "model_types": ["responses"], "routing_config": {
                "type": "round-robin-routing",
                "load_balance_targets": [{"target": "openai-a/gpt-4o"}, {"target": "openai-b/gpt-4o"}]}},
        ],
    }


def test_raw_provider_ids_follow_the_zuplo_stored_response_rules(stack):
    for name in ("openai_a", "openai_b", "router"):
        stack.provider(name)
    envoy = stack.envoy(stored_config(), passthrough="openai_b")
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    # A direct call to a catalog model returns the provider's own id.
    raw_id = client.responses.create(model="openai-a/gpt-4o-mini", input="hi").id
    assert raw_id.startswith("resp_") and not raw_id.startswith("resp_sb1-")
    # Every continuation reaches the one account that stores responses.
    for _ in range(6):
        r = client.responses.with_raw_response.create(
            model="team/stored", input="more", previous_response_id=raw_id)
        assert r.headers["x-switchboard-resolved-model"] == "openai-a/gpt-4o"
    assert stack.providers["router"].requests() == []
    # A retrieve names no model: the configured virtual model's rules route it.
    assert client.responses.retrieve(raw_id).id == raw_id
    assert stack.providers["openai_b"].requests() == [], "not passed through to the default route"
    # A provider that stores nothing gets creates only with store: false.
    served = {client.responses.with_raw_response.create(model="team/stored", input="x")
              .headers["x-switchboard-resolved-model"] for _ in range(6)}
    assert served == {"openai-a/gpt-4o"}
    served = {client.responses.with_raw_response.create(model="team/stored", input="x", store=False)
              .headers["x-switchboard-resolved-model"] for _ in range(6)}
    assert "router/gpt-4o" in served
    # Two accounts and no caller key: Zuplo model load balancing's 400 ("Stored responses").
    r = requests.post(envoy.url + "/v1/responses", timeout=10, json={
        "model": "team/two-accounts", "input": "x", "previous_response_id": raw_id})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "stored_response_unroutable"
    time.sleep(0.3)
    assert "could not be routed" in envoy.log(), "the log names the fix"


def test_an_origin_that_answers_nothing_gets_409_and_one_no_longer_native_gets_400(stack):
    envoy, response_id, origin = first_turn(stack)

    # The origin's catalog entry now says it speaks Anthropic's API, not the Responses API.
    edited = config()
    for m in edited["models"]:
        if m["name"] == origin:
            m["provider"] = "anthropic"
    native = stack.envoy(edited)
    r = requests.post(native.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "unsupported_endpoint"

    # The origin is gone from the network: no answer at all, after its retry.
    provider_of(stack, origin).stop()
    r = requests.post(envoy.url + "/v1/responses", timeout=10,
                      json={"model": VM, "input": "x", "previous_response_id": response_id})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "conversation_origin_unavailable"
    for other in set(TARGETS) - {origin}:
        assert provider_of(stack, other).requests() == [] or all(
            "previous_response_id" not in json.loads(x["body"]) for x in provider_of(stack, other).requests())
