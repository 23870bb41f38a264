"""The counted queue walk behind a blocked EASY head (``passes.lean``) changes nothing.

On one-core nodes the core counts, at C level, the run of queued jobs that it would only
test and refuse (or skip as too wide). ``max_jobs_per_cycle`` set to a huge number turns
that path off (the job-by-job loop then runs), so both must give the same schedule,
including where ``bf_max_job_test`` cuts the backfill pass short.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.sim.cluster import from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.swf import read_swf
from corral.sim.workload import build_workload, select


@pytest.mark.parametrize("max_test", [1, 2, 7, 500])
@pytest.mark.parametrize("ordering", [Ordering.FCFS, Ordering.SJF])
def test_counted_walk_matches_the_job_by_job_loop(traces_dir: Path, max_test: int,
                                                   ordering: Ordering) -> None:
    wl = select(build_workload(read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")), "1500")
    cl = from_header(wl.max_nodes, wl.max_procs, machine="cores")
    cfg = SchedulerConfig(ordering=ordering, backfill=BackfillMode.EASY,
                          bf_max_job_test=max_test)
    a = simulate(wl, cl, EngineOptions(config=cfg, record_allocations=True))
    slow = dataclasses.replace(cfg, max_jobs_per_cycle=10**9)
    b = simulate(wl, cl, EngineOptions(config=slow, record_allocations=True))
    np.testing.assert_array_equal(a.start_s, b.start_s)
    np.testing.assert_array_equal(a.end_s, b.end_s)
    assert a.allocations == b.allocations
    # the slice queues up: the counted walk had work to do
    assert float(np.max(a.start_s - wl.submit_s)) > 0


@pytest.mark.parametrize("max_test", [1, 7, 500])
def test_job_by_job_first_slice_matches_the_pipeline(traces_dir: Path, max_test: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``LeanWalk._lean_few`` (first slices of up to 8 jobs, counted job by job) gives the same
    verdicts as ``LeanWalk._lean_chunk`` (the C-level pipeline) on every slice."""
    import corral.core.passes.lean as lean

    wl = select(build_workload(read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")), "1500")
    cl = from_header(wl.max_nodes, wl.max_procs, machine="cores")
    cfg = SchedulerConfig(ordering=Ordering.FCFS, backfill=BackfillMode.EASY,
                          bf_max_job_test=max_test)
    calls = {"few": 0}
    few = lean.LeanWalk._lean_few

    def counted(self: lean.LeanWalk, *args: object, **kw: object) -> tuple[int, int]:
        calls["few"] += 1
        return few(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lean.LeanWalk, "_lean_few", counted)
    a = simulate(wl, cl, EngineOptions(config=cfg, record_allocations=True))
    assert calls["few"] > 0  # the job-by-job path ran
    monkeypatch.setattr(lean, "_LEAN_SMALL", 0)  # every slice through the pipeline
    b = simulate(wl, cl, EngineOptions(config=cfg, record_allocations=True))
    np.testing.assert_array_equal(a.start_s, b.start_s)
    np.testing.assert_array_equal(a.end_s, b.end_s)
    assert a.allocations == b.allocations
