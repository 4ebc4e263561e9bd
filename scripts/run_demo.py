"""`make run`: the demo providers and Envoy with Switchboard on 127.0.0.1:10000.

Starts one mock-provider per demo cluster, then Envoy with envoy/demo.yaml (or the config
given as the argument: `make run-ecds` passes envoy/ecds.yaml, whose plugin config reloads
from envoy/ecds/switchboard.yaml), prints examples to paste, and stops everything on Ctrl-C
(or when any process dies).
"""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness import ENVOY_BIN, Provider, require, start_provider, stop_process  # noqa: E402

DEMO_CONFIG = ROOT / "envoy" / "demo.yaml"
LISTEN_PORT = 10000
ADMIN_PORT = 9901
# name (= Envoy cluster), port, mock-provider flags: small delays make streaming visible.
DEMO_PROVIDERS = [
    ("openai_east", 18081, {"ttft_ms": 120, "token_delay_ms": 40, "output_tokens": 24}),
    ("openai_west", 18082, {"ttft_ms": 150, "token_delay_ms": 50, "output_tokens": 24}),
    ("azure_east", 18083, {"ttft_ms": 200, "token_delay_ms": 45, "output_tokens": 24}),
    ("anthropic", 18084, {"ttft_ms": 150, "token_delay_ms": 40, "output_tokens": 24}),
]

EXAMPLES = f"""
Switchboard is up: Envoy on http://127.0.0.1:{LISTEN_PORT} (admin http://127.0.0.1:{ADMIN_PORT}).

A chat request to the 80/20 weighted virtual model (-i shows x-switchboard-resolved-model):

  curl -i http://127.0.0.1:{LISTEN_PORT}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "my-group/production-chat", "messages": [{{"role": "user", "content": "Hello"}}]}}'

Streaming from the priority virtual model:

  curl -N http://127.0.0.1:{LISTEN_PORT}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "my-group/resilient-chat", "stream": true, "messages": [{{"role": "user", "content": "Hi"}}]}}'

The OpenAI Python SDK (pip install openai):

  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:{LISTEN_PORT}/v1", api_key="unused")
  r = client.chat.completions.with_raw_response.create(
      model="my-group/production-chat", messages=[{{"role": "user", "content": "Hello"}}])
  print(r.headers["x-switchboard-resolved-model"], r.parse().choices[0].message.content)

The Anthropic SDK against the `my-group/claude` virtual model:

  import anthropic
  client = anthropic.Anthropic(base_url="http://127.0.0.1:{LISTEN_PORT}", api_key="unused")
  print(client.messages.create(model="my-group/claude", max_tokens=64,
                               messages=[{{"role": "user", "content": "Hello"}}]).content[0].text)

Ctrl-C stops Envoy and the providers.
"""


def start_demo_providers() -> list[Provider]:
    providers = []
    try:
        for name, port, flags in DEMO_PROVIDERS:
            providers.append(start_provider(name, port=port, **flags))
    except Exception:
        for p in providers:
            p.stop()
        raise
    return providers


def main() -> int:
    config = Path(sys.argv[1]) if len(sys.argv) > 1 else DEMO_CONFIG
    providers = start_demo_providers()
    # A random key per run for the response ids the filter mints (the config names it as
    # ${env:SWITCHBOARD_RESPONSE_ID_KEY}); one set by the user is kept.
    env = {**os.environ}
    env.setdefault("SWITCHBOARD_RESPONSE_ID_KEY", secrets.token_hex(32))
    envoy = subprocess.Popen([str(require(ENVOY_BIN, "Envoy")), "-c", str(config), "--concurrency", "2",
                              "--disable-hot-restart", "--log-level", "warning",
                              "--component-log-level", "wasm:info"], cwd=ROOT, env=env)
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        deadline = time.monotonic() + 30
        while not stopping and time.monotonic() < deadline:
            if envoy.poll() is not None:
                print("Envoy exited; see its log above.", file=sys.stderr)
                return 1
            try:
                if requests.get(f"http://127.0.0.1:{ADMIN_PORT}/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        else:
            if not stopping:
                print("Envoy did not become ready in 30 s.", file=sys.stderr)
                return 1
        if not stopping:
            print(EXAMPLES, flush=True)
        while not stopping:
            if envoy.poll() is not None or any(p.proc.poll() is not None for p in providers):
                print("A demo process exited; stopping.", file=sys.stderr)
                return 1
            time.sleep(0.2)
        return 0
    finally:
        stop_process(envoy)
        for p in providers:
            p.stop()


if __name__ == "__main__":
    sys.exit(main())
