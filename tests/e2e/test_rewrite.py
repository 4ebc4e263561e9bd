"""The provider receives the request rewritten for the chosen target, and nothing else changes."""

import json

import pytest
import requests

from configs import AZURE_KEY, INTERNAL_KEY, PRIMARY, PUBLIC, SECONDARY, VIRTUAL, model_swapped, weighted_80_20


def only_target(name: str) -> dict:
    """The 80/20 config with all weight on one target, so the target is known."""
    config = weighted_80_20()
    for t in config["virtual_models"][0]["routing_config"]["load_balance_targets"]:
        t["weight"] = 100 if t["target"] == name else 0
    return config


@pytest.mark.parametrize("concurrency", [1, 2])
def test_provider_receives_rewritten_model_and_target_headers(stack, concurrency):
    stack.provider("openai_main")
    azure = stack.provider("azure_east")
    envoy = stack.envoy(only_target(SECONDARY), concurrency=concurrency)
    # Odd spacing, unicode, escapes and a nested "model" must all survive byte for byte; the
    # shorter name is padded with spaces, so the length stays.
    body = ('{ "messages" : [{"role":"user","content":"h\\u00e9llo \\"model\\": \u00fc"}],\n'
            f'  "model"  :  "{VIRTUAL}", "metadata": {{"model": "keep-me"}}, "temperature": 0.25 }}')

    r = requests.post(f"{envoy.url}/v1/chat/completions", data=body.encode(), timeout=10,
                      headers={"content-type": "application/json", "authorization": "Bearer client-key",
                               "x-client": "kept"})

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == SECONDARY
    assert r.json()["model"] == "gpt-4o-2024-08-06"
    [seen] = azure.requests()
    expected = model_swapped(body.encode(), VIRTUAL, "gpt-4o-2024-08-06")
    assert seen["body"].encode() == expected
    assert int(seen["headers"]["content-length"]) == len(expected)
    assert seen["headers"]["api-key"] == AZURE_KEY
    assert seen["headers"]["x-target"] == "azure"
    # Headers the target does not set pass through; the internal cluster header does not, and
    # neither does the client's credential, since the target brings its own (api-key).
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["x-client"] == "kept"
    assert "x-switchboard-cluster" not in seen["headers"]


def test_target_headers_replace_client_values(stack):
    main = stack.provider("openai_main")
    stack.provider("azure_east")
    envoy = stack.envoy(only_target(PRIMARY))

    r = requests.post(f"{envoy.url}/chat/completions", timeout=10,
                      headers={"authorization": "Bearer client-key"},
                      json={"model": VIRTUAL, "messages": [{"role": "user", "content": "hi"}]})

    assert r.status_code == 200, r.text
    [seen] = main.requests()
    assert seen["headers"]["authorization"] == INTERNAL_KEY
    assert json.loads(seen["body"])["model"] == "gpt-4o"
    # A client that leaves out /v1 still reaches the provider's canonical path.
    assert seen["path"] == "/v1/chat/completions"


def test_public_catalog_model_routes_straight_to_it(stack):
    main = stack.provider("openai_main")
    azure = stack.provider("azure_east")
    envoy = stack.envoy(weighted_80_20())

    for _ in range(20):
        r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                          json={"model": PUBLIC, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        assert r.headers["x-switchboard-resolved-model"] == PUBLIC
    assert [json.loads(s["body"])["model"] for s in main.requests()] == ["gpt-4o-mini"] * 20
    assert azure.requests() == []
    # A public model without headers leaves the client's credentials alone.
    assert "authorization" not in main.requests()[0]["headers"]


def test_a_longer_target_name_gets_a_new_content_length(stack):
    azure = stack.provider("azure_east")
    stack.provider("openai_main")
    config = only_target(SECONDARY)
    config["virtual_models"][0]["name"] = "vm"
    envoy = stack.envoy(config)
    body = b'{"model": "vm", "messages": [{"role": "user", "content": "hi"}]}'

    r = requests.post(f"{envoy.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})

    assert r.status_code == 200, r.text
    [seen] = azure.requests()
    expected = body.replace(b'"vm"', b'"gpt-4o-2024-08-06"')
    assert seen["body"].encode() == expected
    assert int(seen["headers"]["content-length"]) == len(expected) == len(body) + 15


@pytest.mark.parametrize("virtual", [VIRTUAL, "vm"], ids=["shorter-target-name", "longer-target-name"])
def test_a_long_prompt_before_the_model_is_forwarded_byte_for_byte(stack, virtual):
    # The OpenAI SDK puts `messages` before `model`, so the whole prompt is in the edited head,
    # which goes back to Envoy in 16 KiB parts: multi-byte characters straddle the cuts.
    azure = stack.provider("azure_east")
    stack.provider("openai_main")
    config = only_target(SECONDARY)
    config["virtual_models"][0]["name"] = virtual
    envoy = stack.envoy(config)
    prompt = "".join(f"{i} h\u00e9llo w\u00f6rld \u2603 " for i in range(20_000))
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "model": virtual, "n": 1},
                      ensure_ascii=False).encode()
    assert len(body) > 300_000

    r = requests.post(f"{envoy.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})

    assert r.status_code == 200, r.text
    [seen] = azure.requests()
    expected = model_swapped(body, virtual, "gpt-4o-2024-08-06")
    assert seen["body"].encode() == expected
    assert int(seen["headers"]["content-length"]) == len(expected)
