"""Per-target options through Envoy: metadata filtering, header overrides, parameter overrides,
and that a fallback carries the next target's settings, never the previous one's."""

import json

import pytest
import requests

CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def model(name: str, **extra) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal", **extra}


def vm(targets: list[dict], **extra) -> dict:
    return {"name": "vm", "model_types": ["chat"], **extra,
            "routing_config": {"type": "weight-based-routing", "load_balance_targets": targets}}


def post(envoy, headers=None, **body):
    return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "vm", **CHAT, **body},
                         headers=headers or {}, timeout=10)


def test_metadata_match_filters_targets_and_defaults_win(stack):
    us = stack.provider("us")
    eu = stack.provider("eu")
    fallback = stack.provider("catchall")
    config = {"models": [model("us"), model("eu"), model("catchall")],
              "default_metadata": {"env": "prod"},
              "virtual_models": [vm([
                  {"target": "us", "weight": 50, "metadata_match": {"region": "us", "env": "prod"}},
                  {"target": "eu", "weight": 50, "metadata_match": {"region": "eu"}},
                  {"target": "catchall", "weight": 0}])]}
    envoy = stack.envoy(config)
    meta = "x-switchboard-metadata"

    served = {region: {post(envoy, {meta: json.dumps({"region": region, "env": "dev"})})
                       .headers["x-switchboard-resolved-model"] for _ in range(10)}
              for region in ("us", "eu", "apac")}

    # env=dev is overridden by the default env=prod, so the us target still matches.
    assert served == {"us": {"us"}, "eu": {"eu"}, "apac": {"catchall"}}
    # The metadata header is Switchboard's: providers do not get it.
    assert all(meta not in r["headers"] for p in (us, eu, fallback) for r in p.requests())

    bad = post(envoy, {meta: "region=us"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_metadata"


def test_no_target_matching_the_metadata_is_a_404(stack):
    stack.provider("us")
    config = {"models": [model("us")],
              "virtual_models": [vm([{"target": "us", "weight": 100, "metadata_match": {"region": "us"}}])]}
    envoy = stack.envoy(config)
    r = post(envoy, {"x-switchboard-metadata": '{"region": "eu"}'})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "no_matching_target"


def test_header_and_param_overrides_apply_per_target_and_do_not_leak_into_a_fallback(stack):
    first = stack.provider("first", fail_status=503)
    second = stack.provider("second")
    config = {"models": [model("first", headers={"authorization": "Bearer first-key"}),
                         model("second", headers={"api-key": "second-key"})],
              "virtual_models": [vm([
                  {"target": "first", "weight": 100,
                   "headers_override": {"set": {"X-Region": "us-east-1"}, "remove": ["x-debug"]},
                   "override_params": {"temperature": 0.1, "max_tokens": 16}},
                  {"target": "second", "weight": 0,
                   "headers_override": {"set": {"x-region": "eu-west-1"}, "remove": ["authorization"]},
                   "override_params": {"temperature": 0.9}}])]}
    envoy = stack.envoy(config)

    r = post(envoy, {"x-debug": "1", "authorization": "Bearer client"}, temperature=0.5)

    assert r.status_code == 200
    assert r.headers["x-switchboard-resolved-model"] == "second"
    [to_first] = first.requests()
    [to_second] = second.requests()
    assert to_first["headers"]["x-region"] == "us-east-1"
    assert "x-debug" not in to_first["headers"]
    assert to_first["headers"]["authorization"] == "Bearer first-key"
    assert json.loads(to_first["body"]) == {"model": "first-upstream", **CHAT, "temperature": 0.1, "max_tokens": 16}
    # The fallback is rewritten from the client's request for the second target only.
    assert to_second["headers"]["x-region"] == "eu-west-1"
    assert to_second["headers"]["api-key"] == "second-key"
    assert "authorization" not in to_second["headers"], "neither first-key nor the removed client value"
    assert to_second["headers"]["x-debug"] == "1", "only the first target removes x-debug"
    assert json.loads(to_second["body"]) == {"model": "second-upstream", **CHAT, "temperature": 0.9}


def regional_config(**extra) -> dict:
    models = [{"name": n, "cluster": n, "model": f"{n}-upstream", "visibility": "internal"}
              for n in ("eu", "eu_zone", "anywhere")]
    return {"models": models, **extra, "virtual_models": [
        {"name": "regional", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "eu", "priority": 0, "metadata_match": {"gateway_region": "eu-west"}},
                {"target": "anywhere", "priority": 1}]}},
        {"name": "zonal", "model_types": ["chat"], "routing_config": {
            "type": "priority-based-routing", "load_balance_targets": [
                {"target": "eu_zone", "priority": 0, "metadata_match": {"gateway_zone": "eu-west-1b"}},
                {"target": "anywhere", "priority": 1}]}}]}


def resolver(envoy):
    def resolved(model: str, headers: dict | None = None) -> str:
        r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": model, **CHAT},
                          headers=headers or {}, timeout=10)
        assert r.status_code == 200, r.text
        return r.headers["x-switchboard-resolved-model"]
    return resolved


CLAIMS_US = {"x-switchboard-metadata": '{"gateway_region": "us-east", "gateway_zone": "us-east-1a"}'}
CLAIMS_EU = {"x-switchboard-metadata": '{"gateway_region": "eu-west", "gateway_zone": "eu-west-1b"}'}


@pytest.mark.native_gap(reason="the 1.40 ABI gives an HTTP filter no access to the node's locality")
def test_gateway_region_and_zone_come_from_envoys_node_locality(stack):
    """TrueFoundry virtual models, "Metadata-based target filtering": the gateway adds its own
    location to every request's metadata; here `gateway_region`/`gateway_zone` from
    `node.locality`, over the metadata header (gateway metadata "overrides request value for
    overlapping keys") and over the config's `gateway_location`."""
    for name in ("eu", "eu_zone", "anywhere"):
        stack.provider(name)
    config = regional_config(gateway_location={"region": "us-east", "zone": "us-east-1a"})
    envoy = stack.envoy(config, locality={"region": "eu-west", "zone": "eu-west-1b"})
    resolved = resolver(envoy)
    assert resolved("regional") == "eu", "no metadata sent: the gateway's region matches"
    assert resolved("zonal") == "eu_zone"
    # A client claiming another region does not move its request there.
    assert resolved("regional", CLAIMS_US) == "eu"
    assert resolved("zonal", CLAIMS_US) == "eu_zone"


def test_gateway_location_from_the_config_and_never_from_the_client(stack):
    """`gateway_location` gives both builds the gateway's location (the native build reads no
    node locality); a client's metadata header never sets `gateway_region`/`gateway_zone`,
    with a location known or not."""
    for name in ("eu", "eu_zone", "anywhere"):
        stack.provider(name)
    located = resolver(stack.envoy(regional_config(gateway_location={"region": "eu-west"})))
    assert located("regional") == "eu"
    assert located("regional", CLAIMS_US) == "eu"
    assert located("zonal") == "anywhere", "no zone configured"
    unlocated = resolver(stack.envoy(regional_config()))
    assert unlocated("regional", CLAIMS_EU) == "anywhere"
    assert unlocated("zonal", CLAIMS_EU) == "anywhere"
