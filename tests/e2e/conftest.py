from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.users import ensure_user


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


USER = "corraltest"  # the real second user of the tests that act as another user


@pytest.fixture(scope="module")
def test_user() -> Iterator[pwd.struct_passwd]:
    """A real unprivileged user (created for the module when missing; root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user")
    yield ensure_user(USER)


@pytest.fixture(scope="module")
def root_cluster(test_user: pwd.struct_passwd, cluster: Cluster) -> Cluster:
    """The module's cluster, with the second user present."""
    return cluster
