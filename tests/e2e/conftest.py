from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """One cluster per test module (starting one takes about a second)."""
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def fresh_cluster() -> Iterator[Cluster]:
    """A cluster of its own, for tests that kill daemons."""
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)
