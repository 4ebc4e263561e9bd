"""Every Envoy config the project ships passes `envoy --mode validate`, and so does the
loopback version of envoy/providers.yaml that end-to-end tests run.

What validate mode checks (Envoy 1.40, verified): it builds the whole server config without
opening a socket or resolving a DNS name, and it *does* start the Wasm VM: the .wasm must exist
(relative paths are read from the working directory, hence cwd = the repository root) and the
filter's on_configure runs, so an invalid plugin config fails validation with the filter's own
error. A `trusted_ca.filename` must exist and hold PEM certificates ("Invalid path: ..." or
"Failed to load trusted CA certificates from ..."). DNS names are not resolved, so the
providers' hosts need not be reachable. Envoy itself does not need the `host_env_keys`
variables (an unset one is just not passed to the VM), but they do reach the VM in validate
mode and the filter resolves `${env:NAME}` when it loads the config, refusing an unset one
("environment variable `OPENAI_API_KEY` is not set"): so the variables a config names are set
here to dummy values.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests
import yaml

from harness import (BUILD, ENVOY_BIN, NATIVE_DIR, ROOT, WASM, build_artifact, envoy_config, free_ports, require,
                     to_native)
from providers_config import (SHIPPED, env_keys, for_test, for_test_dict, load, shipped_plugin_config,
                              wasm_config)

CONFIGS = sorted((ROOT / "envoy").glob("*.yaml"))
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def host_env_keys(node) -> set[str]:
    """Every variable named in a `host_env_keys` anywhere in a config."""
    found = set()
    if isinstance(node, dict):
        found.update(node.get("host_env_keys") or [])
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            found |= host_env_keys(value)
    return found


def validate(config: Path, cwd: Path = ROOT, keys: set[str] = frozenset(),
             extra_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`envoy --mode validate -c config`; with the native build, of the same config with the
    native module in the Wasm filter's place (validate mode loads it and runs its config check
    as it does the Wasm VM's)."""
    require(build_artifact(), f"the {BUILD} build")
    env = dict(os.environ)
    env.update({k: f"dummy-{k.lower()}" for k in keys})
    if BUILD == "native":
        env["ENVOY_DYNAMIC_MODULES_SEARCH_PATH"] = str(NATIVE_DIR)
        with tempfile.TemporaryDirectory(prefix="switchboard-validate-") as tmp:
            native = Path(tmp) / (config.stem + ".native.json")
            native.write_text(json.dumps(to_native(load(cwd / config)), indent=1))
            result = subprocess.run(
                [str(require(ENVOY_BIN, "Envoy")), "--mode", "validate", "-c", str(native),
                 "--log-level", "warning", *extra_args],
                cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        # Report it under the name of the config it was made from.
        result.stdout = result.stdout.replace(str(native), str(config))
        result.stderr = result.stderr.replace(str(native), str(config))
        return result
    return subprocess.run(
        [str(require(ENVOY_BIN, "Envoy")), "--mode", "validate", "-c", str(config), "--log-level", "warning",
         *extra_args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def assert_valid(result: subprocess.CompletedProcess, config: Path) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"envoy --mode validate -c {config} failed:\n{output[-4000:]}"
    assert f"configuration '{config}' OK" in output, output[-4000:]


@pytest.mark.build_independent
def test_every_shipped_config_is_covered():
    assert SHIPPED in CONFIGS and ROOT / "envoy" / "demo.yaml" in CONFIGS and ROOT / "envoy" / "jwt.yaml" in CONFIGS


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_shipped_config_validates(config: Path):
    rel = config.relative_to(ROOT)
    assert_valid(validate(rel, keys=host_env_keys(load(config))), rel)


@pytest.mark.build_independent
def test_providers_config_names_its_keys_only_through_the_environment():
    """Keys come from host_env_keys as ${env:NAME}; none is written into the config."""
    assert "key_values" not in json.dumps(load())
    names = set(env_keys())
    assert names == {"SWITCHBOARD_RESPONSE_ID_KEY", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY",
                     "ANTHROPIC_API_KEY", "VLLM_API_KEY"}
    plugin = shipped_plugin_config()
    for model in plugin["models"]:
        for value in model.get("headers", {}).values():
            assert "${env:" in value, (model["name"], "a key written into the config")
            referenced = value.split("${env:", 1)[1].split("}", 1)[0]
            assert referenced in names, (model["name"], value)
    # The response id key too: never the public built-in one (README "Responses API").
    assert plugin["response_id_keys"] == ["${env:SWITCHBOARD_RESPONSE_ID_KEY}"]


# Every shipped file that holds a Switchboard plugin config.
PLUGIN_CONFIGS = [ROOT / p for p in ("envoy/demo.yaml", "envoy/jwt.yaml", "envoy/providers.yaml",
                                     "envoy/ecds/switchboard.yaml", "deploy/compose/envoy.yaml",
                                     "deploy/istio/envoyfilter.yaml")]


@pytest.mark.build_independent
@pytest.mark.parametrize("config", PLUGIN_CONFIGS, ids=[str(c.relative_to(ROOT)) for c in PLUGIN_CONFIGS])
def test_every_shipped_config_mints_response_ids_with_a_key_from_the_environment(config: Path):
    """A shipped config without `response_id_keys` would mint ids with the built-in key, which
    anyone can read and forge ids with."""
    text = config.read_text()
    assert '"response_id_keys": ["${env:SWITCHBOARD_RESPONSE_ID_KEY}"]' in text, config
    assert "SWITCHBOARD_RESPONSE_ID_KEY" in host_env_keys(list(yaml.safe_load_all(text))), config


@pytest.mark.build_independent
def test_providers_config_has_the_catalog_tests_rely_on():
    pc = shipped_plugin_config()
    models = {m["name"]: m for m in pc["models"]}
    assert {n: (m["cluster"], m["model"]) for n, m in models.items()} == {
        "openai/gpt-4o": ("openai", "gpt-4o"),
        "openai/gpt-4o-mini": ("openai", "gpt-4o-mini"),
        "azure/gpt-4o": ("azure_openai", "gpt-4o"),
        "anthropic/claude-sonnet": ("anthropic", "claude-sonnet-4-5"),
        "vllm/llama-3.1-8b": ("vllm", "meta-llama/Llama-3.1-8B-Instruct"),
    }
    assert [v["name"] for v in pc["virtual_models"]] == ["prod/chat", "prod/claude", "prod/auto"]
    clusters = {c["name"] for c in load()["static_resources"]["clusters"]}
    assert {m["cluster"] for m in models.values()} == clusters


def loopback(tmp_path: Path, plugin_config: dict | None = None) -> tuple[dict, dict]:
    """(shipped bootstrap, for_test_dict of it) with every cluster on loopback."""
    ca = tmp_path / "ca.pem"
    shutil.copy(SYSTEM_CA, ca)
    listen, admin, *ports = free_ports(6)
    names = [c["name"] for c in load()["static_resources"]["clusters"]]
    upstreams = {name: ("127.0.0.1", port) for name, port in zip(names, ports)}
    return load(), for_test_dict(listen, admin, upstreams, str(ca), str(WASM), plugin_config)


@pytest.mark.build_independent
def test_for_test_changes_only_addresses_ca_wasm_and_plugin_config(tmp_path: Path):
    shipped, test = loopback(tmp_path, plugin_config={"models": []})
    # Put the shipped values back where for_test may change them: the rest must be identical.
    assert test["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    test["admin"] = shipped["admin"]
    tl, sl = test["static_resources"]["listeners"][0], shipped["static_resources"]["listeners"][0]
    assert tl["address"]["socket_address"]["address"] == "127.0.0.1"
    tl["address"] = sl["address"]
    tw, sw = wasm_config(test), wasm_config(shipped)
    assert tw["vm_config"]["code"]["local"]["filename"] == str(WASM)
    assert json.loads(tw["configuration"]["value"]) == {"models": []}
    tw["vm_config"]["code"] = sw["vm_config"]["code"]
    tw["configuration"] = sw["configuration"]
    for tc, sc in zip(test["static_resources"]["clusters"], shipped["static_resources"]["clusters"]):
        assert tc["type"] == "STATIC"
        assert tc["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"]["address"] == "127.0.0.1"
        if "transport_socket" in sc:
            ca = tc["transport_socket"]["typed_config"]["common_tls_context"]["validation_context"]["trusted_ca"]
            assert ca["filename"] == str(tmp_path / "ca.pem")
            tc["transport_socket"] = sc["transport_socket"]
        for key in ("type", "load_assignment", "dns_lookup_family"):
            tc.pop(key, None)
            sc.pop(key, None)
    assert test == shipped


def test_for_test_output_validates(tmp_path: Path):
    """The loopback config validates from any working directory (the .wasm path is absolute)."""
    _, test = loopback(tmp_path)
    path = tmp_path / "envoy.yaml"
    path.write_text(json.dumps(test, indent=1))
    assert_valid(validate(path, cwd=tmp_path, keys=set(env_keys())), path)


@pytest.mark.build_independent
def test_for_test_refuses_an_unknown_cluster(tmp_path: Path):
    with pytest.raises(KeyError, match=r"no cluster named \[.openai_east.\]"):
        for_test(1, 2, {"openai_east": ("127.0.0.1", 3)}, str(SYSTEM_CA), str(WASM))


def test_validate_runs_the_filters_config_check(tmp_path: Path):
    """Validate mode starts the Wasm VM (loads the native module): a plugin config the filter
    refuses fails validation."""
    refused = {
        "models": [{"name": "a", "cluster": "openai", "model": "gpt-4o"}],
        "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
            "type": "weight-based-routing", "load_balance_targets": [{"target": "a", "weight": 120}]}}],
    }
    _, test = loopback(tmp_path, plugin_config=refused)
    path = tmp_path / "envoy.yaml"
    path.write_text(json.dumps(test, indent=1))
    result = validate(path, cwd=tmp_path, keys=set(env_keys()))
    assert result.returncode != 0
    assert ("virtual_models[0].routing_config.load_balance_targets[0].weight: "
            "expected an integer from 0 to 100, got 120") in result.stdout + result.stderr


ROUTER_PATH_ONLY = "the router path is the .wasm's; the native module streams every attempt itself"


def with_router_vm(bootstrap: dict, name: str) -> dict:
    """The plugin config of `bootstrap`'s Switchboard filter with virtual model `name` on the
    router path, written back into the filter (so the file and the filter agree)."""
    plugin = json.loads(wasm_config(bootstrap)["configuration"]["value"])
    vm = next(vm for vm in plugin["virtual_models"] if vm["name"] == name)
    vm["stream_fallbacks"] = "router"
    wasm_config(bootstrap)["configuration"]["value"] = json.dumps(plugin)
    return plugin


def route_of_router_path(bootstrap: dict) -> dict:
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["route_config"]["virtual_hosts"][0]["routes"][0]


@pytest.mark.wasm_only(reason=ROUTER_PATH_ONLY)
def test_envoy_config_on_the_demo_validates(tmp_path: Path):
    """`switchboard envoy-config` on envoy/demo.yaml with one router-path virtual model: Envoy
    builds the clusters with the upstream pass, the filters (the reroute pass under its
    matcher) and the route's priority-group specifier, and starts every pass's VM."""
    demo = load(ROOT / "envoy" / "demo.yaml")
    plugin = with_router_vm(demo, "my-group/resilient-chat")
    out = envoy_config(demo, plugin, tmp_path)
    clusters = [c["name"] for c in out["static_resources"]["clusters"]]
    assert clusters[4:] == ["openai_east--router", "openai_west--router", "azure_east--router"]
    assert route_of_router_path(out)["match"]["headers"][0]["name"] == "x-switchboard-route"
    path = tmp_path / "demo-router.json"
    path.write_text(json.dumps(out, indent=1))
    assert_valid(validate(path, keys=host_env_keys(out)), path)
    # Validation reaches the route: a group naming no cluster fails it.
    specifier = route_of_router_path(out)["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
    specifier["priority_groups"][0]["clusters"][0]["cluster_name"] = "nowhere"
    path.write_text(json.dumps(out, indent=1))
    result = validate(path, keys=host_env_keys(out))
    assert result.returncode != 0 and "unknown cluster 'nowhere'" in result.stdout + result.stderr


@pytest.mark.wasm_only(reason=ROUTER_PATH_ONLY)
def test_envoy_config_on_the_providers_config_validates(tmp_path: Path):
    """The same on the loopback envoy/providers.yaml, whose hosted providers' clusters have TLS
    and HTTP/2 by auto_config: the router copies keep both (vLLM's stays plain HTTP/1.1)."""
    _, test = loopback(tmp_path)
    plugin = with_router_vm(test, "prod/chat")
    out = envoy_config(test, plugin, tmp_path)
    clusters = {c["name"]: c for c in out["static_resources"]["clusters"]}
    key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    copies = [n for n in clusters if n.endswith("--router")]
    assert "openai--router" in copies and "vllm--router" in copies, copies
    for name in copies:
        copy, original = clusters[name], clusters[name.removesuffix("--router")]
        options = dict(copy["typed_extension_protocol_options"][key])
        assert [f["name"] for f in options.pop("http_filters")] == ["switchboard_upstream",
                                                                    "envoy.filters.http.upstream_codec"]
        assert options == original.get("typed_extension_protocol_options", {}).get(key, options), name
        assert copy.get("transport_socket") == original.get("transport_socket"), name
    assert "auto_config" in clusters["openai--router"]["typed_extension_protocol_options"][key]
    path = tmp_path / "providers-router.json"
    path.write_text(json.dumps(out, indent=1))
    assert_valid(validate(path, cwd=tmp_path, keys=set(env_keys())), path)


@pytest.mark.wasm_only(reason=ROUTER_PATH_ONLY)
def test_a_stack_on_the_router_path_runs_envoy_config(stack):
    """`Stack.envoy(router_path=True)`: the virtual models take the router path and the Envoy
    started has the router clusters (its admin /clusters lists them)."""
    stack.provider("alpha")
    stack.provider("beta")
    plugin = {"models": [{"name": "a", "cluster": "alpha", "model": "m"},
                         {"name": "b", "cluster": "beta", "model": "m"}],
              "virtual_models": [
                  {"name": "vm", "model_types": ["chat"], "routing_config": {
                      "type": "priority-based-routing", "load_balance_targets": [
                          {"target": "a", "priority": 0}, {"target": "b", "priority": 1}]}},
                  {"name": "kept", "model_types": ["chat"], "stream_fallbacks": "call_out", "routing_config": {
                      "type": "weight-based-routing", "load_balance_targets": [{"target": "b", "weight": 100}]}}]}
    envoy = stack.envoy(plugin, router_path=True)
    dumped = json.loads((Path(envoy.workdir.name) / "plugin.json").read_text())
    assert [vm.get("stream_fallbacks") for vm in dumped["virtual_models"]] == ["router", "call_out"]
    clusters = {line.split("::", 1)[0] for line in
                requests.get(f"http://127.0.0.1:{envoy.admin_port}/clusters", timeout=5).text.splitlines()}
    assert {"alpha--router", "beta--router"} <= clusters, clusters
