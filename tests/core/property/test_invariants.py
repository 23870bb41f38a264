"""Property tests over random clusters and workloads (hypothesis).

No over-allocation, gangs all-or-nothing and shapes respected (checked inside ``simulate``
at every cycle), backfill reservations never delayed, determinism, no starvation.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, PlacementMode, SchedulerConfig
from corral.core.cycle import clear_caches

from .simkit import clusters, simulate, unit_clusters, unit_workloads, workloads

SETTINGS = settings(max_examples=int(os.environ.get("CORE_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

modes = st.sampled_from(list(BackfillMode))
placements = st.sampled_from(list(PlacementMode))


def cfg(mode: BackfillMode, placement: PlacementMode = PlacementMode.PACK,
        resolution: int = 1) -> SchedulerConfig:
    return SchedulerConfig(ordering=Ordering.FCFS, backfill=mode, placement=placement,
                           bf_resolution_s=resolution)


@SETTINGS
@given(clusters(), workloads(), modes, placements)
def test_no_overallocation_and_no_starvation(cluster, jobs, mode, placement) -> None:  # type: ignore[no-untyped-def]
    trace = simulate(cluster, jobs, cfg(mode, placement))
    assert not trace.stuck, f"jobs never started: {trace.stuck}"
    assert set(trace.starts) | trace.rejected == {j.id for j in jobs}


@SETTINGS
@given(clusters(), workloads(), st.sampled_from([BackfillMode.EASY, BackfillMode.CONSERVATIVE]),
       st.sampled_from([1, 7]))
def test_backfill_never_delays_a_reservation(cluster, jobs, mode, resolution) -> None:  # type: ignore[no-untyped-def]
    trace = simulate(cluster, jobs, cfg(mode, resolution=resolution))
    for jid, plans in trace.reserved_at.items():
        first_planned = plans[0][1]
        assert jid in trace.starts
        assert trace.starts[jid] <= first_planned, (
            f"job {jid} reserved for t={first_planned} at t={plans[0][0]} "
            f"but started at {trace.starts[jid]} ({plans})")
        if mode == BackfillMode.EASY:
            continue
        # conservative: later plans never move it later either
        for (_, a), (_, b) in zip(plans, plans[1:], strict=False):
            assert b <= a


@SETTINGS
@given(clusters(), workloads(), modes, placements)
def test_identical_input_identical_decisions(cluster, jobs, mode, placement) -> None:  # type: ignore[no-untyped-def]
    config = cfg(mode, placement)
    snap = cluster.snapshot(pending=jobs)
    a = run_cycle(snap, config, 0.0)
    b = run_cycle(snap, config, 0.0)
    clear_caches()
    c = run_cycle(cluster.snapshot(pending=list(jobs)), config, 0.0)
    assert a == b == c


@SETTINGS
@given(unit_clusters(), unit_workloads(), modes, st.sampled_from([1, 5]), st.booleans())
def test_unit_clusters_count_only_planning(cluster, jobs, mode, resolution, annotate) -> None:  # type: ignore[no-untyped-def]
    config = SchedulerConfig(ordering=Ordering.FCFS, backfill=mode, bf_resolution_s=resolution,
                             annotate_pending=annotate)
    trace = simulate(cluster, jobs, config)
    assert not trace.stuck, f"jobs never started: {trace.stuck}"
    if mode != BackfillMode.NONE:
        for jid, plans in trace.reserved_at.items():
            assert trace.starts[jid] <= plans[0][1], (jid, plans, trace.starts[jid])
    if mode == BackfillMode.NONE:
        # strict: jobs start in priority (here submit) order
        order = sorted(trace.starts, key=lambda j: (trace.starts[j], j))
        assert [trace.starts[j] for j in sorted(trace.starts)] == sorted(
            trace.starts[j] for j in order)


@SETTINGS
@given(unit_clusters(), unit_workloads())
def test_easy_on_unit_nodes_matches_the_node_level_profile(cluster, jobs) -> None:  # type: ignore[no-untyped-def]
    """The count-only plan and the per-node plan give the same start times."""
    from dataclasses import replace

    config = SchedulerConfig(ordering=Ordering.FCFS, bf_resolution_s=1)
    fast = simulate(cluster, jobs, config)
    import corral.core.passes.state as S

    real = S.is_unit_cluster
    try:
        S.is_unit_cluster = lambda table: False  # type: ignore[assignment]
        clear_caches()
        slow = simulate(replace(cluster), jobs, config)
    finally:
        S.is_unit_cluster = real
        clear_caches()
    assert fast.starts == slow.starts
