"""`fallback_on` (refusals and errors inside a 200): a virtual model that opts in
moves a 200 that answers nothing to its next target. A refusal (content filter) falls back
without counting against the target; an empty answer and an error object in a 200 count. A
streamed answer is judged up to its first content only. Without `fallback_on` nothing is held
and the refusal reaches the client as it came."""

import json
import re

import requests

from configs import STRICT

QUESTION = [{"role": "user", "content": "hello"}]


def model(name: str) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal",
            "authority": "api.openai.com", "headers": {"authorization": "Bearer sk-gateway"}}


def config(fallback_on: list[str] | None) -> dict:
    vm = {"name": "vm", "model_types": ["chat"], "routing_config": {
        "type": "priority-based-routing", "load_balance_targets": [
            {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}}
    if fallback_on is not None:
        vm["fallback_on"] = fallback_on
    return {"models": [model("a"), model("b")], "virtual_models": [vm]}


def ask(envoy, stream: bool = False) -> requests.Response:
    return requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                         json={"model": "vm", "messages": QUESTION, "stream": stream})


def fallbacks(envoy, reason: str) -> int:
    """`switchboard.fallbacks.reason.<reason>.vm.vm.target.a` from /stats (either build)."""
    name = f"switchboard.fallbacks.reason.{reason}.vm.vm.target.a"
    for line in requests.get(f"http://127.0.0.1:{envoy.admin_port}/stats", timeout=5,
                             params={"filter": re.escape(name) + "$"}).text.splitlines():
        key, _, value = line.partition(": ")
        if key.endswith(name):
            return int(value)
    return 0


def answered_by_b(r: requests.Response) -> dict:
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "b", r.headers
    body = r.json()
    assert body["choices"][0]["message"]["content"], body
    return body


ALL = ["content_filter", "empty", "error_body"]


def test_a_refusal_falls_back_and_never_counts_against_the_target(stack):
    a = stack.provider("a", answer_fault="refusal", **STRICT)
    b = stack.provider("b", **STRICT)
    envoy = stack.envoy(config(ALL))
    for _ in range(4):  # more than the two failures that make a target unhealthy
        r = ask(envoy)
        answered_by_b(r)
        assert r.headers["x-switchboard-attempts"] == "2"
    assert len(a.requests()) == 4, "a refusal made the target unhealthy"
    assert len(b.requests()) == 4
    assert fallbacks(envoy, "content_filter") == 4


def test_an_error_object_in_a_200_falls_back_and_counts_against_the_target(stack):
    a = stack.provider("a", error_body_on_200=True, **STRICT)
    stack.provider("b", **STRICT)
    envoy = stack.envoy(config(["error_body"]))
    for _ in range(4):
        answered_by_b(ask(envoy))
    assert len(a.requests()) < 4, "the error bodies left the target healthy"
    assert fallbacks(envoy, "error_body") >= 2


def test_an_empty_answer_falls_back_and_counts_against_the_target(stack):
    a = stack.provider("a", answer_fault="empty", **STRICT)
    stack.provider("b", **STRICT)
    envoy = stack.envoy(config(["empty"]))
    for _ in range(4):
        answered_by_b(ask(envoy))
    assert len(a.requests()) < 4, "the empty answers left the target healthy"
    assert fallbacks(envoy, "empty") >= 2


def test_a_stream_refused_before_its_first_content_falls_back(stack):
    stack.provider("a", answer_fault="refusal", **STRICT)
    stack.provider("b", **STRICT)
    envoy = stack.envoy(config(ALL))
    r = ask(envoy, stream=True)
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b", r.text
    events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks), r.text
    assert not any(c["choices"] and c["choices"][0].get("finish_reason") == "content_filter"
                   for c in chunks), "the refusal reached the client"


def test_without_fallback_on_the_refusal_reaches_the_client_as_it_came(stack):
    a = stack.provider("a", answer_fault="refusal", **STRICT)
    b = stack.provider("b", **STRICT)
    envoy = stack.envoy(config(None))
    r = ask(envoy)
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "a"
    assert r.json()["choices"][0]["finish_reason"] == "content_filter"
    assert (len(a.requests()), len(b.requests())) == (1, 0)
