"""deploy/istio, checked without a cluster (none runs here).

istio_model.py builds the Envoy config Istio would give the gateway from the manifests (the
clusters of the ServiceEntries and DestinationRules, the gateway listener, every EnvoyFilter
patch, the Wasm module as Istio's agent hands it over). That config must pass
`envoy --mode validate` with the real .wasm (validate mode starts the VM and runs the filter's
own config check), must serve requests through a real Envoy to strict mock providers over TLS,
and the manifests must agree with each other and with envoy/providers.yaml.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import anthropic
import openai
import requests
import pytest
import yaml

import providers_config
from harness import ROOT, WASM, TestCA
from istio_model import (WASM_TYPE, bootstrap, bootstrap_override, config_patches, extension_config,
                         gateway_port, http_filters, manifests, of_kind, one, parse_cluster_name,
                         patched_clusters, switchboard_config, wasm_plugin_config)
from test_envoy_configs import assert_valid, validate
from test_real_providers import (ANTHROPIC, AZURE, CHAT, OPENAI, accepted, assert_azure_shape,
                                 assert_openai_shape, start_on_loopback, strict_tls_mocks)

pytestmark = pytest.mark.wasm_only(
    reason="Istio's Wasm recipe installs the .wasm (WasmPlugin, EnvoyFilter); test_istio_native.py checks the"
    " native module's")

KEYS = {"OPENAI_API_KEY": OPENAI[1], "AZURE_OPENAI_API_KEY": AZURE[1], "ANTHROPIC_API_KEY": ANTHROPIC[1]}


def host_env_keys(docs: list[dict]) -> list[str]:
    return wasm_plugin_config(docs)["vm_config"]["environment_variables"]["host_env_keys"]


def validate_istio(tmp_path: Path, docs: list[dict], ecds: bool = False):
    """`envoy --mode validate` on the modelled gateway config, with the bootstrap override
    passed as Istio's agent passes it."""
    config = bootstrap(docs, WASM, ecds_file=tmp_path / "ecds.json" if ecds else None)
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config, indent=1))
    result = validate(path, cwd=tmp_path, keys=set(host_env_keys(docs)),
                      extra_args=("--config-yaml", bootstrap_override(docs)))
    return path, result


def test_the_gateway_config_validates_with_the_filter_running(tmp_path: Path):
    path, result = validate_istio(tmp_path, manifests())
    assert_valid(result, path)


def test_the_gateway_config_validates_with_the_filter_from_ecds(tmp_path: Path):
    path, result = validate_istio(tmp_path, manifests(), ecds=True)
    assert_valid(result, path)


def test_validation_runs_the_filters_check_of_the_istio_plugin_config(tmp_path: Path):
    docs = manifests()
    plugin = switchboard_config(docs)
    plugin["virtual_models"][0]["routing_config"]["load_balance_targets"][0]["priority"] = -1
    wasm_plugin_config(docs)["configuration"]["value"] = json.dumps(plugin)
    _, result = validate_istio(tmp_path, docs)
    assert result.returncode != 0
    assert "virtual_models[0].routing_config.load_balance_targets[0].priority" in result.stdout + result.stderr


def test_the_gateway_serves_virtual_models_through_the_istio_config(stack, tmp_path, monkeypatch):
    """The modelled config run for real: the filter's config arrives over (file) ECDS, the
    cluster_header route reaches Istio's cluster names, TLS carries each host's SNI, the keys
    come from the environment, and the VirtualService's route passes other traffic to OpenAI."""
    serve_virtual_models(stack, tmp_path, monkeypatch, manifests(), WASM)


