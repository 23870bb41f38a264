"""Every shared trace replays to completion (a slice of each; full runs are in bench/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.sim.cluster import from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.result import UNFINISHED
from corral.sim.swf import read_swf
from corral.sim.workload import build_workload, select

from .conftest import TRACES

ALL = sorted(p.name for p in TRACES.glob("*") if p.name not in ("README.md", "SHA256SUMS.txt"))


@pytest.mark.parametrize("name", ALL)
def test_slice_replays_to_completion(traces_dir: Path, name: str) -> None:
    trace = read_swf(traces_dir / name)
    wl = build_workload(trace)
    # a slice from the middle of the trace, where the machine is busy
    mid = len(wl) // 2
    part = select(wl, f"{mid}:{mid + 300}")
    cl = from_header(part.max_nodes, part.max_procs, machine="cores")  # the CLI default
    res = simulate(part, cl, EngineOptions(config=SchedulerConfig(
        ordering=Ordering.FCFS, backfill=BackfillMode.EASY)))
    assert not (res.state == UNFINISHED).any()
    started = np.isfinite(res.start_s)
    assert started.sum() >= len(part) - int((part.procs > cl.total_cpus).sum())
    assert (res.start_s[started] >= part.submit_s[started]).all()


def test_twelve_traces_present() -> None:
    assert len(ALL) == 12
