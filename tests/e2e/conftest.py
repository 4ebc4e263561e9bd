"""Fixtures for end-to-end tests: a `stack` of mock providers and Envoys, torn down per test,
and `figure`, which records a measured value for the reports in docs/."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BUILD, Stack  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "wasm_only(reason): checks something only the Wasm build has; skipped, with "
        "the reason, when the suite runs against the native build (SWITCHBOARD_BUILD=native)")
    config.addinivalue_line(
        "markers", "native_only(reason): loads the native module whatever the build under test "
        "(a recipe only the native build has); skipped, with the reason, in the Wasm pass, so it "
        "runs and counts once, in the native pass")
    config.addinivalue_line(
        "markers", "native_gap(reason): a behaviour the native build cannot have with Envoy "
        "1.40's dynamic-modules ABI; expected to fail there (strict xfail: it is reported, and "
        "a pass would flag the marker as stale), never counted as a pass")
    config.addinivalue_line(
        "markers", "build_independent: loads no filter build (config files, the harness); runs "
        "in the Wasm pass only, so the native pass counts only what ran the native module")


def pytest_report_header(config):
    return f"switchboard build: {BUILD} (SWITCHBOARD_BUILD)"


def pytest_collection_modifyitems(config, items):
    if BUILD != "native":
        for item in items:
            if marker := item.get_closest_marker("native_only"):
                reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
                item.add_marker(pytest.mark.skip(reason=f"native build only: {reason}"))
        return
    for item in items:
        if marker := item.get_closest_marker("wasm_only"):
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"Wasm build only: {reason}"))
        elif marker := item.get_closest_marker("native_gap"):
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.xfail(reason=f"native build: {reason}", strict=True))
        elif item.get_closest_marker("build_independent"):
            item.add_marker(pytest.mark.skip(reason="loads no filter build; run in the Wasm pass"))


@pytest.fixture
def stack():
    s = Stack()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def figure(request):
    """`figure(name, value, unit)` appends to $SWITCHBOARD_FIGURES (JSON lines) when it is set."""
    path = os.environ.get("SWITCHBOARD_FIGURES")

    def record(name: str, value, unit: str = "") -> None:
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"test": request.node.name, "name": name, "value": value, "unit": unit}) + "\n")

    return record
