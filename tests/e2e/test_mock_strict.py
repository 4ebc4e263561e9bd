"""The mock provider's TLS and `--strict` modes, without Envoy: each strict kind answers a
correct request and refuses the rest the way the hosted service does (421 wrong TLS name or
Host, 404 path, 401 credential, 400 Anthropic without its version header), and every request,
refused or not, is recorded with what arrived."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess

import pytest
import requests

from harness import Provider, Stack, TestCA

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
OPENAI_HOST, OPENAI_KEY = "api.openai.com", "sk-openai-test"
AZURE_HOST, AZURE_KEY = "my-resource.openai.azure.com", "azure-key-test"
AZURE_DEPLOYMENT, AZURE_VERSION = "gpt-4o-prod", "2024-10-21"
AZURE_CHAT = f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions?api-version={AZURE_VERSION}"
ANTHROPIC_HOST, ANTHROPIC_KEY = "api.anthropic.com", "sk-ant-test"
ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}
COMPAT_HOST, COMPAT_KEY = "vllm.internal:8000", "vllm-key-test"


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def tls_provider(stack: Stack, ca: TestCA, host: str, **flags) -> Provider:
    """A mock (named after its strict kind) serving TLS with a certificate for `host`."""
    cert, key = ca.issue(host.split(":")[0])
    return stack.provider(flags["strict"], tls_cert=cert, tls_key=key, host_name=host, **flags)


class _Connection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1 with a TLS server name chosen apart from the address (None: no SNI)."""

    def __init__(self, port: int, sni: str | None, context: ssl.SSLContext) -> None:
        super().__init__("127.0.0.1", port, context=context, timeout=10)
        self.sni = sni

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.sni)


def call(p: Provider, ca: TestCA, path: str, *, sni: str | None, host: str,
         headers: dict | None = None, body: dict = CHAT, check_name: bool = True) -> tuple[int, dict | str]:
    """POSTs `body` over TLS; the chain is always verified, the name only with `check_name`.
    Returns the status and the JSON answer (an event stream as text)."""
    context = ssl.create_default_context(cafile=str(ca.ca_path))
    context.check_hostname = check_name and sni is not None
    conn = _Connection(p.port, sni, context)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"host": host, "content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        text = resp.read().decode()
        if resp.getheader("content-type", "").startswith("text/event-stream"):
            return resp.status, text
        return resp.status, json.loads(text)
    finally:
        conn.close()


def test_openai(ca, stack):
    p = tls_provider(stack, ca, OPENAI_HOST, strict="openai", api_key=OPENAI_KEY)
    bearer = {"authorization": f"Bearer {OPENAI_KEY}"}

    def post(path="/v1/chat/completions", sni=OPENAI_HOST, host=OPENAI_HOST, headers=bearer, **kw):
        return call(p, ca, path, sni=sni, host=host, headers=headers, **kw)

    status, body = post()
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "tok1 tok2 "
    assert post("/v1/embeddings", body={"model": "e", "input": "x"})[0] == 200

    status, body = post(sni="other.example.com", check_name=False)
    assert (status, body["error"]["code"]) == (421, "misdirected_request")
    assert post(sni=None)[0] == 421, "TLS without a server name"
    assert post(host="127.0.0.1")[0] == 421
    assert post(host=f"{OPENAI_HOST}:443")[0] == 421, "Host must equal --host-name"

    status, body = post("/chat/completions")
    assert status == 404, "strict OpenAI needs the /v1 prefix"
    assert body["error"]["type"] == "invalid_request_error"

    status, body = post(headers={})
    assert (status, body["error"]["code"]) == (401, "invalid_api_key")
    assert post(headers={"authorization": "Bearer sk-wrong"})[0] == 401
    assert post(headers={"api-key": OPENAI_KEY})[0] == 401

    records = p.requests()
    assert [r["strict_status"] for r in records] == [None, None, 421, 421, 421, 421, 404, 401, 401, 401]
    first = records[0]
    assert first["authority"] == OPENAI_HOST
    assert (first["sni"], first["tls"], first["http_version"]) == (OPENAI_HOST, True, "HTTP/1.1")
    assert first["path"] == "/v1/chat/completions"
    assert records[3]["sni"] is None


