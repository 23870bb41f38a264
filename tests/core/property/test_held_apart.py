"""Held jobs kept apart (``ClusterSnapshot.held``): the controller leaves jobs on hold out of
the queue pass. Property: whatever is held, the other jobs get exactly the decisions they
get when the held jobs are in ``pending`` (the pass only ever gave those a reason), and a
dependency on a held job still waits."""

from __future__ import annotations

import dataclasses
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.cycle import clear_caches
from corral.core.model.job import HoldKind
from tests.builders import cluster, config, job

from .simkit import clusters, workloads

SETTINGS = settings(max_examples=int(os.environ.get("CORE_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(clusters(), workloads(), st.data(), st.sampled_from(list(BackfillMode)),
       st.sampled_from([Ordering.FCFS, Ordering.MULTIFACTOR, Ordering.SJF]))
def test_held_jobs_apart_change_no_other_decision(cluster, jobs, data, mode, ordering) -> None:  # type: ignore[no-untyped-def]
    held_ids = data.draw(st.sets(st.sampled_from([j.id for j in jobs])) if jobs
                         else st.just(set()))
    jobs = [dataclasses.replace(j, hold=HoldKind.USER) if j.id in held_ids else j
            for j in jobs]
    cfg = SchedulerConfig(ordering=ordering, backfill=mode)
    together = cluster.snapshot(pending=jobs)
    apart = cluster.snapshot(pending=[j for j in jobs if j.id not in held_ids],
                             held=tuple(j for j in jobs if j.id in held_ids))
    clear_caches()
    a = run_cycle(together, cfg, 1000.0)
    clear_caches()
    b = run_cycle(apart, cfg, 1000.0)
    assert [(s.job_id, s.allocation, s.time_limit_s) for s in a.starts] == \
        [(s.job_id, s.allocation, s.time_limit_s) for s in b.starts]
    # a held job that can never run is refused only once it is released (it shows its
    # hold until then, as in Slurm); the others' refusals are the same
    assert [r for r in a.rejects if r.job_id not in held_ids] == list(b.rejects)
    assert [(r.job_id, r.start_time) for r in a.reservations] == \
        [(r.job_id, r.start_time) for r in b.reservations]
    for jid, info in b.pending.items():
        other = a.pending[jid]
        assert (info.reason, info.est_start) == (other.reason, other.est_start), jid
    assert not set(b.pending) & held_ids  # the pass did not visit them
    assert all(a.pending[j].reason == "JobHeldUser" for j in held_ids
               if j in a.pending)


def test_a_dependency_on_a_held_job_still_waits() -> None:
    c = cluster(nodes=1)
    target = job(1).hold().build()
    waiter = job(2).depends("afterok", 1).build()
    res = run_cycle(c.snapshot(pending=[waiter], held=(target,)), config(), 1000.0)
    assert not res.starts and res.pending[2].reason == "Dependency"
    res = run_cycle(c.snapshot(pending=[waiter]), config(), 1000.0)  # gone: purged
    assert [s.job_id for s in res.starts] == [2]
