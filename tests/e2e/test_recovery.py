"""Crash recovery with real SIGKILLs: nothing accepted is lost, no job starts twice."""

from __future__ import annotations

import collections
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import FINISHED, TEST_CONFIG, Cluster, _alive, wait_for


@pytest.mark.slow
def test_kill9_controller_with_500_jobs(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    starts = c.work / "starts.log"
    ids: list[int] = []
    for i in range(500):
        cmd = f"echo $SLURM_JOB_ID >> {starts}" + ("; sleep 1" if i % 5 == 0 else "")
        ids.append(c.submit(cmd, name=f"r{i}"))
    # kill while some are queued, some running, some finished
    wait_for(lambda: starts.exists() and len(starts.read_text().split()) >= 50, 60,
             what="the first starts")
    pid = c.controller_pid()
    assert pid is not None
    c.kill9(pid)
    c.client.close()
    c.start_controller()
    c.client.close()

    def all_done() -> bool:
        jobs = c.client.history(ids=ids, all_users=True)
        return len(jobs) == 500 and all(j["state"] in FINISHED for j in jobs)

    wait_for(all_done, 120, interval=0.2, what="all 500 jobs to finish after the restart")
    jobs = c.client.history(ids=ids, all_users=True)
    assert sorted(j["id"] for j in jobs) == sorted(ids)
    assert collections.Counter(j["state"] for j in jobs) == {"COMPLETED": 500}
    counts = collections.Counter(int(x) for x in starts.read_text().split())
    twice = {j: n for j, n in counts.items() if n != 1}
    assert not twice, f"jobs started more than once: {twice}"
    assert set(counts) == set(ids)


def test_kill9_agent_jobs_continue_and_are_readopted(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    gate = c.work / "gate"
    starts = c.work / "starts.log"
    ids = [c.submit(f"echo $SLURM_JOB_ID >> {starts}; "
                    f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done-$SLURM_JOB_ID")
           for _ in range(3)]
    for jid in ids:
        c.wait_state(jid, "RUNNING")
    wait_for(lambda: starts.exists() and len(starts.read_text().split()) == 3, 10,
             what="three starts")
    apid = c.agent_pid()
    assert apid is not None
    c.kill9(apid)
    wait_for(lambda: not c.client.nodes()[0]["connected"], 10, what="the agent to be gone")
    gate.write_text("go")  # the jobs finish while no agent runs
    c.start_agent()
    for jid in ids:
        job = c.wait_done(jid, 30)
        assert job["state"] == "COMPLETED", job
        assert (c.work / f"slurm-{jid}.out").read_text().strip() == f"done-{jid}"
    counts = collections.Counter(int(x) for x in starts.read_text().split())
    assert counts == {jid: 1 for jid in ids}
    node = c.client.nodes()[0]
    assert node["connected"] and node["state"] == "IDLE"


def test_kill9_agent_running_jobs_keep_running(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    gate = c.work / "gate2"
    jid = c.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done")
    c.wait_state(jid, "RUNNING")
    apid = c.agent_pid()
    assert apid is not None
    c.kill9(apid)
    # the node goes DOWN after node_down_after_s, but its jobs are not touched before the
    # grace (node_fail_grace_s) runs out: a brief outage never kills live jobs
    wait_for(lambda: c.client.nodes()[0]["state"] == "DOWN", 20, what="the node to go DOWN")
    assert c.job(jid)["state"] == "RUNNING"
    c.start_agent()
    wait_for(lambda: c.client.nodes()[0]["connected"], 20, what="the agent to reconnect")
    assert c.client.nodes()[0]["state"] in ("MIXED", "ALLOCATED")
    assert c.job(jid)["state"] == "RUNNING"  # re-adopted, not restarted, not failed
    gate.write_text("go")
    job = c.wait_done(jid, 20)
    assert job["state"] == "COMPLETED" and job["restarts"] == 0


GRACE_CONFIG = TEST_CONFIG.replace("node_fail_grace_s = 60", "node_fail_grace_s = 1")


@pytest.fixture()
def short_grace_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, GRACE_CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_lost_node_fails_or_requeues_jobs_after_grace(short_grace_cluster: Cluster) -> None:
    c = short_grace_cluster
    gate = c.work / "gate3"
    cmd = (f"echo $$ > pid.$SLURM_JOB_ID.$SLURM_RESTART_COUNT; "
           f"while [ ! -e {gate} ]; do sleep 0.05; done")
    keep = c.submit(cmd, requeue=True)
    lose = c.submit(cmd, requeue=False)
    for jid in (keep, lose):
        c.wait_state(jid, "RUNNING")
        wait_for(lambda j=jid: (c.work / f"pid.{j}.0").exists(), 10, what="the job's pid")
    apid = c.agent_pid()
    assert apid is not None
    c.kill9(apid)
    assert c.wait_done(lose, 30)["state"] == "NODE_FAIL"
    job = c.wait_state(keep, "PENDING", 30)
    assert job["restarts"] == 1
    c.start_agent()
    # the agent reports the old runs; the controller kills them (they are orphans now)
    for jid in (keep, lose):
        old = int((c.work / f"pid.{jid}.0").read_text())
        wait_for(lambda p=old: not _alive(p), 20, what=f"orphan run of job {jid} killed")
    c.wait_state(keep, "RUNNING", 30)
    wait_for(lambda: (c.work / f"pid.{keep}.1").exists(), 10, what="the second run")
    gate.write_text("go")
    done = c.wait_done(keep, 30)
    assert done["state"] == "COMPLETED" and done["restarts"] == 1
