"""Job priority: Slurm multifactor (with Fair Tree or classic fair share) and research orderings.

``compute(snapshot, config, now) -> Mapping[job_id, float]``: a priority per pending job;
higher runs first. Ties are broken by the caller by (submit time, job id).
``explain(job, snapshot, config, now) -> PriorityFactors``: each normalized factor, its
weight and weighted contribution, and the total (what ``sprio``/``corral show`` print).

Modules: ``multifactor`` (the formula), ``fair_tree`` (default fair share) and ``classic``,
``assoc`` (the association tree both walk), ``decay`` (usage half-life, charging),
``eligibility`` (age counts from eligibility), ``orderings`` (FCFS, SJF, WFP3, UNICEP,
F1-F4), ``usage_table`` (the usage mapping a replay passes, with keys kept in place).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from corral.core.config import Ordering, SchedulerConfig
from corral.core.model.job import Job
from corral.core.priority.decay import association_of
from corral.core.priority.guard import apply_guard
from corral.core.priority.multifactor import (
    FACTOR_NAMES,
    Factor,
    MultifactorContext,
    PriorityFactors,
    multifactor_priorities,
)
from corral.core.priority.orderings import (
    TimeLimits,
    ordering_priorities,
    requested_procs,
    requested_time_s,
)
from corral.core.snapshot import ClusterSnapshot

__all__ = [
    "compute", "explain", "explain_all", "PriorityFactors", "Factor", "FACTOR_NAMES",
    "requested_procs", "requested_time_s", "association_of", "TimeLimits",
]


def compute(snapshot: ClusterSnapshot, config: SchedulerConfig,
            now: float) -> Mapping[int, float]:
    """Priority of every pending job under ``config.ordering``; higher runs first. With
    ``config.starvation_guard_s``, jobs that waited that long go first (``guard``)."""
    prio: Mapping[int, float]
    if config.ordering is Ordering.MULTIFACTOR:
        prio = multifactor_priorities(snapshot, config, now)
    else:
        prio = ordering_priorities(snapshot.pending, snapshot, config, now)
    if config.starvation_guard_s is not None and config.ordering is not Ordering.FCFS:
        return apply_guard(prio, snapshot.pending, config.starvation_guard_s, now)
    return prio


def explain_all(
    snapshot: ClusterSnapshot, config: SchedulerConfig, now: float
) -> dict[int, PriorityFactors]:
    """``explain`` for every pending job, sharing one fair-share computation (``sprio``)."""
    ctx = MultifactorContext(snapshot, config, now)
    out = {j.id: ctx.explain(j) for j in snapshot.pending}
    if config.ordering is not Ordering.MULTIFACTOR:
        ordered = ordering_priorities(snapshot.pending, snapshot, config, now)
        out = {k: _with_ordering(v, config.ordering, ordered[k]) for k, v in out.items()}
    return out


def explain(
    job: Job, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float
) -> PriorityFactors:
    """The multifactor breakdown of ``job``'s priority.

    ``job`` need not be in ``snapshot.pending`` (its association is added to the tree if
    new). Under a research ordering the factors are still the multifactor ones, but
    ``total`` is the ordering's priority and ``ordering`` says which.
    """
    snap = snapshot
    if all(j.id != job.id for j in snapshot.pending):
        snap = _with_pending(snapshot, job)
    factors = MultifactorContext(snap, config, now).explain(job)
    if config.ordering is Ordering.MULTIFACTOR:
        return factors
    total = ordering_priorities([job], snap, config, now)[job.id]
    return _with_ordering(factors, config.ordering, total)


def _with_ordering(f: PriorityFactors, ordering: Ordering, total: float) -> PriorityFactors:
    return PriorityFactors(
        f.job_id, f.factors, f.site, f.nice, f.computed, f.admin_priority, total, ordering
    )


def _with_pending(snapshot: ClusterSnapshot, job: Job) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, pending=snapshot.pending + (job,))

