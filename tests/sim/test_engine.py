"""The event engine driving the real core: hand-checked schedules and invariants."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.sim.cluster import from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.result import COMPLETED, REJECTED, TIMEOUT
from corral.sim.swf import read_swf
from corral.sim.workload import ExceedPolicy, Workload, build_workload, select


def wl_of(rows: list[tuple[float, float, float, int]], nodes: int = 4, procs: int = 4,
          users: list[int] | None = None) -> Workload:
    """rows: (submit, run, limit, procs)."""
    n = len(rows)
    a = np.array(rows, dtype=np.float64)
    return Workload(
        job_id=np.arange(1, n + 1), submit_s=a[:, 0], run_s=a[:, 1], limit_s=a[:, 2],
        procs=a[:, 3].astype(np.int64),
        user_id=np.array(users if users is not None else [1] * n, dtype=np.int64),
        group_id=np.array([1] * n, dtype=np.int64), queue_id=np.full(n, -1),
        partition_id=np.full(n, -1), row=np.arange(n), max_nodes=nodes, max_procs=procs,
    )


def opts(ordering: Ordering = Ordering.FCFS, backfill: BackfillMode = BackfillMode.NONE,
         **kw: object) -> EngineOptions:
    return EngineOptions(config=SchedulerConfig(ordering=ordering, backfill=backfill), **kw)  # type: ignore[arg-type]


ROWS = [
    (0, 100, 100, 3),  # A: 0-100 on 3 of 4 nodes
    (1, 10, 10, 4),  # B: needs the whole machine: waits for A
    (2, 10, 10, 1),  # C: fits now, ends at 12, before B's reservation at 100
    (3, 200, 200, 1),  # D: fits now but would delay B (needs the 4th node till 203)
]


def test_strict_fcfs_blocks_behind_the_head() -> None:
    res = simulate(wl_of(ROWS), from_header(4, 4), opts())
    assert res.start_s.tolist() == [0, 100, 110, 110]
    assert (res.state == COMPLETED).all()
    assert res.end_s.tolist() == [100, 110, 120, 310]


def test_easy_backfills_without_delaying_the_reservation() -> None:
    res = simulate(wl_of(ROWS), from_header(4, 4), opts(backfill=BackfillMode.EASY))
    assert res.start_s.tolist() == [0, 100, 2, 110]
    assert res.stats["cycles"] >= 1


def test_kill_at_limit_versus_let_run() -> None:
    rows = [(0, 500, 100, 4), (10, 10, 10, 4)]
    killed = simulate(wl_of(rows), from_header(4, 4), opts())
    assert killed.end_s[0] == 100 and killed.state[0] == TIMEOUT
    assert killed.start_s[1] == 100
    ran = simulate(wl_of(rows), from_header(4, 4), opts(exceed=ExceedPolicy.RUN))
    assert ran.end_s[0] == 500 and ran.state[0] == COMPLETED and ran.start_s[1] == 500


def test_job_larger_than_the_machine_is_rejected_not_lost() -> None:
    rows = [(0, 10, 10, 2), (1, 10, 10, 9), (2, 10, 10, 2)]
    res = simulate(wl_of(rows), from_header(4, 4), opts(backfill=BackfillMode.EASY))
    assert res.state.tolist()[1] == REJECTED
    assert res.start_s[0] == 0 and res.start_s[2] == 2


def test_whole_nodes_versus_cores_anywhere() -> None:
    rows = [(0, 100, 100, 3), (1, 100, 100, 3)]  # 2 nodes x 4 cores
    shared = simulate(wl_of(rows, 2, 8), from_header(2, 8), opts())
    assert shared.start_s.tolist() == [0, 1]
    whole = simulate(wl_of(rows, 2, 8), from_header(2, 8, whole_nodes=True), opts())
    assert whole.start_s.tolist() == [0, 1]  # one whole node each
    rows3 = rows + [(2, 100, 100, 1)]
    whole3 = simulate(wl_of(rows3, 2, 8), from_header(2, 8, whole_nodes=True), opts())
    assert whole3.start_s.tolist() == [0, 1, 100]  # no third node
    assert whole3.alloc_cpus.tolist() == [4, 4, 4]


def _slice(traces_dir: Path, name: str, n: int) -> Workload:
    return select(build_workload(read_swf(traces_dir / name)), str(n))


def test_deterministic_and_skipping_changes_nothing(traces_dir: Path) -> None:
    wl = _slice(traces_dir, "HPC2N-2002-2.2-cln.swf.gz", 600)
    cl = from_header(wl.max_nodes, wl.max_procs)
    for backfill in (BackfillMode.EASY, BackfillMode.NONE, BackfillMode.CONSERVATIVE):
        a = simulate(wl, cl, opts(backfill=backfill))
        b = simulate(wl, cl, opts(backfill=backfill))
        c = simulate(wl, cl, opts(backfill=backfill, skip_idle_cycles=False))
        np.testing.assert_array_equal(a.start_s, b.start_s)
        np.testing.assert_array_equal(a.start_s, c.start_s)
        if backfill is BackfillMode.CONSERVATIVE:
            assert a.stats["cycles"] == c.stats["cycles"]
        else:
            assert a.stats["cycles"] < c.stats["cycles"]


def test_event_mode_and_batch_mode_agree_on_easy_slice(traces_dir: Path) -> None:
    wl = _slice(traces_dir, "KTH-SP2-1996-2.1-cln.swf.gz", 400)
    cl = from_header(wl.max_nodes, wl.max_procs)
    a = simulate(wl, cl, opts(backfill=BackfillMode.EASY))
    b = simulate(wl, cl, opts(backfill=BackfillMode.EASY, cycle_mode="event"))
    assert np.isfinite(a.start_s).all() and np.isfinite(b.start_s).all()
    # never more CPUs busy than the machine has
    for r in (a, b):
        assert r.samples_busy_cpus.max() <= r.total_cpus


def test_no_overallocation_over_time(traces_dir: Path) -> None:
    wl = _slice(traces_dir, "SDSC-SP2-1998-4.2-cln.swf.gz", 300)
    res = simulate(wl, from_header(wl.max_nodes, wl.max_procs),
                   opts(backfill=BackfillMode.CONSERVATIVE, record_allocations=True))
    ok = np.isfinite(res.start_s)
    assert ok.all()
    # sweep: at every start instant, the CPUs of jobs running then fit the machine
    events = sorted([(t, +c) for t, c in zip(res.start_s, res.alloc_cpus, strict=True)]
                    + [(t, -c) for t, c in zip(res.end_s, res.alloc_cpus, strict=True)],
                    key=lambda x: (x[0], x[1]))
    busy = 0
    for _, d in events:
        busy += d
        assert busy <= res.total_cpus
    assert len(res.allocations) == len(wl)


def test_unknown_policy_words_are_rejected() -> None:
    from corral.sim.compare import PolicyError, parse_policy

    p = parse_policy("sjf+conservative+spread")
    assert p.config.ordering is Ordering.SJF
    assert p.config.backfill is BackfillMode.CONSERVATIVE
    assert p.config.placement.value == "spread"
    assert parse_policy("multifactor+nofs").config.weights.fairshare == 0
    with pytest.raises(PolicyError, match="unknown policy word 'fifo'"):
        parse_policy("fifo+easy")
    hi = parse_policy("fcfs+strict+highest").config
    assert dataclasses.asdict(hi)["reservation_policy"].value == "highest"


def test_pool_machine_applies_the_count_based_extra_rule() -> None:
    """A 4-processor pool: B (3 procs) reserves t=100, when A's 2 procs return; one
    processor is spare then, so C (1 proc, long) backfills at once (textbook EASY)."""
    rows = [(0, 100, 100, 2), (1, 50, 50, 3), (2, 1000, 1000, 1)]
    res = simulate(wl_of(rows), from_header(4, 4, pool=True),
                   opts(backfill=BackfillMode.EASY))
    assert res.start_s.tolist() == [0, 100, 2]
    strict = simulate(wl_of(rows), from_header(4, 4, pool=True), opts())
    assert strict.start_s.tolist() == [0, 100, 100]
    with pytest.raises(ValueError, match="whole"):
        from_header(4, 4, pool=True, whole_nodes=True)


def test_pool_easy_never_delays_the_reservation(traces_dir: Path) -> None:
    """HPC2N jobs 20000..20300, t = 19451632: 105 cores free, the head (128 cores) reserves
    t = 19470720, when 141 will be free: 13 spare. A 20-core, 20-hour job must not
    backfill; on 240 one-core nodes it does not, on one 240-core node it does."""
    wl = _slice(traces_dir, "HPC2N-2002-2.2-cln.swf.gz", 20300)
    wl = wl.take(slice(20000, 20300))
    o = opts(backfill=BackfillMode.EASY)
    nodes = simulate(wl, from_header(240, 240), o)
    pool = simulate(wl, from_header(1, 240, pool=True), o)
    k = int(np.flatnonzero(wl.submit_s == 19451632.0)[0])
    assert nodes.start_s[k] > wl.submit_s[k]
    assert pool.start_s[k] == nodes.start_s[k]


def test_cores_and_pool_models_agree(traces_dir: Path) -> None:
    """MaxProcs one-core nodes and one MaxProcs-core node are the same machine for jobs
    that take processors anywhere: the core must schedule them identically (count-based
    EASY on two different code paths)."""
    wl = _slice(traces_dir, "SDSC-BLUE-2000-4.2-cln.swf.gz", 51000).take(slice(50000, 51000))
    o = opts(backfill=BackfillMode.EASY)
    a = simulate(wl, from_header(wl.max_nodes, wl.max_procs, machine="cores"), o)
    b = simulate(wl, from_header(wl.max_nodes, wl.max_procs, machine="pool"), o)
    assert a.total_nodes == 1152 and b.total_nodes == 1
    np.testing.assert_array_equal(a.start_s, b.start_s)
    with pytest.raises(ValueError, match="whole-nodes needs the nodes machine"):
        from_header(144, 1152, machine="cores", whole_nodes=True)
