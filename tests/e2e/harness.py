"""Starts real processes for end-to-end tests: mock providers and an Envoy with the filter.

Each test builds its own stack on free loopback ports and tears it down afterwards. Nothing
here is skipped when a binary is missing: a missing Envoy or build output is a test failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import requests
import urllib3
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVOY_BIN = Path(os.environ.get("SWITCHBOARD_ENVOY", ROOT / ".venv" / "bin" / "envoy"))
WASM = ROOT / "target" / "wasm32-wasip1" / "release" / "switchboard.wasm"
# The native build: Envoy finds `libswitchboard.so` for a dynamic module named "switchboard"
# in $ENVOY_DYNAMIC_MODULES_SEARCH_PATH.
NATIVE_DIR = ROOT / "target" / "native"
NATIVE_MODULE = NATIVE_DIR / "libswitchboard.so"
# Which build Envoy runs: "wasm" (the .wasm in Envoy's V8) or "native" (the dynamic module).
BUILD = os.environ.get("SWITCHBOARD_BUILD", "wasm")
if BUILD not in ("wasm", "native"):
    raise RuntimeError(f"SWITCHBOARD_BUILD must be wasm or native, not {BUILD!r}")
# Envoy's line when it refuses an ECDS update because the filter refused its plugin config.
ECDS_REJECTED = ("Filesystem config update rejected: Failed to create filter config: Failed to initialize dynamic module"
                 if BUILD == "native" else "Filesystem config update rejected: Unable to create Wasm plugin switchboard")
MOCK_PROVIDER = ROOT / "target" / "release" / "mock-provider"
SWITCHBOARD_CLI = ROOT / "target" / "release" / "switchboard"
# SWITCHBOARD_STREAM_FALLBACKS=router: every stack of the Wasm build runs its virtual models on
# the router path (`"stream_fallbacks": "router"`, with `switchboard envoy-config`'s Envoy
# config); the native module streams every attempt itself and has no router path.
STREAM_FALLBACKS = os.environ.get("SWITCHBOARD_STREAM_FALLBACKS", "call_out")
if STREAM_FALLBACKS not in ("call_out", "router"):
    raise RuntimeError(f"SWITCHBOARD_STREAM_FALLBACKS must be call_out or router, not {STREAM_FALLBACKS!r}")
CLUSTER_HEADER = "x-switchboard-cluster"
# Envoy's own request buffer limit must exceed the filter's, so the filter answers the 413.
ENVOY_BUFFER_LIMIT = 64 * 1024 * 1024
WASM_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
# The key the shipped configs' `${env:SWITCHBOARD_RESPONSE_ID_KEY}` reads: random per test run.
RESPONSE_ID_KEY = secrets.token_hex(32)


class HarnessError(RuntimeError):
    """A process of the test stack could not be started."""


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise HarnessError(f"{what} not found at {path}; run `make test` (it builds and installs it)")
    return path


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports (all held open while choosing, so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


class TestCA:
    """A throwaway certificate authority made at test time (trustme): `ca.pem` is written into
    `directory`, and `issue` writes a certificate chain and key there for given host names."""

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, directory: str | Path) -> None:
        import trustme  # only the TLS tests need it

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ca = trustme.CA()
        self.ca_path = self.directory / "ca.pem"
        self._ca.cert_pem.write_to_path(str(self.ca_path))

    def issue(self, hostname: str, *more: str) -> tuple[Path, Path]:
        """(cert_path, key_path) of PEM files for `hostname` (and `more` names). The certificate
        also names 127.0.0.1, so control calls to https://127.0.0.1:PORT verify against ca.pem."""
        cert = self._ca.issue_cert(hostname, *more, "127.0.0.1")
        stem = re.sub(r"[^A-Za-z0-9.-]", "_", hostname)
        cert_path = self.directory / f"{stem}.pem"
        key_path = self.directory / f"{stem}.key"
        cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(key_path))
        return cert_path, key_path


