"""EASY behind a reserved head on one-core nodes: the counted queue walk
(``Pass._lean_run``) leaves alone what it cannot count, e.g. ``--time-min``."""

from __future__ import annotations

from builders import cluster, config, job

from corral.core import run_cycle
from corral.core.config import BackfillMode


def test_time_min_job_behind_counted_jobs_still_starts_shortened() -> None:
    c = cluster(nodes=4, sockets=1, cores_per_socket=1, mem_mb=1000)
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()  # until 100
    head = job(2).tasks(4).nodes(1, 4).walltime_s(600).submit(1).build()  # reserved at 100
    # 1-task jobs that would hold a node past t=100: counted, refused
    refused = [job(k).tasks(1).nodes(1, 1).walltime_s(1000).submit(k).build()
               for k in range(3, 9)]
    short = job(9).tasks(1).nodes(1, 1).walltime_s(1000).spec(time_min_s=30).submit(9)
    snap = c.snapshot(pending=[head, *refused, short.build()], running=[busy])
    cfg = config(backfill=BackfillMode.EASY, bf_resolution_s=1, annotate_pending=False)
    first = run_cycle(snap, cfg, now=10.0)
    r = run_cycle(snap, cfg, now=10.0)  # plans now memoized: the walk counts the 1-task jobs
    assert r == first
    assert r.reservations and r.reservations[0].job_id == 2
    assert [s.job_id for s in r.starts] == [9]
    assert r.starts[0].time_limit_s == 90  # ends by the reservation at t=100
