from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.shims.harness import ShimCluster, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def shim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShimCluster]:
    c = start_cluster(tmp_path_factory.mktemp("shims"))
    try:
        yield c
    finally:
        stop_cluster(c)
