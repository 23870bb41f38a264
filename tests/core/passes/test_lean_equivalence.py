"""The count-only fast paths (``passes.lean``) make the general pass's decisions.

Property: for random workloads on machines of one-core nodes (the only machines where the
paths apply), under EASY with FCFS or SJF order and any ``bf_max_job_test``, a replay with
``Pass.count_only_paths`` on and one with it off (the general loop visits every job) start
every job at the same time on the same nodes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.passes.schedule import Pass
from corral.sim.cluster import from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.workload import Workload


def _workload(jobs: list[tuple[int, int, int, int]], cpus: int) -> Workload:
    """(submit gap, run, limit slack, procs) per job."""
    n = len(jobs)
    submit = np.cumsum([j[0] for j in jobs]).astype(np.float64)
    run = np.array([j[1] for j in jobs], dtype=np.float64)
    ints = np.arange(1, n + 1, dtype=np.int64)
    return Workload(
        job_id=ints, submit_s=submit, run_s=run,
        limit_s=run + np.array([j[2] for j in jobs], dtype=np.float64),
        procs=np.array([min(j[3], cpus) for j in jobs], dtype=np.int64),
        user_id=np.full(n, 1, dtype=np.int64), group_id=np.full(n, 1, dtype=np.int64),
        queue_id=np.full(n, -1, dtype=np.int64), partition_id=np.full(n, -1, dtype=np.int64),
        row=ints - 1, max_nodes=cpus, max_procs=cpus)


JOBS = st.lists(st.tuples(st.integers(0, 8), st.integers(1, 400), st.integers(0, 100),
                          st.integers(1, 16)), min_size=80, max_size=120)


@pytest.fixture(autouse=True)
def _restore() -> None:
    Pass.count_only_paths = True


@settings(max_examples=40, deadline=None)
@given(JOBS, st.integers(4, 16), st.sampled_from([Ordering.FCFS, Ordering.SJF]),
       st.sampled_from([1, 2, 3, 500]), st.sampled_from([1, 60]))
def test_fast_paths_change_no_decision(jobs: list[tuple[int, int, int, int]], cpus: int,
                                       ordering: Ordering, max_test: int,
                                       res: int) -> None:
    wl = _workload(jobs, cpus)
    cl = from_header(cpus, cpus, machine="cores")
    cfg = SchedulerConfig(ordering=ordering, backfill=BackfillMode.EASY,
                          bf_max_job_test=max_test, bf_resolution_s=res)
    opts = EngineOptions(config=cfg, record_allocations=True)
    try:
        Pass.count_only_paths = True
        fast = simulate(wl, cl, opts)
        Pass.count_only_paths = False
        general = simulate(wl, cl, opts)
    finally:
        Pass.count_only_paths = True
    np.testing.assert_array_equal(fast.start_s, general.start_s)
    np.testing.assert_array_equal(fast.end_s, general.end_s)
    assert fast.allocations == general.allocations
