"""The router path (`stream_fallbacks: "router"`): on the `.wasm`, every attempt of a streaming
request goes through Envoy's router, which retries and falls back across the targets' clusters in
Switchboard's order, so a fallback's answer streams to the client as it arrives.

The Envoy config is `switchboard envoy-config`'s (the harness runs it on the bootstrap it would
use anyway). The mocks are strict (a wrong Host, path or key fails as the real provider would),
and each target has its own key: an attempt that carried another target's key would fail.

The native module streams every attempt itself, with no router path: there these tests check
that a virtual model asking for it behaves the same (the field is read and changes nothing).
"""

import json
import time

import openai
import pytest
import requests

from harness import BUILD, free_port
from test_stream_faults import CHAT, counter, openai_client

ROUTER = {"stream_fallbacks": "router"}


def model(name: str, cluster: str | None = None) -> dict:
    """An OpenAI model whose provider checks `key-<name>`."""
    return {"name": name, "cluster": cluster or name, "model": f"gpt-{name}", "provider": "openai",
            "authority": "api.openai.com", "visibility": "internal",
            "headers": {"authorization": f"Bearer key-{name}"}}


def provider(stack, name: str, **flags):
    return stack.provider(name, strict="openai", host_name="api.openai.com", api_key=f"key-{name}", **flags)


def vm(targets: list[dict], **extra) -> dict:
    return {"name": "vm", "model_types": ["chat"], **ROUTER, **extra,
            "routing_config": {"type": "priority-based-routing", "load_balance_targets": [
                {"priority": i, **t} for i, t in enumerate(targets)]}}


def envoy(stack, models: list[dict], virtual: dict):
    return stack.envoy({"models": models, "virtual_models": [virtual]}, router_path=True)


def stream(envoy) -> tuple[str, dict, float | None, Exception | None]:
    """(text, response headers, seconds to the first content chunk, the SDK's error)."""
    text, headers, first, error = "", {}, None, None
    start = time.monotonic()
    try:
        with openai_client(envoy).chat.completions.create(model="vm", stream=True, messages=CHAT) as s:
            headers = dict(s.response.headers)
            for chunk in s:
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.monotonic() - start
                    text += chunk.choices[0].delta.content
    except openai.APIError as e:
        error = e
    return text, headers, first, error


def served(provider) -> list[str]:
    """The model each request to this provider named, in order; every one passed the strict
    check (its Host, path and key)."""
    requests_seen = provider.requests()
    assert all(r.get("strict_status") is None for r in requests_seen), requests_seen
    return [json.loads(r.get("body") or "{}").get("model") for r in requests_seen]


def test_retries_then_a_fallback_each_rewritten_for_its_target(stack):
    a = provider(stack, "a", fail_status=503)
    b = provider(stack, "b", output_tokens=5)
    e = envoy(stack, [model("a"), model("b")],
              vm([{"target": "a", "retry_config": {"attempts": 1, "delay": 10}}, {"target": "b"}]))
    text, headers, first, error = stream(e)
    assert error is None and text, error
    assert headers.get("x-switchboard-resolved-model") == "b"
    # a got the attempt and its retry, b the fallback: each with its own key, Host and model.
    assert served(a) == ["gpt-a", "gpt-a"] and served(b) == ["gpt-b"]
    if BUILD == "wasm":
        # Through the router: the attempts left by the router-path copies of the clusters.
        assert (e.stat("cluster.a--router.upstream_rq_total"), e.stat("cluster.b--router.upstream_rq_total")) == (2, 1)
    assert counter(e, "retries", "a", "status") == 1
    assert counter(e, "fallbacks", "a", "status") == 1


def test_an_error_before_content_falls_back_and_counts_against_the_target(stack):
    a = provider(stack, "a", stream_fault="error-before-content")
    b = provider(stack, "b", output_tokens=5)
    e = envoy(stack, [model("a"), model("b")], vm([{"target": "a"}, {"target": "b"}]))
    text, headers, _, error = stream(e)
    assert error is None and text
    assert headers.get("x-switchboard-resolved-model") == "b"
    assert served(a) == ["gpt-a"] and served(b) == ["gpt-b"]
    assert counter(e, "stream_failed", "a", "error_event") == 1


def test_a_refused_connection_moves_on_and_marks_the_target_down(stack):
    b = provider(stack, "b", output_tokens=5)
    dead = free_port()  # nothing listens there
    models = [model("a", "dead"), model("b")]
    e = stack.envoy({"models": models, "virtual_models": [vm([{"target": "a"}, {"target": "b"}])]},
                    router_path=True, extra_clusters={"dead": dead})
    text, headers, _, error = stream(e)
    assert error is None and text
    assert headers.get("x-switchboard-resolved-model") == "b"
    # The native module's own stream to a refused port ends in Envoy's local 503 (a status).
    reason = "status" if BUILD == "native" else "connect_failure"
    assert counter(e, "fallbacks", "a", reason) == 1