def serve_virtual_models(stack, tmp_path: Path, monkeypatch, docs: list[dict], wasm_path: Path | None) -> None:
    """Runs the gateway config Istio would give from `docs` against strict mock providers and
    checks routing, fallback, keys, SNI and the passthrough (test_istio_native.py runs it on the
    native module's recipe)."""
    ca = TestCA(tmp_path / "ca")
    mocks = strict_tls_mocks(stack, ca, monkeypatch)
    config = bootstrap(docs, wasm_path, ca_file=str(ca.ca_path), ecds_file=tmp_path / "ecds.json")
    for cluster in config["static_resources"]["clusters"]:
        host, _ = parse_cluster_name(cluster["name"])
        cluster.update(type="STATIC")
        cluster.pop("dns_lookup_family")
        socket = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        socket.update(address="127.0.0.1", port_value=mocks[host].port)
    envoy = start_on_loopback(stack, config)

    # A client-sent cluster header does not steer the request: the filter overwrites it.
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=30,
                      json={"model": "prod/chat", "messages": CHAT},
                      headers={"x-switchboard-cluster": "outbound|80||api.anthropic.com"})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "openai/gpt-4o"
    [seen] = accepted(mocks[OPENAI[0]])
    assert_openai_shape(seen)

    mocks[OPENAI[0]].configure(fail_status=503, fail_rate=1.0)
    client = openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="gateway-client-key", max_retries=0)
    answer = client.chat.completions.with_raw_response.create(model="prod/chat", messages=CHAT)
    assert answer.headers["x-switchboard-resolved-model"] == "azure/gpt-4o"
    [seen] = accepted(mocks[AZURE[0]])
    assert_azure_shape(seen)

    sdk = anthropic.Anthropic(base_url=envoy.url, api_key="gateway-client-key", max_retries=0)
    assert sdk.messages.create(model="prod/claude", max_tokens=16, messages=CHAT).content[0].text
    [seen] = accepted(mocks[ANTHROPIC[0]])
    assert (seen["sni"], seen["authority"], seen["headers"]["x-api-key"]) == (ANTHROPIC[0], ANTHROPIC[0], ANTHROPIC[1])

    # Not Switchboard's: the VirtualService route, to OpenAI as the client sent it, Host
    # rewritten. (The mock serves no /v1/files and answers 404 itself.)
    mocks[OPENAI[0]].clear()
    r = requests.get(f"{envoy.url}/v1/files", timeout=30, headers={"authorization": "Bearer client-own-key"})
    assert (r.status_code, r.headers.get("x-mock-provider")) == (404, "openai"), r.text
    [seen] = mocks[OPENAI[0]].requests()
    assert (seen["sni"], seen["authority"], seen["path"]) == (OPENAI[0], OPENAI[0], "/v1/files")
    assert seen["headers"]["authorization"] == "Bearer client-own-key"


def test_the_filter_is_installed_the_way_wasmplugin_cannot():
    docs = manifests()
    plugin = wasm_plugin_config(docs)
    assert plugin["allow_on_headers_stop_iteration"] is True
    assert plugin["failure_policy"] in {"FAIL_RELOAD", "FAIL_CLOSED"}, "FAIL_OPEN lets requests bypass routing"
    uri = plugin["vm_config"]["code"]["remote"]["http_uri"]["uri"]
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert re.fullmatch(rf"oci://[^/]+(/[a-z0-9._-]+)*/switchboard-wasm:{re.escape(version)}", uri), uri

    [patch] = config_patches(docs, "HTTP_FILTER")
    filter_entry = patch["patch"]["value"]
    assert filter_entry["name"] == extension_config(docs)["name"]
    assert filter_entry["config_discovery"]["config_source"]["ads"] == {}
    assert filter_entry["config_discovery"]["type_urls"] == [WASM_TYPE]
    assert [f["name"] for f in http_filters(bootstrap(docs, WASM))] == ["switchboard", "envoy.filters.http.router"]


def test_provider_keys_come_from_the_secret_by_name_only():
    docs = manifests()
    keys = host_env_keys(docs)
    assert "key_values" not in json.dumps(wasm_plugin_config(docs)["vm_config"])
    [container] = [c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "istio-proxy"]
    env = {e["name"]: e for e in container["env"]}
    for key in keys:
        assert "value" not in env[key], f"{key} is written into the Deployment"
        assert env[key]["valueFrom"]["secretKeyRef"]["key"] == key
    for model in switchboard_config(docs)["models"]:
        for header, value in model["headers"].items():
            names = re.findall(r"\$\{env:([A-Z_]+)\}", value)
            assert names and set(names) <= set(keys), (model["name"], header)


def test_every_target_cluster_is_a_service_entry_with_tls_to_its_host():
    docs = manifests()
    clusters = {c["name"]: c for c in patched_clusters(docs)}
    for model in switchboard_config(docs)["models"]:
        host, _ = parse_cluster_name(model["cluster"])
        cluster = clusters[model["cluster"]]
        tls = cluster["transport_socket"]["typed_config"]
        assert tls["sni"] == host == model["authority"]
        sans = tls["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"]
        assert [s["matcher"]["exact"] for s in sans] == [host]
        endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
        assert endpoint["socket_address"]["port_value"] == 443


