"""Non-LLM traffic passes through untouched, and clients can never pick a cluster."""

import requests

from configs import PUBLIC, VIRTUAL, weighted_80_20


def test_spoofed_cluster_header_changes_nothing(stack):
    main = stack.provider("openai_main")
    azure = stack.provider("azure_east")
    passthrough = stack.provider("passthrough")
    envoy = stack.envoy(weighted_80_20(), passthrough="passthrough")

    for _ in range(20):
        r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                          headers={"x-switchboard-cluster": "azure_east"},
                          json={"model": PUBLIC, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        assert r.headers["x-mock-provider"] == "openai_main"
    # On a path the filter does not route, the header is dropped before the route is chosen.
    r = requests.get(f"{envoy.url}/healthz", headers={"x-switchboard-cluster": "azure_east"}, timeout=10)
    assert r.headers["x-mock-provider"] == "passthrough"
    # An error reply must not be bypassed by the header either.
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=10,
                      headers={"x-switchboard-cluster": "azure_east"}, json={"model": "unknown"})
    assert r.status_code == 404
    assert azure.requests() == []
    assert len(main.requests()) == 20
    assert [s["path"] for s in passthrough.requests()] == ["/healthz"]
    assert "x-switchboard-cluster" not in passthrough.requests()[0]["headers"]


def test_non_llm_paths_pass_through_untouched(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    passthrough = stack.provider("passthrough")
    envoy = stack.envoy(weighted_80_20(), passthrough="passthrough")
    body = b'{"model": "' + VIRTUAL.encode() + b'", "not": "routed"'  # not even valid JSON

    r1 = requests.post(f"{envoy.url}/v1/files", data=body, timeout=10)
    r2 = requests.get(f"{envoy.url}/v1/chat/completions", timeout=10)  # GET: list stored completions

    seen = passthrough.requests()
    assert [s["path"] for s in seen] == ["/v1/files", "/v1/chat/completions"]
    assert seen[0]["body"].encode() == body
    assert "x-switchboard-resolved-model" not in r1.headers
    assert "x-switchboard-resolved-model" not in r2.headers