def test_azure(ca, stack):
    p = tls_provider(stack, ca, AZURE_HOST, strict="azure", api_key=AZURE_KEY,
                     deployment=AZURE_DEPLOYMENT, api_version=AZURE_VERSION)
    key = {"api-key": AZURE_KEY}

    def post(path=AZURE_CHAT, headers=key, sni=AZURE_HOST, **kw):
        return call(p, ca, path, sni=sni, host=AZURE_HOST, headers=headers, **kw)

    status, body = post()
    assert status == 200, body
    assert body["object"] == "chat.completion"
    embeddings = f"/openai/deployments/{AZURE_DEPLOYMENT}/embeddings?api-version={AZURE_VERSION}"
    assert post(embeddings, body={"model": "e", "input": "x"})[0] == 200
    assert post("/openai/v1/chat/completions")[0] == 200, "the v1 API needs no api-version"

    not_found = {"error": {"code": "404", "message": "Resource not found"}}
    assert post(AZURE_CHAT.split("?")[0]) == (404, not_found), "api-version is required"
    assert post(AZURE_CHAT.replace(AZURE_VERSION, "2023-05-15")) == (404, not_found)
    status, body = post(AZURE_CHAT.replace(AZURE_DEPLOYMENT, "other"))
    assert (status, body["error"]["code"]) == (404, "DeploymentNotFound")
    assert post("/v1/chat/completions")[0] == 404, "an OpenAI path is not Azure's"

    assert post(headers={})[0] == 401
    assert post(headers={"api-key": "wrong"})[0] == 401
    assert post(headers={"authorization": f"Bearer {AZURE_KEY}"})[0] == 401
    status, body = post(headers={**key, "authorization": "Bearer sk-openai"})
    assert (status, body["error"]["code"]) == (401, "401"), "a foreign Bearer token beside a good key"

    assert post(sni="api.openai.com", check_name=False)[0] == 421
    records = p.requests()
    assert records[0]["query"] == f"api-version={AZURE_VERSION}"
    assert records[-1]["strict_status"] == 421
    assert records[-2]["headers"]["authorization"] == "Bearer sk-openai"


