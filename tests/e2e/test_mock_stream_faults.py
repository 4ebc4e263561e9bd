"""The mock provider's stream faults as the real SDKs see them, straight at the mock (no Envoy):
each breaks a streamed chat completion, Responses or Messages answer the way that provider's
own in-stream error, garbage, stall or cut would, so tests through Switchboard can rely on
what a client gets without it."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from harness import Provider

pytestmark = pytest.mark.build_independent

MESSAGES = [{"role": "user", "content": "hi"}]


def clients(p: Provider) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    return (openai.OpenAI(base_url=p.url + "/v1", api_key="x", max_retries=0, timeout=10),
            anthropic.Anthropic(base_url=p.url, api_key="x", max_retries=0, timeout=10))


def chat_text(c: openai.OpenAI) -> str:
    chunks = c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)


def messages_text(a: anthropic.Anthropic) -> str:
    with a.messages.stream(model="c", max_tokens=9, messages=MESSAGES) as s:
        return "".join(s.text_stream)


def response_events(c: openai.OpenAI) -> list:
    return list(c.responses.create(model="m", input="hi", stream=True))


def test_error_faults_are_each_apis_own_stream_error(stack):
    p = stack.provider("f", output_tokens=4, stream_fault="error-before-content")
    c, a = clients(p)
    with pytest.raises(openai.APIError, match="injected stream error from f"):
        chat_text(c)
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        messages_text(a)
    events = response_events(c)
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1].response
    assert (failed.status, failed.error.code, failed.output) == ("failed", "insufficient_quota", [])

    p.configure(stream_fault="error-after-content", fault_after_tokens=2)
    with pytest.raises(openai.APIError, match="injected stream error from f"):
        chat_text(c)
    events = response_events(c)
    assert [e.type for e in events][-2:] == ["response.output_text.delta", "error"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "tok1 tok2 "
    assert (events[-1].code, events[-1].sequence_number) == ("server_error", len(events) - 1)
    # A plain answer ignores stream faults.
    r = c.chat.completions.create(model="m", messages=MESSAGES)
    assert r.choices[0].message.content == "tok1 tok2 tok3 tok4 "


def test_garbage_and_stall_leave_the_answer_whole(stack):
    p = stack.provider("g", output_tokens=4, stream_fault="garbage-after-content")
    c, a = clients(p)
    assert chat_text(c) == messages_text(a) == "tok1 tok2 tok3 tok4 "
    assert response_events(c)[-1].type == "response.completed"

    p.configure(stream_fault="stall-after-content", fault_after_tokens=1, stall_ms=400)
    arrivals = []
    start = time.monotonic()
    for ch in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 4
    assert arrivals[1] - arrivals[0] >= 0.38, arrivals
    assert arrivals[0] < arrivals[1] - arrivals[0], "the stall comes after tok1, not before"


def test_cut_after_content_drops_the_connection_after_n_tokens(stack):
    p = stack.provider("x", output_tokens=6, stream_fault="cut-after-content", fault_after_tokens=3)
    c, a = clients(p)
    seen = []
    with pytest.raises(openai.APIConnectionError):
        for ch in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            seen.extend(ch.choices[0].delta.content or "" for _ in ch.choices)
    assert "".join(seen) == "tok1 tok2 tok3 "
    seen, error = [], None
    try:
        with a.messages.stream(model="c", max_tokens=9, messages=MESSAGES) as s:
            seen.extend(s.text_stream)
    except Exception as e:  # the SDK surfaces a cut stream as an httpx or anthropic error
        error = e
    assert error is not None, "a cut stream must not end cleanly"
    assert "".join(seen) == "tok1 tok2 tok3 "
