"""The body is routed on its real top-level `model`, however the prompt is written.

The scan that finds the top-level members skips string contents without decoding them (a SIMD
pass that stops at a quote, a backslash, a control byte or a non-ASCII byte). A prompt with
every JSON escape, multi-byte UTF-8 of every length, `"model"` inside strings and inside a
nested object, in runs longer than the scan's 64-byte steps, must reach the target the real
`model` names, byte for byte but for that name; what JSON refuses (a raw control byte, text
that is not UTF-8) is the client's 400 in OpenAI's shape, and no provider sees it.
"""

from __future__ import annotations

import json

import pytest
import requests

from configs import STRICT, model_swapped

VIRTUAL = "team/scan"
LONG = "plain words of a long prompt, longer than one 64-byte step of the scan, "
ESCAPES = r'\" \\ \/ \b \f \n \r \t \u0000 \u001f \u00e9 \u20AC \ud83d\ude00 \uD83D\uDE00'
UTF8 = "h\u00e9llo w\u00f6rld \u20ac \u2603 \u4e2d\u6587 \U0001d11e \U0001f600"
DECOY = r'\"model\": \"decoy\", {\"model\":\"decoy\"}'


def plugin() -> dict:
    return {
        "models": [{"name": name, "cluster": name, "model": f"model-{name}", "authority": "api.openai.com",
                    "headers": {"authorization": "Bearer sk-gateway"}} for name in ("real", "decoy")],
        "virtual_models": [{"name": VIRTUAL, "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "real", "weight": 100}]}}],
    }


def prompt_body(model_first: bool) -> bytes:
    content = f"{LONG * 2}{ESCAPES} {LONG}{UTF8 * 8} {DECOY} {ESCAPES}{LONG}"
    messages = (f'[{{"role":"system","content":"{LONG}"}},'
                f'{{"role":"user","content":"{content}","model":"decoy"}}]')
    fields = [f'"model" : "{VIRTUAL}"', f'"messages":{messages}',
              '"metadata":{"model":"decoy","note":"\\"model\\":\\"decoy\\""}', '"stream":false']
    if not model_first:
        fields.append(fields.pop(0))
    return ("{" + ",\n ".join(fields) + "}").encode()


@pytest.fixture
def routed(stack):
    real = stack.provider("real", **STRICT)
    decoy = stack.provider("decoy", **STRICT)
    return stack.envoy(plugin()), real, decoy


@pytest.mark.parametrize("model_first", [True, False], ids=["model-first", "model-last"])
def test_every_escape_and_utf8_length_is_skipped_and_the_real_model_routes(routed, model_first):
    envoy, real, decoy = routed
    body = prompt_body(model_first)
    assert json.loads(body)["model"] == VIRTUAL  # the body is valid JSON, as a client sends it

    r = requests.post(f"{envoy.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "real"
    assert decoy.requests() == []
    [seen] = real.requests()
    expected = model_swapped(body, VIRTUAL, "model-real")
    assert seen["body"].encode() == expected


@pytest.mark.parametrize("damage", ["control byte", "broken UTF-8"])
def test_what_json_refuses_in_a_long_string_is_the_clients_400(routed, damage):
    envoy, real, decoy = routed
    body = prompt_body(model_first=False)
    at = body.index(LONG.encode(), body.index(b'"user"')) + 70  # past the first 64-byte step
    bad = b"\x01" if damage == "control byte" else b"\xe2\x82"
    body = body[:at] + bad + body[at:]

    r = requests.post(f"{envoy.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})

    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    if damage == "broken UTF-8":
        assert f"not UTF-8 (byte {at})" in error["message"], error
    else:
        assert "not valid JSON: syntax error at line 1" in error["message"], error
    assert real.requests() == [] and decoy.requests() == []
