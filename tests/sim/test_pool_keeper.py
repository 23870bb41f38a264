"""The engine's kept pool (``corral.core.pool.PoolKeeper``) changes no decision.

With ``keep_pool`` the core applies the engine's start/end deltas to a pool kept across
cycles; without it the core diffs the whole running set every cycle. Both must give the
same schedule, including with preemption (requeue and cancel, where running records are
replaced) and on a multi-core machine.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.cycle import clear_caches
from corral.sim.cluster import from_config, from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.swf import read_swf
from corral.sim.workload import ExceedPolicy, Workload, build_workload, select

from .test_cluster_config import preempt_toml
from .test_engine import wl_of


def _same(wl: Workload, cl: object, opt: EngineOptions) -> None:
    clear_caches()
    a = simulate(wl, cl, opt)  # type: ignore[arg-type]
    clear_caches()
    b = simulate(wl, cl, dataclasses.replace(opt, keep_pool=False))  # type: ignore[arg-type]
    np.testing.assert_array_equal(a.start_s, b.start_s)
    np.testing.assert_array_equal(a.end_s, b.end_s)
    np.testing.assert_array_equal(a.state, b.state)
    assert a.allocations == b.allocations


@pytest.mark.parametrize("backfill", [BackfillMode.EASY, BackfillMode.CONSERVATIVE,
                                      BackfillMode.NONE])
@pytest.mark.parametrize("machine", ["cores", "nodes"])
def test_kept_pool_matches_the_diffed_pool(traces_dir: Path, backfill: BackfillMode,
                                           machine: str) -> None:
    wl = select(build_workload(read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")), "400")
    cl = from_header(wl.max_nodes, wl.max_procs, machine=machine)
    for exceed in (ExceedPolicy.KILL, ExceedPolicy.RUN):
        opt = EngineOptions(config=SchedulerConfig(ordering=Ordering.SJF, backfill=backfill),
                            exceed=exceed, record_allocations=True)
        _same(wl, cl, opt)


@pytest.mark.parametrize("mode", ["requeue", "cancel"])
def test_kept_pool_follows_preemption(tmp_path: Path, mode: str) -> None:
    p = tmp_path / "corral.toml"
    p.write_text(preempt_toml(mode))
    cl = from_config(p).with_queue_map("0=high,1=low")
    rows = [(0, 1000, 1000, 4), (10, 100, 100, 4), (20, 50, 50, 2), (30, 500, 600, 1),
            (40, 20, 30, 3), (45, 300, 300, 2)]
    wl = dataclasses.replace(wl_of(rows, 2, 4), queue_id=np.array([1, 0, 0, 1, 0, 1]))
    assert cl.scheduler is not None
    _same(wl, cl, EngineOptions(config=cl.scheduler, record_allocations=True))
