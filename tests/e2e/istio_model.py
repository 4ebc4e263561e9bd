"""The Envoy config Istio gives the switchboard-gateway proxies from the manifests in
deploy/istio, modelled so that `envoy --mode validate` can check it without a cluster.

What the model does, and where Istio does it (Istio 1.28 sources):
- Each ServiceEntry port becomes a cluster `outbound|<port>||<host>` (resolution DNS_ROUND_ROBIN
  is LOGICAL_DNS, DNS is STRICT_DNS; the endpoint is the host at `targetPort`), and its
  DestinationRule's `tls` for that port an UpstreamTlsContext with the SNI, the subject alt
  names and the system CA bundle when `caCertificates` is unset
  (pilot/pkg/networking/core/cluster.go, cluster_tls.go).
- The Gateway server becomes a listener on its port with an HTTP connection manager whose
  filters end with the router, and the VirtualService routes a virtual host `*:<port>`.
- The EnvoyFilter patches are applied the way pilot/pkg/networking/core/envoyfilter applies
  them: MERGE is a protobuf merge (maps merged, lists appended, scalars replaced),
  INSERT_BEFORE puts an HTTP filter before the one its subFilter names, INSERT_FIRST puts a
  route first in the virtual hosts of the matched route configuration, EXTENSION_CONFIG ADD
  defines an extension config served over ECDS. A patch the model cannot place is an error,
  never skipped.
- Istio's agent rewrites a remote Wasm code source (the oci:// image) to the local file it
  pulled (pkg/wasm/convert.go); here the local file is the .wasm `make build` produced. It
  leaves other extension configs alone: the native module's (deploy/istio/native) reaches Envoy
  as written, and Envoy loads libswitchboard.so from its search path.
- The bootstrap override ConfigMap reaches Envoy as `--config-yaml` (pkg/envoy/proxy.go).

What it does not model: Istio's own filters, stats rules, TLS certificates for mTLS, and the
Istio-side validation of the resources (istioctl is not installed here).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from harness import ROOT

ISTIO_DIR = ROOT / "deploy" / "istio"
# The native module's recipe: native/ replaces envoyfilter.yaml and gateway.yaml, and shares
# the other files (deploy/istio/native/README.md).
NATIVE_DIR = ISTIO_DIR / "native"
SHARED_FILES = ("providers.yaml", "routing.yaml", "bootstrap-override.yaml")
WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
NATIVE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"
HCM = "envoy.filters.network.http_connection_manager"
ROUTER = "envoy.filters.http.router"
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


def manifests(directory: Path = ISTIO_DIR) -> list[dict]:
    """Every Kubernetes object in the directory's YAML files."""
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def native_manifests() -> list[dict]:
    """The objects of the native module's recipe: the shared files, then native/."""
    docs = []
    for path in [ISTIO_DIR / name for name in SHARED_FILES] + sorted(NATIVE_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def config_patches(docs: list[dict], apply_to: str) -> list[dict]:
    return [p for f in of_kind(docs, "EnvoyFilter") for p in f["spec"]["configPatches"]
            if p["applyTo"] == apply_to]


def extension_config(docs: list[dict]) -> dict:
    """The one TypedExtensionConfig the EnvoyFilters add (EXTENSION_CONFIG)."""
    [patch] = config_patches(docs, "EXTENSION_CONFIG")
    assert patch["patch"]["operation"] == "ADD", "Istio only applies ADD to EXTENSION_CONFIG"
    return patch["patch"]["value"]


def wasm_plugin_config(docs: list[dict]) -> dict:
    """The Wasm PluginConfig (`config` of the extension config's Wasm filter)."""
    typed = extension_config(docs)["typed_config"]
    assert typed["@type"] == WASM_TYPE
    return typed["config"]


def native_filter_config(docs: list[dict]) -> dict:
    """The DynamicModuleFilter of the native module's extension config."""
    typed = extension_config(docs)["typed_config"]
    assert typed["@type"] == NATIVE_TYPE
    return typed


def switchboard_config(docs: list[dict]) -> dict:
    """The Switchboard plugin config (the JSON in the Wasm filter's `configuration`, or in the
    native filter's `filter_config`)."""
    if extension_config(docs)["typed_config"]["@type"] == NATIVE_TYPE:
        return json.loads(native_filter_config(docs)["filter_config"]["value"])
    return json.loads(wasm_plugin_config(docs)["configuration"]["value"])


def proto_merge(dst: dict, src: dict) -> dict:
    """A protobuf merge of JSON-shaped messages, as Istio's MERGE does: in place, returns dst."""
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            proto_merge(dst[key], value)
        elif isinstance(value, list) and isinstance(dst.get(key), list):
            dst[key] = dst[key] + copy.deepcopy(value)
        else:
            dst[key] = copy.deepcopy(value)
    return dst


def cluster_name(host: str, port: int) -> str:
    return f"outbound|{port}||{host}"


def parse_cluster_name(name: str) -> tuple[str, int]:
    """(host, port) of an `outbound|<port>|<subset>|<host>` cluster name without subset."""
    direction, port, subset, host = name.split("|")
    assert direction == "outbound" and subset == "", name
    return host, int(port)


def _tls_context(tls: dict, ca_file: str) -> dict:
    assert tls["mode"] == "SIMPLE", f"only SIMPLE TLS is modelled, got {tls['mode']}"
    validation = {"trusted_ca": {"filename": tls.get("caCertificates", ca_file)}}
    if tls.get("subjectAltNames"):
        validation["match_typed_subject_alt_names"] = [
            {"san_type": "DNS", "matcher": {"exact": san}} for san in tls["subjectAltNames"]]
    context = {"common_tls_context": {"validation_context": validation}}
    if tls.get("sni"):
        context["sni"] = tls["sni"]
    return {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        **context}}


