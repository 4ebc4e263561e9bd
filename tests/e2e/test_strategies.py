"""Routing strategies beyond weights and priorities, through Envoy."""

import requests

CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def model(name: str) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal"}


def test_conditional_routing_picks_the_first_true_when_and_falls_back_to_the_next(stack):
    stack.provider("fast")
    stack.provider("smart", fail_status=503)
    stack.provider("eu")
    config = {"models": [model("fast"), model("smart"), model("eu")],
              "virtual_models": [{"name": "adaptive", "model_types": ["chat"], "routing_config": {
                  "type": "conditional-routing", "load_balance_targets": [
                      {"target": "fast", "when": 'request.headers["x-tier"] == "free"'},
                      {"target": "smart", "when": 'request.headers["x-tier"] == "pro"'},
                      {"target": "eu", "when": 'metadata.region in ["eu", "uk"] || request.headers["x-tier"] == "pro"'},
                  ]}}]}
    envoy = stack.envoy(config)

    def send(headers: dict) -> requests.Response:
        return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "adaptive", **CHAT},
                             headers=headers, timeout=10)

    assert send({"x-tier": "free"}).headers["x-switchboard-resolved-model"] == "fast"
    # "pro" matches smart first; smart fails, and eu (also true for pro) takes the fallback.
    pro = send({"x-tier": "pro"})
    assert (pro.status_code, pro.headers["x-switchboard-resolved-model"], pro.headers["x-switchboard-attempts"]) == \
        (200, "eu", "2")
    assert send({"x-switchboard-metadata": '{"region": "uk"}'}).headers["x-switchboard-resolved-model"] == "eu"
    none = send({"x-tier": "enterprise"})
    assert none.status_code == 400
    assert none.json()["error"]["code"] == "no_matching_condition"
