"""docker-compose.yml, checked statically (no Docker engine runs in the tests).

It must work on Linux and Docker Desktop alike: no host networking, ports published (on the
host's loopback). Every build names a stage of an existing Dockerfile, every mounted host path
exists, every service Envoy talks to is defined and listens on the port Envoy uses, Envoy waits
for providers whose health check really passes against a running mock provider, and the Envoy
config it mounts passes `envoy --mode validate`. For that one path is substituted: the .wasm is
at /etc/switchboard/switchboard.wasm in the image (deploy/Dockerfile puts it there) and at
target/wasm32-wasip1/release/ here. The compose service names in the clusters need no
substitution: validate mode does not resolve DNS names (test_envoy_configs.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from dockerfile import stages
from harness import ROOT, WASM
from test_envoy_configs import assert_valid, host_env_keys, validate

pytestmark = pytest.mark.wasm_only(reason="the compose demo runs the .wasm build")

COMPOSE = ROOT / "docker-compose.yml"
DEMO = ROOT / "envoy" / "demo.yaml"


def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def published(service: dict) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port."""
    found = []
    for entry in service.get("ports", []):
        host_ip, host_port, container_port = str(entry).split(":")
        found.append((host_ip, int(host_port), int(container_port)))
    return found


def mounts(service: dict) -> list[tuple[Path, str]]:
    """(host path, container path) of each bind mount."""
    found = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        assert source.startswith("."), f"{volume}: only bind mounts of repository paths are expected"
        found.append(((ROOT / source).resolve(), target))
    return found


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def envoy_config() -> tuple[Path, dict]:
    """The host file mounted where the envoy service's `-c` points, and its content."""
    envoy = services()["envoy"]
    [host_path] = [h for h, c in mounts(envoy) if c == flag(envoy["command"], "-c")]
    return host_path, yaml.safe_load(host_path.read_text())


def endpoints(config: dict) -> list[tuple[str, str, int]]:
    """(cluster, address, port) of every endpoint in the Envoy config."""
    return [(c["name"], e["endpoint"]["address"]["socket_address"]["address"],
             e["endpoint"]["address"]["socket_address"]["port_value"])
            for c in config["static_resources"]["clusters"]
            for group in c["load_assignment"]["endpoints"] for e in group["lb_endpoints"]]


def test_no_host_networking_and_every_port_published_on_loopback():
    seen = set()
    for name, service in services().items():
        assert "network_mode" not in service, f"{name}: network_mode does not work the same on Docker Desktop"
        for host_ip, host_port, _ in published(service):
            assert host_ip == "127.0.0.1", f"{name} publishes on {host_ip}"
            assert host_port not in seen, f"host port {host_port} published twice"
            seen.add(host_port)


def test_every_build_names_a_stage_of_an_existing_dockerfile():
    for name, service in services().items():
        build = service["build"]
        dockerfile = ROOT / build["context"] / build["dockerfile"]
        assert dockerfile.is_file(), f"{name}: no {dockerfile}"
        assert build["target"] in {s.name for s in stages(dockerfile)}, f"{name}: no stage {build['target']}"


def test_every_mounted_path_exists():
    found = [m for service in services().values() for m in mounts(service)]
    assert found
    for host_path, _ in found:
        assert host_path.exists(), f"{host_path} is mounted but does not exist"


def test_envoy_reaches_each_provider_where_it_listens():
    _, config = envoy_config()
    all_services = services()
    for cluster, address, port in endpoints(config):
        assert address in all_services, f"cluster {cluster}: no compose service {address}"
        command = all_services[address]["command"]
        assert flag(command, "--port") == str(port), f"cluster {cluster}: {address} does not listen on {port}"
        assert flag(command, "--host") == "0.0.0.0", f"{address} listens on loopback only: Envoy cannot reach it"


def test_every_published_port_is_one_the_service_listens_on():
    _, config = envoy_config()
    envoy_ports = {config["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"],
                   config["admin"]["address"]["socket_address"]["port_value"]}
    for name, service in services().items():
        listening = envoy_ports if name == "envoy" else {int(flag(service["command"], "--port"))}
        assert {container for _, _, container in published(service)} == listening, name
    listener = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener["address"] == "0.0.0.0", "a published port reaches the container's address, not its loopback"


def test_envoy_starts_after_every_provider_is_healthy():
    all_services = services()
    depends = all_services["envoy"]["depends_on"]
    _, config = envoy_config()
    assert set(depends) == {address for _, address, _ in endpoints(config)}
    for name, condition in depends.items():
        assert condition == {"condition": "service_healthy"}, name
        assert all_services[name]["healthcheck"]["test"][0] == "CMD", f"{name} has no health check"


def run_healthcheck(test: list[str], port: int) -> int:
    """Runs a CMD health check here with the container's port 8080 replaced by `port`."""
    assert test[0] == "CMD"
    command = [arg.replace("/8080 ", f"/{port} ") for arg in test[1:]]
    return subprocess.run(command, capture_output=True, timeout=20).returncode


def test_the_health_check_passes_on_a_running_provider_and_fails_without_one(stack):
    for name, service in services().items():
        if name == "envoy":
            continue
        test = service["healthcheck"]["test"]
        assert "/dev/tcp/127.0.0.1/8080 " in test[-1] and flag(service["command"], "--port") == "8080"
        provider = stack.provider(name)
        assert run_healthcheck(test, provider.port) == 0, f"{name}: the health check fails on a healthy provider"
        provider.stop()
        assert run_healthcheck(test, provider.port) != 0, f"{name}: the health check passes with nothing listening"


def test_the_mounted_envoy_config_validates(tmp_path: Path):
    host_path, _ = envoy_config()
    text = host_path.read_text()
    assert text.count("/etc/switchboard/switchboard.wasm") == 1
    path = tmp_path / "envoy.yaml"
    path.write_text(text.replace("/etc/switchboard/switchboard.wasm", str(WASM)))
    assert_valid(validate(path, cwd=tmp_path, keys=host_env_keys(yaml.safe_load(text))), path)


def without_container_differences(config: dict) -> dict:
    """The config with what containers change put aside: addresses, cluster endpoints and
    resolution, the .wasm path, and stats_config (checked against deploy/istio instead)."""
    config = json.loads(json.dumps(config))
    config.pop("stats_config", None)
    config["admin"]["address"]["socket_address"].pop("address")
    for listener in config["static_resources"]["listeners"]:
        listener["address"]["socket_address"].pop("address")
    for cluster in config["static_resources"]["clusters"]:
        for key in ("type", "dns_lookup_family", "load_assignment"):
            cluster.pop(key, None)
    text = json.dumps(config).replace('"/etc/switchboard/switchboard.wasm"', '"WASM"')
    return json.loads(text.replace('"target/wasm32-wasip1/release/switchboard.wasm"', '"WASM"'))


def test_the_compose_envoy_config_is_the_demo_config_for_containers():
    _, config = envoy_config()
    assert without_container_differences(config) == without_container_differences(yaml.safe_load(DEMO.read_text()))
    demo_clusters = {c["name"] for c in yaml.safe_load(DEMO.read_text())["static_resources"]["clusters"]}
    assert {cluster for cluster, _, _ in endpoints(config)} == demo_clusters
