"""Starvation guard: a job that has waited long enough goes ahead of every job that has not.

Short-first orders (``sjf``, ``f1``, multifactor with a strong job-size weight) cut mean
bounded slowdown well below first-come-first-served, because most jobs are short and a
short job no longer waits behind a long one. Their cost is starvation: a long or wide job
can be passed over again and again (first 20,000 CTC-SP2 jobs: ``sjf+easy`` left one job
waiting 29.5 days where ``fcfs+easy``'s longest wait was 2.3). The guard bounds that, at
a price in slowdown: ``docs/sim/guard.md`` measures both, and shows that it does not
dominate EASY on every trace.

Algorithm (``SchedulerConfig.starvation_guard_s = G``; ``None`` turns it off): at every
cycle, a pending job whose wait ``now - since`` is at least ``G`` (``since``: its submit
time, or its begin time when later) is *starving*. Starving jobs get the priority
``GUARD_BASE - since``: above every priority the orderings give (they stay far below
``GUARD_BASE / 2``), and among themselves in submit order. The queue pass is unchanged:
under EASY the first starving job is the head, so it gets the reservation and backfilling
may not delay it (Lifka's EASY guarantee, applied to the oldest starving job); under
conservative backfill every tested job gets one.

What it does not guarantee: a maximum wait below first-come-first-served's. In a long
saturated stretch the starving jobs form a first-come-first-served queue that each joined
``G`` late, so their waits can exceed what FCFS would have given (measured in
``docs/sim/guard.md``).

Invariants (property-tested, ``tests/core/priority/test_guard.py``):

* a starving job ranks ahead of every job that is not starving;
* starving jobs rank among themselves by ``since`` (first come, first served);
* jobs that are not starving keep the ordering's priorities, hence its order;
* an ``admin_priority`` still wins (``passes.order`` reads it before any priority).

Under FCFS the guard changes nothing (the queue is in submit order already), so the core
does not apply it there. Reference: the starvation of short-first backfilling orders is
discussed by Mu'alem & Feitelson, IEEE TPDS 12(6), 2001; this rule is Corral's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.core.model.job import Job

GUARD_BASE = float(2**50)  # starving priority = GUARD_BASE - since (exact to 0.25 s)


def since_of(job: Job) -> float:
    """When the job's wait started: submit time, or its begin time when later."""
    begin = job.spec.begin_time
    if begin is not None and begin > job.submit_time:
        return float(begin)
    return float(job.submit_time)


def starving(job: Job, guard_s: float, now: float) -> bool:
    return now - since_of(job) >= guard_s


def apply_guard(prio: Mapping[int, float], pending: Iterable[Job], guard_s: float,
                now: float) -> dict[int, float]:
    """``prio`` with every starving job's priority replaced by ``GUARD_BASE - since``."""
    out = dict(prio)
    for job in pending:
        since = since_of(job)
        if now - since >= guard_s:
            out[job.id] = GUARD_BASE - since
    return out