def _port_policy(rule: dict | None, port: int) -> dict:
    """The DestinationRule traffic policy for one port: port-level settings over the top level."""
    if rule is None:
        return {}
    policy = {k: v for k, v in rule["spec"].get("trafficPolicy", {}).items() if k != "portLevelSettings"}
    for setting in rule["spec"].get("trafficPolicy", {}).get("portLevelSettings", []):
        if setting["port"]["number"] == port:
            policy.update({k: v for k, v in setting.items() if k != "port"})
    return policy


def service_entry_clusters(docs: list[dict], ca_file: str = SYSTEM_CA) -> list[dict]:
    """The clusters of the ServiceEntries with their DestinationRules, before CLUSTER patches."""
    rules = {r["spec"]["host"]: r for r in of_kind(docs, "DestinationRule")}
    clusters = []
    for entry in of_kind(docs, "ServiceEntry"):
        spec = entry["spec"]
        kind = {"DNS_ROUND_ROBIN": "LOGICAL_DNS", "DNS": "STRICT_DNS"}[spec["resolution"]]
        for host in spec["hosts"]:
            for port in spec["ports"]:
                policy = _port_policy(rules.get(host), port["number"])
                name = cluster_name(host, port["number"])
                socket = {"address": host, "port_value": port.get("targetPort", port["number"])}
                cluster = {
                    "name": name, "type": kind, "dns_lookup_family": "V4_PREFERRED",
                    "connect_timeout": policy.get("connectionPool", {}).get("tcp", {}).get("connectTimeout", "10s"),
                    "load_assignment": {"cluster_name": name, "endpoints": [
                        {"lb_endpoints": [{"endpoint": {"address": {"socket_address": socket}}}]}]},
                }
                if "tls" in policy:
                    cluster["transport_socket"] = _tls_context(policy["tls"], ca_file)
                clusters.append(cluster)
    return clusters


def _cluster_matches(match: dict, cluster: dict) -> bool:
    host, port = parse_cluster_name(cluster["name"])
    wanted = match.get("cluster", {})
    return wanted.get("service", host) == host and wanted.get("portNumber", port) == port


def patched_clusters(docs: list[dict], ca_file: str = SYSTEM_CA) -> list[dict]:
    clusters = service_entry_clusters(docs, ca_file)
    for patch in config_patches(docs, "CLUSTER"):
        assert patch["patch"]["operation"] == "MERGE", f"CLUSTER {patch['patch']['operation']} is not modelled"
        matched = [c for c in clusters if _cluster_matches(patch.get("match", {}), c)]
        assert matched, f"CLUSTER patch matches no cluster: {patch.get('match')}"
        for cluster in matched:
            proto_merge(cluster, patch["patch"]["value"])
    return clusters


def default_routes(docs: list[dict]) -> list[dict]:
    """The routes of the gateway's VirtualService (only what the shipped one uses)."""
    routes = []
    for http in one(docs, "VirtualService")["spec"]["http"]:
        [dest] = http["route"]
        route = {"cluster": cluster_name(dest["destination"]["host"], dest["destination"]["port"]["number"]),
                 "timeout": http.get("timeout", "0s")}
        if "rewrite" in http:
            route["host_rewrite_literal"] = http["rewrite"]["authority"]
        routes.append({"name": http.get("name", ""), "match": {"prefix": "/"}, "route": route})
    return routes


def gateway_port(docs: list[dict]) -> int:
    [server] = one(docs, "Gateway")["spec"]["servers"]
    assert server["port"]["protocol"] == "HTTP"
    return server["port"]["number"]


