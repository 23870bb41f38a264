"""``--time-min``: a job may start with a shorter time limit, down to its minimum, when
that lets it backfill without delaying a reservation (Slurm's TimeMin)."""

from __future__ import annotations

import pytest
from builders import cluster, config, job

from corral.core import run_cycle
from corral.core.config import BackfillMode


def scenario(time_min_s: int | None, mode: BackfillMode = BackfillMode.EASY):  # type: ignore[no-untyped-def]
    c = cluster(nodes=2, sockets=1, cores_per_socket=4)
    busy = job(1).walltime_s(100).running_on(("n001", 4), start=0.0).build()  # n001 until 100
    head = job(2).nodes(2).exclusive().walltime_s(600).submit(1).build()  # reserved at 100
    cand = job(3).nodes(1).exclusive().walltime_s(1000).submit(2)
    if time_min_s is not None:
        cand = cand.spec(time_min_s=time_min_s)
    snap = c.snapshot(pending=[head, cand.build()], running=[busy])
    return run_cycle(snap, config(backfill=mode, bf_resolution_s=1), now=10.0)


@pytest.mark.parametrize("mode", [BackfillMode.EASY, BackfillMode.CONSERVATIVE])
def test_shorter_limit_lets_the_job_backfill(mode: BackfillMode) -> None:
    r = scenario(None, mode)
    assert not r.starts  # 1000 s on n002 would delay job 2's reservation at t=100
    r = scenario(30, mode)
    [st] = r.starts
    assert st.job_id == 3 and st.allocation.node_names == ("n002",)
    assert st.time_limit_s == 90  # the longest limit that ends by the reservation at t=100
    assert r.reservations and r.reservations[0].job_id == 2
    assert r.reservations[0].start_time == 100


def test_minimum_longer_than_the_hole_waits() -> None:
    r = scenario(120)
    assert not r.starts
    assert r.pending[3].reason == "Priority"


def test_full_limit_when_it_fits() -> None:
    c = cluster(nodes=2, sockets=1, cores_per_socket=4)
    cand = job(3).nodes(1).walltime_s(1000).spec(time_min_s=30).submit(2).build()
    r = run_cycle(c.snapshot(pending=[cand]), config(), now=10.0)
    assert [s.time_limit_s for s in r.starts] == [1000]


def test_strict_mode_ignores_time_min() -> None:
    r = scenario(30, BackfillMode.NONE)
    assert not r.starts
