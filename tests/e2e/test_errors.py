"""Bad requests get OpenAI-style JSON errors with the right status, and reach no provider."""

import http.client
import json

import openai
import pytest
import requests

from configs import PRIMARY, VIRTUAL, model_swapped, weighted_80_20

LIMIT = 4096


@pytest.fixture
def gateway(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    return stack.envoy(weighted_80_20(max_request_body_bytes=LIMIT))


def assert_error(r: requests.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] == code
    assert err["type"] in ("invalid_request_error", "server_error")
    assert err["message"]
    return err


def assert_no_provider_saw_anything(stack):
    for p in stack.providers.values():
        assert p.requests() == [], p.name


@pytest.mark.parametrize("body, status, code", [
    (json.dumps({"model": "nobody/knows", "messages": []}), 404, "model_not_found"),
    (json.dumps({"model": PRIMARY, "messages": []}), 404, "model_not_found"),
    (json.dumps({"messages": []}), 400, "missing_model"),
    (json.dumps({"model": None, "messages": []}), 400, "missing_model"),
    (json.dumps({"model": 42, "messages": []}), 400, "invalid_model"),
    (json.dumps({"model": ["a"], "messages": []}), 400, "invalid_model"),
    ('{"model": "x", "messages": [', 400, "invalid_json"),
    ('{"model": "x",}', 400, "invalid_json"),
    ('[{"model": "x"}]', 400, "invalid_json"),
    ('not json at all', 400, "invalid_json"),
    (f'{{"model": "{VIRTUAL}", "model": "{PRIMARY}"}}', 400, "invalid_json"),
    (b'{"model": "\xff\xfe"}', 400, "invalid_json"),
])
def test_bad_request_gets_openai_style_error(stack, gateway, body, status, code):
    r = requests.post(f"{gateway.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(r, status, code)
    assert_no_provider_saw_anything(stack)


def test_internal_model_looks_exactly_like_an_unknown_one(gateway):
    internal = requests.post(f"{gateway.url}/v1/chat/completions", json={"model": PRIMARY}, timeout=10)
    unknown = requests.post(f"{gateway.url}/v1/chat/completions", json={"model": "x/y"}, timeout=10)
    assert internal.status_code == unknown.status_code == 404
    assert internal.json()["error"]["message"].replace(PRIMARY, "x/y") == unknown.json()["error"]["message"]


def test_sdk_raises_typed_errors(gateway):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk", max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nobody/knows", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model=VIRTUAL + "-typo", input="x")
    assert "production-chat-typo" in e.value.message


def test_empty_body_is_a_400(stack, gateway):
    r = requests.post(f"{gateway.url}/v1/chat/completions", timeout=10)
    assert_error(r, 400, "missing_body")
    assert_no_provider_saw_anything(stack)


def test_body_over_the_limit_is_a_413_with_content_length(stack, gateway):
    big = json.dumps({"model": VIRTUAL, "messages": [{"role": "user", "content": "x" * LIMIT}]})
    r = requests.post(f"{gateway.url}/v1/chat/completions", data=big, timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(r, 413, "request_too_large")
    assert_no_provider_saw_anything(stack)


def test_body_over_the_limit_is_a_413_when_chunked(stack, gateway):
    def chunks():
        yield b'{"model": "' + VIRTUAL.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(LIMIT // 512 + 2):
            yield b"y" * 512
        yield b'"}]}'

    r = requests.post(f"{gateway.url}/v1/chat/completions", data=chunks(), timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(r, 413, "request_too_large")
    assert_no_provider_saw_anything(stack)


def test_body_just_under_the_limit_is_routed(gateway):
    body = {"model": VIRTUAL, "messages": [{"role": "user", "content": ""}]}
    body["messages"][0]["content"] = "z" * (LIMIT - len(json.dumps(body)))
    data = json.dumps(body)
    assert len(data) == LIMIT
    r = requests.post(f"{gateway.url}/v1/chat/completions", data=data, timeout=10,
                      headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_virtual_model_on_an_endpoint_outside_its_model_types_is_a_400(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    config = weighted_80_20()
    config["virtual_models"][0]["model_types"] = ["embedding"]
    envoy = stack.envoy(config)
    r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": VIRTUAL}, timeout=10)
    err = assert_error(r, 400, "unsupported_endpoint")
    assert "/v1/chat/completions" in err["message"]
    assert_no_provider_saw_anything(stack)


def test_hostile_input_never_breaks_the_vm(stack):
    """Garbage bodies and odd headers get errors; every worker keeps serving afterwards."""
    stack.provider("openai_main")
    stack.provider("azure_east")
    gateway = stack.envoy(weighted_80_20())
    nasty = [
        b"\x00" * 100,
        b"{" * 50_000,
        b'{"model": "' + b"\\u" * 1000 + b'"}',
        b'{"model": "' + VIRTUAL.encode() + b'", "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
        b'{"model": "' + VIRTUAL.encode() + b'", "n": 1e999999}',
        bytes(range(256)),
    ]
    replies = [requests.post(f"{gateway.url}/v1/chat/completions", data=body, timeout=10) for body in nasty]
    assert [r.status_code for r in replies] == [400] * 6
    # Deep nesting and a huge number are valid JSON in fields the filter skips: they are
    # routed, and the mock provider's own parser refuses them. The rest are the filter's errors.
    routed = ["x-switchboard-resolved-model" in r.headers for r in replies]
    assert routed == [False, False, False, True, True, False], routed
    # A header value that is not UTF-8 (obs-text) must not abort the VM.
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("x-weird", b"\xff\xfe")
    conn.putheader("content-type", "application/json")
    body = json.dumps({"model": VIRTUAL, "messages": []}).encode()
    conn.putheader("content-length", str(len(body)))
    conn.endheaders(body)
    assert conn.getresponse().status == 200
    conn.close()
    # Fresh connections land on both workers; each must still route.
    for _ in range(40):
        r = requests.post(f"{gateway.url}/v1/chat/completions", timeout=10,
                          json={"model": VIRTUAL, "messages": [{"role": "user", "content": "ok"}]})
        assert r.status_code == 200, r.text


def test_chunked_body_under_the_limit_is_rewritten_exactly(stack, gateway):
    pieces = [b'{"messages": [{"role": "user", "content": "', b"x" * 1000, b'"}], ',
              b'"model": "' + VIRTUAL.encode() + b'", "n": 1}']

    r = requests.post(f"{gateway.url}/v1/chat/completions", data=iter(pieces), timeout=10,
                      headers={"content-type": "application/json"})

    assert r.status_code == 200, r.text
    seen = [x for p in stack.providers.values() for x in p.requests()]
    assert len(seen) == 1
    target_model = {"openai_main": "gpt-4o", "azure_east": "gpt-4o-2024-08-06"}[r.headers["x-mock-provider"]]
    expected = model_swapped(b"".join(pieces), VIRTUAL, target_model)
    assert seen[0]["body"].encode() == expected
    assert int(seen[0]["headers"]["content-length"]) == len(expected)
    assert "transfer-encoding" not in seen[0]["headers"]