@dataclass
class Provider:
    """A running mock provider process."""

    name: str
    proc: subprocess.Popen
    port: int
    tls: bool = False
    # TLS only: the CA file control calls verify with; False skips verification.
    verify: str | bool = False

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _control(self, method: str, path: str, **kwargs) -> requests.Response:
        """A call to a `/__` endpoint (never subject to `--strict`)."""
        with warnings.catch_warnings():
            # verify=False is a choice here, not an accident worth a warning per call.
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            return requests.request(method, f"{self.url}{path}", timeout=5,
                                    verify=self.verify if self.tls else True, **kwargs)

    def requests(self) -> list[dict]:
        return self._control("GET", "/__requests").json()

    def clear(self) -> None:
        self._control("DELETE", "/__requests").raise_for_status()

    def stats(self) -> dict:
        """`{"requests": N, ...}`: counted even with `max_records=0`."""
        return self._control("GET", "/__stats").json()

    def configure(self, **settings) -> dict:
        r = self._control("POST", "/__config", json=settings)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        stop_process(self.proc)


def start_provider(name: str, port: int = 0, **flags) -> Provider:
    """Starts `mock-provider --name NAME` with `--flag value` for each keyword (snake_case),
    e.g. `tls_cert=..., tls_key=..., strict="azure", host_name=..., api_key=...`. With TLS,
    control calls verify with the `ca.pem` beside the certificate (a `TestCA` layout) if
    there is one, else without verification."""
    args = [str(require(MOCK_PROVIDER, "mock-provider")), "--name", name, "--port", str(port)]
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not None and value is not False:
            args += [flag, str(value)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        stop_process(proc)
        raise HarnessError(f"mock provider {name} did not start: {line!r} {proc.stderr.read()}")
    provider = Provider(name=name, proc=proc, port=int(line.rsplit(":", 1)[1]))
    if flags.get("tls_cert"):
        ca = Path(flags["tls_cert"]).parent / "ca.pem"
        provider.tls = True
        provider.verify = str(ca) if ca.exists() else False
    return provider


# `latency-based-routing` re-draws each caller's target at every 10-minute epoch of wall-clock
# time (EPOCH_MS in src/core/routing/latency.rs): a test that asserts a caller keeps its target
# must not straddle a boundary, or it fails about once in a few hundred runs.
LATENCY_EPOCH_S = 600


def clear_of_latency_epoch_boundary(margin_s: float = 20.0) -> None:
    """Waits for the next latency epoch when fewer than `margin_s` seconds are left in this one."""
    left = LATENCY_EPOCH_S - time.time() % LATENCY_EPOCH_S
    if left < margin_s:
        time.sleep(left + 0.5)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def cluster(name: str, port: int) -> dict:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "per_connection_buffer_limit_bytes": ENVOY_BUFFER_LIMIT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}],
        },
    }


def wasm_filter(plugin_config: dict | str, wasm_path: Path = WASM, failure_policy: str | None = None) -> dict:
    """The Switchboard HTTP filter entry; the plugin config travels as a JSON string.
    `failure_policy` (e.g. FAIL_RELOAD) is the Wasm PluginConfig's; Envoy's default otherwise."""
    value = plugin_text(plugin_config)
    entry = {
        "name": "switchboard",
        "typed_config": {
            "@type": WASM_FILTER_TYPE,
            "config": {
                "name": "switchboard",
                "root_id": "switchboard",
                # Without this, pausing in on_http_request_headers stops the body callbacks.
                "allow_on_headers_stop_iteration": True,
                "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": value},
                "vm_config": {
                    "vm_id": "switchboard",
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": str(wasm_path)}},
                },
            },
        },
    }
    if failure_policy:
        entry["typed_config"]["config"]["failure_policy"] = failure_policy
    return entry


def plugin_text(plugin_config: dict | str) -> str:
    """The plugin config as the filter receives it (a dict travels as compact JSON)."""
    return plugin_config if isinstance(plugin_config, str) else json.dumps(plugin_config)


def config_version(plugin_config: dict | str) -> str:
    """The version the filter logs for a plugin config: the first 12 hex digits of the SHA-256
    of its text (src/core/config/version.rs)."""
    return hashlib.sha256(plugin_text(plugin_config).encode()).hexdigest()[:12]


