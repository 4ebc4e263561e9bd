"""Switchboard's own log lines at debug level: decisions are debug lines, a request no target
could answer is one warn line, and no secret ever shows: provider keys, the client's key, the trace
token, sticky-session and hash keys. (Envoy's router would print upstream headers, keys
included, at debug level: the harness keeps every component but `wasm` at warning, as
operators must in production.)"""

import re
import time

import requests

from harness import BUILD
from observability import access_lines, start

PROVIDER_KEY = "sk-provider-SECRET-4242424242"
CLIENT_KEY = "sk-client-SECRET-1313131313"
TRACE_TOKEN = "trace-SECRET-token-777777777"
SESSION = "user-SECRET-session-555"
HASH_KEY = "tenant-SECRET-hash-999"
SECRETS = [PROVIDER_KEY, CLIENT_KEY, TRACE_TOKEN, SESSION, HASH_KEY]
A, B = "prov-a/gpt-4o", "prov-b/gpt-4o"


def plugin() -> dict:
    key = {"authorization": "Bearer ${env:SB_PROVIDER_KEY}"}
    targets = [{"target": A, "weight": 50}, {"target": B, "weight": 50}]
    return {
        "models": [{"name": A, "cluster": "a", "model": "m", "headers": key},
                   {"name": B, "cluster": "b", "model": "m", "headers": key}],
        "trace": {"token": "${env:SB_TRACE_TOKEN}"},
        # The variables `${env:}` may read: without it the native build warns at load.
        "env_keys": ["SB_PROVIDER_KEY", "SB_TRACE_TOKEN"],
        "filter_state": True,
        "virtual_models": [
            {"name": "team/resilient", "model_types": ["chat"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                    {"target": A, "priority": 0}, {"target": B, "priority": 1}]}},
            {"name": "team/sticky", "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing", "load_balance_targets": targets,
                "sticky_routing": {"ttl_seconds": 600, "session_identifiers": [{"key": "x-user-id", "source": "headers"}]}}},
            {"name": "team/hashed", "model_types": ["chat"], "routing_config": {
                "type": "hash-based-routing", "hash_key": {"source": "headers", "key": "x-tenant"},
                "load_balance_targets": [{"target": A}, {"target": B}]}},
        ],
    }


def test_no_secret_in_switchboards_debug_lines_and_one_warn_line_per_failed_request(
        stack, monkeypatch, tmp_path):
    a, b = stack.provider("a"), stack.provider("b")
    monkeypatch.setenv("SB_PROVIDER_KEY", PROVIDER_KEY)
    monkeypatch.setenv("SB_TRACE_TOKEN", TRACE_TOKEN)
    access = tmp_path / "access.log"
    envoy = start(stack, plugin(), access_log=access, wasm_log_level="debug",
                  host_env_keys=["SB_PROVIDER_KEY", "SB_TRACE_TOKEN"])
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-switchboard-trace-token": TRACE_TOKEN,
               "x-user-id": SESSION, "x-tenant": HASH_KEY}

    def chat(model):
        return requests.post(f"{envoy.url}/v1/chat/completions?api-key={CLIENT_KEY}", headers=headers,
                             json={"model": model, "messages": [{"role": "user", "content": "hi"}]}, timeout=30)

    answers = [chat(m) for m in ["team/resilient", "team/sticky", "team/hashed"]]
    a.configure(fail_status=503)
    answers += [chat("team/resilient"), chat("team/sticky")]
    b.configure(fail_status=503)
    answers.append(chat("team/resilient"))  # every target fails: the provider's 503 goes through
    a.configure(fail_status=None, drop="before-response")
    b.configure(fail_status=None, drop="before-response")
    answers.append(chat("team/resilient"))  # no target answers at all
    assert [r.status_code for r in answers] == [200] * 5 + [503, 503]
    assert all("x-switchboard-trace" in r.headers for r in answers)
    received = a.requests() + b.requests()
    assert received and all(r["headers"].get("authorization") == f"Bearer {PROVIDER_KEY}" for r in received)

    time.sleep(0.5)  # Envoy flushes its log every 100 ms
    log = envoy.log()
    # Envoy's component for the filter's own lines: `wasm`, or `dynamic_modules` natively.
    component = "[dynamic_modules]" if BUILD == "native" else "[wasm]"
    ours = [line for line in log.splitlines() if component in line]
    assert any("[debug]" in line and "team/sticky (weight-based-routing): candidates" in line for line in ours)
    assert any("[debug]" in line and "attempt 2 at prov-b/gpt-4o" in line for line in ours)
    warns = [line for line in ours if "[warning]" in line]
    assert len(warns) == 2, warns
    # Which target failed last depends on the health each worker saw: both were failing.
    assert re.search(r"team/resilient: routing failed after 2 attempts with 503; "
                     r"the client gets it from prov-[ab]/gpt-4o$", warns[0]), warns[0]
    assert "team/resilient: routing failed after 2 attempts with 503; no target answered" in warns[1]
    lines = access_lines(access, len(answers))
    for secret in SECRETS:
        assert secret not in log, f"{secret} in Envoy's log"
        for r in answers:
            assert secret not in r.headers.get("x-switchboard-trace", ""), secret
            assert secret not in r.text, secret
        assert secret not in str(lines), f"{secret} in the access log"
