"""Through the shipped envoy/providers.yaml, over TLS, to mock providers in strict mode: each one
refuses what the hosted service refuses (wrong SNI or Host 421, wrong path or api-version 404,
missing or foreign credential 401, Anthropic without its version 400). Every kind of attempt
(the router's, a retry, a fallback, the classifier call) must reach each provider in its own
shape, and keys given only as environment variables must reach the providers and nothing else.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import anthropic
import openai
import pytest
import requests

import providers_config
from configs import model_swapped
from harness import WASM, Provider, Stack, TestCA, free_ports, start_envoy

OPENAI = ("api.openai.com", "sk-openai-e2e-5f1c")
AZURE = ("my-resource.openai.azure.com", "azure-e2e-91ab")
ANTHROPIC = ("api.anthropic.com", "sk-ant-e2e-77d0")
VLLM = ("vllm.internal:8000", "vllm-e2e-3c42")
KEYS = {
    "OPENAI_API_KEY": OPENAI[1],
    "AZURE_OPENAI_API_KEY": AZURE[1],
    "ANTHROPIC_API_KEY": ANTHROPIC[1],
    "VLLM_API_KEY": VLLM[1],
}
CLIENT_KEY = "Bearer gateway-client-key-0e9d"
AZURE_PATH = "/openai/deployments/gpt-4o-prod/chat/completions"
CHAT = [{"role": "user", "content": "Hello"}]


@dataclass
class Providers:
    openai: Provider
    azure: Provider
    anthropic: Provider
    vllm: Provider
    envoy: object

    @property
    def url(self) -> str:
        return self.envoy.url

    def all(self) -> list[Provider]:
        return [self.openai, self.azure, self.anthropic, self.vllm]


def start(stack: Stack, tmp_path, monkeypatch, plugin_config: dict | None = None,
          wasm_log_level: str = "info", **openai_flags) -> Providers:
    """The four strict providers and Envoy running envoy/providers.yaml in front of them, with
    the keys only in Envoy's environment."""
    ca = TestCA(tmp_path / "ca")

    def tls(name: str, host: str, **flags) -> Provider:
        cert, key = ca.issue(host)
        return stack.provider(name, tls_cert=cert, tls_key=key, host_name=host, **flags)

    providers = Providers(
        openai=tls("openai", OPENAI[0], strict="openai", api_key=OPENAI[1], **openai_flags),
        azure=tls("azure_openai", AZURE[0], strict="azure", api_key=AZURE[1],
                  deployment="gpt-4o-prod", api_version="2024-10-21"),
        anthropic=tls("anthropic", ANTHROPIC[0], strict="anthropic", api_key=ANTHROPIC[1]),
        # Self-hosted, plain HTTP, as shipped.
        vllm=stack.provider("vllm", strict="openai-compatible", host_name=VLLM[0], api_key=VLLM[1]),
        envoy=None,
    )
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    upstreams = {p.name: ("127.0.0.1", p.port) for p in providers.all()}
    listen, admin = free_ports(2)
    text = providers_config.for_test(listen, admin, upstreams, str(ca.ca_path), str(WASM), plugin_config)
    providers.envoy = start_envoy(text, ports=(listen, admin), wasm_log_level=wasm_log_level)
    stack.envoys.append(providers.envoy)
    return providers


def strict_tls_mocks(stack: Stack, ca: TestCA, monkeypatch) -> dict[str, Provider]:
    """Strict TLS mocks of OpenAI, Azure OpenAI and Anthropic by host name, each with a
    certificate from `ca`, and their keys in the environment only (for a packaged recipe's
    Envoy config to read)."""
    def strict(host: str, key: str, kind: str, **flags) -> Provider:
        cert, pem_key = ca.issue(host)
        return stack.provider(kind, tls_cert=cert, tls_key=pem_key, host_name=host, strict=kind,
                              api_key=key, **flags)

    mocks = {OPENAI[0]: strict(*OPENAI, "openai"),
             AZURE[0]: strict(*AZURE, "azure", deployment="gpt-4o-prod", api_version="2024-10-21"),
             ANTHROPIC[0]: strict(*ANTHROPIC, "anthropic")}
    for name, value in {"OPENAI_API_KEY": OPENAI[1], "AZURE_OPENAI_API_KEY": AZURE[1],
                        "ANTHROPIC_API_KEY": ANTHROPIC[1]}.items():
        monkeypatch.setenv(name, value)
    return mocks


