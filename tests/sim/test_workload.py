"""Workload cleaning and job selection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corral.sim.swf import read_swf
from corral.sim.workload import (
    LoadOptions,
    MissingEstimate,
    ProcsField,
    build_workload,
    parse_sample,
    sample_starts,
    select,
    sequences,
)

TEXT = """; MaxNodes: 16
; MaxProcs: 64
1   0  -1  100  4 -1 -1  8  200 -1 1 1 1 -1 1 -1 -1 -1
2  10  -1   -1  2 -1 -1  2   50 -1 5 2 1 -1 1 -1 -1 -1
3   5  -1    0  1 -1 -1  1   -1 -1 1 3 2 -1 1 -1 -1 -1
4  20  -1  300 -1 -1 -1 16   -1 -1 1 1 1 -1 1 -1 -1 -1
5  30  -1  400 -1 -1 -1 -1  500 -1 1 1 1 -1 1 -1 -1 -1
"""


@pytest.fixture
def trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    p = tmp_path / "w.swf"
    p.write_text(TEXT)
    return read_swf(p)


def test_default_cleaning(trace) -> None:  # type: ignore[no-untyped-def]
    wl = build_workload(trace)
    # job 2 (run -1) and job 5 (no processors) are dropped; sorted by submit: 1, 3, 4
    assert wl.job_id.tolist() == [1, 3, 4]
    assert wl.dropped == {"unknown_runtime": 1, "unknown_procs": 1}
    assert wl.procs.tolist() == [8, 1, 16]  # max(allocated, requested)
    # missing estimates become the run time (at least 1 s)
    assert wl.limit_s.tolist() == [200, 1, 300]
    assert (wl.max_nodes, wl.max_procs) == (16, 64)


def test_estimate_and_runtime_policies(trace) -> None:  # type: ignore[no-untyped-def]
    wl = build_workload(trace, LoadOptions(missing_estimate=MissingEstimate.DEFAULT,
                                           default_estimate_s=77, unknown_runtime_s=10))
    assert wl.job_id.tolist() == [1, 3, 2, 4]
    assert wl.run_s.tolist() == [100, 0, 10, 300]
    assert wl.limit_s.tolist() == [200, 77, 50, 77]
    wl = build_workload(trace, LoadOptions(missing_estimate=MissingEstimate.MAX,
                                           drop_zero_runtime=True))
    assert wl.job_id.tolist() == [1, 4] and wl.limit_s.tolist() == [200, 200]
    wl = build_workload(trace, LoadOptions(procs=ProcsField.ALLOCATED))
    assert wl.procs.tolist() == [4, 1, 16]


def test_selection_specs(trace) -> None:  # type: ignore[no-untyped-def]
    wl = build_workload(trace, LoadOptions(unknown_runtime_s=10))
    assert select(wl, "2").job_id.tolist() == [1, 3]
    assert select(wl, "1:3").job_id.tolist() == [3, 2]
    assert select(wl, "-1:").job_id.tolist() == [4]
    assert select(wl, "id:2-4").job_id.tolist() == [3, 2, 4]
    assert len(select(wl, "all")) == 4
    for bad in ("x", "id:5-1", "1-2"):
        with pytest.raises(ValueError, match="job selection"):
            select(wl, bad)


def test_sampled_sequences_are_seeded() -> None:
    assert parse_sample("10x1024") == (10, 1024)
    with pytest.raises(ValueError):
        parse_sample("10*1024")
    a = sample_starts(10_000, 5, 100, seed=3)
    assert a == sample_starts(10_000, 5, 100, seed=3)
    assert a != sample_starts(10_000, 5, 100, seed=4)
    assert all(0 <= s <= 9_900 for s in a)
    with pytest.raises(ValueError):
        sample_starts(10, 1, 11, seed=1)


def test_sequences_slice_the_workload(trace) -> None:  # type: ignore[no-untyped-def]
    wl = build_workload(trace, LoadOptions(unknown_runtime_s=10))
    parts = sequences(wl, 3, 2, seed=0)
    assert len(parts) == 3 and all(len(p) == 2 for p in parts)
    for p in parts:
        i = int(np.flatnonzero(wl.job_id == p.job_id[0])[0])
        assert p.job_id.tolist() == wl.job_id[i:i + 2].tolist()
