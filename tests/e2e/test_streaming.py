"""A streaming answer stays streaming through Envoy and the filter."""

import time

import anthropic
import openai

from configs import SECONDARY, VIRTUAL
from test_rewrite import only_target

TOKENS = 6
DELAY_MS = 150


def test_streaming_chat_arrives_as_separate_sse_chunks(stack):
    stack.provider("openai_main")
    stack.provider("azure_east", token_delay_ms=DELAY_MS, output_tokens=TOKENS)
    envoy = stack.envoy(only_target(SECONDARY))
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk-test", max_retries=0)

    start = time.monotonic()
    arrivals, text, usage = [], "", None
    with client.chat.completions.create(model=VIRTUAL, stream=True, stream_options={"include_usage": True},
                                        messages=[{"role": "user", "content": "count"}]) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic() - start)
                text += chunk.choices[0].delta.content
                assert chunk.model == "gpt-4o-2024-08-06"
            if chunk.usage:
                usage = chunk.usage
        resolved = stream.response.headers["x-switchboard-resolved-model"]

    assert resolved == SECONDARY
    assert len(arrivals) == TOKENS, arrivals
    assert usage is not None and usage.completion_tokens == TOKENS
    # One blob would arrive all at once; a stream spreads over the provider's delays.
    spread = arrivals[-1] - arrivals[0]
    assert spread >= (TOKENS - 1) * DELAY_MS / 1000 * 0.8, arrivals
    assert arrivals[0] < arrivals[-1] - 0.5, "the first token must not wait for the last"


def test_anthropic_messages_stream_through_a_virtual_model(stack):
    stack.provider("claude", token_delay_ms=100, output_tokens=4)
    config = {
        "models": [{"name": "anthropic/claude", "cluster": "claude", "model": "claude-sonnet-4-0",
                    "provider": "anthropic", "visibility": "internal", "headers": {"x-api-key": "sk-ant"}}],
        "virtual_models": [{"name": "team/claude", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "anthropic/claude", "weight": 100}]}}],
    }
    envoy = stack.envoy(config)
    client = anthropic.Anthropic(base_url=envoy.url, api_key="client", max_retries=0)
    # The SDK's first stream builds its event models as the first events arrive (~0.1 s of
    # client CPU, in either build), which bunches the first tokens; time a second stream.
    with client.messages.stream(model="team/claude", max_tokens=50,
                                messages=[{"role": "user", "content": "warm up"}]) as stream:
        stream.get_final_message()
    stack.providers["claude"].clear()

    start = time.monotonic()
    arrivals = []
    with client.messages.stream(model="team/claude", max_tokens=50,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream.text_stream:
            arrivals.append(time.monotonic() - start)
        final = stream.get_final_message()

    assert final.model == "claude-sonnet-4-0"
    assert len(arrivals) == 4
    assert arrivals[-1] - arrivals[0] >= 0.2, arrivals
    [seen] = stack.providers["claude"].requests()
    assert seen["headers"]["x-api-key"] == "sk-ant"