def start_on_loopback(stack: Stack, config: dict):
    """Starts a modelled Envoy config with its one listener and the admin on free loopback ports."""
    listen, admin = free_ports(2)
    [listener] = config["static_resources"]["listeners"]
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=listen)
    config["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}}
    envoy = start_envoy(config)
    stack.envoys.append(envoy)
    return envoy


def accepted(p: Provider) -> list[dict]:
    """What `p` received, each checked to have passed its strict checks."""
    seen = p.requests()
    for r in seen:
        assert r["strict_status"] is None, (p.name, r["strict_status"], r["path"], r["authority"])
    return seen


def assert_openai_shape(r: dict) -> None:
    assert (r["sni"], r["authority"], r["path"]) == (OPENAI[0], OPENAI[0], "/v1/chat/completions")
    assert r["headers"]["authorization"] == f"Bearer {OPENAI[1]}"


def assert_azure_shape(r: dict) -> None:
    assert (r["sni"], r["authority"], r["path"]) == (AZURE[0], AZURE[0], AZURE_PATH)
    assert r["query"] == "api-version=2024-10-21"
    assert r["headers"]["api-key"] == AZURE[1]
    assert "authorization" not in r["headers"], "the client's credential must not reach Azure"


def assert_vllm_shape(r: dict) -> None:
    assert (r["tls"], r["authority"], r["path"]) == (False, VLLM[0], "/v1/chat/completions")
    assert r["headers"]["authorization"] == f"Bearer {VLLM[1]}", "the target's key, not the client's"


def chat(url: str, model: str = "prod/chat", path: str = "/v1/chat/completions", **extra) -> requests.Response:
    return requests.post(url + path, timeout=30, json={"model": model, "messages": CHAT, **extra},
                         headers={"authorization": CLIENT_KEY})


def test_the_router_attempt_and_a_retry_reach_openai_in_its_shape(stack, tmp_path, monkeypatch):
    p = start(stack, tmp_path, monkeypatch)
    # A client that leaves out /v1 still reaches OpenAI's path.
    r = chat(p.url, path="/chat/completions")
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "openai/gpt-4o"
    [seen] = accepted(p.openai)
    assert_openai_shape(seen)
    assert seen["http_version"] == "HTTP/2", "providers.yaml speaks HTTP/2 where ALPN offers it"

    # The shipped config retries openai once: the retry is a call-out, and keeps the shape.
    p.openai.clear()
    p.openai.configure(fail_status=503, fail_rate=1.0)
    p.azure.configure(fail_status=503, fail_rate=1.0)
    p.vllm.configure(fail_status=503, fail_rate=1.0)
    r = chat(p.url)
    assert r.status_code == 503
    attempts = accepted(p.openai)
    assert len(attempts) == 2, "the router's attempt and one retry"
    for a in attempts:
        assert_openai_shape(a)


def test_fallbacks_reach_azure_then_the_self_hosted_server_in_their_own_shapes(stack, tmp_path, monkeypatch):
    p = start(stack, tmp_path, monkeypatch)
    p.openai.configure(fail_status=500, fail_rate=1.0)
    r = chat(p.url)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "azure/gpt-4o"
    assert r.headers["x-switchboard-attempts"] == "3", "openai, its retry, then azure"
    [at_azure] = accepted(p.azure)
    assert_azure_shape(at_azure)
    assert json.loads(at_azure["body"])["model"] == "gpt-4o"

    p.azure.configure(fail_status=503, fail_rate=1.0)
    r = chat(p.url)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "vllm/llama-3.1-8b"
    [at_vllm] = accepted(p.vllm)
    assert_vllm_shape(at_vllm)
    assert json.loads(at_vllm["body"])["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    # Every provider refused nothing: each attempt had its own host, path and key.
    for provider in p.all():
        accepted(provider)


def test_the_router_attempt_reaches_azure_and_anthropic_in_their_shapes(stack, tmp_path, monkeypatch):
    config = providers_config.shipped_plugin_config()
    config["virtual_models"].append({
        "name": "prod/azure-only", "model_types": ["chat"],
        "routing_config": {"type": "weight-based-routing",
                           "load_balance_targets": [{"target": "azure/gpt-4o", "weight": 100}]}})
    p = start(stack, tmp_path, monkeypatch, plugin_config=config)
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="gateway-client-key", max_retries=0)
    answer = client.chat.completions.with_raw_response.create(model="prod/azure-only", messages=CHAT)
    assert answer.headers["x-switchboard-resolved-model"] == "azure/gpt-4o"
    [seen] = accepted(p.azure)
    assert_azure_shape(seen)

    # The Anthropic SDK sends its own anthropic-version, which is kept; its api key is not.
    sdk = anthropic.Anthropic(base_url=p.url, api_key="gateway-client-key", max_retries=0)
    raw = sdk.messages.with_raw_response.create(model="prod/claude", max_tokens=16, messages=CHAT)
    assert raw.parse().content[0].text
    [seen] = accepted(p.anthropic)
    assert (seen["sni"], seen["authority"], seen["path"]) == (ANTHROPIC[0], ANTHROPIC[0], "/v1/messages")
    assert seen["headers"]["x-api-key"] == ANTHROPIC[1]
    assert seen["headers"]["anthropic-version"] == raw.http_request.headers["anthropic-version"]

    # A client that sends no version gets the one Anthropic needs.
    p.anthropic.clear()
    r = requests.post(p.url + "/v1/messages", timeout=30,
                      json={"model": "prod/claude", "max_tokens": 16, "messages": CHAT})
    assert r.status_code == 200, r.text
    [seen] = accepted(p.anthropic)
    assert seen["headers"]["anthropic-version"] == "2023-06-01"


def test_the_classifier_call_reaches_its_provider_in_its_shape(stack, tmp_path, monkeypatch):
    # The classifier model (openai/gpt-4o-mini) names the tier in one word.
    p = start(stack, tmp_path, monkeypatch, reply="complex")
    r = chat(p.url, model="prod/auto")
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "openai/gpt-4o", "the classifier's tier decided"
    classifier, routed = accepted(p.openai)
    assert json.loads(classifier["body"])["model"] == "gpt-4o-mini"
    assert_openai_shape(classifier)
    assert json.loads(routed["body"])["model"] == "gpt-4o"
    assert_openai_shape(routed)


def test_keys_from_the_environment_reach_providers_and_appear_nowhere_else(stack, tmp_path, monkeypatch):
    p = start(stack, tmp_path, monkeypatch, wasm_log_level="debug")
    p.openai.configure(fail_status=503, fail_rate=1.0)
    bodies = [chat(p.url).text,  # falls back to azure
              chat(p.url, model="no-such-model").text,
              requests.post(p.url + "/v1/chat/completions", data=b"{", timeout=10).text]
    p.azure.configure(fail_status=503, fail_rate=1.0)
    p.vllm.configure(fail_status=503, fail_rate=1.0)
    bodies.append(chat(p.url).text)  # every target fails
    assert_azure_shape(accepted(p.azure)[0])

    dump = requests.get(f"http://127.0.0.1:{p.envoy.admin_port}/config_dump", timeout=10).text
    time.sleep(0.5)  # Envoy flushes its log file every 100 ms
    assert "${env:OPENAI_API_KEY}" in dump, "the dump holds the reference, not the value"
    log = p.envoy.log()
    assert "attempt 1 at openai/gpt-4o" in log, "Switchboard's debug lines were written"
    for name, key in KEYS.items():
        assert key not in dump, f"{name} in /config_dump"
        assert key not in log, f"{name} in Envoy's log"
        for body in bodies:
            assert key not in body, f"{name} in an error body"


def test_a_stream_longer_than_envoys_default_route_timeout_arrives_whole(stack, tmp_path, monkeypatch):
    # 20 tokens 850 ms apart: about 17 s, past Envoy's 15 s default route timeout.
    p = start(stack, tmp_path, monkeypatch, ttft_ms=100, token_delay_ms=850, output_tokens=20)
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="gateway-client-key", max_retries=0,
                           timeout=60)
    started = time.monotonic()
    chunks, finish = [], None
    for chunk in client.chat.completions.create(model="prod/chat", messages=CHAT, stream=True):
        for choice in chunk.choices:
            if choice.delta.content:
                chunks.append((time.monotonic() - started, choice.delta.content))
            finish = choice.finish_reason or finish
    elapsed = time.monotonic() - started
    assert elapsed > 15, elapsed
    assert finish == "stop"
    assert len(chunks) == 20
    # Streamed, not buffered: the first token arrived long before the last.
    assert chunks[0][0] < 2 and chunks[-1][0] > 15, (chunks[0][0], chunks[-1][0])
    [seen] = accepted(p.openai)
    assert_openai_shape(seen)


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_compressed_body_gets_a_clear_415(stack, tmp_path, monkeypatch, encoding):
    p = start(stack, tmp_path, monkeypatch)
    r = requests.post(p.url + "/v1/chat/completions", data=b"\x1f\x8b\x08\x00compressed", timeout=10,
                      headers={"content-type": "application/json", "content-encoding": encoding})
    assert r.status_code == 415
    error = r.json()["error"]
    assert error["code"] == "unsupported_content_encoding"
    assert encoding in error["message"]
    assert all(not provider.requests() for provider in p.all())