def test_anthropic(ca, stack):
    p = tls_provider(stack, ca, ANTHROPIC_HOST, strict="anthropic", api_key=ANTHROPIC_KEY)
    good = {"x-api-key": ANTHROPIC_KEY, **ANTHROPIC_VERSION}
    message = {"model": "claude", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}

    def post(path="/v1/messages", headers=good, host=ANTHROPIC_HOST, **kw):
        return call(p, ca, path, sni=ANTHROPIC_HOST, host=host, headers=headers, body=message, **kw)

    status, body = post()
    assert (status, body["type"]) == (200, "message"), body

    status, body = post(headers={"x-api-key": ANTHROPIC_KEY})
    assert status == 400
    assert body == {"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "anthropic-version: header is required"}}
    status, body = post(headers={**good, "authorization": "Bearer sk-openai"})
    assert (status, body["error"]["type"]) == (401, "authentication_error")
    assert post(headers={**good, "x-api-key": "wrong"})[0] == 401
    assert post(headers=ANTHROPIC_VERSION)[0] == 401
    status, body = post("/v1/chat/completions")
    assert (status, body["type"], body["error"]["type"]) == (404, "error", "not_found_error")
    assert post(host="api.openai.com")[0] == 421
    assert [r["strict_status"] for r in p.requests()] == [None, 400, 401, 401, 401, 404, 421]


def test_openai_compatible_with_port(ca, stack):
    p = tls_provider(stack, ca, COMPAT_HOST, strict="openai-compatible", api_key=COMPAT_KEY)
    bearer = {"authorization": f"Bearer {COMPAT_KEY}"}

    def post(path="/v1/chat/completions", host=COMPAT_HOST, headers=bearer):
        return call(p, ca, path, sni="vllm.internal", host=host, headers=headers)

    assert post()[0] == 200
    assert post("/v1/completions")[0] == 200
    assert post(host="vllm.internal")[0] == 421, "the port is part of --host-name"
    assert post("/chat/completions")[0] == 404
    assert post("/v1/responses")[0] == 404
    assert post(headers={"authorization": "Bearer wrong"})[0] == 401


def test_behaviour_flags_and_control_endpoints_in_strict_tls(ca, stack):
    p = tls_provider(stack, ca, OPENAI_HOST, strict="openai", api_key=OPENAI_KEY)
    bearer = {"authorization": f"Bearer {OPENAI_KEY}"}
    assert p.url.startswith("https://127.0.0.1:")
    p.configure(fail_status=503)

    def post(headers):
        return call(p, ca, "/v1/chat/completions", sni=OPENAI_HOST, host=OPENAI_HOST, headers=headers)

    assert post(bearer)[0] == 503, "injected failures still apply"
    assert post({})[0] == 401, "strict refusals come before injected failures"
    p.configure(fail_status=None, ttft_ms=20, token_delay_ms=5, output_tokens=3)
    assert post(bearer)[0] == 200
    status, events = call(p, ca, "/v1/chat/completions", sni=OPENAI_HOST, host=OPENAI_HOST,
                          headers=bearer, body={**CHAT, "max_tokens": 3, "stream": True})
    assert status == 200
    assert events.count("data: ") == 6 and events.endswith("data: [DONE]\n\n"), events
    assert len(p.requests()) == 4
    p.clear()
    assert p.requests() == []


def test_http2_over_tls(ca, stack):
    """ALPN h2: the :authority is checked like Host, and the record says HTTP/2."""
    curl = shutil.which("curl")
    assert curl, "curl (with HTTP/2) is needed for this test"
    p = tls_provider(stack, ca, OPENAI_HOST, strict="openai", api_key=OPENAI_KEY)

    def curl_post(authorization: str) -> tuple[int, str]:
        out = subprocess.run(
            [curl, "-sS", "--http2", "--cacert", str(ca.ca_path),
             "--connect-to", f"{OPENAI_HOST}:443:127.0.0.1:{p.port}",
             "-H", f"authorization: {authorization}", "-H", "content-type: application/json",
             "-d", json.dumps(CHAT), "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
             f"https://{OPENAI_HOST}/v1/chat/completions"],
            capture_output=True, text=True, timeout=20, check=True)
        code, version = out.stdout.split()
        return int(code), version

    assert curl_post(f"Bearer {OPENAI_KEY}") == (200, "2")
    assert curl_post("Bearer wrong") == (401, "2")
    records = p.requests()
    assert [(r["http_version"], r["authority"], r["strict_status"]) for r in records] == [
        ("HTTP/2", OPENAI_HOST, None), ("HTTP/2", OPENAI_HOST, 401)]


def test_strict_without_tls_checks_host(stack):
    p = stack.provider("plain-strict", strict="openai", host_name=OPENAI_HOST, api_key=OPENAI_KEY)
    assert p.url.startswith("http://")
    bearer = {"authorization": f"Bearer {OPENAI_KEY}"}
    url = f"{p.url}/v1/chat/completions"
    assert requests.post(url, json=CHAT, headers={**bearer, "host": OPENAI_HOST}, timeout=5).status_code == 200
    assert requests.post(url, json=CHAT, headers=bearer, timeout=5).status_code == 421
    record = p.requests()[0]
    assert (record["tls"], record["sni"], record["http_version"]) == (False, None, "HTTP/1.1")


def test_tls_without_strict_accepts_as_before(ca, stack):
    cert, key = ca.issue("mock.test")
    p = stack.provider("tls-only", tls_cert=cert, tls_key=key)
    r = requests.post(f"{p.url}/chat/completions", json=CHAT, verify=str(ca.ca_path), timeout=5)
    assert r.status_code == 200, r.text
    record = p.requests()[0]
    assert (record["tls"], record["sni"], record["strict_status"]) == (True, None, None)
