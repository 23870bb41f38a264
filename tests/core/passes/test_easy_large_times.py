"""EASY's extra-resources rule at trace-sized absolute times (t ~ 2e7 s).

A reservation starting exactly at a step of the profile must count in the window minimum;
an epsilon of 1e-9 s vanishes at 2e7 (the float spacing there is ~4e-9), which once let a
long job backfill into cores the head job had reserved.
"""

from __future__ import annotations

import pytest
from builders import alloc_on, cluster, config, job

from corral.core import run_cycle
from corral.core.config import BackfillMode


@pytest.mark.parametrize("t0", [0.0, 19_451_632.0, 2.0e9])
@pytest.mark.parametrize("mode", [BackfillMode.EASY, BackfillMode.CONSERVATIVE])
def test_backfill_never_takes_reserved_cores_on_one_big_node(t0: float,
                                                              mode: BackfillMode) -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=240, mem_mb=240 * 1000)
    # 135 of 240 cores busy: 36 until t0+1000, 99 much longer
    short = job(1).tasks(36).walltime_s(1000).running_on(
        alloc_on("n001", range(36)), start=t0).build()
    long_ = job(2).tasks(99).walltime_s(500_000).running_on(
        alloc_on("n001", range(36, 135)), start=t0).build()
    head = job(3).tasks(128).walltime_s(3600).mem_per_cpu(1).submit(t0 + 10).build()
    # 20 cores for 20 h: fits now (105 free) but at the reservation only 141-128 = 13 spare
    cand = job(4).tasks(20).walltime_s(72_000).mem_per_cpu(1).submit(t0 + 11).build()
    small = job(5).tasks(13).walltime_s(72_000).mem_per_cpu(1).submit(t0 + 12).build()
    res = run_cycle(c.snapshot(pending=[head, cand, small], running=[short, long_]),
                    config(backfill=mode), now=t0 + 100)
    started = {s.job_id for s in res.starts}
    assert 3 not in started and 4 not in started
    assert 5 in started  # exactly the spare cores: the extra-resources rule still applies
    assert res.reservations and res.reservations[0].job_id == 3
