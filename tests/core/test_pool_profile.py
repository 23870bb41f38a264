"""Pool bookkeeping, the per-node profile and the count-only profile."""

from __future__ import annotations

import math

from builders import alloc_on, cluster, job

from corral.core.counts import CountProfile
from corral.core.cycle import clear_caches
from corral.core.model.job import JobState
from corral.core.model.node import NodeState
from corral.core.nodes import node_table
from corral.core.pool import Pool, build_pool, compiled
from corral.core.profile import Profile


def table_of(c):  # type: ignore[no-untyped-def]
    return node_table(tuple(c.nodes), tuple(c.partitions))


def test_take_and_give_are_exact_inverses() -> None:
    c = cluster(nodes=2, sockets=2, cores_per_socket=4, gpus_per_node=2)
    table, up = table_of(c)
    pool = Pool(table, up)
    j = job(1).running_on(alloc_on("n001", [0, 1, 5], 3000, gpus=[1])).build()
    before = (list(pool.cores_free), list(pool.mem_free), list(pool.gpus_free), pool.idle,
              list(pool.ge_cores), pool.free_total)
    pool.take_job(j)
    assert pool.cores_free[0] == 5 and pool.mem_free[0] == 13000 and pool.gpus_free[0] == 1
    assert pool.core_mask[0] == 0b11011100 and not pool.idle & 1
    assert pool.free_total == 13 and not pool.check()
    pool.give_job(j)
    assert before == (list(pool.cores_free), list(pool.mem_free), list(pool.gpus_free),
                      pool.idle, list(pool.ge_cores), pool.free_total)
    assert not pool.check()


def test_suspended_jobs_keep_memory_and_gpus_but_not_cores() -> None:
    c = cluster(nodes=1, gpus_per_node=2)
    table, up = table_of(c)
    pool = Pool(table, up)
    j = job(1).running_on(alloc_on("n001", [0, 1], 4000, gpus=[0]),
                          state=JobState.SUSPENDED).build()
    pool.take_job(j)
    assert pool.cores_free[0] == 8 and pool.mem_free[0] == 12000 and pool.gpus_free[0] == 1


def test_down_nodes_are_not_candidates_but_keep_their_jobs() -> None:
    c = cluster(nodes=2).set_state("n002", NodeState.DRAINING)
    table, up = table_of(c)
    assert up == 0b01
    pool = build_pool(table, up, [job(1).running_on(("n002", 2)).build()])
    assert pool.cores_free[1] == 6 and not pool.ge_cores[1] & 0b10 and pool.free_total == 8


def test_build_pool_diff_matches_a_rebuild() -> None:
    c = cluster(nodes=3)
    table, up = table_of(c)
    jobs = [job(k).running_on((f"n00{k}", k)).build() for k in (1, 2, 3)]
    build_pool(table, up, jobs)
    diffed = build_pool(table, up, jobs[1:] + [job(9).running_on(("n001", 4)).build()])
    clear_caches()
    table, up = table_of(c)
    fresh = build_pool(table, up, jobs[1:] + [job(9).running_on(("n001", 4)).build()])
    assert diffed.cores_free == fresh.cores_free and diffed.ge_cores == fresh.ge_cores
    assert not diffed.check()


def test_allocation_without_core_ids_counts_cores() -> None:
    from corral.core.model.job import NodeAllocation

    c = cluster(nodes=1)
    table, up = table_of(c)
    pool = Pool(table, up)
    pool.take_job(job(1).running_on(NodeAllocation("n001", (), 3, 100)).build())
    assert pool.cores_free[0] == 5 and pool.approx


def test_profile_releases_at_time_limit_and_window_views() -> None:
    c = cluster(nodes=2, sockets=1, cores_per_socket=4)
    table, up = table_of(c)
    running = job(1).walltime_s(100).running_on(("n001", 4), start=0).build()
    pool = build_pool(table, up, [running])
    uses = compiled(table, running.allocation)  # type: ignore[arg-type]
    prof = Profile(pool, 10.0, 1, [(100.0, uses, True)])
    prof.reserve([(1, 4, 0, 0)], 50.0, 80.0)  # n002 reserved on [50, 80)
    assert prof.window_view(30).cores_free[1] == 4  # ends before the reservation
    assert prof.window_view(45).cores_free[1] == 0  # would overlap it
    assert prof.steps[0].window_min(10, 200) == (0, 12000, 0)
    assert prof.steps[0].window_min(100, 200)[0] == 4
    ts_job = job(2).nodes(2).exclusive().build()
    from corral.core.config import SchedulerConfig
    from corral.core.shape import shape_of

    ts = shape_of(ts_job.spec, table.partitions["batch"], SchedulerConfig()).single
    got = prof.earliest_uniform(ts, 0b11, [(4, 0, 0)], 10.0, whole=True)
    assert got == (100.0, [0, 1])
    prof.unreserve([(1, 4, 0, 0)], 50.0, 80.0)
    one = shape_of(job(3).build().spec, table.partitions["batch"], SchedulerConfig()).single
    assert prof.earliest_uniform(one, 0b11, [(4, 0, 0)], 10.0) == (10.0, [1])
    assert prof.earliest_uniform(one, 0b01, [(4, 0, 0)], 10.0) == (100.0, [0])


def test_count_profile_easy_shadow_and_extra_nodes() -> None:
    # 4 free now, 6 more at t=100, 2 more at t=200 (12 nodes)
    cp = CountProfile(0.0, 1, 4, [(100.0, 6), (200.0, 2)])
    assert cp.earliest(10, 50) == 100.0 and cp.earliest(12, 10) == 200.0
    assert cp.earliest(13, 10) is None
    cp.reserve([(-1, 1, 0, 0)] * 10, 100.0, 150.0)  # the head job: 10 nodes at t=100
    assert cp.allows(4, 100)  # ends by the shadow time
    assert not cp.allows(4, 101)  # would delay it: no extra nodes at t=100
    assert cp.allows(0, math.inf)
    cp.started([object()] * 2, 60.0)  # type: ignore[list-item]
    assert cp.free_at(0) == 2 and cp.free_at(60) == 4
    cp2 = CountProfile.from_index(0.0, 1, 4, _Index([100.0, 200.0], {100.0: 6, 200.0: 2}),
                                  1.0)
    assert cp2.times == [0.0, 100.0, 200.0] and cp2.free == [4, 10, 12]
    cp3 = CountProfile.from_index(150.0, 1, 4, _Index([100.0, 200.0], {100.0: 6, 200.0: 2}),
                                  151.0)
    assert cp3.times == [150.0, 151.0, 200.0] and cp3.free == [4, 10, 12]  # overdue: soon


class _Index:
    def __init__(self, ends: list[float], nodes: dict[float, int]) -> None:
        self.ends = ends
        self.nodes = nodes
