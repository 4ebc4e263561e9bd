"""Sessions kept where their prompt cache is, keyed on what coding agents already send: 20 agent
sessions of 5 turns over 3 weighted targets (Claude Code's and Codex's session headers,
`prompt_cache_key` only, `metadata.user_id` only) keep one target each; one session whose target
a 429 with Retry-After evicts moves once and stays on its new target after the old one
recovers; the sticky metrics count exactly that. Then one virtual model per new key source
(body top-level, body two-level, the agent_session header, a hash key from the body) and the
caller identity from the body."""

from __future__ import annotations

import time
import uuid

import pytest
import requests

from configs import STRICT
from observability import sample, start, wait_for

TARGETS = ["a", "b", "c"]
AGENTS = "team/agents"
RETRY_AFTER_S = 2


def target(name: str) -> dict:
    # No retries; a 429 or 5xx moves to the next target.
    return {"target": name, "weight": {"a": 50, "b": 30, "c": 20}[name],
            "fallback_status_codes": ["429", "5xx"]}


def weighted(name: str, identifiers: list[dict], **sticky) -> dict:
    return {"name": name, "model_types": ["chat"], "routing_config": {
        "type": "weight-based-routing",
        # The longest window (30 days): no test run straddles a window's end.
        "sticky_routing": {"ttl_seconds": 30 * 86_400, "missing_identifier": "none",
                           "session_identifiers": identifiers, **sticky},
        "load_balance_targets": [target(t) for t in TARGETS]}}


def plugin() -> dict:
    body = {"source": "body"}
    return {
        "models": [{"name": t, "cluster": t, "model": f"model-{t}", "authority": "api.openai.com",
                    "headers": {"authorization": "Bearer sk-gateway"}} for t in TARGETS],
        # Only a provider's Retry-After evicts: every count below is fixed.
        "failure_window": {"failures": 0},
        "virtual_models": [
            weighted(AGENTS, [{"source": "agent_session"}], idle_ttl_seconds=3600),
            weighted("team/by-cache-key", [{**body, "key": "prompt_cache_key"}]),
            weighted("team/by-user-id", [{**body, "key": "metadata.user_id"}]),
            weighted("team/by-agent-header", [{"source": "agent_session"}]),
            {"name": "team/hashed", "model_types": ["chat"], "routing_config": {
                "type": "hash-based-routing", "hash_key": {**body, "key": "prompt_cache_key"},
                "load_balance_targets": [{"target": t} for t in TARGETS]}},
        ],
    }


def chat(envoy, model: str, headers: dict | None = None, turn: int = 0, **fields) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": f"turn {turn}"}], **fields}
    r = requests.post(f"{envoy.url}/v1/chat/completions", json=body, headers=headers or {}, timeout=10)
    assert r.status_code == 200, r.text
    return r.headers["x-switchboard-resolved-model"]


def sessions() -> list[tuple[dict, dict]]:
    """20 agent sessions, as (headers, body fields) each agent sends on every turn."""
    out = []
    for i in range(5):
        claude = str(uuid.UUID(int=0xC1A0DE << 64 | i))
        out.append(({"x-claude-code-session-id": claude},
                    {"metadata": {"user_id": f"user_{i:064x}_account__session_{claude}"}}))
        codex = str(uuid.UUID(int=0xC0DE7 << 64 | i))
        out.append(({"session-id": codex, "user-agent": "codex_cli_rs/0.131.0"}, {"prompt_cache_key": codex}))
        out.append(({}, {"prompt_cache_key": f"ses_cache{i:08d}"}))
        out.append(({}, {"metadata": {"user_id": f"user_{i:064x}_account__session_{uuid.UUID(int=i)}"}}))
    return out


