"""``PoolKeeper`` lends its pool to the pass (no copy per cycle) and stays exact.

After every cycle the kept pool must equal a pool built from scratch from the running set,
whatever the shell does with the starts: add them all, add only some (a lent allocation no
job was added with is given back), add and remove again before the next cycle, or let a
pass fail part-way (the keeper is invalidated and rebuilt from the snapshot).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from corral.core import ClusterSnapshot, SchedulerConfig, run_cycle
from corral.core.config import BackfillMode
from corral.core.model.job import Job, JobState
from corral.core.nodes import node_table
from corral.core.pool import Pool, PoolKeeper
from corral.sim.cluster import SimCluster, from_header


def _state(p: Pool) -> tuple[object, ...]:
    return (p.core_mask, p.cores_free, p.mem_free, p.gpu_mask, p.gpus_free, p.ge_cores,
            p.idle, p.free_total)


def _fresh(cl: SimCluster, running: list[Job]) -> Pool:
    table, up = node_table(cl.nodes, cl.partitions)
    pool = Pool(table, up)
    for j in running:
        pool.take_job(j)
    return pool


@pytest.mark.parametrize("machine", ["cores", "nodes"])
def test_lent_pool_equals_a_rebuilt_one(machine: str) -> None:
    rng = random.Random(3)
    cl = from_header(8, 32, machine=machine)
    config = SchedulerConfig(backfill=BackfillMode.EASY, annotate_pending=False)
    keeper = PoolKeeper()
    pending: dict[int, Job] = {}
    running: dict[int, Job] = {}
    nxt = 0
    dropped = kept = 0
    for step in range(120):
        now = float(step * 10)
        for _ in range(rng.randrange(0, 4)):
            spec = cl.spec_for(rng.choice([1, 2, 3, 4, 8, 12]), rng.choice([30, 60, 600]),
                               "u1", "g1")
            pending[nxt] = Job(id=nxt, spec=spec, submit_time=now)
            nxt += 1
        for jid in [j for j in running if rng.random() < 0.3]:
            keeper.remove(running.pop(jid))
        snap = ClusterSnapshot(nodes=cl.nodes, partitions=cl.partitions,
                               pending=tuple(pending.values()),
                               running=tuple(running.values()), generation=step)
        res = run_cycle(snap, config, now, keeper=keeper)
        for s in res.starts:
            job = pending.pop(s.job_id)
            if rng.random() < 0.2:  # the shell did not start it: stays pending
                pending[job.id] = job
                dropped += 1
                continue
            started = dataclasses.replace(job, state=JobState.RUNNING, start_time=now,
                                          allocation=s.allocation, time_limit_s=60)
            running[job.id] = started
            keeper.add(started)
            kept += 1
            if rng.random() < 0.1:  # ended at once, before the next cycle
                keeper.remove(running.pop(job.id))
        assert keeper.pool is not None
        table, up = node_table(cl.nodes, cl.partitions)
        got = keeper.lend(table, up, tuple(running.values()))
        assert got.check() == []
        assert _state(got) == _state(_fresh(cl, list(running.values())))
    assert dropped > 5 and kept > 20  # both paths were exercised


def test_failed_pass_invalidates_the_keeper() -> None:
    cl = from_header(4, 16, machine="cores")
    config = SchedulerConfig(annotate_pending=False)
    keeper = PoolKeeper()
    spec = cl.spec_for(4, 60, "u1", "g1")
    job = Job(id=1, spec=spec, submit_time=0.0)
    bad = Job(id=2, spec=spec, submit_time=0.0, time_limit_s="x")  # type: ignore[arg-type]
    snap = ClusterSnapshot(nodes=cl.nodes, partitions=cl.partitions, pending=(job, bad))
    with pytest.raises(TypeError):
        run_cycle(snap, config, 0.0, keeper=keeper)
    assert keeper.pool is None  # rebuilt from the next snapshot
    res = run_cycle(dataclasses.replace(snap, pending=(job,)), config, 0.0, keeper=keeper)
    assert [s.job_id for s in res.starts] == [1]
