"""envoy/providers.yaml, made runnable on loopback for tests.

`for_test` keeps the shipped config as it is (listener and HTTP connection manager timeouts,
routes, TLS contexts with their SNI and SAN checks, HTTP protocol options, the Wasm VM and its
host_env_keys) and changes only what cannot work on a test machine: addresses and ports, the
CA bundle, the .wasm path and, when a test gives one, the plugin config. So an end-to-end test
through it exercises what users run.

    from providers_config import for_test, env_keys
    text = for_test(listen, admin, {"openai": ("127.0.0.1", tls_port)}, ca_file, str(WASM))
    envoy = start_envoy(text, ports=(listen, admin))   # with env_keys() set in os.environ

The result is JSON text, which is also YAML, so `start_envoy` can run it as it is.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

SHIPPED = Path(__file__).resolve().parents[2] / "envoy" / "providers.yaml"
WASM_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"


def load(path: Path = SHIPPED) -> dict:
    """The Envoy bootstrap in `path` (the shipped providers.yaml by default) as a dict."""
    with open(path) as f:
        return yaml.safe_load(f)


def wasm_config(bootstrap: dict) -> dict:
    """The Wasm `PluginConfig` (`{name, root_id, vm_config, configuration, ...}`) of the one
    Switchboard filter in the bootstrap; a change to it changes the bootstrap."""
    found = []
    for listener in bootstrap["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for net_filter in chain["filters"]:
                for http_filter in net_filter.get("typed_config", {}).get("http_filters", []):
                    typed = http_filter.get("typed_config", {})
                    if typed.get("@type") == WASM_FILTER_TYPE:
                        found.append(typed["config"])
    if len(found) != 1:
        raise ValueError(f"expected one Wasm filter in the bootstrap, found {len(found)}")
    return found[0]


def shipped_plugin_config(path: Path = SHIPPED) -> dict:
    """The Switchboard plugin config (the JSON in the filter's `configuration`) as a dict."""
    return json.loads(wasm_config(load(path))["configuration"]["value"])


def env_keys(path: Path = SHIPPED) -> list[str]:
    """The environment variables the Wasm VM takes from Envoy (`host_env_keys`): a test sets
    them (e.g. with monkeypatch.setenv) before starting Envoy, which inherits the environment."""
    return list(wasm_config(load(path))["vm_config"]["environment_variables"]["host_env_keys"])


def _set_trusted_ca(node, ca_file: str) -> int:
    """Points every `trusted_ca.filename` under `node` to `ca_file`; returns how many."""
    count = 0
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "trusted_ca" and isinstance(value, dict) and "filename" in value:
                value["filename"] = ca_file
                count += 1
            else:
                count += _set_trusted_ca(value, ca_file)
    elif isinstance(node, list):
        for item in node:
            count += _set_trusted_ca(item, ca_file)
    return count


def for_test_dict(listen_port: int, admin_port: int, upstreams: dict[str, tuple[str, int]],
                  ca_file: str, wasm_path: str, plugin_config: dict | str | None = None,
                  path: Path = SHIPPED) -> dict:
    """`for_test`, as a dict (to inspect or to change further before `json.dumps`)."""
    bootstrap = copy.deepcopy(load(path))
    bootstrap["admin"]["address"]["socket_address"].update(address="127.0.0.1", port_value=admin_port)
    listeners = bootstrap["static_resources"]["listeners"]
    if len(listeners) != 1:
        raise ValueError(f"expected one listener, found {len(listeners)}")
    listeners[0]["address"]["socket_address"].update(address="127.0.0.1", port_value=listen_port)

    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    unknown = sorted(set(upstreams) - set(clusters))
    if unknown:
        raise KeyError(f"no cluster named {unknown} in {path.name}; it has {sorted(clusters)}")
    for name, (host, port) in upstreams.items():
        c = clusters[name]
        # STATIC takes an IP address as it is: no DNS on the test machine. The transport socket
        # (TLS, SNI, SAN check) and the protocol options stay as shipped.
        c["type"] = "STATIC"
        c.pop("dns_lookup_family", None)
        c["load_assignment"] = {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": host, "port_value": port}}}}]}],
        }

    _set_trusted_ca(bootstrap, ca_file)
    wasm = wasm_config(bootstrap)
    wasm["vm_config"]["code"]["local"]["filename"] = str(wasm_path)
    if plugin_config is not None:
        value = plugin_config if isinstance(plugin_config, str) else json.dumps(plugin_config, indent=1)
        wasm["configuration"]["value"] = value
    return bootstrap


def for_test(listen_port: int, admin_port: int, upstreams: dict[str, tuple[str, int]], ca_file: str,
             wasm_path: str, plugin_config: dict | str | None = None) -> str:
    """envoy/providers.yaml with the listener on 127.0.0.1:`listen_port`, the admin interface on
    127.0.0.1:`admin_port`, each cluster named in `upstreams` made `STATIC` at its (IP, port),
    every `trusted_ca.filename` set to `ca_file`, the .wasm at `wasm_path` and, when given, the
    plugin config replaced. Clusters not in `upstreams` keep their DNS names. Returns JSON text
    (valid YAML) for `harness.start_envoy(text, ports=(listen_port, admin_port))`."""
    return json.dumps(for_test_dict(listen_port, admin_port, upstreams, ca_file, wasm_path, plugin_config),
                      indent=1)