def test_agent_sessions_keep_their_target_and_an_evicted_one_moves_once(stack):
    providers = {t: stack.provider(t, **STRICT) for t in TARGETS}
    envoy = start(stack, plugin())
    agents = sessions()
    homes = []
    for headers, fields in agents:
        seen = {chat(envoy, AGENTS, headers, turn, **fields) for turn in range(5)}
        assert len(seen) == 1, (headers, fields, seen)
        homes.append(seen.pop())
    assert len(set(homes)) >= 2, f"20 sessions spread by weight: {homes}"

    # One session's target answers 429 with Retry-After: evicted, the session falls back to the
    # next target in config order and is pinned there.
    moved = 0
    old = homes[moved]
    new = next(t for t in TARGETS if t != old)
    headers, fields = agents[moved]
    before = len(providers[old].requests())
    providers[old].configure(fail_status=429, retry_after=str(RETRY_AFTER_S))
    assert [chat(envoy, AGENTS, headers, 5 + turn, **fields) for turn in range(3)] == [new] * 3
    # The old target recovers; the session stays where its cache now is, within the window.
    providers[old].configure(fail_status=None, retry_after=None)
    time.sleep(RETRY_AFTER_S + 0.5)
    assert [chat(envoy, AGENTS, headers, 8 + turn, **fields) for turn in range(2)] == [new] * 2
    assert len(providers[old].requests()) == before + 1, "one 429, then never again"
    # Every other session is still on its own target.
    for i, (h, f) in enumerate(agents):
        if i != moved:
            assert chat(envoy, AGENTS, h, 10, **f) == homes[i], i

    hits = 100 + 2 + 2 + 19
    series = wait_for(envoy, "switchboard_sticky_hits", hits, virtual_model=AGENTS)
    labels = {"virtual_model": AGENTS}
    assert sample(series, "switchboard_sticky_hits", **labels) == hits
    assert sample(series, "switchboard_sticky_moves", **labels) == 1
    assert sample(series, "switchboard_sticky_pins", **labels) == 1


def spread(envoy, model: str, request_for) -> None:
    """12 keys, two requests each (another turn, other headers): each key keeps one target,
    and the keys use more than one."""
    firsts = []
    for key in range(12):
        headers, fields = request_for(f"key-{key:04d}-{'x' * 8}")
        a = chat(envoy, model, headers, 0, **fields)
        b = chat(envoy, model, {**headers, "x-noise": str(key)}, 1, **fields)
        assert a == b, (model, key)
        firsts.append(a)
    assert len(set(firsts)) >= 2, (model, firsts)


@pytest.mark.parametrize("model, request_for", [
    ("team/by-cache-key", lambda k: ({}, {"prompt_cache_key": k})),
    ("team/by-user-id", lambda k: ({}, {"metadata": {"user_id": k}})),
    ("team/by-agent-header", lambda k: ({"x-session-affinity": k}, {})),
    ("team/hashed", lambda k: ({}, {"prompt_cache_key": k})),
])
def test_each_new_key_source_keeps_a_key_on_one_target(stack, model, request_for):
    for t in TARGETS:
        stack.provider(t, **STRICT)
    envoy = stack.envoy(plugin())
    spread(envoy, model, request_for)


def test_the_caller_identity_read_from_the_body_binds_response_ids(stack):
    stack.provider("a", **STRICT)
    envoy = stack.envoy({
        "models": [{"name": "a", "cluster": "a", "model": "gpt-4o", "provider": "openai",
                    "authority": "api.openai.com", "headers": {"authorization": "Bearer sk-gateway"}}],
        "response_id_keys": ["agent-sessions-test-key"],
        "response_id_binding": "caller",
        "caller_identity": {"source": "body", "key": "prompt_cache_key"},
        "virtual_models": [{"name": "team/r", "model_types": ["responses"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 100}]}}],
    })

    def respond(cache_key: str, previous: str | None = None) -> requests.Response:
        body = {"model": "team/r", "input": "hi", "prompt_cache_key": cache_key}
        if previous:
            body["previous_response_id"] = previous
        # The same credential for both callers: only the body tells them apart.
        return requests.post(f"{envoy.url}/v1/responses", json=body, timeout=10,
                             headers={"authorization": "Bearer shared"})

    first = respond("alice-cache")
    assert first.status_code == 200, first.text
    other = respond("mallory-cache", first.json()["id"])
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "foreign_response_id"
    assert respond("alice-cache", first.json()["id"]).status_code == 200
