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


# ---- FLEX: start before, end after, use nodes outside ------------------------------------

FLEX = frozenset({"FLEX"})


def test_flex_jobs_start_before_the_reservation_on_its_nodes_first() -> None:
    c = cluster(nodes=3)
    flex = resv(name="f", nodes=("n002",), flags=FLEX)  # starts at NOW+1000
    plain = resv(name="p", start=NOW + 1000, end=NOW + 2000, nodes=("n003",))
    early = job(1).user("ann").cpus(2).walltime_s(3000).build()  # runs past its end too
    waits = job(2).user("ann").cpus(2).build()
    snap = c.snapshot(pending=[early, waits], advance=(flex, plain),
                      job_reservations={1: "f", 2: "p"})
    res = run_cycle(snap, config(), NOW)
    assert _nodes(res, 1) == ("n002",)  # its reservation's node, though n001 is free
    assert res.pending[2].reason == R.RESERVATION  # not FLEX: waits for its start


def test_flex_jobs_use_nodes_outside_an_active_reservation() -> None:
    c = cluster(nodes=3)
    flex = resv(name="f", start=NOW - 10, end=NOW + 5000, nodes=("n001",), flags=FLEX)
    other = resv(name="o", start=NOW - 10, end=NOW + 5000, nodes=("n003",),
                 users=frozenset({"bob"}))
    wide = job(1).user("ann").nodes(2).tasks_per_node(1).cpus(8).walltime_s(100).build()
    third = job(2).user("ann").nodes(1).cpus(8).walltime_s(100).build()
    snap = c.snapshot(pending=[wide, third], advance=(flex, other),
                      job_reservations={1: "f", 2: "f"})
    res = run_cycle(snap, config(), NOW)
    assert sorted(_nodes(res, 1)) == ["n001", "n002"]  # never bob's n003
    assert 2 not in {s.job_id for s in res.starts}


def test_flex_jobs_go_first_and_others_plan_around_them() -> None:
    """Slurm's job queue puts jobs that asked for a reservation before the others: a
    FLEX job takes its node now even if a job without a reservation, planned on it, then
    starts later; that job never takes what the FLEX job got."""
    c = cluster(nodes=3)
    flex = resv(name="f", start=NOW + 5000, end=NOW + 6000, nodes=("n001",), flags=FLEX)
    busy = job(9).cpus(8).walltime_s(500).running_on(alloc_on("n003", list(range(8))),
                                                      start=NOW - 10).build()
    wide = job(1).nodes(3).tasks_per_node(1).cpus(8).walltime_s(1000).build()
    long_flex = job(2).user("ann").cpus(8).walltime_s(1000).build()
    short_flex = job(3).user("ann").cpus(8).walltime_s(300).build()
    for mode in MODES[:2]:
        snap = c.snapshot(pending=[wide, long_flex], running=[busy], advance=(flex,),
                          job_reservations={2: "f"})
        res = run_cycle(snap, config(backfill=mode), NOW)
        assert [(s.job_id, s.allocation.node_names) for s in res.starts] == [
            (2, ("n001",))], (mode, res.starts)
        [plan] = [x for x in res.reservations if x.job_id == 1]
        assert plan.start_time >= NOW + 1000, (mode, plan)  # after the FLEX job's end
        snap = c.snapshot(pending=[wide, short_flex], running=[busy], advance=(flex,),
                          job_reservations={3: "f"})
        res = run_cycle(snap, config(backfill=mode), NOW)
        assert _nodes(res, 3) == ("n001",), mode
        [plan] = [x for x in res.reservations if x.job_id == 1]
        assert NOW + 500 <= plan.start_time < NOW + 1000, (mode, plan)
    small = job(4).cpus(1).walltime_s(100).build()
    snap = c.snapshot(pending=[small, long_flex], running=[busy], advance=(flex,),
                      job_reservations={2: "f"})
    res = run_cycle(snap, config(), NOW)
    got = {s.job_id: s.allocation.node_names for s in res.starts}
    assert got == {2: ("n001",), 4: ("n002",)}, got  # not on the FLEX job's node


@pytest.mark.parametrize("mode", MODES[:2])
def test_a_flex_job_needing_outside_nodes_is_not_starved(mode: BackfillMode) -> None:
    """Its node is busy for 300 s; it also needs n002, free now. Jobs without a
    reservation may use n002 only until its planned start (backfill), not past it."""
    c = cluster(nodes=2)
    flex = resv(name="f", start=NOW - 10, end=NOW + 5000, nodes=("n001",), flags=FLEX)
    busy = job(9).user("ann").cpus(8).walltime_s(300).running_on(
        alloc_on("n001", list(range(8))), start=NOW - 10).build()
    both = job(1).user("ann").nodes(2).tasks_per_node(1).cpus(8).walltime_s(1000).build()
    long_main = job(2).cpus(8).walltime_s(1000).build()
    short_main = job(3).cpus(8).walltime_s(200).build()
    snap = c.snapshot(pending=[long_main, short_main, both], running=[busy],
                      advance=(flex,), job_reservations={1: "f"})
    res = run_cycle(snap, config(backfill=mode), NOW)
    assert [(s.job_id, s.allocation.node_names) for s in res.starts] == [
        (3, ("n002",))], res.starts  # fits before the FLEX job's planned start
    [plan] = [x for x in res.reservations if x.job_id == 1]
    assert NOW + 290 <= plan.start_time < NOW + 400 and sorted(plan.nodes) == [
        "n001", "n002"], plan
    assert res.pending[2].reason == R.RESOURCES


@pytest.mark.parametrize("mode", MODES)
def test_what_a_flex_job_leaves_of_a_node_stays_usable(mode: BackfillMode) -> None:
    c = cluster(nodes=1)
    flex = resv(name="f", start=NOW + 5000, end=NOW + 6000, nodes=("n001",), flags=FLEX)
    mine = job(1).user("ann").cpus(2).walltime_s(100).build()
    other = job(2).cpus(4).walltime_s(100).build()
    snap = c.snapshot(pending=[other, mine], advance=(flex,), job_reservations={1: "f"})
    res = run_cycle(snap, config(backfill=mode), NOW)
    got = {s.job_id: s.allocation for s in res.starts}
    assert set(got) == {1, 2}, res.pending  # the FLEX job first, the other beside it
    cores = [set(a.nodes[0].cores) for a in got.values()]
    assert not cores[0] & cores[1]  # never the same cores
