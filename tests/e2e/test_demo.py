"""The demo that `make run` starts is valid and serves every virtual model it advertises."""

import os
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import requests

from harness import ENVOY_BIN, RESPONSE_ID_KEY, ROOT, WASM, free_ports, start_envoy

sys.path.insert(0, str(ROOT / "scripts"))

from run_demo import ADMIN_PORT, DEMO_CONFIG, DEMO_PROVIDERS, LISTEN_PORT  # noqa: E402


def test_demo_config_passes_envoy_validation():
    # Run from the repository root, as `make run` does: the .wasm path is relative to it.
    # With the response id key in the environment, as `make run` gives it.
    env = {**os.environ, "SWITCHBOARD_RESPONSE_ID_KEY": RESPONSE_ID_KEY}
    r = subprocess.run([str(ENVOY_BIN), "--mode", "validate", "-c", str(DEMO_CONFIG)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_demo_serves_its_virtual_models(stack):
    text = DEMO_CONFIG.read_text()
    text = text.replace("target/wasm32-wasip1/release/switchboard.wasm", str(WASM))
    listen, admin = free_ports(2)
    text = text.replace(f"port_value: {LISTEN_PORT} ", f"port_value: {listen} ")
    text = text.replace(f"port_value: {ADMIN_PORT} ", f"port_value: {admin} ")
    for name, port, flags in DEMO_PROVIDERS:
        p = stack.provider(name, **{**flags, "ttft_ms": 0, "token_delay_ms": 0})
        assert f"port_value: {port} " in text
        text = text.replace(f"port_value: {port} ", f"port_value: {p.port} ")
    envoy = start_envoy(text, ports=(listen, admin))
    stack.envoys.append(envoy)
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="unused", max_retries=0)

    seen = set()
    for _ in range(40):
        r = client.chat.completions.with_raw_response.create(
            model="my-group/production-chat", messages=[{"role": "user", "content": "Hello"}])
        seen.add(r.headers["x-switchboard-resolved-model"])
    assert seen == {"openai-east/gpt-4o", "azure-east/gpt-4o"}

    r = client.chat.completions.with_raw_response.create(
        model="my-group/resilient-chat", messages=[{"role": "user", "content": "Hi"}])
    assert r.headers["x-switchboard-resolved-model"] in {"openai-east/gpt-4o", "openai-west/gpt-4o"}

    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                      json={"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.headers["x-switchboard-resolved-model"] == "openai/gpt-4o-mini"

    claude = anthropic.Anthropic(base_url=envoy.url, api_key="unused", max_retries=0)
    msg = claude.messages.create(model="my-group/claude", max_tokens=16,
                                 messages=[{"role": "user", "content": "Hello"}])
    assert msg.model == "claude-sonnet-4-0"
