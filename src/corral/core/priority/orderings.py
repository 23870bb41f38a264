"""Research orderings of the pending queue, selected by ``SchedulerConfig.ordering``.

Each returns a priority per job where HIGHER runs first; the caller breaks ties by
``(submit_time, id)``, i.e. queue order, as the reference simulators do with a stable sort.
Notation: ``r`` = requested time in seconds (``requested_time_s``), ``n`` = requested
processors (``requested_procs``), ``s`` = submit time exactly as in the job record (an
absolute trace time in the simulator), ``wait = now - s``.

=========  ==========================================  ==============================
ordering   score (runs first)                          priority returned
=========  ==========================================  ==============================
FCFS       earliest ``s``                              ``-s``
SJF        smallest ``r``, then ``s``                  ``-r``
WFP3       largest ``(wait / r) ** 3 * n``             ``(wait / r) ** 3 * n``
UNICEP     largest ``wait / (log2(n) * r)``            ``wait / (log2(n) * r)``
F1         smallest ``log10(r) * n + 870 * log10(s)``  negated score
F2         smallest ``sqrt(r) * n + 25600 * log10(s)``
F3         smallest ``r * n + 6860000 * log10(s)``
F4         smallest ``r * sqrt(n) + 530000 * log10(s)``
=========  ==========================================  ==============================

F1-F4 are the functions learned in Carastan-Santos & de Camargo, "Obtaining Dynamic
Scheduling Policies with Simulation and Machine Learning", SC'17 (Table 2), with the
guard RLScheduler's F1 uses on all four: ``r`` and ``s`` at or below 0 become 0.1 before
``log10``/``sqrt`` (RLScheduler guards only F1; for F2-F4 it would give ``-inf`` at
``s == 0``, which ranks that job first exactly as the guarded ``log10(0.1)`` does for
integer trace times). WFP3 and UNICEP are the Tang et al. heuristics as RLScheduler
writes them, with its ``1e-15`` guards in UNICEP: ``log2(1)`` is 0, so single-processor
jobs rank above all others and among themselves by ``wait / r``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from corral.core.config import Ordering, SchedulerConfig
from corral.core.model.job import Job, JobSpec
from corral.core.snapshot import ClusterSnapshot


def requested_procs(spec: JobSpec) -> int:
    """Processors (CPUs) a job asks for: the ``n`` of the scheduling literature.

    - task groups: ``sum(replicas * cpus_per_task)``;
    - ``ntasks`` given: ``ntasks * cpus_per_task`` (an SWF job of N processors is N tasks);
    - ``ntasks_per_node`` given: ``ntasks_per_node * nodes_min * cpus_per_task``;
    - otherwise one task per node: ``nodes_min * cpus_per_task``.

    Whole-node requests (``--exclusive``) count only what was asked, not the node's cores:
    the spec does not know which nodes it will get.
    """
    if spec.task_groups:
        return sum(g.replicas * g.cpus_per_task for g in spec.task_groups)
    if spec.ntasks is not None:
        return spec.ntasks * spec.cpus_per_task
    if spec.ntasks_per_node is not None:
        return spec.ntasks_per_node * spec.nodes_min * spec.cpus_per_task
    return spec.nodes_min * spec.cpus_per_task


class TimeLimits:
    """Resolves a job's requested time: job, spec, partition default/max, config default."""

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig) -> None:
        self._parts = {p.name: p for p in snapshot.partitions}
        default = snapshot.default_partition()
        self._default_name = default.name if default else None
        self._fallback = config.default_time_s
        self._cache: dict[tuple[str, ...], int] = {}

    def partition_default(self, partitions: tuple[str, ...]) -> int:
        got = self._cache.get(partitions)
        if got is None:
            name = partitions[0] if partitions else self._default_name
            part = self._parts.get(name) if name else None
            got = self._fallback
            if part is not None:
                if part.default_time_s is not None:
                    got = part.default_time_s
                elif part.max_time_s is not None:
                    got = part.max_time_s
            self._cache[partitions] = got
        return got

    def of(self, job: Job) -> int:
        if job.time_limit_s is not None:
            return job.time_limit_s
        if job.spec.time_limit_s is not None:
            return job.spec.time_limit_s
        return self.partition_default(job.spec.partitions)


def requested_time_s(job: Job, snapshot: ClusterSnapshot, config: SchedulerConfig) -> int:
    """``r``: the job's time limit, else the partition's default (or max), else config's."""
    return TimeLimits(snapshot, config).of(job)


_EPS = 1e-15


def _pos(x: float) -> float:
    return x if x > 0 else 0.1


def score(ordering: Ordering, r: float, n: int, s: float, now: float) -> float:
    """Priority (higher first) of one job under a research ordering."""
    if ordering is Ordering.FCFS:
        return -s
    if ordering is Ordering.SJF:
        return -float(r)
    if ordering is Ordering.WFP3:
        return ((now - s) / _pos(r)) ** 3 * n
    if ordering is Ordering.UNICEP:
        return (now - s + _EPS) / (math.log2(max(n, 1) + _EPS) * _pos(r))
    if ordering is Ordering.F1:
        return -(math.log10(_pos(r)) * n + 870 * math.log10(_pos(s)))
    if ordering is Ordering.F2:
        return -(math.sqrt(_pos(r)) * n + 25600 * math.log10(_pos(s)))
    if ordering is Ordering.F3:
        return -(_pos(r) * n + 6860000 * math.log10(_pos(s)))
    if ordering is Ordering.F4:
        return -(_pos(r) * math.sqrt(n) + 530000 * math.log10(_pos(s)))
    raise ValueError(f"{ordering!r} is not a research ordering")


def ordering_priorities(
    jobs: Iterable[Job], snapshot: ClusterSnapshot, config: SchedulerConfig, now: float
) -> dict[int, float]:
    """Priorities of ``jobs`` under ``config.ordering`` (anything but MULTIFACTOR)."""
    ordering = config.ordering
    if ordering is Ordering.FCFS:
        return {j.id: -j.submit_time for j in jobs}
    limits = TimeLimits(snapshot, config)
    return {
        j.id: score(ordering, limits.of(j), requested_procs(j.spec), j.submit_time, now)
        for j in jobs
    }