@pytest.mark.parametrize("model_first", [False, True], ids=["prompt-first", "model-first"])
@pytest.mark.parametrize("virtual", ["prod/azure-only", "a"], ids=["shorter-target-name", "longer-target-name"])
def test_a_long_prompt_reaches_azure_byte_for_byte_on_either_side_of_the_model(
        stack, tmp_path, monkeypatch, virtual, model_first):
    # The OpenAI SDK puts `messages` before `model`. On the .wasm the edited head (the whole
    # prompt, then) goes back to Envoy in 16 KiB parts; natively the edit is written over
    # Envoy's own slices, and a longer name moves every byte after it (the whole prompt when
    # the model comes first) across the slices: multi-byte characters straddle the cuts.
    config = providers_config.shipped_plugin_config()
    config["virtual_models"].append({
        "name": virtual, "model_types": ["chat"],
        "routing_config": {"type": "weight-based-routing",
                           "load_balance_targets": [{"target": "azure/gpt-4o", "weight": 100}]}})
    p = start(stack, tmp_path, monkeypatch, plugin_config=config)
    prompt = "".join(f"{i} h\u00e9llo w\u00f6rld \u2603 " for i in range(20_000))
    messages = [{"role": "user", "content": prompt}]
    fields = {"model": virtual, "messages": messages} if model_first else {"messages": messages, "model": virtual}
    body = json.dumps({**fields, "n": 1}, ensure_ascii=False).encode()
    assert len(body) > 300_000

    r = requests.post(p.url + "/v1/chat/completions", data=body, timeout=30,
                      headers={"content-type": "application/json", "authorization": CLIENT_KEY})

    assert r.status_code == 200, r.text
    [seen] = accepted(p.azure)
    assert_azure_shape(seen)
    expected = model_swapped(body, virtual, "gpt-4o")
    assert seen["body"].encode() == expected
    assert int(seen["headers"]["content-length"]) == len(expected)


