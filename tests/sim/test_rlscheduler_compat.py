"""The published RLScheduler (SC'20) cells, reproduced by the compatibility policy.

Every (trace, mode, policy) cell, all 10 sequences, four metrics (bsld and utilization
are published; mean wait and turnaround were derived with the authors' code), pinned to
``shared/reference/sim/rlscheduler-sc20-expected.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from corral.core.compat.rlscheduler import RlsJob, policy_key, replay
from corral.sim.baselines import PUBLISHED, REFERENCE_TRACES, TRACES
from corral.sim.rlscheduler import (
    PUBLISHED_STARTS,
    gym_seed_words,
    load_workload,
    numpy_key,
    run_sequence,
    sequence_starts,
)
from corral.sim.swf import read_swf

from .conftest import EXPECTED


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    if not EXPECTED.exists():
        pytest.skip("expected values not available")
    data: dict[str, Any] = json.loads(EXPECTED.read_text())
    return data


@pytest.fixture(scope="module")
def workloads(traces_dir: Path):  # type: ignore[no-untyped-def]
    return {name: load_workload(read_swf(traces_dir / f)) for name, f in TRACES.items()
            if name in REFERENCE_TRACES}


def test_rng_protocol_gives_the_documented_starts() -> None:
    assert len(gym_seed_words(1)) == 2
    assert sequence_starts(10_000) == list(PUBLISHED_STARTS)  # Lublin: N = 10,000
    assert sequence_starts(59_705, batch_job_slice=10_000) == list(PUBLISHED_STARTS)
    assert sequence_starts(10_000, seed=2) != list(PUBLISHED_STARTS)


def test_loader_counts_and_first_ids(workloads, expected) -> None:  # type: ignore[no-untyped-def]
    for name, wl in workloads.items():
        e = expected["traces"][name]
        assert len(wl.jobs) == e["jobs_after_filter"]
        for seq in e["sequences"]:
            jobs = wl.jobs[seq["start_index"]:seq["start_index"] + 1024]
            assert jobs[0].job_id == seq["first_job_id"]
            assert jobs[-1].job_id == seq["last_job_id"]
            assert jobs[0].submit_s == seq["first_submit"]


@pytest.mark.parametrize("trace", REFERENCE_TRACES)
@pytest.mark.parametrize("mode", ["without_backfilling", "with_backfilling"])
def test_every_published_cell(workloads, expected, trace: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    e = expected["traces"][trace][mode]
    wl = workloads[trace]
    backfill = mode == "with_backfilling"
    for policy in ("FCFS", "WFP3", "UNI", "SJF", "F1"):
        ms = [run_sequence(wl, s, policy, backfill=backfill) for s in PUBLISHED_STARTS]
        for metric in ("bsld", "utilization", "wait_s", "turnaround_s"):
            got = [getattr(m, metric) for m in ms]
            want = e[metric]["per_sequence"][policy]
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-6), (
                    f"{trace} {mode} {policy} {metric} sequence {k}: {g} != {w}")
        # the printed table: bsld to two decimals; utilization within one unit of the third
        # decimal (the paper prints 0.661 for SDSC-SP2 SJF with backfilling, whose exact
        # mean, here and in the reference JSON, is 0.660464)
        pub_bsld, pub_util = PUBLISHED[(trace, backfill)][policy]
        assert round(sum(m.bsld for m in ms) / 10, 2) == pytest.approx(pub_bsld, abs=0.006)
        assert sum(m.utilization for m in ms) / 10 == pytest.approx(pub_util, abs=0.001)


def test_math_keys_reproduce_too(workloads, expected) -> None:  # type: ignore[no-untyped-def]
    """The pure module's math-based keys differ from numpy's in the last bit for some
    jobs, but change no tie order in the published sequences (checked on two cells)."""
    wl = workloads["SDSC-SP2"]
    e = expected["traces"]["SDSC-SP2"]["with_backfilling"]["bsld"]["per_sequence"]
    for policy in ("F1", "WFP3"):
        got = [run_sequence(wl, s, policy, backfill=True, numpy_keys=False).bsld
               for s in PUBLISHED_STARTS[:3]]
        assert got == pytest.approx(e[policy][:3], abs=1e-6)


def test_keys_follow_the_formulas() -> None:
    j = RlsJob(1, submit_s=1000, run_s=50, req_s=100, procs=4)
    assert policy_key("FCFS", j) == 1000
    assert policy_key("SJF", j) == (100, 1000)
    assert policy_key("F1", j) == pytest.approx(2 * 4 + 870 * 3)
    assert policy_key("WFP3", j) == pytest.approx((1001 / 100) ** 3 * 4)
    assert numpy_key("F1", j) == pytest.approx(policy_key("F1", j))
    with pytest.raises(ValueError, match="unknown RLScheduler policy"):
        policy_key("LJF", j)


def test_replay_semantics_on_a_tiny_machine() -> None:
    """Strict head blocking vs the authors' backfilling, on 4 nodes."""
    jobs = [
        RlsJob(1, 0, 100, 100, 3),  # runs 0-100
        RlsJob(2, 1, 10, 10, 4),  # head: blocked until 100
        RlsJob(3, 2, 10, 10, 1),  # fits now; backfill ends at 12 < shadow 100
        RlsJob(4, 3, 200, 200, 1),  # would end past the shadow: never backfilled
    ]
    keys = [policy_key("FCFS", j) for j in jobs]
    strict = replay(jobs, keys, nodes=4, backfill=False)
    assert strict.start_s == (0, 100, 110, 110)
    bf = replay(jobs, keys, nodes=4, backfill=True)
    assert bf.start_s == (0, 100, 2, 110)
    with pytest.raises(ValueError, match="needs 5 nodes"):
        replay([RlsJob(1, 0, 1, 1, 5)], [0], nodes=4)
