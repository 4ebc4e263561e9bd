"""The `x-switchboard-trace` answer header: off by default, on with the configured token (read
from the environment) or for every request by config; it lists what the providers saw, and the
token never reaches a provider."""

import requests

from observability import start


A, B, EU = "prov-a/gpt-4.1", "prov-b/gpt-4o", "prov-eu/gpt-4o"
TOKEN = "trace-token-0123456789-abcdef"
TRACE, TOKEN_HEADER = "x-switchboard-trace", "x-switchboard-trace-token"


def plugin(**trace) -> dict:
    return {
        "models": [{"name": A, "cluster": "a", "model": "m"}, {"name": B, "cluster": "b", "model": "m"},
                   {"name": EU, "cluster": "b", "model": "m"},
                   {"name": "public/model", "cluster": "a", "model": "m", "visibility": "public"}],
        "trace": trace,
        "failure_window": {"failures": 0},
        "virtual_models": [{"name": "team/chat", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": A, "priority": 0, "retry_config": {"attempts": 1, "delay": 1}},
                {"target": EU, "priority": 0, "metadata_match": {"region": "eu"}},
                {"target": B, "priority": 1}]}}],
    }


def chat(envoy, model="team/chat", **headers):
    return requests.post(f"{envoy.url}/v1/chat/completions", headers=headers, timeout=30,
                         json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def test_the_token_asks_for_the_trace_and_it_matches_what_the_providers_saw(stack, monkeypatch):
    a, b = stack.provider("a"), stack.provider("b")
    monkeypatch.setenv("SB_TRACE_TOKEN", TOKEN)
    envoy = start(stack, plugin(token="${env:SB_TRACE_TOKEN}"), host_env_keys=["SB_TRACE_TOKEN"])

    assert TRACE not in chat(envoy).headers, "off without the token"
    wrong = chat(envoy, **{TOKEN_HEADER: TOKEN[:-1] + "X"})
    assert wrong.status_code == 200 and TRACE not in wrong.headers

    a.clear()
    b.clear()
    a.configure(fail_status=503)
    r = chat(envoy, **{TOKEN_HEADER: TOKEN})
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == B
    # What the providers saw: a twice (the router's attempt and its retry, both 503), then b.
    assert len(a.requests()) == 2 and len(b.requests()) == 1
    assert r.headers[TRACE] == (
        f"vm=team/chat; strategy=priority-based-routing; candidates={A},{B}; "
        f"skipped={EU} metadata_match; attempts={A} 503,{A} 503,{B} 200")

    # The token and the trace header never go upstream, on any attempt.
    for record in a.requests() + b.requests():
        assert TOKEN_HEADER not in record["headers"] and TOKEN not in str(record), record

    # With the region metadata, the eu target is a candidate and nothing is skipped.
    a.configure(fail_status=None)
    r = chat(envoy, **{TOKEN_HEADER: TOKEN, "x-switchboard-metadata": '{"region": "eu"}'})
    first = r.headers["x-switchboard-resolved-model"]
    assert r.headers[TRACE].startswith("vm=team/chat; strategy=priority-based-routing; candidates=")
    assert "skipped" not in r.headers[TRACE] and r.headers[TRACE].endswith(f"; attempts={first} 200")

    # A catalog model called directly, and a request Switchboard does not route.
    r = chat(envoy, model="public/model", **{TOKEN_HEADER: TOKEN})
    assert r.headers[TRACE] == "vm=(direct); candidates=public/model; attempts=public/model 200"
    a.clear()
    r = requests.get(f"{envoy.url}/v1/files", headers={TOKEN_HEADER: TOKEN}, timeout=10)
    assert TRACE not in r.headers
    assert TOKEN_HEADER not in a.requests()[0]["headers"], "stripped from a passed-through request too"


def test_trace_always_covers_every_routed_request_and_an_error_switchboard_makes(stack):
    a, b = stack.provider("a"), stack.provider("b")
    envoy = start(stack, plugin(always=True))
    r = chat(envoy)
    assert r.headers[TRACE].endswith(f"; attempts={A} 200")
    a.configure(drop="before-response")
    b.configure(drop="before-response")
    r = chat(envoy)
    assert r.status_code == 503
    assert r.headers[TRACE].endswith(
        f"; attempts={A} connect_failure,{A} connect_failure,{B} connect_failure"), r.headers[TRACE]
    assert TRACE not in requests.get(f"{envoy.url}/v1/models", timeout=10).headers
