"""Requests the filter and a provider could read differently are refused before routing, and the
filter's own errors stay small whatever the client sent.

- An error echoes at most 256 bytes of a client's value, cut on a character boundary, then `…`.
"""

import json

import pytest
import requests

from configs import VIRTUAL, weighted_80_20

UPLOAD_VM = "team/stt"


def assert_refused(stack, r: requests.Response, code: str, *words: str) -> dict:
    """A 400 with `code` whose message holds each of `words`, and no provider saw the request."""
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == code, err
    for word in words:
        assert word in err["message"], err
    for p in stack.providers.values():
        assert p.requests() == [], p.name
    return err


@pytest.fixture
def gateway(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    return stack.envoy(weighted_80_20())


# --- what an error echoes ----------------------------------------------------------------------

# One ASCII letter, then two-byte characters: byte 256 falls inside a character, so the cut
# comes one byte earlier, at 255.
HUGE_MODEL = "a" + "é" * 500_000
ECHOED = HUGE_MODEL.encode()[:255].decode() + "…"


@pytest.mark.parametrize("path, extra", [
    ("/v1/chat/completions", {"messages": []}),
    ("/v1/messages", {"max_tokens": 5, "messages": []}),
])
def test_a_huge_model_name_is_echoed_clipped(stack, gateway, path, extra):
    body = json.dumps({"model": HUGE_MODEL, **extra}, ensure_ascii=False).encode()
    assert len(body) > 1_000_000
    r = requests.post(f"{gateway.url}{path}", data=body, timeout=30,
                      headers={"content-type": "application/json"})
    assert r.status_code == 404, r.text[:500]
    assert len(r.content) < 1024, len(r.content)
    message = r.json()["error"]["message"]
    assert f"`{ECHOED}`" in message, message
    for p in stack.providers.values():
        assert p.requests() == [], p.name
