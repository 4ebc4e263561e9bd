"""The strict mock providers as the translation meets them, without Envoy: a strict
Anthropic refuses a Messages body the real API refuses (unknown fields, a `system` role in
`messages`, no `max_tokens`, an orphan `tool_result`, a first turn not the user's, a content
block of another API) and a strict OpenAI a Chat Completions body (unknown fields, a `tool`
message answering no call), each with a 400 in that API's own error shape; and a chat with
tools answers with a tool call, plain and streamed, then quotes the tool's result."""

from __future__ import annotations

import copy
import json

import pytest
import requests

from harness import Provider

pytestmark = pytest.mark.build_independent

ANTHROPIC_HOST, ANTHROPIC_KEY = "api.anthropic.com", "sk-ant-test"
OPENAI_HOST, OPENAI_KEY = "api.openai.com", "sk-openai-test"

# Anthropic's tool use guide: the weather tool and the question that calls it.
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location", "unit"],
}
QUESTION = "What's the weather like in San Francisco?"
MESSAGES_ASK = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "tools": [{"name": "get_weather", "description": "Get the current weather in a given location",
               "input_schema": WEATHER_SCHEMA}],
    "messages": [{"role": "user", "content": QUESTION}],
}
CHAT_ASK = {
    "model": "gpt-4.1",
    "messages": [{"role": "user", "content": QUESTION}],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a given location",
        "parameters": WEATHER_SCHEMA}}],
}
ARGUMENTS = {"location": "x", "unit": "celsius"}


def anthropic(stack) -> Provider:
    return stack.provider("anthropic", strict="anthropic", host_name=ANTHROPIC_HOST, api_key=ANTHROPIC_KEY)


def openai(stack) -> Provider:
    return stack.provider("openai", strict="openai", host_name=OPENAI_HOST, api_key=OPENAI_KEY)


def post_messages(p: Provider, body: dict, **kw) -> requests.Response:
    headers = {"host": ANTHROPIC_HOST, "x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
    return requests.post(f"{p.url}/v1/messages", json=body, headers=headers, timeout=10, **kw)


def post_chat(p: Provider, body: dict, **kw) -> requests.Response:
    headers = {"host": OPENAI_HOST, "authorization": f"Bearer {OPENAI_KEY}"}
    return requests.post(f"{p.url}/v1/chat/completions", json=body, headers=headers, timeout=10, **kw)


def edited(body: dict, edit) -> dict:
    body = copy.deepcopy(body)
    edit(body)
    return body


def anthropic_events(text: str) -> list[tuple[str, dict]]:
    """An Anthropic event stream as (event name, data) pairs."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"], block
        events.append((lines["event"], data))
    return events


def openai_chunks(text: str) -> list[dict]:
    """A chat completions stream's chunks; it must end with [DONE]."""
    datas = [block.removeprefix("data: ") for block in text.strip().split("\n\n")]
    assert datas[-1] == "[DONE]", text
    return [json.loads(d) for d in datas[:-1]]


def tool_use_of(answer: dict) -> dict:
    [block] = answer["content"]
    assert block["type"] == "tool_use"
    return block


def assistant_turn(call: dict) -> dict:
    """The assistant's tool call as the client sends it back."""
    return {"role": "assistant", "content": [call]}


MESSAGES_REFUSALS = [
    ("unknown field", lambda b: b.update(n=1), "n: Extra inputs are not permitted"),
    ("OpenAI's stop", lambda b: b.update(stop=["\n"]), "stop: Extra inputs are not permitted"),
    ("no max_tokens", lambda b: b.pop("max_tokens"), "max_tokens: Field required"),
    ("system role", lambda b: b["messages"].insert(0, {"role": "system", "content": "Be brief."}),
     "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` "
     "parameter, not \"system\" as an input message role."),
    ("first turn not the user's", lambda b: b["messages"].insert(0, {"role": "assistant", "content": "Hi."}),
     "messages: first message must use the \"user\" role"),
    ("orphan tool_result", lambda b: b["messages"].append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "15"}]}),
     "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_nowhere. Each "
     "`tool_result` block must have a corresponding `tool_use` block in the previous message."),
    ("an OpenAI content part", lambda b: b["messages"][0].update(
        content=[{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]),
     "messages.0.content.0: Input tag 'image_url' found using 'type' does not match any of the expected tags: "),
    ("a field on a message", lambda b: b["messages"][0].update(name="alice"),
     "messages.0.name: Extra inputs are not permitted"),
    ("an OpenAI tool", lambda b: b.update(tools=CHAT_ASK["tools"]),
     "tools.0: Input tag 'function' found using 'type' does not match any of the expected tags: "),
    ("OpenAI's tool_choice", lambda b: b.update(tool_choice="required"),
     "tool_choice: Input should be a valid dictionary or object to extract fields from"),
]


@pytest.mark.parametrize("edit,message", [c[1:] for c in MESSAGES_REFUSALS], ids=[c[0] for c in MESSAGES_REFUSALS])
def test_strict_anthropic_refuses_what_the_messages_api_refuses(stack, edit, message):
    p = anthropic(stack)
    r = post_messages(p, edited(MESSAGES_ASK, edit))
    assert r.status_code == 400, r.text
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(message), body
    assert post_messages(p, MESSAGES_ASK).status_code == 200
    assert [r["strict_status"] for r in p.requests()] == [400, None]


