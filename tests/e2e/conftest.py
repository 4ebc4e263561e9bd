"""Fixtures for end-to-end tests: a `stack` of mock providers and Envoys, torn down per test."""

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