def _insert_route_patches(docs: list[dict], routes: list[dict], port: int) -> list[dict]:
    for patch in config_patches(docs, "HTTP_ROUTE"):
        assert patch["match"]["context"] == "GATEWAY"
        assert patch["match"]["routeConfiguration"].get("portNumber", port) == port, "route patch misses the gateway port"
        assert patch["patch"]["operation"] == "INSERT_FIRST", f"HTTP_ROUTE {patch['patch']['operation']} is not modelled"
        routes = [copy.deepcopy(patch["patch"]["value"])] + routes
    return routes


def _insert_filter_patches(docs: list[dict], filters: list[dict], port: int) -> list[dict]:
    for patch in config_patches(docs, "HTTP_FILTER"):
        listener = patch["match"]["listener"]
        assert patch["match"]["context"] == "GATEWAY" and listener.get("portNumber", port) == port
        assert listener["filterChain"]["filter"]["name"] == HCM
        before = listener["filterChain"]["filter"]["subFilter"]["name"]
        assert patch["patch"]["operation"] == "INSERT_BEFORE", f"HTTP_FILTER {patch['patch']['operation']} is not modelled"
        names = [f["name"] for f in filters]
        assert before in names, f"HTTP_FILTER patch names {before}, not in the chain {names}"
        filters.insert(names.index(before), copy.deepcopy(patch["patch"]["value"]))
    return filters


def gateway_listener(docs: list[dict]) -> dict:
    """The gateway's HTTP listener with the HTTP_FILTER, HTTP_ROUTE and LISTENER patches."""
    port = gateway_port(docs)
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": f"outbound_0.0.0.0_{port}",
        "route_config": {"name": f"http.{port}", "validate_clusters": False, "virtual_hosts": [{
            "name": f"*:{port}", "domains": ["*"],
            "routes": _insert_route_patches(docs, default_routes(docs), port)}]},
        "http_filters": _insert_filter_patches(docs, [{"name": ROUTER, "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}], port),
    }
    listener = {"name": f"0.0.0.0_{port}",
                "address": {"socket_address": {"address": "0.0.0.0", "port_value": port}},
                "filter_chains": [{"filters": [{"name": HCM, "typed_config": hcm}]}]}
    for patch in config_patches(docs, "LISTENER"):
        assert patch["match"]["context"] == "GATEWAY" and patch["match"]["listener"]["portNumber"] == port
        assert patch["patch"]["operation"] == "MERGE", f"LISTENER {patch['patch']['operation']} is not modelled"
        proto_merge(listener, patch["patch"]["value"])
    return listener


def agent_rewrite(ext: dict, wasm_path: Path | None) -> dict:
    """The extension config as Istio's agent hands it to Envoy: the remote code source (the
    image it pulled) replaced by the local file. The agent rewrites only Wasm configs: the
    native module's reaches Envoy as written, and Envoy loads the module from its own disk."""
    ext = copy.deepcopy(ext)
    if ext["typed_config"]["@type"] == NATIVE_TYPE:
        return ext
    assert wasm_path is not None, "a Wasm extension config needs the .wasm to hand over"
    vm = ext["typed_config"]["config"]["vm_config"]
    assert "remote" in vm["code"], "the module is meant to come from an image"
    vm["code"] = {"local": {"filename": str(wasm_path)}}
    return ext


def http_filters(bootstrap: dict) -> list[dict]:
    [listener] = bootstrap["static_resources"]["listeners"]
    return listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]


def bootstrap(docs: list[dict], wasm_path: Path | None = None, ca_file: str = SYSTEM_CA,
              ecds_file: Path | None = None) -> dict:
    """The gateway's Envoy config. The Switchboard filter's config is put inline (then
    validate mode starts the VM on it) or, with `ecds_file`, written there and fetched the way
    the HTTP_FILTER patch asks, from a file instead of from istiod (validate mode checks the
    discovery stanza but does not read the file)."""
    config = {
        "node": {"id": "switchboard-gateway", "cluster": "switchboard-gateway.switchboard"},
        "static_resources": {"listeners": [gateway_listener(docs)],
                             "clusters": patched_clusters(docs, ca_file)},
    }
    ext = agent_rewrite(extension_config(docs), wasm_path)
    filters = http_filters(config)
    [entry] = [f for f in filters if f["name"] == ext["name"]]
    source = entry["config_discovery"]["config_source"]
    assert source.pop("ads") == {}, "the filter's config must come from istiod (ads)"
    if ecds_file is None:
        del entry["config_discovery"]
        entry["typed_config"] = ext["typed_config"]
    else:
        ecds_file.write_text(json.dumps({"resources": [
            {"@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", **ext}]}))
        source["path_config_source"] = {"path": str(ecds_file)}
    return config


def bootstrap_override(docs: list[dict]) -> str:
    """The text Istio's agent passes to Envoy as --config-yaml (custom_bootstrap.json)."""
    [configmap] = [d for d in of_kind(docs, "ConfigMap") if "custom_bootstrap.json" in d["data"]]
    return configmap["data"]["custom_bootstrap.json"]