def test_body_refusals_come_before_injected_failures_and_only_in_strict_mode(stack):
    p = anthropic(stack)
    p.configure(fail_status=503)
    no_max = edited(MESSAGES_ASK, lambda b: b.pop("max_tokens"))
    assert post_messages(p, no_max).status_code == 400
    assert post_messages(p, MESSAGES_ASK).status_code == 503
    lenient = stack.provider("lenient")
    r = requests.post(f"{lenient.url}/v1/messages", json={**no_max, "n": 1}, timeout=10)
    assert r.status_code == 200, r.text


def test_strict_openai_refuses_unknown_fields_and_orphan_tool_messages(stack):
    p = openai(stack)

    def refusal(body: dict) -> dict:
        r = post_chat(p, body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        return error

    assert refusal({**CHAT_ASK, "max_tokens_to_sample": 5}) == {
        "message": "Unrecognized request argument supplied: max_tokens_to_sample",
        "type": "invalid_request_error", "param": None, "code": None}
    assert refusal({**CHAT_ASK, "system": "Be brief."})["message"] == \
        "Unrecognized request argument supplied: system"
    orphan = edited(CHAT_ASK, lambda b: b["messages"].append(
        {"role": "tool", "tool_call_id": "call_nowhere", "content": "15"}))
    error = refusal(orphan)
    assert error["message"] == ("Invalid parameter: messages with role 'tool' must be a response to a "
                                "preceeding message with 'tool_calls'.")
    assert error["param"] == "messages.[1].role"
    wrong_id = edited(CHAT_ASK, lambda b: b["messages"].extend([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "15"}]))
    assert refusal(wrong_id)["param"] == "messages.[2].tool_call_id"
    anthropic_part = edited(CHAT_ASK, lambda b: b["messages"][0].update(
        content=[{"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]))
    assert refusal(anthropic_part)["param"] == "messages[0].content[0].type"
    assert post_chat(p, CHAT_ASK).status_code == 200
    assert [r["strict_status"] for r in p.requests()] == [400, 400, 400, 400, 400, None]


def test_anthropic_tool_use_then_the_result_plain_and_streamed(stack):
    p = anthropic(stack)
    r = post_messages(p, MESSAGES_ASK)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["stop_reason"] == "tool_use"
    call = tool_use_of(answer)
    assert call["id"].startswith("toolu_") and call["name"] == "get_weather"
    assert call["input"] == ARGUMENTS

    r = post_messages(p, {**MESSAGES_ASK, "stream": True})
    assert r.headers["content-type"] == "text/event-stream"
    events = anthropic_events(r.text)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    block = events[1][1]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {})
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert len(deltas) > 1 and all(d["type"] == "input_json_delta" for d in deltas)
    assert json.loads("".join(d["partial_json"] for d in deltas)) == ARGUMENTS
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

    # Step two: the client runs the tool and sends its result back.
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": block["id"], "content": "15 degrees"}]}
    follow_up = {**MESSAGES_ASK, "messages": [*MESSAGES_ASK["messages"], assistant_turn(call), result]}
    r = post_messages(p, follow_up)
    assert r.status_code == 400, "the streamed call's id is not the plain answer's"
    follow_up["messages"][-1]["content"][0]["tool_use_id"] = call["id"]
    r = post_messages(p, follow_up)
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "The tool said: 15 degrees"}]
    assert r.json()["stop_reason"] == "end_turn"
    streamed = anthropic_events(post_messages(p, {**follow_up, "stream": True}).text)
    text = "".join(d["delta"]["text"] for n, d in streamed if n == "content_block_delta")
    assert text == "The tool said: 15 degrees"


def test_openai_tool_call_then_the_result_plain_and_streamed(stack):
    p = openai(stack)
    r = post_chat(p, CHAT_ASK)
    assert r.status_code == 200, r.text
    [choice] = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == ARGUMENTS

    r = post_chat(p, {**CHAT_ASK, "stream": True, "stream_options": {"include_usage": True}})
    chunks = openai_chunks(r.text)
    opening = chunks[0]["choices"][0]["delta"]
    assert opening["role"] == "assistant"
    [first] = opening["tool_calls"]
    assert (first["index"], first["type"], first["function"]) == (
        0, "function", {"name": "get_weather", "arguments": ""})
    fragments = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:]
                 if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert len(fragments) > 1 and all(f["index"] == 0 and "id" not in f for f in fragments)
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == ARGUMENTS
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0

    # Step two: the call goes back with the tool's result.
    follow_up = {**CHAT_ASK, "messages": [
        *CHAT_ASK["messages"], {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "15 degrees"}]}
    r = post_chat(p, follow_up)
    assert r.status_code == 200, r.text
    [choice] = r.json()["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("The tool said: 15 degrees", "stop")
    chunks = openai_chunks(post_chat(p, {**follow_up, "stream": True}).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "The tool said: 15 degrees"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
