"""A streamed answer that fails: before its first content it falls back like a failed status
(the commit point); after it, it ends with an error event in the client's API shape.

The mock provider produces each fault (`stream_fault`): an error event before content, a
`response.failed` before output, Anthropic's `event: error` before content, an error event, a
line that is not an event, a stall or a cut after content. The real OpenAI and Anthropic SDKs
read the answers. What differs by build is what Envoy lets a filter do: the native module
forwards every attempt of a streaming request itself, so a fallback streams, a stall ends after
`stream_idle_timeout_ms` and a reset ends with an error event; on the `.wasm` a fallback's
answer arrives whole on the call-out path (a proxy-wasm call-out; the router path of
test_router_path.py streams it), and a reset upstream resets the client's stream in Envoy's
router before any filter can write.
"""

import json
import re
import time

import anthropic
import openai
import requests

from harness import BUILD

CHAT = [{"role": "user", "content": "hello"}]
NATIVE = BUILD == "native"


OPENAI_KEY = "sk-gateway-openai"
ANTHROPIC_KEY = "sk-ant-gateway"


def model(name: str, cluster: str, **extra) -> dict:
    return {"name": name, "cluster": cluster, "model": "gpt-4o", "provider": "openai",
            "authority": "api.openai.com", "visibility": "internal",
            "headers": {"authorization": f"Bearer {OPENAI_KEY}"}, **extra}


def claude(name: str, cluster: str) -> dict:
    return {"name": name, "cluster": cluster, "model": "claude-sonnet-4-0", "provider": "anthropic",
            "authority": "api.anthropic.com", "visibility": "internal",
            "headers": {"x-api-key": ANTHROPIC_KEY}}


def openai_provider(stack, name: str, **flags):
    """A mock in OpenAI's strict mode: a wrong Host, path or key fails as the real one would."""
    return stack.provider(name, strict="openai", host_name="api.openai.com", api_key=OPENAI_KEY, **flags)


def anthropic_provider(stack, name: str, **flags):
    return stack.provider(name, strict="anthropic", host_name="api.anthropic.com", api_key=ANTHROPIC_KEY,
                          **flags)


def priority(names: list[str], types=("chat",), **vm_extra) -> dict:
    return {"name": "vm", "model_types": list(types), **vm_extra,
            "routing_config": {"type": "priority-based-routing", "load_balance_targets": [
                {"target": n, "priority": i} for i, n in enumerate(names)]}}


def config(models: list[dict], vm: dict) -> dict:
    return {"models": models, "virtual_models": [vm]}


def counter(envoy, metric: str, target: str, reason: str) -> int:
    """`switchboard.<metric>.reason.<reason>.vm.vm.target.<target>` from /stats (either build)."""
    name = f"switchboard.{metric}.reason.{reason}.vm.vm.target.{target}"
    for line in requests.get(f"http://127.0.0.1:{envoy.admin_port}/stats", timeout=5,
                             params={"filter": re.escape(name) + "$"}).text.splitlines():
        key, _, value = line.partition(": ")
        if key.endswith(name):
            return int(value)
    return 0


def openai_client(envoy) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0, timeout=20)


def chat_stream(envoy) -> tuple[str, str, Exception | None]:
    """Streams a chat answer: (its text, the resolved-model header, the SDK's error if it raised)."""
    text, resolved, error = "", "", None
    try:
        with openai_client(envoy).chat.completions.create(model="vm", stream=True, messages=CHAT) as stream:
            resolved = stream.response.headers.get("x-switchboard-resolved-model", "")
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
    except openai.APIError as e:
        error = e
    return text, resolved, error


def raw_chat_stream(envoy, timeout: float = 20) -> bytes:
    """The raw SSE bytes of a streamed chat answer (until the stream ends or is cut)."""
    body = b""
    try:
        with requests.post(f"{envoy.url}/v1/chat/completions", stream=True, timeout=timeout,
                           json={"model": "vm", "stream": True, "messages": CHAT}) as r:
            for part in r.iter_content(chunk_size=None):
                body += part
    except requests.exceptions.RequestException:
        pass
    return body


