"""Advance reservations in the pure core (``corral.core.advance``): windows in the future,
active reservations, members and others, every backfill mode."""

from __future__ import annotations

import pytest

from corral.core import reasons as R
from corral.core.config import BackfillMode
from corral.core.cycle import run_cycle
from corral.core.model.reservation import AdvanceReservation
from tests.builders import alloc_on, cluster, config, job

NOW = 10_000.0
MODES = [BackfillMode.EASY, BackfillMode.CONSERVATIVE, BackfillMode.NONE]


def resv(name: str = "r", start: float = NOW + 1000, end: float = NOW + 2000,
         nodes: tuple[str, ...] = ("n001",), users: frozenset[str] | None = frozenset({"ann"}),
         flags: frozenset[str] = frozenset()) -> AdvanceReservation:
    return AdvanceReservation(name, start, end, nodes, users=users, flags=flags)


def _nodes(result, jid: int) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    return next(s.allocation.node_names for s in result.starts if s.job_id == jid)


@pytest.mark.parametrize("mode", MODES)
def test_a_job_crossing_a_future_window_avoids_its_nodes(mode: BackfillMode) -> None:
    c = cluster(nodes=2)
    short = job(1).cpus(8).walltime_s(500).build()  # ends before the window opens
    long_ = job(2).cpus(8).walltime_s(1500).build()  # would cross it
    snap = c.snapshot(pending=[long_, short], advance=(resv(),))
    res = run_cycle(snap, config(backfill=mode), NOW)
    assert _nodes(res, 2) == ("n002",)
    assert _nodes(res, 1) == ("n001",)


@pytest.mark.parametrize("mode", MODES)
def test_a_long_job_waits_until_the_window_is_over(mode: BackfillMode) -> None:
    c = cluster(nodes=1)
    long_ = job(1).cpus(8).walltime_s(1500).build()
    res = run_cycle(c.snapshot(pending=[long_], advance=(resv(),)),
                    config(backfill=mode), NOW)
    assert not res.starts and not res.rejects  # waits: it can run once the window is over
    info = res.pending[1]
    assert info.reason == R.RESOURCES
    if mode is not BackfillMode.NONE:
        assert info.est_start is not None and info.est_start >= NOW + 2000


def test_members_run_only_inside_an_active_reservation() -> None:
    c = cluster(nodes=2)
    r = resv(start=NOW - 10, end=NOW + 5000, nodes=("n001",))
    member = job(1).user("ann").cpus(2).walltime_s(100).build()
    other = job(2).user("bob").cpus(8).walltime_s(100).build()
    other2 = job(3).user("bob").cpus(8).walltime_s(100).build()
    big_member = job(4).user("ann").nodes(2).cpus(2).walltime_s(100).build()
    snap = c.snapshot(pending=[member, other, other2, big_member], advance=(r,),
                      job_reservations={1: "r", 4: "r"})
    res = run_cycle(snap, config(), NOW)
    assert _nodes(res, 1) == ("n001",)
    started = {s.job_id for s in res.starts}
    assert _nodes(res, 2) == ("n002",) and 3 not in started  # others never use n001
    assert 4 not in started and not res.rejects  # two nodes: more than the reservation


def test_reservation_reasons() -> None:
    c = cluster(nodes=1)
    later = resv(start=NOW + 100, end=NOW + 200)
    jobs = [job(1).user("ann").cpus(1).build(), job(2).user("bob").cpus(1).build(),
            job(3).user("ann").cpus(1).build()]
    snap = c.snapshot(pending=jobs, advance=(later,),
                      job_reservations={1: "r", 2: "r", 3: "gone"})
    res = run_cycle(snap, config(), NOW)
    assert not res.starts
    assert res.pending[1].reason == R.RESERVATION and res.pending[1].est_start == NOW + 100
    assert res.pending[2].reason == R.RESERVATION and "does not allow" in res.pending[2].detail
    assert res.pending[3].reason == R.RESERVATION and "does not exist" in res.pending[3].detail


def test_maintenance_reason_and_running_jobs_are_kept() -> None:
    c = cluster(nodes=1)
    m = resv(nodes=("n001",), users=frozenset({"root"}), flags=frozenset({"MAINT"}))
    running = job(9).cpus(2).walltime_s(3000).running_on(alloc_on("n001", [0, 1]),
                                                          start=NOW - 10).build()
    crossing = job(1).cpus(1).walltime_s(1500).build()
    res = run_cycle(c.snapshot(pending=[crossing], running=[running], advance=(m,)),
                    config(), NOW)
    assert not res.starts
    assert res.pending[1].reason == R.RESERVED_MAINT, res.pending[1]
    fits = job(2).cpus(1).walltime_s(600).build()
    res = run_cycle(c.snapshot(pending=[fits], running=[running], advance=(m,)), config(), NOW)
    assert _nodes(res, 2) == ("n001",)


def test_an_ended_reservation_changes_nothing() -> None:
    c = cluster(nodes=1)
    old = resv(start=NOW - 200, end=NOW - 100)
    j = job(1).cpus(8).walltime_s(5000).build()
    res = run_cycle(c.snapshot(pending=[j], advance=(old,)), config(), NOW)
    assert _nodes(res, 1) == ("n001",)
