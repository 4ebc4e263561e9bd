"""Requests the filter and a provider could read differently are refused before routing, and the
filter's own errors stay small whatever the client sent.

- A `multipart/form-data` upload is read by RFC 2045/2046 rules (quoted parameters, one
  `boundary`, delimiters at the start of a line); anything a Python-style parser (the last
  parameter wins) could read otherwise is a 400.
- A JSON body with any top-level key twice is a 400 naming the key: a last-key-wins provider
  would read another `stream` (or `model`) than the filter routed on.
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


# --- multipart/form-data uploads (RFC 2045 §5.1, RFC 2046 §5.1.1) -----------------------------

@pytest.fixture
def uploads(stack):
    stack.provider("audio")
    return stack.envoy({
        "models": [{"name": "openai/whisper", "cluster": "audio", "model": "whisper-1"}],
        "virtual_models": [{"name": UPLOAD_VM, "model_types": ["audio_transcription"],
                            "routing_config": {"type": "weight-based-routing",
                                               "load_balance_targets": [{"target": "openai/whisper", "weight": 100}]}}],
    })


def form(boundary: str, *fields: tuple[str, str], preamble: str = "") -> bytes:
    parts = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                    for name, value in fields)
    return f"{preamble}{parts}--{boundary}--\r\n".encode()


def upload(envoy, content_type: str, body: bytes) -> requests.Response:
    return requests.post(f"{envoy.url}/v1/audio/transcriptions", data=body, timeout=10,
                         headers={"content-type": content_type})


def test_a_repeated_boundary_parameter_is_refused(stack, uploads):
    # Read with AAA the body asks for the virtual model; with BBB (a last-wins parser) for
    # the catalog model by name, which the filter would have let through unrouted.
    body = form("AAA", ("model", UPLOAD_VM)) + form("BBB", ("model", "openai/whisper"))
    r = upload(uploads, "multipart/form-data; boundary=AAA; boundary=BBB", body)
    assert_refused(stack, r, "invalid_multipart", "`boundary`", "more than once")


def test_any_repeated_content_type_parameter_is_refused(stack, uploads):
    r = upload(uploads, "multipart/form-data; charset=utf-8; boundary=AAA; CHARSET=latin1",
               form("AAA", ("model", UPLOAD_VM)))
    assert_refused(stack, r, "invalid_multipart", "`charset`", "more than once")


def test_a_quoted_parameter_is_read_whole_as_rfc_2045_says(stack, uploads):
    # The `boundary=AAA` inside the quoted charset is not a parameter: the boundary is BBB.
    body = form("BBB", ("model", UPLOAD_VM), ("language", "en"))
    r = upload(uploads, 'multipart/form-data; charset="x; boundary=AAA"; boundary="BBB"', body)
    assert r.status_code != 400, r.text
    assert r.headers["x-switchboard-resolved-model"] == "openai/whisper"
    [seen] = stack.providers["audio"].requests()
    assert 'name="model"\r\n\r\nwhisper-1\r\n--BBB' in seen["body"]


@pytest.mark.parametrize("content_type, words", [
    ("multipart/form-data; boundary=" + "b" * 71, ("70",)),
    ('multipart/form-data; boundary="a@b"', ("boundary",)),
    ('multipart/form-data; boundary="ab "', ("boundary",)),
    ('multipart/form-data; boundary="a\\b"', ()),
    ('multipart/form-data; boundary="AAA', ()),
    ("multipart/form-data; boundary=", ()),
    ("multipart/form-data; boundary*=utf-8''AAA", ()),
])
def test_a_boundary_outside_rfc_2046_is_refused(stack, uploads, content_type, words):
    boundary = "b" * 71 if "b" * 71 in content_type else "AAA"
    r = upload(uploads, content_type, form(boundary, ("model", UPLOAD_VM)))
    assert_refused(stack, r, "invalid_multipart", *words)


def test_a_boundary_of_70_characters_and_a_preamble_are_fine(stack, uploads):
    boundary = "'()+_,-./:=? " * 5 + "0123z"
    assert len(boundary) == 70
    body = form(boundary, ("model", UPLOAD_VM), preamble="This is a preamble.\r\n")
    r = upload(uploads, f'multipart/form-data; boundary="{boundary}"', body)
    assert r.headers["x-switchboard-resolved-model"] == "openai/whisper", r.text


def test_a_first_delimiter_in_the_middle_of_a_line_is_refused(stack, uploads):
    # RFC 2046 reads `x--AAA` as preamble: the provider would see only `other`, while the
    # filter (old) routed on the `model` it found after it.
    body = b"x" + form("AAA", ("model", UPLOAD_VM), ("other", "v"))
    r = upload(uploads, "multipart/form-data; boundary=AAA", body)
    assert_refused(stack, r, "invalid_multipart", "start of a line")


def test_a_line_that_starts_with_the_boundary_but_goes_on_is_refused(stack, uploads):
    # `--AAAx` is no delimiter to RFC 2046 parsers: to them the `model` below is part of the
    # `other` field's value and the upload has no model; the filter (old) routed on it.
    hidden = f'v\r\n--AAAx\r\nContent-Disposition: form-data; name="model"\r\n\r\n{UPLOAD_VM}'
    body = form("AAA", ("other", hidden))
    r = upload(uploads, "multipart/form-data; boundary=AAA", body)
    assert_refused(stack, r, "invalid_multipart", "delimiter")


# --- duplicate top-level keys (RFC 8259 §4, RFC 7493 §2.3) -------------------------------------

@pytest.mark.parametrize("body, key", [
    (f'{{"model": "{VIRTUAL}", "messages": [], "stream": false, "stream": true}}', "stream"),
    (f'{{"model": "{VIRTUAL}", "messages": [], "stream": false, "str\\u0065am": true}}', "stream"),
    (f'{{"model": null, "model": "{VIRTUAL}", "messages": []}}', "model"),
    (f'{{"model": "{VIRTUAL}", "messages": [], "messages": [], "n": 1}}', "messages"),
])
def test_a_duplicated_top_level_key_is_refused_naming_it(stack, gateway, body, key):
    r = requests.post(f"{gateway.url}/v1/chat/completions", data=body, timeout=10,
                      headers={"content-type": "application/json"})
    err = assert_refused(stack, r, "invalid_json", f"`{key}`", "more than once")
    assert err["param"] == key


def test_a_duplicated_key_on_messages_gets_anthropics_shape(stack, gateway):
    body = '{"model": "x", "max_tokens": 5, "stream": false, "stream": true, "messages": []}'
    r = requests.post(f"{gateway.url}/v1/messages", data=body, timeout=10,
                      headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "`stream`" in r.json()["error"]["message"]


def test_nested_duplicates_and_distinct_keys_still_route(gateway):
    body = {"model": VIRTUAL, "messages": [{"role": "user", "content": "hi"}], "stream": False,
            "metadata": {"a": "1"}, "user": "u"}
    text = json.dumps(body).replace('"metadata": {"a": "1"}', '"metadata": {"a": "1", "a": "2"}')
    r = requests.post(f"{gateway.url}/v1/chat/completions", data=text, timeout=10,
                      headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("fields", [
    (("model", UPLOAD_VM), ("stream", "false"), ("stream", "true")),
    (("model", UPLOAD_VM), ("model", "openai/whisper")),
])
def test_a_repeated_model_or_stream_form_field_is_refused(stack, uploads, fields):
    r = upload(uploads, "multipart/form-data; boundary=AAA", form("AAA", *fields))
    assert_refused(stack, r, "invalid_multipart", f"`{fields[-1][0]}`", "more than once")


def test_other_form_fields_may_repeat(uploads):
    body = form("AAA", ("model", UPLOAD_VM), ("timestamp_granularities[]", "word"),
                ("timestamp_granularities[]", "segment"))
    r = upload(uploads, "multipart/form-data; boundary=AAA", body)
    assert r.headers["x-switchboard-resolved-model"] == "openai/whisper", r.text


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
