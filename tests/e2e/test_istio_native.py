"""deploy/istio/native, the native module's Istio recipe, checked without a cluster (none runs
here), as test_istio.py checks the Wasm one.

istio_model.py builds, from the shared manifests and native/, the Envoy config Istio would give
the gateway. It must pass `envoy --mode validate` with the real libswitchboard.so (validate mode
loads the module and runs its own check of the plugin config), found by name in the folder
ENVOY_DYNAMIC_MODULES_SEARCH_PATH names, as the gateway's Deployment sets it; it must serve
requests through a real Envoy to strict mock providers over TLS. The native files must differ
from the Wasm ones only where the module needs it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import ENVOY_BIN, NATIVE_DIR, NATIVE_MODULE, require
from istio_model import (ISTIO_DIR, NATIVE_TYPE, SHARED_FILES, bootstrap, bootstrap_override,
                         config_patches, extension_config, http_filters, manifests, native_filter_config,
                         native_manifests, one, switchboard_config)
from istio_model import NATIVE_DIR as ISTIO_NATIVE_DIR
from test_istio import serve_virtual_models

NATIVE_ONLY = pytest.mark.native_only(reason="Istio's recipe for the native module loads libswitchboard.so")
STATIC = pytest.mark.build_independent


def proxy_container(docs: list[dict]) -> dict:
    [container] = [c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "istio-proxy"]
    return container


def validate_native(tmp_path: Path, docs: list[dict], ecds: bool = False) -> tuple[Path, subprocess.CompletedProcess]:
    """`envoy --mode validate` on the modelled gateway config, with the module where the
    Deployment's search path would find it (here: target/native) and the bootstrap override
    passed as Istio's agent passes it."""
    require(NATIVE_MODULE, "the native build (cargo build --profile native --lib)")
    config = bootstrap(docs, ecds_file=tmp_path / "ecds.json" if ecds else None)
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config, indent=1))
    env = {**os.environ, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH": str(NATIVE_DIR)}
    env.update({k: f"dummy-{k.lower()}" for k in switchboard_config(docs)["env_keys"]})
    result = subprocess.run(
        [str(require(ENVOY_BIN, "Envoy")), "--mode", "validate", "-c", str(path), "--log-level", "info",
         "--config-yaml", bootstrap_override(docs)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return path, result


def assert_valid_with_module(path: Path, result: subprocess.CompletedProcess, loaded: bool = True) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"envoy --mode validate -c {path} failed:\n{output[-4000:]}"
    assert f"configuration '{path}' OK" in output, output[-4000:]
    if loaded:
        # Envoy loaded this module (its ABI check) and the module read the plugin config.
        assert "Dynamic module ABI version v0.2.0 matched" in output, output[-4000:]
        assert "4 models and 3 virtual models" in output, output[-4000:]


@NATIVE_ONLY
def test_the_gateway_config_validates_with_the_module_loaded(tmp_path: Path):
    path, result = validate_native(tmp_path, native_manifests())
    assert_valid_with_module(path, result)


@NATIVE_ONLY
def test_the_gateway_config_validates_with_the_module_config_from_ecds(tmp_path: Path):
    # Validate mode checks the discovery stanza but reads no ECDS file: no module is loaded.
    path, result = validate_native(tmp_path, native_manifests(), ecds=True)
    assert_valid_with_module(path, result, loaded=False)


@NATIVE_ONLY
def test_validation_runs_the_modules_check_of_the_plugin_config(tmp_path: Path):
    docs = native_manifests()
    plugin = switchboard_config(docs)
    plugin["virtual_models"][0]["routing_config"]["load_balance_targets"][0]["priority"] = -1
    native_filter_config(docs)["filter_config"]["value"] = json.dumps(plugin)
    _, result = validate_native(tmp_path, docs)
    assert result.returncode != 0
    assert "virtual_models[0].routing_config.load_balance_targets[0].priority" in result.stdout + result.stderr


@NATIVE_ONLY
def test_a_module_missing_from_the_search_path_fails_validation(tmp_path: Path):
    """What a gateway whose volume is not mounted would do: the config is refused, not served
    without Switchboard."""
    empty = tmp_path / "empty"
    empty.mkdir()
    config = bootstrap(native_manifests())
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH": str(empty)}
    result = subprocess.run([str(require(ENVOY_BIN, "Envoy")), "--mode", "validate", "-c", str(path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "libswitchboard.so" in result.stdout + result.stderr


@NATIVE_ONLY
def test_the_gateway_serves_virtual_models_through_the_native_istio_config(stack, tmp_path, monkeypatch):
    """The modelled config run for real with the module: the same requests and checks as the
    Wasm recipe's (test_istio.py)."""
    serve_virtual_models(stack, tmp_path, monkeypatch, native_manifests(), None)


@STATIC
def test_the_native_recipe_is_the_wasm_one_with_the_module_in_the_filters_place():
    wasm_docs, native_docs = manifests(), native_manifests()
    assert switchboard_config(native_docs) == switchboard_config(wasm_docs)
    assert config_patches(native_docs, "HTTP_ROUTE") == config_patches(wasm_docs, "HTTP_ROUTE")
    assert config_patches(native_docs, "LISTENER") == config_patches(wasm_docs, "LISTENER")
    assert config_patches(native_docs, "CLUSTER") == config_patches(wasm_docs, "CLUSTER")

    [wasm_patch], [native_patch] = config_patches(wasm_docs, "HTTP_FILTER"), config_patches(native_docs, "HTTP_FILTER")
    assert native_patch["patch"]["value"]["config_discovery"]["type_urls"] == [NATIVE_TYPE]
    strip = lambda p: {**p, "patch": {**p["patch"], "value": {  # noqa: E731
        **p["patch"]["value"], "config_discovery": {**p["patch"]["value"]["config_discovery"], "type_urls": None}}}}
    assert strip(native_patch) == strip(wasm_patch)
    assert [f["name"] for f in http_filters(bootstrap(native_docs))] == ["switchboard", "envoy.filters.http.router"]

    typed = native_filter_config(native_docs)
    assert typed["dynamic_module_config"]["name"] == "switchboard" == typed["filter_name"]
    assert extension_config(native_docs)["name"] == native_patch["patch"]["value"]["name"]
    # The module reads keys from Envoy's environment only for the names in env_keys: the
    # Wasm recipe's host_env_keys.
    wasm_keys = extension_config(wasm_docs)["typed_config"]["config"]["vm_config"]["environment_variables"]["host_env_keys"]
    assert switchboard_config(native_docs)["env_keys"] == wasm_keys


@STATIC
def test_the_native_gateway_differs_from_the_wasm_one_only_by_the_module():
    """native/gateway.yaml is ../gateway.yaml plus the module's volume, its mount and the
    search path: nothing else may drift."""
    wasm = [d for d in yaml.safe_load_all((ISTIO_DIR / "gateway.yaml").read_text()) if d]
    native = [d for d in yaml.safe_load_all((ISTIO_NATIVE_DIR / "gateway.yaml").read_text()) if d]
    assert [d for d in native if d["kind"] != "Deployment"] == [d for d in wasm if d["kind"] != "Deployment"]

    deployment = copy.deepcopy(one(native, "Deployment"))
    pod = deployment["spec"]["template"]["spec"]
    [volume] = pod.pop("volumes")
    container = proxy_container([deployment])
    [mount] = container.pop("volumeMounts")
    [path_env] = [e for e in container["env"] if e["name"] == "ENVOY_DYNAMIC_MODULES_SEARCH_PATH"]
    container["env"].remove(path_env)
    assert deployment == one(wasm, "Deployment")
    assert mount == {"name": volume["name"], "mountPath": path_env["value"], "readOnly": True}
    assert set(volume["image"]) == {"reference", "pullPolicy"}


@STATIC
def test_the_native_recipe_is_the_shared_files_and_native():
    """The README's install command applies exactly what native_manifests() models."""
    readme = (ISTIO_NATIVE_DIR / "README.md").read_text()
    files = [f"deploy/istio/{name}" for name in SHARED_FILES] + ["deploy/istio/native/"]
    command = "kubectl apply " + " ".join(f"-f {f}" for f in files)
    assert command in readme, command
    assert set(SHARED_FILES) < {p.name for p in ISTIO_DIR.glob("*.yaml")}
    assert {p.name for p in ISTIO_NATIVE_DIR.glob("*.yaml")} == {"envoyfilter.yaml", "gateway.yaml"}
