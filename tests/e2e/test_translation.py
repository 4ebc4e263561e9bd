"""Mixed-vendor virtual models: a request is translated for a target that does not
serve the client's API (`translate`), and its answer back, streamed and not, tool calls included.

The providers are the strict mocks: each validates the body it gets like the real API (unknown
fields, a `system` role inside Anthropic `messages`, a missing `max_tokens`, an orphan
`tool_result` are all refused) and checks its Host, path and key. The clients are the real
OpenAI and Anthropic SDKs."""

import json

import anthropic
import openai
import pytest
import requests

OPENAI_KEY, ANTHROPIC_KEY = "sk-gateway-openai", "sk-ant-gateway"
WEATHER = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                              "parameters": WEATHER}}
MESSAGES_TOOL = {"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def gpt(name: str, cluster: str, provider: str = "openai") -> dict:
    return {"name": name, "cluster": cluster, "model": "gpt-4o", "provider": provider,
            "authority": "api.openai.com", "visibility": "internal",
            "headers": {"authorization": f"Bearer {OPENAI_KEY}"}}


def claude(name: str, cluster: str) -> dict:
    return {"name": name, "cluster": cluster, "model": "claude-sonnet-4-5", "provider": "anthropic",
            "authority": "api.anthropic.com", "visibility": "internal", "max_output_tokens": 2048,
            "headers": {"x-api-key": ANTHROPIC_KEY}}


def vm(targets: list[str], **extra) -> dict:
    return {"name": "vm", "model_types": ["chat"], **extra,
            "routing_config": {"type": "priority-based-routing", "load_balance_targets": [
                {"target": t, "priority": i} for i, t in enumerate(targets)]}}


@pytest.fixture
def gpt_then_claude(stack):
    """OpenAI answering 503, then Anthropic: the OpenAI SDK's request is translated for Claude."""
    stack.provider("openai", strict="openai", host_name="api.openai.com", api_key=OPENAI_KEY, fail_status=503)
    claude_mock = stack.provider("anthropic", strict="anthropic", host_name="api.anthropic.com",
                                 api_key=ANTHROPIC_KEY, output_tokens=4)
    envoy = stack.envoy({"models": [gpt("openai/gpt", "openai"), claude("anthropic/claude", "anthropic")],
                         "virtual_models": [vm(["openai/gpt", "anthropic/claude"])]})
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="client", max_retries=0, timeout=20)
    return envoy, client, claude_mock


def accepted(provider) -> list[dict]:
    """The bodies this provider took (every one passed its strict checks)."""
    seen = provider.requests()
    assert all(r.get("strict_status") is None for r in seen), [r.get("strict_status") for r in seen]
    return [json.loads(r["body"]) for r in seen]


def test_the_openai_sdk_gets_a_chat_completion_from_claude(gpt_then_claude):
    envoy, client, claude_mock = gpt_then_claude
    r = client.chat.completions.with_raw_response.create(model="vm", messages=QUESTION)
    answer = r.parse()
    assert r.headers["x-switchboard-resolved-model"] == "anthropic/claude"
    assert answer.object == "chat.completion" and answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop" and answer.usage.completion_tokens > 0
    body = accepted(claude_mock)[-1]
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 2048
    assert claude_mock.requests()[-1]["path"] == "/v1/messages"


def test_the_openai_sdk_streams_from_claude(gpt_then_claude):
    envoy, client, claude_mock = gpt_then_claude
    text, finish = "", None
    with client.chat.completions.create(model="vm", messages=QUESTION, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        usage = None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
    assert text and finish == "stop" and usage and usage.completion_tokens > 0
    assert accepted(claude_mock)[-1]["stream"] is True


@pytest.mark.parametrize("streamed", [False, True])
def test_a_two_step_tool_call_through_claude(gpt_then_claude, streamed):
    envoy, client, claude_mock = gpt_then_claude

    def ask(messages):
        if not streamed:
            return client.chat.completions.create(model="vm", messages=messages, tools=[CHAT_TOOL]).choices[0].message
        calls, text = {}, ""
        with client.chat.completions.create(model="vm", messages=messages, tools=[CHAT_TOOL], stream=True) as s:
            for chunk in s:
                delta = chunk.choices[0].delta if chunk.choices else None
                for tc in (delta.tool_calls or []) if delta else []:
                    call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += tc.id or ""
                    call["name"] += (tc.function.name or "") if tc.function else ""
                    call["arguments"] += (tc.function.arguments or "") if tc.function else ""
                text += (delta.content or "") if delta else ""
        return {"content": text, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())]}

    first = ask(QUESTION)
    calls = first.tool_calls if not streamed else first["tool_calls"]
    assert len(calls) == 1
    call = calls[0] if streamed else calls[0].model_dump()
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["location"]
    followup = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "18 degrees and sunny"}]
    second = ask(followup)
    text = second.content if not streamed else second["content"]
    assert "18 degrees and sunny" in text
    # Claude got the tool call and its result as tool_use and tool_result blocks (strict checks).
    last = accepted(claude_mock)[-1]["messages"]
    assert any(b.get("type") == "tool_result" for m in last for b in (m["content"] if isinstance(m["content"], list) else []))


def test_a_field_that_cannot_be_translated_is_a_400_in_the_clients_shape(stack):
    stack.provider("anthropic", strict="anthropic", host_name="api.anthropic.com", api_key=ANTHROPIC_KEY)
    envoy = stack.envoy({"models": [claude("anthropic/claude", "anthropic")],
                         "virtual_models": [vm(["anthropic/claude"])]})
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                      json={"model": "vm", "messages": QUESTION, "n": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "`n`" in error["message"] or "'n'" in error["message"] or " n " in error["message"], error
    assert stack.providers["anthropic"].requests() == []


@pytest.fixture
def claude_code_on_vllm(stack):
    """The Anthropic SDK on /v1/messages, a virtual model translating Messages, an
    OpenAI-compatible target (strict: it refuses a body OpenAI would)."""
    vllm = stack.provider("vllm", strict="openai", host_name="vllm.internal", api_key=OPENAI_KEY, output_tokens=4)
    model = {**gpt("vllm/llama", "vllm", provider="openai-compatible"), "authority": "vllm.internal"}
    envoy = stack.envoy({"models": [model], "virtual_models": [
        vm(["vllm/llama"], translate=["chat_completions", "messages"])]})
    return envoy, anthropic.Anthropic(base_url=envoy.url, api_key="client", max_retries=0, timeout=20), vllm


def test_the_anthropic_sdk_gets_a_message_from_an_openai_compatible_server(claude_code_on_vllm):
    envoy, client, vllm = claude_code_on_vllm
    message = client.messages.create(model="vm", max_tokens=256, messages=QUESTION)
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    assert vllm.requests()[-1]["path"] == "/v1/chat/completions"
    assert accepted(vllm)[-1]["model"] == "gpt-4o"


def test_the_anthropic_sdk_streams_a_tool_call_from_an_openai_compatible_server(claude_code_on_vllm):
    envoy, client, vllm = claude_code_on_vllm
    with client.messages.stream(model="vm", max_tokens=256, messages=QUESTION, tools=[MESSAGES_TOOL]) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and uses and uses[0].name == "get_weather"
    assert uses[0].input.get("location")
    plain = client.messages.create(model="vm", max_tokens=256, messages=QUESTION, tools=[MESSAGES_TOOL])
    assert plain.stop_reason == "tool_use" and plain.content[-1].type == "tool_use"
