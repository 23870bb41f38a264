"""Queue order: partition PriorityTier (higher first), priority (higher first), submit time,
job id.

As in Slurm, jobs of a partition with a higher ``PriorityTier`` are considered before any
job of a lower tier, whatever their priorities (a job listing several partitions counts
with the highest tier among them). Without tier differences this is plain priority order.

With ``ReservationPolicy.HIGHEST`` (Maui's ``RESERVATIONPOLICY HIGHEST``) the jobs that
hold a persistent reservation from earlier cycles (``ClusterSnapshot.reserved``, in the
order they got it) come first, whatever their priority is now; a job keeps that place until
it starts. With ``CURRENT_HIGHEST`` (the default, like Slurm) the order is recomputed from
priorities every cycle. An ``admin_priority`` overrides the computed priority.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, count, islice
from operator import attrgetter, eq, neg

from corral.core.config import ReservationPolicy
from corral.core.model.job import Job
from corral.core.model.partition import Partition
from corral.core.priority.multifactor import Priorities

_ADMIN = attrgetter("admin_priority")
# the last partitions tuple seen and its tiers (partitions are frozen records)
_TIERS: list[tuple[Sequence[Partition], dict[str, int], bool]] = []


def _tiers(partitions: Sequence[Partition]) -> tuple[dict[str, int], bool]:
    """Tier per partition name, and whether there is at most one tier."""
    if _TIERS and _TIERS[0][0] is partitions:
        return _TIERS[0][1], _TIERS[0][2]
    tiers = {p.name: p.priority_tier for p in partitions}
    one_tier = len(set(tiers.values())) <= 1
    if isinstance(partitions, tuple):  # immutable: safe to remember by identity
        _TIERS[:] = [(partitions, tiers, one_tier)]
    return tiers, one_tier
_SUBMIT_ID = attrgetter("submit_time", "id")


def effective_priority(job: Job, prio: Mapping[int, float]) -> float:
    if job.admin_priority is not None:
        return float(job.admin_priority)
    return prio.get(job.id, 0.0)


def order_jobs(pending: Sequence[Job], prio: Mapping[int, float],
               reserved: Sequence[int], policy: ReservationPolicy,
               partitions: Sequence[Partition] = (), fcfs: bool = False,
               in_submit_order: bool = False) -> list[Job]:
    """Pending jobs in the order the passes consider them.

    ``fcfs``: every job's priority is ``-submit_time`` (``Ordering.FCFS``) and ``prio`` is
    not read; without tiers or admin priorities the order is then ``(submit_time, id)``,
    sorted on a C-level key (the same order, since ``-(-s) == s``), or taken as it is when
    the caller vouches that ``pending`` is in that order already and holds no admin
    priority (``in_submit_order``)."""
    if len(pending) < 2:  # one job (or none) is in its only order
        return list(pending)
    get = prio.get
    tiers, one_tier = _tiers(partitions)
    if fcfs and one_tier and in_submit_order:  # vouched: in order, no admin priorities
        return _highest_first(list(pending), reserved, policy)
    # no admin priority set (int or None: ``count`` finds exactly the Nones)
    if fcfs and one_tier and list(map(_ADMIN, pending)).count(None) == len(pending):
        return _highest_first(sorted(pending, key=_SUBMIT_ID), reserved, policy)

    def prio_of(j: Job) -> float:
        if j.admin_priority is not None:
            return float(j.admin_priority)
        return -j.submit_time if fcfs else prio.get(j.id, 0.0)

    if not one_tier:
        default = next((p.name for p in partitions if p.is_default), partitions[0].name)

        def tier(j: Job) -> int:
            names = j.spec.partitions or (default,)
            return max((tiers.get(n, 0) for n in names), default=0)

        jobs = sorted(pending, key=lambda j: (-tier(j), -prio_of(j), j.submit_time, j.id))
    elif fcfs:
        jobs = sorted(pending, key=lambda j: (-prio_of(j), j.submit_time, j.id))
    elif isinstance(prio, Priorities) and prio.pending is pending:
        jobs = _by_priority(pending, prio.in_order, in_submit_order)
    else:
        jobs = sorted(pending, key=lambda j: (
            -(get(j.id, 0.0) if j.admin_priority is None else j.admin_priority),
            j.submit_time, j.id))
    return _highest_first(jobs, reserved, policy)


def _by_priority(pending: Sequence[Job], values: list[float],
                 in_submit_order: bool = False) -> list[Job]:
    """``pending`` in (-priority, submit_time, id) order, ``values[k]`` the priority of
    ``pending[k]`` (admin priorities included, as ``multifactor_priorities`` gives them):
    the positions are sorted on the negated priority alone (floats, compared at C level),
    then each run of equal priorities on (submit_time, id). The same order as the tuple
    key, without a tuple or a lookup per job. ``in_submit_order``: the caller vouches that
    ``pending`` is in (submit_time, id) order; the sort is stable, so each run of equal
    priorities is in that order already and is left as it is."""
    keys = list(map(neg, values))
    idx = sorted(range(len(keys)), key=keys.__getitem__)
    if in_submit_order:
        return list(map(pending.__getitem__, idx))
    ordered = list(map(keys.__getitem__, idx))
    ties = list(compress(count(1), map(eq, ordered, islice(ordered, 1, None))))
    k = 0
    while k < len(ties):  # a run of equal keys: positions ties[k] - 1 .. ties[j]
        lo = ties[k] - 1
        j = k
        while j + 1 < len(ties) and ties[j + 1] == ties[j] + 1:
            j += 1
        hi = ties[j] + 1
        idx[lo:hi] = sorted(idx[lo:hi], key=lambda i: _SUBMIT_ID(pending[i]))
        k = j + 1
    return list(map(pending.__getitem__, idx))


def _highest_first(jobs: list[Job], reserved: Sequence[int],
                   policy: ReservationPolicy) -> list[Job]:
    """``ReservationPolicy.HIGHEST``: jobs holding a reservation first, in that order."""
    if policy == ReservationPolicy.HIGHEST and reserved:
        pos = {jid: k for k, jid in enumerate(reserved)}
        head = sorted((j for j in jobs if j.id in pos), key=lambda j: pos[j.id])
        if head:
            rest = [j for j in jobs if j.id not in pos]
            jobs = head + rest
    return jobs