def ecds_resource(plugin_config: dict | str, wasm_path: Path = WASM, failure_policy: str | None = None) -> dict:
    """The file an ECDS filter reads: one TypedExtensionConfig holding `wasm_filter` (the
    native filter for the native build, which has no VM and so no `failure_policy`)."""
    entry = wasm_filter(plugin_config, wasm_path, failure_policy)
    return for_build({"resources": [{"@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
                                     "name": entry["name"], "typed_config": entry["typed_config"]}]})


def ecds_filter(path: Path) -> dict:
    """The Switchboard filter entry taking its config from the file `path` (ECDS), watching its
    directory so that a rename over the file is an update."""
    return {"name": "switchboard", "config_discovery": {
        "config_source": {"path_config_source": {"path": str(path), "watched_directory": {"path": str(path.parent)}}},
        "type_urls": [WASM_FILTER_TYPE]}}


def replace_file(path: Path, text: str) -> None:
    """Writes a temporary file beside `path` and renames it over `path`: Envoy never sees a
    half-written file, and the rename is the event its watched directory reports."""
    tmp = path.parent / f".{path.name}.next"
    tmp.write_text(text)
    os.replace(tmp, path)


def native_filter(plugin_config: dict | str) -> dict:
    """The Switchboard HTTP filter entry of the native build: the same plugin config, as the
    dynamic module filter's `filter_config` string."""
    value = plugin_config if isinstance(plugin_config, str) else json.dumps(plugin_config)
    return {
        "name": "switchboard",
        "typed_config": {
            "@type": NATIVE_FILTER_TYPE,
            "dynamic_module_config": {"name": "switchboard"},
            "filter_name": "switchboard",
            "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": value},
        },
    }


NATIVE_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"


def to_native(config: dict) -> dict:
    """`config` (a bootstrap, or an ECDS file) with every Switchboard Wasm filter (one loading
    switchboard.wasm) replaced by the native build's filter with the same plugin config, and
    the Wasm filter's type in `config_discovery.type_urls` by the native one; other filters
    stay as they are."""
    def walk(node):
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        typed = node.get("typed_config")
        if isinstance(typed, dict) and typed.get("@type") == WASM_FILTER_TYPE:
            plugin = typed.get("config", {})
            code = plugin.get("vm_config", {}).get("code", {}).get("local", {}).get("filename", "")
            if code.endswith("switchboard.wasm"):
                value = plugin.get("configuration", {}).get("value", "")
                return {**node, "typed_config": native_filter(value)["typed_config"]}
        if "type_urls" in node:
            node = {**node, "type_urls": [NATIVE_FILTER_TYPE if t == WASM_FILTER_TYPE else t
                                          for t in node["type_urls"]]}
        return {k: walk(v) for k, v in node.items()}
    return walk(config)


def plugin_config_of(typed_config: dict) -> dict:
    """Where the plugin config text sits in a Switchboard filter's `typed_config` (either
    build): the dict whose "value" it is."""
    if typed_config.get("@type") == NATIVE_FILTER_TYPE:
        return typed_config["filter_config"]
    return typed_config["config"]["configuration"]


def for_build(config: dict) -> dict:
    """`config` for the build under test: as it is for Wasm, `to_native` of it for native."""
    return to_native(config) if BUILD == "native" else config


def build_artifact() -> Path:
    """The file Envoy loads for the build under test."""
    return NATIVE_MODULE if BUILD == "native" else WASM


def bootstrap(listen_port: int, admin_port: int, clusters: dict[str, int], http_filters: list[dict],
              passthrough: str, locality: dict | None = None) -> dict:
    """An Envoy bootstrap: one listener whose route sends to the cluster the filter names.
    `locality` ({"region": ..., "zone": ...}) becomes the node's locality."""
    routes = [
        {"match": {"prefix": "/", "headers": [{"name": CLUSTER_HEADER, "present_match": True}]},
         "route": {"cluster_header": CLUSTER_HEADER, "timeout": "300s"},
         # The cluster name is internal: providers never see it.
         "request_headers_to_remove": [CLUSTER_HEADER]},
        {"match": {"prefix": "/"}, "route": {"cluster": passthrough, "timeout": "300s"}},
    ]
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "ingress",
        "codec_type": "AUTO",
        "route_config": {"name": "local", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": routes}]},
        "http_filters": http_filters + [{
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
        }],
    }
    node = {"id": "switchboard-test", "cluster": "switchboard"}
    if locality:
        node["locality"] = locality
    return {
        "node": node,
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [{
                "name": "main",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen_port}},
                "per_connection_buffer_limit_bytes": ENVOY_BUFFER_LIMIT,
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                "typed_config": hcm}]}],
            }],
            "clusters": [cluster(name, port) for name, port in clusters.items()],
        },
    }


