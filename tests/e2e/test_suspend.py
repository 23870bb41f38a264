"""Preemption mode SUSPEND through the real daemons (``[preemption] allow_suspend``).

A high-tier job takes the cores of a running low-tier job, which is frozen (SUSPENDED),
keeps its memory, does not burn its time limit while frozen, and resumes where it was
when the high job ends (same run: no requeue). A multi-node victim carries the warning
that MPI jobs often cannot resume.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, corral, wait_for

SUSPEND_CONFIG = TEST_CONFIG + """
[preemption]
type = "partition_prio"
mode = "SUSPEND"
allow_suspend = true

[[partitions]]
name = "low"
nodes = "ALL"
default = true
priority_tier = 1
preempt_mode = "SUSPEND"

[[partitions]]
name = "high"
nodes = "ALL"
priority_tier = 2
"""

SECOND_NODE = """
[[nodes]]
name = "testnode2"
cpus = 16
mem_mb = 8000
"""


@pytest.fixture()
def suspend_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, SUSPEND_CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_suspended_victim_resumes_after_the_preemptor(suspend_cluster: Cluster) -> None:
    c = suspend_cluster
    ticks = c.work / "ticks"
    gate = c.work / "gate"
    # the whole node; a 6 s limit it would exceed if its frozen time counted
    low = c.submit(f"while [ ! -e {gate} ]; do echo t >> {ticks}; sleep 0.05; done",
                   partitions=("low",), ntasks=16, nodes_max=1, time_limit_s=6,
                   mem_per_node_mb=3000)
    c.wait_state(low, "RUNNING")
    wait_for(lambda: _lines(ticks) >= 3, 20, what="the low job to tick")
    # the high job checks that the low one is frozen while it runs
    high = c.submit(f"a=$(wc -l < {ticks}); sleep 7; b=$(wc -l < {ticks}); echo $a $b",
                    partitions=("high",), ntasks=16, nodes_max=1, mem_per_node_mb=3000)
    rec = c.wait_state(low, "SUSPENDED", 20)
    assert rec["state_short"] == "S" and rec["restarts"] == 0
    assert rec["warning"] == ""  # one node: no MPI warning
    c.wait_state(high, "RUNNING", 20)
    node = c.client.node("testnode")
    assert node["alloc_cpus"] == 16  # the high job's; the frozen one gave its CPUs back
    assert node["alloc_mem_mb"] == 6000  # ... but kept its memory
    show = corral("show", str(low), env=dict(os.environ, CORRAL_SOCKET=str(c.sock)))
    assert "SUSPENDED" in show.stdout and f"suspended for job {high}" in show.stdout, show
    queue = corral("queue", "--json", env=dict(os.environ, CORRAL_SOCKET=str(c.sock)))
    assert '"state_short": "S"' in queue.stdout or '"state_short":"S"' in queue.stdout
    # a controller crash while it is suspended loses nothing
    pid = c.controller_pid()
    assert pid is not None
    c.kill9(pid)
    c.client.close()
    c.start_controller()
    c.client.close()
    assert c.job(low)["state"] == "SUSPENDED" and c.job(high)["state"] == "RUNNING"
    assert c.client.node("testnode")["alloc_cpus"] == 16
    assert c.wait_done(high, 30)["state"] == "COMPLETED"
    a, b = (c.work / f"slurm-{high}.out").read_text().split()
    assert a == b, "the suspended job ran while the preemptor had its cores"
    # resumed in the same run, and ticking again
    rec = c.wait_state(low, "RUNNING", 20)
    assert rec["restarts"] == 0 and rec["suspended_s"] >= 6.5, rec
    frozen = _lines(ticks)
    wait_for(lambda: _lines(ticks) > frozen + 2, 20, what="the resumed job to tick")
    gate.write_text("go")
    final = c.wait_done(low, 30)
    # 7 s frozen + its own run time > its 6 s limit: the frozen time did not count
    assert final["state"] == "COMPLETED", final
    assert final["end_time"] - final["start_time"] > 6.5
    assert final["time_used_s"] < 6


def _second_agent(c: Cluster) -> subprocess.Popen[bytes]:
    log = open(c.state_dir / "log" / "agent2.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", ENTRY, "agent", "--controller",
                          f"unix:{c.sock}", "--key-file", str(c.state_dir / "cluster.key"),
                          "--state-dir", str(c.state_dir / "agent2"), "--config",
                          str(c.config), "--name", "testnode2"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    c.extra_procs.append(p)
    return p


def test_multi_node_victim_carries_the_mpi_warning() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, SUSPEND_CONFIG + SECOND_NODE)
    c.up()
    try:
        _second_agent(c)
        wait_for(lambda: c.client.node("testnode2")["connected"], 30,
                 what="the second agent")
        low = c.submit("sleep 60", partitions=("low",), ntasks=32, nodes_min=2)
        c.wait_state(low, "RUNNING", 20)
        high = c.submit("sleep 60", partitions=("high",), ntasks=32, nodes_min=2)
        rec = c.wait_state(low, "SUSPENDED", 20)
        assert rec["warning"] == "suspending a multi-node job: MPI jobs often cannot resume"
        c.wait_state(high, "RUNNING", 20)
        log = (c.state_dir / "log" / "controller.log").read_text()
        assert f"job {low} suspended for job {high}: suspending a multi-node job" in log
        # cancelling a frozen job ends it (its supervisor thaws it first)
        c.client.cancel([low, high])
        assert c.wait_done(low, 30)["state"] == "CANCELLED"
        assert c.wait_done(high, 30)["state"] == "CANCELLED"
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)
