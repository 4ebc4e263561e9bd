"""Switchboard mints only the response's own ids, never a value the client chose.

The Responses object echoes the request's `metadata`, `user` and `prompt_cache_key` (OpenAI API
reference, "The response object"), and the stream repeats that object in `response.created`,
`response.in_progress` and `response.completed` ("Streaming events"). Were those echoes minted,
any raw id a client put there would come back as a valid `resp_sb1-` id: a signing oracle. Here
they come back unchanged, while the response's `id` and `previous_response_id` (top level, or
`response.*` in every event) are minted, and only reasoning items' `encrypted_content` is marked,
through the router's streamed answer and through a fallback's whole call-out answer alike. The
providers are mock OpenAI accounts in strict mode.
"""

from __future__ import annotations

import json

import pytest
import requests

VM = "team/oracle"
TARGETS = ["openai-a/gpt-4o", "openai-b/gpt-4o"]
HOST, API_KEY = "api.openai.com", "sk-oracle-e2e-2b7d"
RAW = "resp_abc123"
# Client data shaped like what gets minted or marked: ids, and a reasoning blob under its key.
METADATA = {"id": RAW, "previous_response_id": RAW, "response_id": RAW,
            "encrypted_content": "gAAAAABclient-blob"}
ECHOED = {"metadata": METADATA, "user": RAW, "prompt_cache_key": RAW}
MINTED = "resp_sb1-"
MARKED = "sbrc1."


def cluster(name: str) -> str:
    return name.split("/")[0].replace("-", "_")


def config() -> dict:
    models = [{"name": name, "cluster": cluster(name), "model": "gpt-4o", "provider": "openai",
               "authority": HOST, "headers": {"authorization": f"Bearer {API_KEY}"}}
              for name in TARGETS]
    targets = [{"target": name, "priority": p, "retry_config": {"attempts": 1, "delay": 50}}
               for p, name in enumerate(TARGETS)]
    return {
        "models": models,
        "response_id_keys": ["oracle-test-response-id-key-0001"],
        "virtual_models": [{"name": VM, "model_types": ["responses"],
                            "routing_config": {"type": "priority-based-routing",
                                               "load_balance_targets": targets}}],
    }


@pytest.fixture
def gateway(stack):
    for name in TARGETS:
        stack.provider(cluster(name), strict="openai", host_name=HOST, api_key=API_KEY)
    return stack.envoy(config())


def post(envoy, body: dict) -> requests.Response:
    r = requests.post(envoy.url + "/v1/responses", timeout=30, json={"model": VM, **body})
    assert r.status_code == 200, r.text
    return r


def events(r: requests.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


def assert_own_values_minted_and_echoes_unchanged(response: dict, previous: bool) -> None:
    assert response["id"].startswith(MINTED), response["id"]
    if previous:
        assert response["previous_response_id"].startswith(MINTED)
    for field, sent in ECHOED.items():
        assert response[field] == sent, field
    for item in response["output"]:
        if item["type"] == "reasoning":
            assert item["encrypted_content"].startswith(MARKED)


def first_turn(envoy) -> str:
    r = post(envoy, {"input": "hi"})
    assert r.headers["x-switchboard-resolved-model"] == TARGETS[0]
    return r.json()["id"]


def turn(stack, envoy, stream: bool) -> tuple[str, dict | list[dict]]:
    """A follow-up that echoes client ids and asks for reasoning: (answering target, answer)."""
    previous = first_turn(envoy)
    for name in TARGETS:
        stack.providers[cluster(name)].clear()
    r = post(envoy, {"input": "and?", "stream": stream, "previous_response_id": previous,
                     "include": ["reasoning.encrypted_content"], **ECHOED})
    answer = events(r) if stream else r.json()
    return r.headers["x-switchboard-resolved-model"], answer


def assert_providers_took_everything(stack) -> None:
    """Every request passed the strict OpenAI checks, and the client's values reached it as sent."""
    for name in TARGETS:
        for seen in stack.providers[cluster(name)].requests():
            assert seen["strict_status"] is None, (name, seen["path"], seen["strict_status"])
            body = json.loads(seen["body"] or "{}")
            if "metadata" in body:
                assert {k: body[k] for k in ECHOED} == ECHOED
            assert not body.get("previous_response_id", "").startswith(MINTED)


def fallback(stack, envoy, stream: bool) -> requests.Response:
    """A first turn whose first target fails, after its retry: the second one's answer arrives
    whole, from a call-out."""
    stack.providers[cluster(TARGETS[0])].configure(fail_status=503, fail_rate=1.0)
    r = post(envoy, {"input": "hi", "stream": stream, "include": ["reasoning.encrypted_content"],
                     **ECHOED})
    assert r.headers["x-switchboard-resolved-model"] == TARGETS[1]
    assert len(stack.providers[cluster(TARGETS[0])].requests()) == 2
    assert_providers_took_everything(stack)
    return r


def test_a_json_answer_mints_its_own_ids_and_returns_echoed_client_ids_unchanged(stack, gateway):
    served, answer = turn(stack, gateway, stream=False)
    assert served == TARGETS[0]
    assert_own_values_minted_and_echoes_unchanged(answer, previous=True)
    assert [i["type"] for i in answer["output"]] == ["reasoning", "message"]
    assert_providers_took_everything(stack)
    origin = stack.providers[cluster(TARGETS[0])]
    [follow_up] = origin.requests()
    raw_previous = json.loads(follow_up["body"])["previous_response_id"]
    # The stored response, retrieved by its minted id, comes back the same way.
    got = requests.get(f"{gateway.url}/v1/responses/{answer['id']}", timeout=30)
    assert got.status_code == 200, got.text
    assert got.json()["id"] == answer["id"]
    assert_own_values_minted_and_echoes_unchanged(got.json(), previous=True)
    # The minted previous_response_id names the provider's response the follow-up named.
    origin.clear()
    post(gateway, {"input": "again", "previous_response_id": answer["previous_response_id"]})
    [again] = origin.requests()
    assert json.loads(again["body"])["previous_response_id"] == raw_previous


def test_every_stream_event_mints_the_responses_ids_and_returns_echoed_client_ids_unchanged(stack, gateway):
    served, stream = turn(stack, gateway, stream=True)
    assert served == TARGETS[0]
    assert_stream(stream, previous=True)
    assert_providers_took_everything(stack)


def assert_stream(stream: list[dict], previous: bool) -> None:
    carrying = [e for e in stream if "response" in e]
    assert [e["type"] for e in carrying] == [
        "response.created", "response.in_progress", "response.completed"]
    for event in carrying:
        assert_own_values_minted_and_echoes_unchanged(event["response"], previous)
    assert len({e["response"]["id"] for e in carrying}) == 1
    items = [e["item"] for e in stream if e["type"].startswith("response.output_item.")]
    reasoning = [i for i in items if i["type"] == "reasoning"]
    assert len(reasoning) == 2 and all(i["encrypted_content"].startswith(MARKED) for i in reasoning)
    completed = carrying[-1]["response"]
    assert completed["output"][0]["encrypted_content"] == reasoning[-1]["encrypted_content"]


def test_a_fallbacks_whole_json_answer_is_rewritten_the_same_way(stack, gateway):
    answer = fallback(stack, gateway, stream=False).json()
    assert_own_values_minted_and_echoes_unchanged(answer, previous=False)
    assert answer["previous_response_id"] is None
    assert answer["output"][0]["encrypted_content"].startswith(MARKED)


def test_a_fallbacks_whole_stream_is_rewritten_the_same_way(stack, gateway):
    assert_stream(events(fallback(stack, gateway, stream=True)), previous=False)
