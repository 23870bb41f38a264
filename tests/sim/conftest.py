"""Shared paths and small helpers of the simulator tests."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path("/work/shared")
TRACES = SHARED / "traces"
EXPECTED = SHARED / "reference" / "sim" / "rlscheduler-sc20-expected.json"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip("shared traces not available")
    return TRACES