def test_fallback_timeout_bounds_the_first_event_not_the_answer(stack):
    provider(stack, "a", ttft_ms=3000, output_tokens=3)
    b = provider(stack, "b", ttft_ms=100, token_delay_ms=300, output_tokens=6)
    e = envoy(stack, [model("a"), model("b")],
              vm([{"target": "a"}, {"target": "b"}], fallback_timeout_ms=600))
    start = time.monotonic()
    text, headers, first, error = stream(e)
    whole = time.monotonic() - start
    assert error is None and headers.get("x-switchboard-resolved-model") == "b"
    assert first < 1.5, first
    assert counter(e, "fallbacks", "a", "timeout") == 1
    # b's answer takes ~1.6 s after its first token: more than fallback_timeout_ms, not cut.
    assert whole > 1.5 and len(b.requests()) == 1


def test_a_fallback_streams_as_it_arrives(stack, figure):
    """A 503, then a fallback streaming 20 chunks 250 ms apart: the first content chunk comes
    within 1.2 x (the fallback's own time to it + the failed attempt's time), and
    `fallback_timeout_ms` 1000 bounds only the time to the first event, not the 5 s answer. On
    the native build every attempt is a module stream: the same bound holds."""
    provider(stack, "a", fail_status=503)
    provider(stack, "b", ttft_ms=250, token_delay_ms=250, output_tokens=20)
    both = envoy(stack, [model("a"), model("b")], vm([{"target": "a"}, {"target": "b"}], fallback_timeout_ms=1000))
    only_a = envoy(stack, [model("a")], vm([{"target": "a"}]))
    only_b = envoy(stack, [model("b")], vm([{"target": "b"}]))

    start = time.monotonic()
    _, _, _, error = stream(only_a)
    failed_attempt = time.monotonic() - start
    assert isinstance(error, openai.APIStatusError) and error.status_code == 503

    def timed(e) -> tuple[float, float, int]:
        start = time.monotonic()
        first, chunks = None, 0
        with openai_client(e).chat.completions.create(model="vm", stream=True, messages=CHAT) as s:
            for chunk in s:
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.monotonic() - start
                    chunks += 1
        return first, time.monotonic() - start, chunks

    own_first, _, _ = timed(only_b)
    first, whole, chunks = timed(both)
    assert chunks == 20, "the fallback was not abandoned at fallback_timeout_ms"
    assert whole >= 4.5, whole
    assert first <= 1.2 * (own_first + failed_attempt), (first, own_first, failed_attempt)
    build = ".wasm, router path" if BUILD == "wasm" else "native, module streams"
    figure(f"{build}: first content chunk", round(first * 1000), "ms")
    figure(f"{build}: the fallback's own first chunk", round(own_first * 1000), "ms")
    figure(f"{build}: the failed attempt", round(failed_attempt * 1000), "ms")
    figure(f"{build}: whole answer", round(whole * 1000), "ms")


def test_a_request_that_does_not_stream_keeps_the_call_out_path(stack):
    a = provider(stack, "a", fail_status=503)
    b = provider(stack, "b", output_tokens=3)
    e = envoy(stack, [model("a"), model("b")], vm([{"target": "a"}, {"target": "b"}]))
    r = requests.post(f"{e.url}/v1/chat/completions", timeout=10,
                      json={"model": "vm", "messages": CHAT})
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b"
    assert len(a.requests()) == 1 and len(b.requests()) == 1


def test_two_requests_with_one_request_id_never_share_their_attempts(stack):
    """Envoy keeps a client's `x-request-id`: a second request with the id of one in flight takes
    the call-out path, so each retry and fallback is built from its own request."""
    provider(stack, "a", fail_status=503)
    b = provider(stack, "b", ttft_ms=200, token_delay_ms=100, output_tokens=5)
    e = stack.envoy({"models": [model("a"), model("b")],
                     "virtual_models": [vm([{"target": "a"}, {"target": "b"}])]},
                    router_path=True, concurrency=1)

    def ask(prompt: str) -> requests.Response:
        return requests.post(f"{e.url}/v1/chat/completions", stream=True, timeout=20,
                             headers={"x-request-id": "one-id"},
                             json={"model": "vm", "stream": True,
                                   "messages": [{"role": "user", "content": prompt}]})

    first = ask("first prompt")
    second = ask("second prompt")  # sent while the first still streams
    for r in (first, second):
        assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "b"
        assert b"[DONE]" in b"".join(r.iter_content(chunk_size=None))
    prompts = sorted(json.loads(q["body"])["messages"][0]["content"] for q in b.requests())
    assert prompts == ["first prompt", "second prompt"]
    assert served(b) == ["gpt-b", "gpt-b"]
