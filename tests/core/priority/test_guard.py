"""The starvation guard (``corral.core.priority.guard``), as a property of the queue order.

For random queues (submit times, time limits, begin times, admin priorities), orderings
(SJF, F1, multifactor) and guards, the order the pass gets (``priority.compute`` then
``passes.order.order_jobs``) puts every starving job (waited at least the guard) ahead of
every job that is not (admin priorities aside: they still win), the starving ones in
submit order; and the jobs that are not starving keep the order they have without the
guard.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from priority_helpers import job, snapshot

from corral.core import priority
from corral.core.config import Ordering, ReservationPolicy, SchedulerConfig
from corral.core.passes.order import order_jobs
from corral.core.priority.guard import since_of, starving

NOW = 100_000.0

JOB = st.tuples(st.integers(0, 100_000), st.integers(1, 10).map(lambda x: x * 600),
                st.integers(1, 16), st.sampled_from([None, None, None, 5_000, 99_000]),
                st.sampled_from([None, None, None, None, 7]))


def _order(jobs, cfg):  # type: ignore[no-untyped-def]
    snap = snapshot(jobs)
    prio = priority.compute(snap, cfg, NOW)
    return order_jobs(snap.pending, prio, (), ReservationPolicy.CURRENT_HIGHEST,
                      snap.partitions)


@settings(max_examples=200, deadline=None)
@given(st.lists(JOB, min_size=1, max_size=25),
       st.sampled_from([Ordering.SJF, Ordering.F1, Ordering.MULTIFACTOR]),
       st.sampled_from([1, 600, 3600, 12 * 3600, 10**9]))
def test_starving_jobs_go_first_in_submit_order(specs, ordering, guard_s) -> None:  # type: ignore[no-untyped-def]
    jobs = [job(i + 1, float(sub), time_limit_s=limit, cpus_per_task=1, ntasks=n,
                begin_time=begin, admin_priority=admin)
            for i, (sub, limit, n, begin, admin) in enumerate(specs)]
    cfg = SchedulerConfig(ordering=ordering, starvation_guard_s=guard_s)
    got = _order(jobs, cfg)
    plain = _order(jobs, dataclasses.replace(cfg, starvation_guard_s=None))
    admin = [j for j in got if j.admin_priority is not None]
    rest = [j for j in got if j.admin_priority is None]
    # admin priorities (7) are below the guard's priorities but above the orderings' own
    # here, so they sit between the starving jobs and the others: check each group
    hungry = [j for j in rest if starving(j, guard_s, NOW)]
    fed = [j for j in rest if not starving(j, guard_s, NOW)]
    assert rest == hungry + fed  # every starving job before every other
    assert [since_of(j) for j in hungry] == sorted(since_of(j) for j in hungry)
    assert fed == [j for j in plain if j in fed]  # the others keep their order
    if admin:
        assert got.index(admin[0]) >= len(hungry)  # the guard ranks above priority 7
    # the guard is off with None, and changes nothing under FCFS
    fcfs = dataclasses.replace(cfg, ordering=Ordering.FCFS)
    assert priority.compute(snapshot(jobs), fcfs, NOW) == priority.compute(
        snapshot(jobs), dataclasses.replace(fcfs, starvation_guard_s=None), NOW)


def test_a_begin_time_starts_the_wait() -> None:
    j = job(1, 0.0, begin_time=90_000.0)
    assert since_of(j) == 90_000.0
    assert not starving(j, 20_000, NOW) and starving(j, 10_000, NOW)
