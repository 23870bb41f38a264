"""Fixtures: multi-host test clusters whose hosts are network namespaces (``hosts.py``).

- ``mn_cluster``: one 3-host cluster for the whole session (``NetnsCluster``; hosts
  ``mn_cluster.names``, ``mn_cluster.host(1..3)``, head ``mn_cluster.head``). Tests that
  break a host (cut its link, stop or kill its agent) should restore it and end with
  ``mn_cluster.wait_all_up()``, or use the factory.
- ``mn_cluster_factory``: ``make(n_hosts=2, **NetnsCluster kwargs) -> started cluster``,
  torn down at the end of the test.

Both skip (with the reason) where network namespaces cannot be made: not root, no
iproute2/util-linux, ``ip netns`` refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.multinode.hosts import NetnsCluster, netns_skip_reason


@pytest.fixture(scope="session")
def netns_available() -> None:
    reason = netns_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def mn_cluster(netns_available: None) -> Iterator[NetnsCluster]:
    """A 3-host cluster (controller on a head host), shared by the session."""
    c = NetnsCluster(3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
def mn_cluster_factory(netns_available: None) -> Iterator[Callable[..., NetnsCluster]]:
    """``make(n_hosts=2, **kw)``: a started cluster of the test's own."""
    made: list[NetnsCluster] = []

    def make(n_hosts: int = 2, **kw: Any) -> NetnsCluster:
        c = NetnsCluster(n_hosts, **kw)
        made.append(c)
        return c.start()

    try:
        yield make
    finally:
        for c in reversed(made):
            c.stop()