# Before the first content: a failed attempt that falls back.

def test_an_error_event_before_content_falls_back_like_a_failed_status(stack):
    a = openai_provider(stack, "a", stream_fault="error-before-content")
    b = openai_provider(stack, "b")
    envoy = stack.envoy(config([model("a", "a"), model("b", "b")], priority(["a", "b"])))

    text, resolved, error = chat_stream(envoy)

    assert error is None, error
    assert resolved == "b" and text, "the fallback answered, and the client never saw a's error"
    assert counter(envoy, "stream_failed", "a", "error_event") == 1
    assert counter(envoy, "fallbacks", "a", "stream_failed") == 1
    sent = a.requests() + b.requests()
    assert len(sent) == 2 and all(q["strict_status"] is None for q in sent), "each attempt as OpenAI takes it"


def test_a_responses_failed_before_output_falls_back(stack):
    openai_provider(stack, "a", stream_fault="error-before-content")
    openai_provider(stack, "b")
    envoy = stack.envoy(config([model("a", "a"), model("b", "b")], priority(["a", "b"], types=("responses",))))

    kinds = []
    with openai_client(envoy).responses.create(model="vm", input="hello", stream=True) as stream:
        for event in stream:
            kinds.append(event.type)

    assert "response.failed" not in kinds, kinds
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds, kinds
    assert counter(envoy, "stream_failed", "a", "error_event") == 1


def test_an_anthropic_error_before_content_falls_back(stack):
    anthropic_provider(stack, "a", stream_fault="error-before-content")
    anthropic_provider(stack, "b")
    envoy = stack.envoy(config([claude("a", "a"), claude("b", "b")], priority(["a", "b"])))
    client = anthropic.Anthropic(base_url=envoy.url, api_key="client", max_retries=0)

    with client.messages.stream(model="vm", max_tokens=50, messages=CHAT) as stream:
        text = "".join(stream.text_stream)
        resolved = stream.response.headers.get("x-switchboard-resolved-model")

    assert text and resolved == "b"
    assert counter(envoy, "stream_failed", "a", "error_event") == 1


def test_with_nothing_left_an_error_before_content_reaches_the_client_in_its_shape(stack):
    openai_provider(stack, "a", stream_fault="error-before-content")
    envoy = stack.envoy(config([model("a", "a")], priority(["a"])))

    _, _, error = chat_stream(envoy)

    assert isinstance(error, openai.APIError) and "injected stream error" in str(error), error
    assert counter(envoy, "stream_failed", "a", "error_event") == 1


# After the first content: the request stays on its target, and the stream ends honestly.

def test_an_error_event_after_content_ends_the_stream_with_that_error(stack):
    openai_provider(stack, "a", stream_fault="error-after-content")
    openai_provider(stack, "b")
    envoy = stack.envoy(config([model("a", "a"), model("b", "b")], priority(["a", "b"])))

    text, resolved, error = chat_stream(envoy)

    assert resolved == "a" and text, "after its first content the request stays on its target"
    assert isinstance(error, openai.APIError), "the SDK raises on the error event"
    assert counter(envoy, "stream_failed", "a", "error_event") == 1
    assert not stack.providers["b"].requests()


