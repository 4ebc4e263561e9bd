"""Every endpoint of this slice routes a virtual model, driven by the real SDKs."""

import json

import anthropic
import openai

from configs import PRIMARY, VIRTUAL
from test_rewrite import only_target


def test_openai_endpoints_route_through_the_virtual_model(stack):
    main = stack.provider("openai_main")
    stack.provider("azure_east")
    envoy = stack.envoy(only_target(PRIMARY))
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)

    chat = client.chat.completions.with_raw_response.create(
        model=VIRTUAL, messages=[{"role": "user", "content": "hi"}])
    completion = client.completions.create(model=VIRTUAL, prompt="say hi")
    embedding = client.embeddings.create(model=VIRTUAL, input=["a", "b"])
    response = client.responses.create(model=VIRTUAL, input="hi")

    assert chat.headers["x-switchboard-resolved-model"] == PRIMARY
    assert chat.parse().choices[0].message.content
    assert completion.choices[0].text
    assert len(embedding.data) == 2
    assert response.output_text
    seen = main.requests()
    assert [s["path"] for s in seen] == ["/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                         "/v1/responses"]
    assert {json.loads(s["body"])["model"] for s in seen} == {"gpt-4o"}


def test_anthropic_messages_route_through_a_chat_virtual_model(stack):
    claude = stack.provider("claude")
    config = {
        "models": [{"name": "anthropic/claude", "cluster": "claude", "model": "claude-sonnet-4-0",
                    "provider": "anthropic", "visibility": "internal"}],
        "virtual_models": [{"name": "team/claude", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "anthropic/claude", "weight": 100}]}}],
    }
    envoy = stack.envoy(config)
    client = anthropic.Anthropic(base_url=envoy.url, api_key="sk-ant", max_retries=0)

    message = client.messages.create(model="team/claude", max_tokens=20,
                                     messages=[{"role": "user", "content": "hi"}])

    assert message.model == "claude-sonnet-4-0"
    assert message.content[0].text
    [seen] = claude.requests()
    assert seen["path"] == "/v1/messages"
    assert json.loads(seen["body"])["model"] == "claude-sonnet-4-0"
