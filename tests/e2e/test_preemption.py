"""Preemption through the real daemons: a high-tier partition evicts a low-tier job.

Partition ``low`` (tier 1, PreemptMode=REQUEUE) and ``high`` (tier 2) share the node;
``preempt/partition_prio``. A low job filling the node is signalled, requeued (same id,
restart count 1) and runs again after the high job ends; with CANCEL the victim ends
PREEMPTED. The victim is never offered twice while it is being killed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for

PREEMPT_CONFIG = TEST_CONFIG + """
[preemption]
type = "partition_prio"
mode = "REQUEUE"
grace_s = 1

[[partitions]]
name = "low"
nodes = "ALL"
default = true
priority_tier = 1
preempt_mode = "{mode}"

[[partitions]]
name = "high"
nodes = "ALL"
priority_tier = 2
"""


def _cluster(mode: str) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, PREEMPT_CONFIG.replace("{mode}", mode))
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def requeue_cluster() -> Iterator[Cluster]:
    yield from _cluster("REQUEUE")


@pytest.fixture()
def cancel_cluster() -> Iterator[Cluster]:
    yield from _cluster("CANCEL")


def test_high_tier_job_requeues_low_tier_victim(requeue_cluster: Cluster) -> None:
    c = requeue_cluster
    runs = c.work / "runs"
    gate = c.work / "gate"
    low = c.submit(f"trap 'echo term >> {runs}; exit 143' TERM; echo run >> {runs}; "
                   f"while [ ! -e {gate} ]; do sleep 0.05; done",
                   partitions=("low",), ntasks=16, nodes_max=1)
    c.wait_state(low, "RUNNING")
    wait_for(lambda: runs.exists() and runs.read_text().split() == ["run"], 30,
             what="the low job's first run to start its script")
    high = c.submit(f"cat {runs}", partitions=("high",), ntasks=16, nodes_max=1)
    done = c.wait_done(high, 30)
    assert done["state"] == "COMPLETED", done
    # the victim got SIGTERM and had ended before the high job started on its cores
    assert (c.work / f"slurm-{high}.out").read_text().split() == ["run", "term"]
    # the victim was requeued under the same id and ran again after the high job
    victim = wait_for(lambda: (lambda j: j if j["restarts"] >= 1 and j["state"] == "RUNNING"
                               else None)(c.job(low)), 30, what="the victim to run again")
    assert victim["restarts"] == 1
    gate.write_text("go")
    final = c.wait_done(low, 30)
    assert final["state"] == "COMPLETED" and final["restarts"] == 1
    assert runs.read_text().split() == ["run", "term", "run"]


def test_cancel_mode_ends_victim_preempted(cancel_cluster: Cluster) -> None:
    c = cancel_cluster
    low = c.submit("sleep 60", partitions=("low",), ntasks=16, nodes_max=1)
    c.wait_state(low, "RUNNING")
    high = c.submit("echo high", partitions=("high",), ntasks=16, nodes_max=1)
    assert c.wait_done(high, 30)["state"] == "COMPLETED"
    victim = c.wait_done(low, 30)
    assert victim["state"] == "PREEMPTED", victim