def test_a_multipart_upload_whose_model_name_shrinks_reaches_openai_byte_for_byte(stack, tmp_path, monkeypatch):
    # A form field's value takes no padding, so the body gets shorter: natively the bytes
    # before the model field move up in Envoy's own slices and the front is drained; the file
    # after it (several of Envoy's 16 KiB slices) must not move or change.
    virtual = "team/speech-to-text-for-the-whole-company"
    config = providers_config.shipped_plugin_config()
    [gpt] = [m for m in config["models"] if m["name"] == "openai/gpt-4o"]
    config["models"].append({**gpt, "name": "openai/whisper", "model": "whisper-1"})
    config["virtual_models"].append({
        "name": virtual, "model_types": ["audio_transcription"],
        "routing_config": {"type": "weight-based-routing",
                           "load_balance_targets": [{"target": "openai/whisper", "weight": 100}]}})
    p = start(stack, tmp_path, monkeypatch, plugin_config=config)
    # Text, so the mock's record of the body is exact; CR/LF and dashes inside, as in a file.
    audio = b"".join(b"%06d RIFF----\r\n--not-a-boundary\r\n" % i for i in range(3_000))
    request = requests.Request("POST", p.url + "/v1/audio/transcriptions", headers={"authorization": CLIENT_KEY},
                               data={"language": "en", "model": virtual},
                               files={"file": ("speech.wav", audio, "audio/wav")}).prepare()
    assert len(request.body) > 64 * 1024

    r = requests.Session().send(request, timeout=30)

    assert r.headers["x-switchboard-resolved-model"] == "openai/whisper", r.text
    [seen] = accepted(p.openai)
    assert (seen["sni"], seen["authority"], seen["path"]) == (OPENAI[0], OPENAI[0], "/v1/audio/transcriptions")
    assert seen["headers"]["authorization"] == f"Bearer {OPENAI[1]}"
    expected = request.body.replace(f"\r\n\r\n{virtual}\r\n".encode(), b"\r\n\r\nwhisper-1\r\n")
    assert len(expected) == len(request.body) - len(virtual) + len("whisper-1")
    assert seen["body"].encode() == expected
    assert int(seen["headers"]["content-length"]) == len(expected)
