"""Smoke tests of the multi-host test cluster: real agents on separate network (and UTS)
namespaces, jobs submitted over HTTP from a compute host with the Slurm shims."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.core.parse.hostlist import expand
from tests.multinode.hosts import NetnsCluster, wait_for

pytestmark = [pytest.mark.multinode, pytest.mark.root]


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_agents_registered_on_distinct_hosts(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    nodes = {n["name"]: n for n in c.client.nodes()}
    assert sorted(nodes) == sorted(c.names) and len(set(c.names)) == 3
    assert all(n["connected"] and n["state"] == "IDLE" for n in nodes.values()), nodes
    # every agent in a network namespace of its own, none in the test's
    netns = {os.readlink(f"/proc/{h.pid}/ns/net") for h in c.hosts}
    assert len(netns) == 3 and os.readlink("/proc/self/ns/net") not in netns
    for h in c.hosts:  # each host: its own name and address, the head reachable
        r = c.run_on(h, "hostname; ip -4 -o addr show eth0", check=True)
        name, addr = r.stdout.splitlines()
        assert name == h.name and f"{h.ip}/24" in addr
    assert c.startup_s is not None and c.startup_s < 30


def test_sbatch_from_one_host_runs_on_another(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    h1, h2 = c.host(1), c.host(2)
    out = c.shared / "where.out"
    jid = c.sbatch(h1, "-w", h2.name, "-o", str(out), "--wrap", "hostname")
    job = c.wait_done(jid)
    assert job["state"] == "COMPLETED", (job, c.logs())
    assert job["nodes"] == [h2.name]
    assert _read(out).strip() == h2.name
    # squeue/sacct from another host see the same job over HTTP
    r = c.run_on(c.host(3), ["sacct", "-j", str(jid), "-n", "-X", "-o", "JobID,State,NodeList"],
                 check=True)
    assert r.stdout.split()[:3] == [str(jid), "COMPLETED", h2.name], r.stdout


def test_sbatch_over_three_hosts(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    out = c.shared / "three.out"
    jid = c.sbatch(1, "-N3", "-o", str(out), "--wrap",
                   'echo "$SLURM_JOB_NODELIST $SLURM_JOB_NUM_NODES"; hostname')
    job = c.wait_done(jid)
    assert job["state"] == "COMPLETED", (job, c.logs())
    nodelist, num, host = _read(out).split()
    assert sorted(expand(nodelist)) == sorted(c.names) and num == "3"
    assert sorted(job["nodes"]) == sorted(c.names)
    assert host == job["nodes"][0]  # the batch script runs on the allocation's first node


def test_cut_link_and_stop_agent(mn_cluster_factory: Callable[..., NetnsCluster]) -> None:
    c = mn_cluster_factory(2)
    h1, h2 = c.host(1), c.host(2)
    assert c.can_reach(h1, h2) and c.can_reach(h2, c.head)  # a refused port answers too
    with c.link_cut(h2):
        assert not c.can_reach(h1, h2, timeout=0.3)
        assert not c.can_reach(h2, c.head, timeout=0.3)
        assert c.can_reach(h1, c.head)
    wait_for(lambda: c.can_reach(h1, h2, timeout=0.3), 10, what="h2 reachable again")

    # a stopped agent stops heartbeating (its process in state T) and resumes on SIGCONT.
    # (The node's DOWN and return: test_liveness_hosts.py.)
    down_after = 3.0  # BASE_SETTINGS controller.node_down_after_s
    with c.agent_stopped(h1):
        assert Path(f"/proc/{h1.pid}/status").read_text().split("State:")[1].split()[0] == "T"
        wait_for(lambda: time.time() - c.node(h1)["last_seen"] > down_after, 15,
                 what="h1 silent for node_down_after_s")
        assert time.time() - c.node(h2)["last_seen"] < down_after
    wait_for(lambda: time.time() - c.node(h1)["last_seen"] < 1.0, 10,
             what="h1 heartbeating again")
    c.wait_all_up(10)
