"""The general core reproduces the published FCFS, SJF and F1 cells without backfilling.

Strict priority with Maui-style persistent reservations (``ReservationPolicy.HIGHEST``:
the head keeps its reservation, and so its place, until it starts), a cycle after every
event with arrivals first, absolute trace submit times in the F1/SJF keys, and jobs that
run their logged time. The fast test checks two sequences per cell; the slow one all ten
and all four metrics.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from corral.sim import baselines as bl

from .conftest import EXPECTED, TRACES


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    if not EXPECTED.exists():
        pytest.skip("expected values not available")
    data: dict[str, Any] = json.loads(EXPECTED.read_text())
    return data


@pytest.fixture(scope="module")
def workloads():  # type: ignore[no-untyped-def]
    if not TRACES.is_dir():
        pytest.skip("shared traces not available")
    return {name: bl.load(TRACES, name) for name in bl.REFERENCE_TRACES}


def _check(workloads, expected, trace: str, policy: str, seqs: list[int]) -> None:  # type: ignore[no-untyped-def]
    starts = [bl.PUBLISHED_STARTS[k] for k in seqs]
    got = bl.core_cells(workloads[trace], policy, backfill=False, starts=starts)
    e = expected["traces"][trace]["without_backfilling"]
    for metric, values in (("bsld", got.bsld), ("utilization", got.utilization),
                           ("wait_s", got.wait_s)):
        want = [e[metric]["per_sequence"][policy][k] for k in seqs]
        for k, g, w in zip(seqs, values, want, strict=True):
            assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-6), (
                f"{trace} {policy} {metric} sequence {k}: core {g} != published {w}")


@pytest.mark.parametrize("trace", bl.REFERENCE_TRACES)
@pytest.mark.parametrize("policy", ["FCFS", "SJF", "F1"])
def test_core_matches_published_cells(workloads, expected, trace: str, policy: str) -> None:  # type: ignore[no-untyped-def]
    _check(workloads, expected, trace, policy, [0, 7])


@pytest.mark.slow
@pytest.mark.parametrize("trace", bl.REFERENCE_TRACES)
@pytest.mark.parametrize("policy", ["FCFS", "SJF", "F1"])
def test_core_matches_published_cells_all_sequences(workloads, expected, trace: str,  # type: ignore[no-untyped-def]
                                                    policy: str) -> None:
    _check(workloads, expected, trace, policy, list(range(10)))
    mean = sum(bl.core_cells(workloads[trace], policy, backfill=False).bsld) / 10
    assert round(mean, 2) == pytest.approx(bl.PUBLISHED[(trace, False)][policy][0], abs=0.006)


def test_without_persistent_reservations_the_cells_differ(workloads, expected) -> None:  # type: ignore[no-untyped-def]
    """The HIGHEST policy is what makes the difference: re-picking the head every cycle
    (Slurm-like CURRENT_HIGHEST) lets a later, higher-priority SJF job overtake a waiting
    head, which the authors' loop never does."""
    import dataclasses

    from corral.sim.cluster import from_header
    from corral.sim.engine import EngineOptions, simulate
    from corral.sim.metrics import summarize
    from corral.sim.workload import ExceedPolicy

    wl = workloads["Lublin-1"]
    cfg = bl.core_config("SJF", backfill=False)
    current = dataclasses.replace(cfg, reservation_policy=type(cfg.reservation_policy)(
        "current_highest"))
    res = simulate(bl.sequence_workload(wl, bl.PUBLISHED_STARTS[0]),
                   from_header(wl.max_nodes, wl.max_procs),
                   EngineOptions(config=current, exceed=ExceedPolicy.RUN, cycle_mode="event"))
    want = expected["traces"]["Lublin-1"]["without_backfilling"]["bsld"]["per_sequence"]["SJF"]
    assert not math.isclose(summarize(res)["bsld"]["mean"], want[0], abs_tol=1e-6)
