"""Research orderings: formulas exactly as published, and the orders they produce."""

from __future__ import annotations

import math

import pytest
from priority_helpers import job, snapshot

from corral.core.config import Ordering, SchedulerConfig
from corral.core.model import Job, JobSpec, Partition, TaskGroup
from corral.core.priority import compute, requested_procs, requested_time_s
from corral.core.priority.orderings import score


@pytest.mark.parametrize(
    ("spec", "procs"),
    [
        (JobSpec(), 1),
        (JobSpec(ntasks=64), 64),
        (JobSpec(ntasks=4, cpus_per_task=8), 32),
        (JobSpec(nodes_min=2, ntasks_per_node=4, cpus_per_task=2), 16),
        (JobSpec(nodes_min=3, cpus_per_task=4), 12),
        (JobSpec(task_groups=(TaskGroup("cfd", 4, cpus_per_task=8), TaskGroup("gpu", 4))), 36),
    ],
)
def test_requested_procs(spec: JobSpec, procs: int) -> None:
    assert requested_procs(spec) == procs


def test_requested_time_resolution() -> None:
    parts = [Partition("a", (), is_default=True, default_time_s=600, max_time_s=7200),
             Partition("b", (), max_time_s=1800), Partition("c", ())]
    snap = snapshot(partitions=parts)
    c = SchedulerConfig(default_time_s=3600)
    assert requested_time_s(job(1, time_limit_s=5), snap, c) == 5  # resolved by the shell
    assert requested_time_s(job(1, time_limit_s=None), snap, c) == 600
    assert requested_time_s(job(1, partitions=("b",)), snap, c) == 1800
    assert requested_time_s(job(1, partitions=("c",)), snap, c) == 3600
    assert requested_time_s(Job(1, JobSpec(time_limit_s=99), 0.0), snap, c) == 99


def _order(ordering: Ordering, jobs: list, now: float) -> list[int]:  # type: ignore[type-arg]
    snap = snapshot(jobs)
    prio = compute(snap, SchedulerConfig(ordering=ordering), now)
    by_id = {j.id: j for j in jobs}
    return sorted(prio, key=lambda i: (-prio[i], by_id[i].submit_time, i))


def test_fcfs_and_sjf() -> None:
    jobs = [job(1, 30.0, time_limit_s=100), job(2, 10.0, time_limit_s=500),
            job(3, 20.0, time_limit_s=100), job(4, 5.0, time_limit_s=50)]
    assert _order(Ordering.FCFS, jobs, 100.0) == [4, 2, 3, 1]
    assert _order(Ordering.SJF, jobs, 100.0) == [4, 3, 1, 2]  # (r, s)


def test_wfp3_and_unicep_values() -> None:
    r, n, s, now = 3600.0, 16, 1000.0, 8200.0
    assert score(Ordering.WFP3, r, n, s, now) == pytest.approx(((now - s) / r) ** 3 * n)
    assert score(Ordering.UNICEP, r, n, s, now) == pytest.approx((now - s) / (4 * r))
    # one processor: log2(1) = 0, guarded: ranks above any wider job that waited as long
    one = score(Ordering.UNICEP, r, 1, s, now)
    assert one > 1e10 and math.isfinite(one)
    assert score(Ordering.UNICEP, 2 * r, 1, s, now) < one


@pytest.mark.parametrize(
    ("ordering", "formula"),
    [
        (Ordering.F1, lambda r, n, s: math.log10(r) * n + 870 * math.log10(s)),
        (Ordering.F2, lambda r, n, s: math.sqrt(r) * n + 25600 * math.log10(s)),
        (Ordering.F3, lambda r, n, s: r * n + 6860000 * math.log10(s)),
        (Ordering.F4, lambda r, n, s: r * math.sqrt(n) + 530000 * math.log10(s)),
    ],
)
def test_carastan_santos_de_camargo_functions(ordering: Ordering, formula) -> None:  # type: ignore[no-untyped-def]
    for r, n, s in [(3600.0, 16, 1.2e6), (60.0, 1, 5.0), (86400.0, 1024, 3.1e7)]:
        assert score(ordering, r, n, s, s + 100) == pytest.approx(-formula(r, n, s), rel=1e-12)
    # RLScheduler's guards: r, s <= 0 are taken as 0.1
    assert score(ordering, 0, 4, 0, 0) == pytest.approx(-formula(0.1, 4, 0.1))


def test_f1_prefers_small_short_early_jobs() -> None:
    jobs = [job(1, 1000.0, ntasks=64, time_limit_s=86400), job(2, 1000.0, ntasks=1,
            time_limit_s=600), job(3, 2000.0, ntasks=1, time_limit_s=600)]
    assert _order(Ordering.F1, jobs, 3000.0) == [2, 3, 1]


def test_wfp3_lets_long_waiters_overtake() -> None:
    jobs = [job(1, 0.0, ntasks=4, time_limit_s=3600), job(2, 3000.0, ntasks=64,
                                                          time_limit_s=3600)]
    assert _order(Ordering.WFP3, jobs, 3600.0) == [1, 2]


def test_research_orderings_ignore_admin_priority_but_multifactor_honours_it() -> None:
    jobs = [job(1, 0.0, admin_priority=10**6), job(2, 0.0)]
    assert compute(snapshot(jobs), SchedulerConfig(ordering=Ordering.FCFS), 1.0) == {
        1: -0.0, 2: -0.0}
    assert compute(snapshot(jobs), SchedulerConfig(), 1.0)[1] == 10**6
