"""ReservationPolicy: CURRENT_HIGHEST (Slurm-like) vs HIGHEST (Maui: a reserved job keeps
its place until it starts)."""

from __future__ import annotations

from dataclasses import replace

from builders import apply_starts, cluster, job

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, ReservationPolicy, SchedulerConfig


def cfg(mode: BackfillMode, policy: ReservationPolicy, annotate: bool = True) -> SchedulerConfig:
    return SchedulerConfig(ordering=Ordering.SJF, backfill=mode, reservation_policy=policy,
                           bf_resolution_s=1, annotate_pending=annotate)


def scenario(mode: BackfillMode, policy: ReservationPolicy, annotate: bool = True
             ) -> list[set[int]]:
    """Job 10 (long, 4 nodes) blocks at t=0; at t=10 a short 1-node job 11 arrives."""
    c = cluster(nodes=4, sockets=1, cores_per_socket=4)
    busy = job(1).walltime_s(100).exclusive().running_on(("n001", 4), start=0).build()
    snap = c.snapshot(pending=[job(10).nodes(4).exclusive().walltime_s(1000).build()],
                      running=[busy])
    config = cfg(mode, policy, annotate)
    r1 = run_cycle(snap, config, 0.0)
    snap = apply_starts(snap, r1, 0.0)
    snap = replace(snap, pending=snap.pending + (
        job(11).exclusive().walltime_s(500).submit(10).build(),))
    r2 = run_cycle(snap, config, 10.0)
    return [{s.job_id for s in r1.starts}, {s.job_id for s in r2.starts}, set(r2.reserved)]


def test_strict_current_highest_lets_a_new_top_job_start() -> None:
    # SJF ranks the new short job first; it fits on a free node and starts
    assert scenario(BackfillMode.NONE, ReservationPolicy.CURRENT_HIGHEST) == [set(), {11}, {10}]


def test_strict_highest_keeps_the_reserved_head_blocking() -> None:
    assert scenario(BackfillMode.NONE, ReservationPolicy.HIGHEST) == [set(), set(), {10}]
    assert scenario(BackfillMode.NONE, ReservationPolicy.HIGHEST, annotate=False) == [
        set(), set(), {10}]


def test_easy_highest_keeps_the_reservation_holder() -> None:
    # job 11 (500 s) would delay job 10's reservation at t=100 under either policy;
    # under CURRENT_HIGHEST job 11 is the top job now and takes the reservation
    cur = scenario(BackfillMode.EASY, ReservationPolicy.CURRENT_HIGHEST)
    high = scenario(BackfillMode.EASY, ReservationPolicy.HIGHEST)
    assert cur[1] == {11} and high[1] == set()
    assert high[2] == {10}


def test_reserved_order_is_returned_and_fed_back() -> None:
    c = cluster(nodes=2, sockets=1, cores_per_socket=4)
    busy = job(1).walltime_s(100).exclusive().running_on(("n001", 4)).build()
    snap = c.snapshot(pending=[job(5).nodes(2).exclusive().walltime_s(50).build(),
                               job(6).nodes(2).exclusive().walltime_s(40).build()],
                      running=[busy], reserved=(5,))
    config = cfg(BackfillMode.CONSERVATIVE, ReservationPolicy.HIGHEST)
    r = run_cycle(snap, config, 0.0)
    assert r.reserved == (5, 6)  # job 5 first although SJF ranks job 6 higher
    assert [x.job_id for x in r.reservations] == [5, 6]
    assert r.reservations[0].start_time == 100.0 and r.reservations[1].start_time == 150.0
