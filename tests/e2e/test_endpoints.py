"""Every endpoint of this slice routes a virtual model, driven by the real SDKs."""

import json

import anthropic
import openai
import requests

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


def test_models_list_shows_what_clients_may_call(stack):
    stack.provider("openai_main")
    config = {
        "models": [{"name": "secret/gpt-4o", "cluster": "openai_main", "model": "gpt-4o"},
                   {"name": "open/gpt-4o-mini", "cluster": "openai_main", "model": "gpt-4o-mini",
                    "visibility": "public"}],
        "virtual_models": [{"name": "team/chat", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "secret/gpt-4o", "weight": 100}]}}],
    }
    envoy = stack.envoy(config)
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)

    ids = [m.id for m in client.models.list()]

    assert ids == ["open/gpt-4o-mini", "team/chat"], "internal models are not listed"
    assert stack.providers["openai_main"].requests() == [], "answered by the filter"


def test_other_json_endpoints_route_through_a_virtual_model(stack):
    provider = stack.provider("multi")
    config = {
        "models": [{"name": "multi/m", "cluster": "multi", "model": "upstream-m"}],
        "virtual_models": [{"name": "team/all", "model_types": ["rerank", "moderation", "image", "text_to_speech"],
                            "routing_config": {"type": "weight-based-routing",
                                               "load_balance_targets": [{"target": "multi/m", "weight": 100}]}}],
    }
    envoy = stack.envoy(config)
    paths = ["/v2/rerank", "/v1/moderations", "/v1/images/generations", "/v1/audio/speech"]
    for path in paths:
        r = requests.post(f"{envoy.url}{path}", json={"model": "team/all", "input": "x"}, timeout=10)
        # The mock does not implement these APIs (404), but the request reached it rewritten.
        assert r.headers["x-switchboard-resolved-model"] == "multi/m", path
    seen = provider.requests()
    assert [s["path"] for s in seen] == paths
    assert {json.loads(s["body"])["model"] for s in seen} == {"upstream-m"}


def test_messages_never_reach_a_provider_that_does_not_speak_them(stack):
    claude = stack.provider("claude")
    gpt = stack.provider("gpt")
    config = {
        "models": [{"name": "anthropic/claude", "cluster": "claude", "model": "claude-sonnet-4-0",
                    "provider": "anthropic"},
                   {"name": "openai/gpt-4o", "cluster": "gpt", "model": "gpt-4o", "provider": "openai"}],
        "virtual_models": [{"name": "team/mixed", "model_types": ["chat", "embedding"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [
                {"target": "anthropic/claude", "weight": 50}, {"target": "openai/gpt-4o", "weight": 50}]}}],
    }
    envoy = stack.envoy(config)
    ant = anthropic.Anthropic(base_url=envoy.url, api_key="sk", max_retries=0)
    oai = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)

    for _ in range(10):
        ant.messages.create(model="team/mixed", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        oai.embeddings.create(model="team/mixed", input="hi")

    assert {s["path"] for s in claude.requests()} == {"/v1/messages"}
    assert {s["path"] for s in gpt.requests()} == {"/v1/embeddings"}


def test_multipart_uploads_get_their_model_field_rewritten_and_the_file_untouched(stack):
    provider = stack.provider("audio")
    config = {
        "models": [{"name": "openai/whisper", "cluster": "audio", "model": "whisper-1"}],
        "virtual_models": [{"name": "team/stt", "model_types": ["audio_transcription", "audio_translation", "image"],
                            "routing_config": {"type": "weight-based-routing",
                                               "load_balance_targets": [{"target": "openai/whisper", "weight": 100}]}}],
    }
    envoy = stack.envoy(config)
    audio = bytes(range(256)) * 40  # binary, with CR/LF and dashes inside

    for path in ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/edits"):
        r = requests.post(f"{envoy.url}{path}", data={"model": "team/stt", "language": "en"},
                          files={"file": ("speech.wav", audio, "audio/wav")}, timeout=10)
        assert r.headers["x-switchboard-resolved-model"] == "openai/whisper", path
    seen = provider.requests()
    assert [s["path"] for s in seen] == ["/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/edits"]
    for s in seen:
        assert 'name="model"\r\n\r\nwhisper-1\r\n' in s["body"]
        assert "team/stt" not in s["body"]
        assert s["body_len"] == int(s["headers"]["content-length"])
        assert s["body_len"] > len(audio), "the file went through whole"

    r = requests.post(f"{envoy.url}/v1/audio/transcriptions", json={"model": "team/stt"}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_multipart"


def test_batch_input_naming_a_virtual_model_is_refused(stack):
    passthrough = stack.provider("files")
    stack.provider("openai_main")
    config = {
        "models": [{"name": "openai/gpt-4o", "cluster": "openai_main", "model": "gpt-4o", "visibility": "public"}],
        "virtual_models": [{"name": "team/chat", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "openai/gpt-4o", "weight": 100}]}}],
    }
    envoy = stack.envoy(config, passthrough="files")
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="sk", max_retries=0)

    def jsonl(model_name: str) -> bytes:
        line = {"custom_id": "1", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": model_name, "messages": [{"role": "user", "content": "hi"}]}}
        return (json.dumps(line) + "\n").encode()

    try:
        client.files.create(file=("in.jsonl", jsonl("team/chat")), purpose="batch")
        raise AssertionError("a batch naming a virtual model must be refused")
    except openai.BadRequestError as e:
        assert e.code == "virtual_model_in_batch"
        assert "catalog model" in e.message
    assert passthrough.requests() == []
    # A catalog model passes through untouched (the mock answers 404 to /v1/files: not our concern).
    r = requests.post(f"{envoy.url}/v1/files", data={"purpose": "batch"},
                      files={"file": ("in.jsonl", jsonl("openai/gpt-4o"))}, timeout=10)
    assert r.status_code == 404 and "x-switchboard-resolved-model" not in r.headers
    assert [s["path"] for s in passthrough.requests()] == ["/v1/files"]
