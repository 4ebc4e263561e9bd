"""The trace token is Switchboard's own secret: on either build it never reaches a provider,
whether Switchboard routes the request or lets it pass."""

import requests

from observability import start

TOKEN = "trace-token-0123456789-abcdef"
TOKEN_HEADER = "x-switchboard-trace-token"


def test_the_trace_token_never_goes_upstream_routed_or_passed_through(stack):
    a = stack.provider("a")
    envoy = start(stack, {
        "models": [{"name": "prov-a/gpt-4.1", "cluster": "a", "model": "m"}],
        "trace": {"token": TOKEN},
        "virtual_models": [{"name": "team/chat", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing",
            "load_balance_targets": [{"target": "prov-a/gpt-4.1", "weight": 100}]}}],
    })
    routed = requests.post(f"{envoy.url}/v1/chat/completions", headers={TOKEN_HEADER: TOKEN}, timeout=30,
                           json={"model": "team/chat", "messages": [{"role": "user", "content": "hi"}]})
    assert routed.status_code == 200
    # Not an LLM request: Switchboard lets it pass (the mock has no such path and answers 404).
    requests.get(f"{envoy.url}/v1/files", headers={TOKEN_HEADER: TOKEN}, timeout=10)
    seen = a.requests()
    assert [r["path"] for r in seen] == ["/v1/chat/completions", "/v1/files"], seen
    for record in seen:
        assert TOKEN_HEADER not in record["headers"] and TOKEN not in str(record), record
