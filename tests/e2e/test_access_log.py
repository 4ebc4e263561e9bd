"""The shipped JSON access log carries Switchboard's routing facts (filter state): virtual
model, the target that answered, strategy, attempts, fallback reason, complexity tier, sticky
hit and decision time."""

import requests

from observability import access_lines, start


A, B = "prov-a/gpt-4o", "prov-b/gpt-4o"
FIELDS = ["virtual_model", "target", "strategy", "attempts", "fallback_reason", "tier", "sticky", "decision_us"]


def plugin() -> dict:
    return {
        "filter_state": True,
        "models": [{"name": A, "cluster": "a", "model": "m-a"}, {"name": B, "cluster": "b", "model": "m-b"}],
        "virtual_models": [
            {"name": "team/resilient", "model_types": ["chat"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                    {"target": A, "priority": 0}, {"target": B, "priority": 1}]}},
            {"name": "team/sticky", "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing",
                "sticky_routing": {"ttl_seconds": 3600, "session_identifiers": [{"key": "x-user-id", "source": "headers"}]},
                "load_balance_targets": [{"target": A, "weight": 100}, {"target": B, "weight": 0}]}},
            {"name": "team/auto", "model_types": ["chat"], "routing_config": {
                "type": "complexity-based-routing", "load_balance_targets": [
                    {"target": A, "tier": "simple"}, {"target": B, "tier": "complex"}]}},
        ],
    }


def chat(envoy, model, **headers):
    r = requests.post(f"{envoy.url}/v1/chat/completions", headers=headers, timeout=30,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    return r.headers["x-switchboard-resolved-model"]


def test_each_routed_request_logs_where_it_went_and_why(stack, tmp_path):
    a, _ = stack.provider("a"), stack.provider("b")
    log = tmp_path / "access.log"
    envoy = start(stack, plugin(), access_log=log)
    assert chat(envoy, "team/resilient") == A
    a.configure(fail_status=503)
    assert chat(envoy, "team/resilient") == B
    # A new session: no pin yet (its hash picks a), a fails, the fallback pins it to b ...
    assert chat(envoy, "team/sticky", **{"x-user-id": "user-7"}) == B
    # ... so the session's next request finds its pin.
    assert chat(envoy, "team/sticky", **{"x-user-id": "user-7"}) == B
    a.configure(fail_status=None)
    assert chat(envoy, "team/auto") == A
    requests.get(f"{envoy.url}/v1/files", timeout=10)  # not routed by Switchboard

    lines = access_lines(log, 6)
    picked = [{k: line[k] for k in FIELDS} for line in lines]
    for p in picked[:5]:
        assert p.pop("decision_us").isdigit(), p
    assert picked[0] == {"virtual_model": "team/resilient", "target": A, "strategy": "priority-based-routing",
                         "attempts": "1", "fallback_reason": None, "tier": None, "sticky": None}
    assert picked[1] == {**picked[0], "target": B, "attempts": "2", "fallback_reason": "status"}
    sticky = {"virtual_model": "team/sticky", "strategy": "weight-based-routing", "tier": None}
    assert picked[2] == {**sticky, "target": B, "attempts": "2", "fallback_reason": "status", "sticky": "miss"}
    assert picked[3] == {**sticky, "target": B, "attempts": "1", "fallback_reason": None, "sticky": "hit"}
    assert picked[4] == {"virtual_model": "team/auto", "target": A, "strategy": "complexity-based-routing",
                         "attempts": "1", "fallback_reason": None, "tier": "simple", "sticky": None}
    assert picked[5] == dict.fromkeys(FIELDS), "a request Switchboard does not route has no fields"
    assert [line["status"] for line in lines[:5]] == [200] * 5
    assert lines[1]["path"] == "/v1/chat/completions" and lines[1]["method"] == "POST"


def test_filter_state_is_off_unless_the_config_asks(stack, tmp_path):
    stack.provider("a")
    stack.provider("b")
    log = tmp_path / "access.log"
    config = plugin()
    del config["filter_state"]  # the default
    envoy = start(stack, config, access_log=log)
    assert chat(envoy, "team/resilient") == A
    [line] = access_lines(log, 1)
    assert all(line[k] is None for k in FIELDS), line
    assert line["status"] == 200