def test_the_providers_mirror_envoy_providers_yaml():
    docs = manifests()
    shipped = providers_config.load()
    shipped_clusters = {c["name"]: c for c in shipped["static_resources"]["clusters"]}
    tls_hosts = {name: c["transport_socket"]["typed_config"]["sni"]
                 for name, c in shipped_clusters.items() if "transport_socket" in c}
    assert {h for e in of_kind(docs, "ServiceEntry") for h in e["spec"]["hosts"]} == set(tls_hosts.values())

    shipped_plugin = providers_config.shipped_plugin_config()
    shipped_models = {m["name"]: m for m in shipped_plugin["models"]}
    istio_plugin = switchboard_config(docs)
    for model in istio_plugin["models"]:
        twin = shipped_models[model["name"]]
        assert parse_cluster_name(model["cluster"])[0] == tls_hosts[twin["cluster"]]
        assert {**model, "cluster": None} == {**twin, "cluster": None}, model["name"]
    assert istio_plugin["max_request_body_bytes"] == shipped_plugin["max_request_body_bytes"]

    [shipped_listener] = shipped["static_resources"]["listeners"]
    [listener] = bootstrap(docs, WASM)["static_resources"]["listeners"]
    assert listener["per_connection_buffer_limit_bytes"] == shipped_listener["per_connection_buffer_limit_bytes"]
    for cluster in patched_clusters(docs):
        assert cluster["per_connection_buffer_limit_bytes"] == shipped_clusters["openai"]["per_connection_buffer_limit_bytes"]


def test_the_buffer_limit_is_above_the_filters_body_limit():
    docs = manifests()
    [listener] = bootstrap(docs, WASM)["static_resources"]["listeners"]
    assert listener["per_connection_buffer_limit_bytes"] > switchboard_config(docs)["max_request_body_bytes"]


def test_selectors_namespaces_and_ports_line_up():
    docs = manifests()
    assert {d["metadata"]["namespace"] for d in docs} == {"switchboard"}
    pod = one(docs, "Deployment")["spec"]["template"]["metadata"]
    labels = pod["labels"]
    for envoy_filter in of_kind(docs, "EnvoyFilter"):
        assert envoy_filter["spec"]["workloadSelector"]["labels"].items() <= labels.items()
    assert one(docs, "Gateway")["spec"]["selector"].items() <= labels.items()
    service = one(docs, "Service")["spec"]
    assert service["selector"].items() <= labels.items()
    port = gateway_port(docs)
    assert [p["targetPort"] for p in service["ports"]] == [port]
    for apply_to in ("HTTP_FILTER", "LISTENER"):
        assert {p["match"]["listener"]["portNumber"] for p in config_patches(docs, apply_to)} == {port}
    assert {p["match"]["routeConfiguration"]["portNumber"] for p in config_patches(docs, "HTTP_ROUTE")} == {port}
    assert one(docs, "VirtualService")["spec"]["gateways"] == [one(docs, "Gateway")["metadata"]["name"]]
    [configmap] = of_kind(docs, "ConfigMap")
    assert pod["annotations"]["sidecar.istio.io/bootstrapOverride"] == configmap["metadata"]["name"]


def test_the_stats_rules_are_the_ones_every_shipped_envoy_config_has():
    override = json.loads(bootstrap_override(manifests()))["stats_config"]
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "envoy.yaml").read_text())["stats_config"]
    assert override == compose
    for path in sorted((ROOT / "envoy").glob("*.yaml")):
        shipped = yaml.safe_load(path.read_text()).get("stats_config")
        if shipped is not None:
            assert shipped == override, f"{path.name} and deploy/istio disagree on stats_config"


def extract_tags(name: str, rules: list[dict]) -> tuple[str, dict]:
    """Envoy's tag extraction: every rule is matched against the full name; the first group is
    cut out of the name and the second is the tag's value."""
    tags, cut = {}, []
    for rule in rules:
        m = re.search(rule["regex"], name)
        if m:
            tags[rule["tag_name"]] = m.group(2)
            cut.append(m.span(1))
    kept = "".join(c for i, c in enumerate(name) if not any(a <= i < b for a, b in cut))
    return kept, tags


def test_the_stats_rules_label_switchboard_metric_names():
    rules = json.loads(bootstrap_override(manifests()))["stats_config"]["stats_tags"]
    assert extract_tags("wasmcustom.switchboard.requests.vm.my-group/production-chat.target.openai/gpt-4.1:latest",
                        rules) == ("wasmcustom.switchboard.requests",
                                   {"virtual_model": "my-group/production-chat", "target": "openai/gpt-4.1:latest"})
    assert extract_tags("wasmcustom.switchboard.answers.class.2xx.vm.prod/chat.target.azure/gpt-4o", rules) == (
        "wasmcustom.switchboard.answers", {"class": "2xx", "virtual_model": "prod/chat", "target": "azure/gpt-4o"})
    assert extract_tags("wasmcustom.switchboard.fallbacks.reason.connect_failure.vm.prod/chat.target.azure/gpt-4o",
                        rules)[1] == {"reason": "connect_failure", "virtual_model": "prod/chat", "target": "azure/gpt-4o"}
    assert extract_tags("wasmcustom.switchboard.decision_us.vm.prod/auto", rules) == (
        "wasmcustom.switchboard.decision_us", {"virtual_model": "prod/auto"})
