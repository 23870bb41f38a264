"""Node addresses across hosts: each node's address is the one its agent connected from
(its host's address), its host name the one its host reported."""

from __future__ import annotations

import pytest

from tests.multinode.hosts import NetnsCluster

pytestmark = [pytest.mark.multinode, pytest.mark.root]


def test_node_address_and_hostname_per_host(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    c.wait_all_up()
    for h in c.hosts:
        node = c.node(h)
        assert node["address"] == h.ip and node["hostname"] == h.name, node
    h1, h2 = c.host(1), c.host(2)
    r = c.run_on(h1, ["scontrol", "show", "node", h2.name], check=True)
    assert f"NodeAddr={h2.ip} NodeHostName={h2.name} " in r.stdout, r.stdout
    r = c.run_on(h1, ["sinfo", "-N", "-h", "-n", h2.name, "-o", "%N %o"], check=True)
    assert r.stdout.split() == [h2.name, h2.ip], r.stdout
