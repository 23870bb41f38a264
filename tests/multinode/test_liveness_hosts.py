"""Node liveness across hosts: a host whose cable is pulled (packets dropped, no resets:
the controller's TCP connection to its agent stays open) or whose agent is stopped loses
its node after ``node_down_after_s``; its jobs follow their requeue policy after
``node_fail_grace_s``; once the host is back, its agent reconnects on its own."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.multinode.hosts import NetnsCluster, _alive, wait_for

pytestmark = [pytest.mark.multinode, pytest.mark.root]

DOWN_AFTER = 3.0  # BASE_SETTINGS controller.node_down_after_s
SHORT_GRACE = {"controller": {"node_fail_grace_s": 2}}


def test_cut_link_node_down_job_requeued_agent_reconnects(
        mn_cluster_factory: Callable[..., NetnsCluster]) -> None:
    c = mn_cluster_factory(2, settings=SHORT_GRACE)
    h1, h2 = c.host(1), c.host(2)
    gate = c.shared / "gate"
    pid = c.shared / "pid"
    jid = c.sbatch(h1, "-w", h2.name, "--requeue", "-o", "/dev/null", "--wrap",
                   f"echo $$ > {pid}.$SLURM_RESTART_COUNT; "
                   f"while [ ! -e {gate} ]; do sleep 0.05; done")
    c.wait_state(jid, "RUNNING")
    wait_for(lambda: (c.shared / "pid.0").exists() and (c.shared / "pid.0").read_text(), 10,
             what="the first run's pid")
    with c.link_cut(h2):
        cut = time.monotonic()
        node = c.wait_node(h2, "DOWN", DOWN_AFTER + 4)
        assert time.monotonic() - cut < DOWN_AFTER + 4
        assert node["reason"] == "Not responding" and not node["connected"]
        assert c.node(h1)["state"] != "DOWN"
        job = c.wait_state(jid, "PENDING", 15)  # after the grace: requeued (it allows it)
        assert job["restarts"] == 1
    # the link is back: the agent gave up its dead connection and dials again
    wait_for(lambda: (lambda n: n["connected"] and n["state"] != "DOWN")(c.node(h2)), 30,
             what=f"{h2.name} reconnected and up")
    old = int((c.shared / "pid.0").read_text())
    wait_for(lambda: not _alive(old), 20, what="the orphan first run killed")
    c.wait_state(jid, "RUNNING", 30)
    wait_for(lambda: (c.shared / "pid.1").exists(), 10, what="the second run")
    gate.write_text("go")
    done = c.wait_done(jid, 30)
    assert done["state"] == "COMPLETED" and done["restarts"] == 1 and done["nodes"] == [h2.name]


def test_stopped_agent_node_down_then_readopted(
        mn_cluster_factory: Callable[..., NetnsCluster]) -> None:
    c = mn_cluster_factory(2)
    h1, h2 = c.host(1), c.host(2)
    gate = c.shared / "gate"
    jid = c.sbatch(h1, "-w", h1.name, "-o", "/dev/null", "--wrap",
                   f"while [ ! -e {gate} ]; do sleep 0.05; done")
    c.wait_state(jid, "RUNNING")
    with c.agent_stopped(h1):
        c.wait_node(h1, "DOWN", DOWN_AFTER + 4)
        assert c.node(h2)["state"] == "IDLE"
        assert c.job(jid)["state"] == "RUNNING"  # within the grace (60 s): untouched
    c.wait_node(h1, {"MIXED", "ALLOCATED"}, 20)
    assert c.node(h1)["connected"] and c.job(jid)["state"] == "RUNNING"
    gate.write_text("go")
    done = c.wait_done(jid, 20)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0
