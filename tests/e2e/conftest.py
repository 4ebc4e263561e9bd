"""Fixtures for end-to-end tests: a `stack` of mock providers and Envoys, torn down per test,
and `figure`, which records a measured value for the reports in docs/."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Stack  # noqa: E402


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
