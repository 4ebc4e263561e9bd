"""An Envoy for the metrics, access-log and trace tests: the harness's bootstrap plus what the
shipped configs add for observability, taken from envoy/demo.yaml itself (its `stats_config`
and its access log's JSON format), so the tests check what users run.

    envoy = start(stack, plugin, access_log=tmp_path / "access.log")
    series = prometheus(envoy)            # {(name, frozenset(labels.items())): value}
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import requests

from harness import BUILD, ROOT, bootstrap, free_ports, start_envoy, wasm_filter
from providers_config import load

DEMO = load(ROOT / "envoy" / "demo.yaml")
STATS_CONFIG = DEMO["stats_config"]


def _demo_access_log_format() -> dict:
    hcm = DEMO["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["access_log"][0]["typed_config"]["log_format"]["json_format"]


ACCESS_LOG_FORMAT = _demo_access_log_format()


def start(stack, plugin: dict, access_log: Path | None = None, host_env_keys: list[str] | None = None,
          wasm_log_level: str = "info", concurrency: int = 2):
    """Envoy with one cluster per provider of `stack`, Switchboard with `plugin`, the shipped
    stats_config (flushed every second, so histograms show soon) and, with `access_log`, the
    shipped JSON access log written to that file."""
    clusters = {name: p.port for name, p in stack.providers.items()}
    listen, admin = free_ports(2)
    filter_ = wasm_filter(plugin)
    if host_env_keys:
        filter_["typed_config"]["config"]["vm_config"]["environment_variables"] = {
            "host_env_keys": host_env_keys}
    config = bootstrap(listen, admin, clusters, [filter_], next(iter(clusters)))
    config["stats_config"] = STATS_CONFIG
    config["stats_flush_interval"] = "1s"
    if access_log:
        hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        hcm["access_log"] = [{"name": "envoy.access_loggers.file", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": str(access_log),
            "log_format": {"json_format": ACCESS_LOG_FORMAT}}}]
    envoy = start_envoy(config, concurrency=concurrency, wasm_log_level=wasm_log_level)
    stack.envoys.append(envoy)
    return envoy


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


# Envoy 1.40 prints a Wasm filter's metric `wasmcustom.switchboard.x` on /stats/prometheus as
# `switchboard_x`, but a dynamic module's `dynamicmodulescustom.switchboard.x` as
# `envoy_dynamicmodulescustom_switchboard_x` (it strips only the Wasm namespace): the labels are
# the same, the names carry this prefix on the native build.
PROMETHEUS_PREFIX = "envoy_dynamicmodulescustom_" if BUILD == "native" else ""


def prometheus_text(envoy) -> str:
    return requests.get(f"http://127.0.0.1:{envoy.admin_port}/stats/prometheus", timeout=5).text


def prometheus(envoy) -> dict:
    """Every sample of Envoy's /stats/prometheus: {(name, frozenset of (label, value)): value},
    Switchboard's names without the build's PROMETHEUS_PREFIX."""
    out = {}
    for line in prometheus_text(envoy).splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = frozenset((k, v.replace('\\"', '"')) for k, v in _LABEL.findall(m.group(2) or ""))
        name = m.group(1)
        if PROMETHEUS_PREFIX and name.startswith(PROMETHEUS_PREFIX + "switchboard_"):
            name = name[len(PROMETHEUS_PREFIX):]
        out[(name, labels)] = float(m.group(3))
    return out


def sample(series: dict, name: str, **labels) -> float | None:
    return series.get((name, frozenset(labels.items())))


def wait_for(envoy, name: str, value: float, timeout: float = 15.0, **labels) -> dict:
    """Polls /stats/prometheus until `name{labels}` equals `value` (histograms need a stats
    flush); returns the last scrape, which the caller then checks in full."""
    deadline = time.monotonic() + timeout
    series = prometheus(envoy)
    while sample(series, name, **labels) != value and time.monotonic() < deadline:
        time.sleep(0.2)
        series = prometheus(envoy)
    return series


def access_lines(path: Path, count: int, timeout: float = 10.0) -> list[dict]:
    """The first `count` JSON lines of an access log, waiting for Envoy to write them."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            break
        time.sleep(0.1)
    assert len(lines) >= count, f"{len(lines)} access-log lines, expected {count}: {lines}"
    return [json.loads(line) for line in lines]