def test_a_garbage_line_after_content_ends_with_an_error_event_and_no_done(stack):
    openai_provider(stack, "a", stream_fault="garbage-after-content")
    envoy = stack.envoy(config([model("a", "a")], priority(["a"])))

    body = raw_chat_stream(envoy)

    assert b'"content":"tok1' in body.replace(b" ", b""), body
    events = [e for e in body.split(b"\n\n") if e.strip()]
    last = json.loads(events[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == "stream_malformed", events[-1]
    assert b"[DONE]" not in body and b"this is not an event" not in body, body
    assert counter(envoy, "stream_failed", "a", "malformed") == 1

    _, _, error = chat_stream(envoy)
    assert isinstance(error, openai.APIError), "the SDK raises on the terminal event"


def test_a_garbage_line_ends_a_messages_stream_with_an_error_event(stack):
    anthropic_provider(stack, "a", stream_fault="garbage-after-content")
    envoy = stack.envoy(config([claude("a", "a")], priority(["a"])))
    client = anthropic.Anthropic(base_url=envoy.url, api_key="client", max_retries=0)

    text, error = "", None
    try:
        with client.messages.stream(model="vm", max_tokens=50, messages=CHAT) as stream:
            for part in stream.text_stream:
                text += part
    except anthropic.APIError as e:
        error = e
    assert text and error is not None, "the Anthropic SDK raises on the `event: error`"
    assert counter(envoy, "stream_failed", "a", "malformed") == 1


def test_a_garbage_line_ends_a_responses_stream_with_response_failed(stack):
    openai_provider(stack, "a", stream_fault="garbage-after-content")
    envoy = stack.envoy(config([model("a", "a")], priority(["a"], types=("responses",))))

    kinds = []
    with openai_client(envoy).responses.create(model="vm", input="hello", stream=True) as stream:
        for event in stream:
            kinds.append(event.type)
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.failed", kinds
    assert counter(envoy, "stream_failed", "a", "malformed") == 1


def test_a_stall_after_content(stack):
    """Native: no event for `stream_idle_timeout_ms` ends the stream with an error event. The
    `.wasm` cannot write to the client from a timer: the stall passes and the stream goes on."""
    openai_provider(stack, "a", stream_fault="stall-after-content", stall_ms=3000)
    envoy = stack.envoy(config([model("a", "a")], priority(["a"], stream_idle_timeout_ms=500)))

    start = time.monotonic()
    body = raw_chat_stream(envoy)
    took = time.monotonic() - start

    if NATIVE:
        assert took < 2.5, took
        assert b'"code":"stream_idle"' in body.replace(b" ", b""), body
        assert b"[DONE]" not in body
        assert counter(envoy, "stream_failed", "a", "idle") == 1
    else:
        assert took >= 2.5 and body.rstrip().endswith(b"data: [DONE]"), (took, body[-200:])


def test_a_cut_after_content(stack):
    """Native: the upstream's reset ends the stream with an error event. The `.wasm`: Envoy's
    router resets the client's stream before a filter can write. Both count it against the
    target."""
    openai_provider(stack, "a", stream_fault="cut-after-content")
    envoy = stack.envoy(config([model("a", "a")], priority(["a"])))

    text, _, error = chat_stream(envoy)

    assert text, "the content before the cut arrived"
    assert error is not None, "the client learns the stream failed"
    if NATIVE:
        assert isinstance(error, openai.APIError) and "stream_reset" in str(error.body), error
    deadline = time.monotonic() + 5
    while counter(envoy, "stream_failed", "a", "reset") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # the .wasm counts it when Envoy logs the request, after the reset
    assert counter(envoy, "stream_failed", "a", "reset") == 1


def test_a_client_that_hangs_up_cancels_the_attempt_without_counting_against_the_target(stack):
    openai_provider(stack, "a", token_delay_ms=200, output_tokens=20)
    openai_provider(stack, "b")
    envoy = stack.envoy(config([model("a", "a"), model("b", "b")], priority(["a", "b"])))

    for _ in range(2):
        with requests.post(f"{envoy.url}/v1/chat/completions", stream=True, timeout=10,
                           json={"model": "vm", "stream": True, "messages": CHAT}) as r:
            assert r.headers["x-switchboard-resolved-model"] == "a"
            next(r.iter_content(chunk_size=None))
        # Leaving the `with` closes the connection mid-stream.
    deadline = time.monotonic() + 5
    while envoy.stat("cluster.a.upstream_rq_active") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert envoy.stat("cluster.a.upstream_rq_active") == 0, "the attempt in flight was cancelled"
    assert all(counter(envoy, "stream_failed", "a", r) == 0 for r in ("reset", "idle", "malformed", "error_event"))
    text, resolved, error = chat_stream(envoy)
    assert error is None and resolved == "a", "two clients leaving did not make a unhealthy"
