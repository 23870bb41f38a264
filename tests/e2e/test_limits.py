"""Per-job limits and credential limits on a real cluster (issue 11, item 6): the token
lifetime cap, the default pids limit of every job, Slurm's memory-constraint knobs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import CorralError
from tests.e2e.cluster import TEST_CONFIG, Cluster

MAX_TTL = 3600
CONFIG = TEST_CONFIG.replace("[controller]\n", f"[controller]\nmax_token_ttl_s = {MAX_TTL}\n", 1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("ttl", [1e308, -5, 0, 1.5, "3600", True, MAX_TTL + 1, 10**30])
def test_token_lifetime_is_validated_and_capped(cluster: Cluster, ttl: object) -> None:
    with pytest.raises(CorralError) as err:
        cluster.client.request("POST", "/tokens", {"ttl_s": ttl})
    assert err.value.status == 400, err.value
    assert "ttl_s" in err.value.message


def test_token_within_the_cap_is_minted(cluster: Cluster) -> None:
    got = cluster.client.request("POST", "/tokens", {"ttl_s": MAX_TTL})
    assert got["ttl_s"] == MAX_TTL and got["token"]
    assert cluster.client.request("POST", "/tokens", {})["ttl_s"] == MAX_TTL  # default capped