@dataclass
class Envoy:
    """A running Envoy process."""

    proc: subprocess.Popen
    port: int
    admin_port: int
    log_path: Path
    workdir: tempfile.TemporaryDirectory = field(repr=False)
    concurrency: int = 2
    # With ECDS: the file the filter's config comes from (see `reload`), and the Wasm
    # failure_policy every config written there carries.
    ecds_path: Path | None = None
    failure_policy: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stats(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5).text

    def stat(self, name: str) -> int:
        """One counter or gauge of /stats (0 when Envoy has not created it)."""
        for line in requests.get(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5,
                                 params={"filter": f"^{re.escape(name)}$"}).text.splitlines():
            key, _, value = line.partition(": ")
            if key == name:
                return int(value)
        return 0

    def wait_loaded(self, version: str, log_from: int = 0, timeout: float = 30.0) -> None:
        """Waits until the main thread and every worker logged loading config `version` after
        offset `log_from` of the log (each loads its own copy of the plugin). The native
        module loads a config once, on the main thread, for every worker: Envoy then hands the
        new filter factory to each worker's event loop, which this waits a moment for."""
        component, threads_needed = ("dynamic_modules", 1) if BUILD == "native" else ("wasm", self.concurrency + 1)
        pattern = re.compile(r"\]\[(\d+)\]\[\w+\]\[" + component + r"\].*loaded config " + version)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            threads = {m.group(1) for m in pattern.finditer(self.log()[log_from:])}
            if len(threads) >= threads_needed:
                if BUILD == "native":
                    time.sleep(0.2)
                return
            time.sleep(0.05)
        raise HarnessError(f"config {version} not loaded by every thread in {timeout} s:\n{self.log()[-3000:]}")

    def reload(self, plugin_config: dict | str, timeout: float = 30.0) -> bool:
        """ECDS only: replaces the filter's file the way operators do (temporary file, rename)
        and waits for Envoy's verdict. True: Envoy took the update and every thread loaded it, so
        new requests get it; False: Envoy refused it (and keeps the config it had)."""
        if self.ecds_path is None:
            raise HarnessError("reload needs an Envoy started with ecds=True")
        prefix = "extension_config_discovery.http_filter.switchboard."
        success, rejected = self.stat(prefix + "update_success"), self.stat(prefix + "update_rejected")
        log_from = len(self.log())
        replace_file(self.ecds_path, json.dumps(ecds_resource(plugin_config, failure_policy=self.failure_policy)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stat(prefix + "update_rejected") > rejected:
                return False
            if self.stat(prefix + "update_success") > success:
                self.wait_loaded(config_version(plugin_config), log_from, max(deadline - time.monotonic(), 1.0))
                return True
            time.sleep(0.05)
        raise HarnessError(f"Envoy neither took nor refused the config in {timeout} s")

    def connections_per_worker(self) -> list[int]:
        """Downstream connections each worker accepted on the main listener."""
        counts = {}
        for line in self.stats().splitlines():
            name, _, value = line.partition(": ")
            if name.startswith(f"listener.127.0.0.1_{self.port}.worker_") and name.endswith(".downstream_cx_total"):
                counts[name] = int(value)
        return [counts[k] for k in sorted(counts)]

    def stop(self) -> None:
        stop_process(self.proc)
        self.workdir.cleanup()


def wasm_memory_kb(pid: int) -> int | None:
    """Resident KB of the process's Wasm memories, read from smaps: V8 places each memory just
    below its multi-GB guard reservation. None if no such layout is found."""
    maps = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if m := re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line):
            maps.append([int(m.group(1), 16), int(m.group(2), 16), 0])
        elif line.startswith("Rss:") and maps:
            maps[-1][2] = int(line.split()[1])
    guards = {start for start, end, _ in maps if end - start >= 4 << 30}
    found = [rss for _, end, rss in maps if end in guards]
    return sum(found) if found else None


def start_envoy(config: dict | str, concurrency: int = 2, expect_failure: bool = False,
                timeout: float = 30.0, ports: tuple[int, int] | None = None,
                wasm_log_level: str = "info", workdir: tempfile.TemporaryDirectory | None = None) -> Envoy:
    """Starts Envoy and waits until it is ready (or, with `expect_failure`, has exited). With
    the native build, the Switchboard Wasm filter of `config` is swapped for the native one.

    `config` is a bootstrap dict, or YAML text with `ports` = (listener, admin) given.
    `wasm_log_level` is the level of the filter's own lines (Envoy's `wasm` component, or
    `dynamic_modules` for the native build); every other component logs warnings only
    (Envoy's router prints upstream headers, keys included, at debug).
    `workdir` (removed when Envoy stops) holds the config and log; one is made if not given.
    """
    envoy_bin = require(ENVOY_BIN, "Envoy")
    require(build_artifact(), f"the {BUILD} build")
    if BUILD == "native":
        # The same config with the native module in the Wasm filter's place (YAML text is
        # parsed and written back as JSON, which is YAML too).
        config = for_build(config) if isinstance(config, dict) else json.dumps(
            to_native(yaml.safe_load(config)), indent=1)
    workdir = workdir or tempfile.TemporaryDirectory(prefix="switchboard-envoy-")
    if isinstance(config, dict):
        config_path = Path(workdir.name) / "envoy.json"
        config_path.write_text(json.dumps(config, indent=1))
        listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"]
        admin = config["admin"]["address"]["socket_address"]["port_value"]
    else:
        config_path = Path(workdir.name) / "envoy.yaml"
        config_path.write_text(config)
        listener, admin = ports
    log_path = Path(workdir.name) / "envoy.log"
    args = [str(envoy_bin), "-c", str(config_path), "--concurrency", str(concurrency),
            "--disable-hot-restart", "--log-level", "warning", "--component-log-level",
            f"wasm:{wasm_log_level},dynamic_modules:{wasm_log_level}",
            # Tests read the log while Envoy runs: flush it within 100 ms, not 10 s.
            "--file-flush-interval-msec", "100",
            "--log-path", str(log_path)]
    env = {**os.environ, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH": str(NATIVE_DIR)}
    # The shipped configs take the response id key from Envoy's environment, as `make run`
    # gives it (a random one per run); a test that sets its own keeps it.
    env.setdefault("SWITCHBOARD_RESPONSE_ID_KEY", RESPONSE_ID_KEY)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    envoy = Envoy(proc=proc, port=listener, admin_port=admin, log_path=log_path, workdir=workdir,
                  concurrency=concurrency)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if expect_failure:
                return envoy
            log = envoy.log() if log_path.exists() else ""
            envoy.stop()
            raise HarnessError(f"Envoy exited with {proc.returncode}:\n{log[-4000:]}")
        if not expect_failure:
            try:
                if requests.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200:
                    return envoy
            except requests.RequestException:
                pass
        time.sleep(0.05)
    envoy.stop()
    raise HarnessError("Envoy did not become ready" if not expect_failure else "Envoy did not exit")


def with_router_fallbacks(plugin_config: dict | str) -> dict | str:
    """A dict plugin config with `"stream_fallbacks": "router"` in every virtual model that does
    not choose; a string (a test's exact text) stays as it is."""
    if not isinstance(plugin_config, dict):
        return plugin_config
    vms = [vm if not isinstance(vm, dict) or "stream_fallbacks" in vm else {**vm, "stream_fallbacks": "router"}
           for vm in plugin_config.get("virtual_models") or []]
    return {**plugin_config, "virtual_models": vms} if "virtual_models" in plugin_config else plugin_config


def envoy_config(config: dict, plugin_config: dict | str, directory: Path) -> dict:
    """`config` with the router path added by `switchboard envoy-config`, which reads the plugin
    config and the bootstrap from files written to `directory`."""
    plugin_path, bootstrap_path = directory / "plugin.json", directory / "bootstrap.json"
    plugin_path.write_text(plugin_text(plugin_config))
    bootstrap_path.write_text(json.dumps(config, indent=1))
    result = subprocess.run([str(require(SWITCHBOARD_CLI, "the switchboard command")), "envoy-config",
                             str(plugin_path), str(bootstrap_path)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise HarnessError(f"switchboard envoy-config failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout)


def takes_router_path(router_path: bool | None, ecds: bool) -> bool:
    """Whether a stack's plugin config gets `"stream_fallbacks": "router"`: as asked, else as
    SWITCHBOARD_STREAM_FALLBACKS says for the Wasm build. ECDS stacks stay on the call-out path:
    the router path's passes need the plugin config inline, and `reload` would have to replace
    it in three places."""
    if router_path and ecds:
        raise HarnessError("the router path needs the plugin config inline: no ECDS stack takes it")
    if router_path is None:
        return STREAM_FALLBACKS == "router" and BUILD == "wasm" and not ecds
    return router_path


class Stack:
    """Providers plus an Envoy in front of them; every process is stopped by `close()`."""

    def __init__(self) -> None:
        self.providers: dict[str, Provider] = {}
        self.envoys: list[Envoy] = []

    def provider(self, name: str, **flags) -> Provider:
        p = start_provider(name, **flags)
        self.providers[name] = p
        return p

    def envoy(self, plugin_config: dict | str, concurrency: int = 2, passthrough: str | None = None,
              expect_failure: bool = False, extra_clusters: dict[str, int] | None = None,
              locality: dict | None = None, filters_before: list[dict] | None = None,
              ecds: bool = False, failure_policy: str | None = None,
              router_path: bool | None = None) -> Envoy:
        """Envoy with one cluster per provider (cluster name = provider name), plus
        `extra_clusters` (name to port), e.g. a port nothing listens on; `locality` is the
        node's, `filters_before` are HTTP filters placed before Switchboard. With `ecds`, the
        filter's config comes from a watched file (as in envoy/ecds.yaml): `Envoy.reload`
        replaces it. `failure_policy`: the Wasm filter's (Envoy's default when None).
        `router_path`: every virtual model of a dict plugin config that does not choose takes
        the router path, with the Envoy config `switchboard envoy-config` adds (the native build
        gets the field only: it has no router path); None follows SWITCHBOARD_STREAM_FALLBACKS."""
        router = takes_router_path(router_path, ecds)
        if router:
            plugin_config = with_router_fallbacks(plugin_config)
        clusters = {name: p.port for name, p in self.providers.items()}
        clusters.update(extra_clusters or {})
        passthrough = passthrough or next(iter(clusters))
        # A port chosen here can still be taken by another process before Envoy binds it:
        # try again with new ports rather than fail the test on that race.
        for attempt in range(3):
            listen, admin = free_ports(2)
            workdir = tempfile.TemporaryDirectory(prefix="switchboard-envoy-")
            ecds_path = None
            if ecds:
                ecds_path = Path(workdir.name) / "ecds" / "switchboard.yaml"
                ecds_path.parent.mkdir()
                replace_file(ecds_path, json.dumps(ecds_resource(plugin_config, failure_policy=failure_policy)))
            switchboard = ecds_filter(ecds_path) if ecds_path else wasm_filter(plugin_config,
                                                                               failure_policy=failure_policy)
            config = bootstrap(listen, admin, clusters, (filters_before or []) + [switchboard], passthrough, locality)
            if router and BUILD == "wasm":
                try:
                    config = envoy_config(config, plugin_config, Path(workdir.name))
                except HarnessError:
                    # A plugin config the CLI refuses is one the filter refuses too: the test
                    # expecting that failure reads it from Envoy, started without the router path.
                    if not expect_failure:
                        raise
            try:
                e = start_envoy(config, concurrency=concurrency, expect_failure=expect_failure, workdir=workdir)
            except HarnessError as err:
                if attempt < 2 and "Address already in use" in str(err):
                    continue
                raise
            self.envoys.append(e)
            if ecds_path and not expect_failure:
                e.ecds_path, e.failure_policy = ecds_path, failure_policy
                e.wait_loaded(config_version(plugin_config))
            return e
        raise HarnessError("no free ports for Envoy")

    def close(self) -> None:
        for e in self.envoys:
            e.stop()
        for p in self.providers.values():
            p.stop()
