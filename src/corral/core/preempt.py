"""Preemption: which running jobs to evict so a higher-priority job fits.

Who may be evicted (``SchedulerConfig.preempt_type``):

* ``partition_prio``: jobs running in a partition of *lower* ``priority_tier`` than the one
  the preemptor would run in, whose partition ``preempt_mode`` is not OFF;
* ``qos``: jobs whose QOS is listed in the preemptor QOS's ``preempt`` set, whose QOS
  ``preempt_mode`` is not OFF.

Nothing else is ever a candidate: not equal tiers, not unlisted QOS, not jobs already being
preempted (COMPLETING) or suspended.

Choice (fewest, lowest-priority victims): candidates that share nodes with the
preemptor's partition are sorted lowest first (tier or QOS priority, then admin priority,
then the most recently started, which loses the least work). The lowest single victim that
suffices wins; otherwise they are added one by one to a what-if pool until the job fits,
then each chosen victim is tried for removal, highest first, and dropped when the job
still fits without it (a greedy bound, not an exact minimum set cover). Jobs already
ending (COMPLETING) count as free in the what-if; when they suffice, nobody is preempted
and the job waits.

Mode: the victim partition's (partition_prio) or the victim QOS's (qos) preempt mode.
SUSPEND is used only when ``config.allow_suspend``, otherwise the configured
``preempt_mode`` (REQUEUE if that is SUSPEND too); REQUEUE falls back to CANCEL for jobs
that may not be requeued. A suspended multi-node job carries a warning: MPI jobs often
cannot resume. Grace time: the victim partition's or QOS's ``GraceTime``, else the
configured default; the shell signals first and kills after the grace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.core.config import PreemptType, SchedulerConfig
from corral.core.decisions import Preempt
from corral.core.model.job import Job, JobState
from corral.core.model.partition import Partition, PreemptMode, Qos
from corral.core.pool import Pool, compiled

SUSPEND_WARNING = "suspending a multi-node job: MPI jobs often cannot resume"


@dataclass(frozen=True, slots=True)
class Victim:
    job: Job
    mode: PreemptMode
    grace_s: int
    rank: tuple[float, float, float, int]


def _mode(mode: PreemptMode, victim: Job, config: SchedulerConfig) -> PreemptMode:
    if mode == PreemptMode.SUSPEND and not config.allow_suspend:
        mode = (config.preempt_mode if config.preempt_mode not in
                (PreemptMode.SUSPEND, PreemptMode.OFF) else PreemptMode.REQUEUE)
    if mode == PreemptMode.REQUEUE and not victim.spec.requeue:
        mode = PreemptMode.CANCEL
    return mode


def candidates(job: Job, partition: Partition, job_qos: Qos | None, running: Sequence[Job],
               partitions: dict[str, Partition], qos: dict[str, Qos],
               qos_of: Callable[[Job], str | None], config: SchedulerConfig,
               exclude: set[int]) -> list[Victim]:
    """Running jobs this job may evict, lowest priority first."""
    out: list[Victim] = []
    if config.preempt_type == PreemptType.NONE:
        return out
    for v in running:
        if v.state != JobState.RUNNING or v.allocation is None or v.id in exclude:
            continue
        vpart = partitions.get(v.partition or v.allocation.partition)
        mode: PreemptMode
        if config.preempt_type == PreemptType.PARTITION_PRIO:
            if vpart is None or vpart.priority_tier >= partition.priority_tier:
                continue
            if vpart.preempt_mode == PreemptMode.OFF:
                continue
            mode = vpart.preempt_mode
            grace = vpart.grace_time_s or config.preempt_grace_s
            rank0 = float(vpart.priority_tier)
        else:
            vq_name = qos_of(v)
            if job_qos is None or vq_name is None or vq_name not in job_qos.preempt:
                continue
            vq = qos.get(vq_name)
            if vq is None or vq.preempt_mode == PreemptMode.OFF:
                continue
            mode = vq.preempt_mode
            grace = vq.grace_time_s or config.preempt_grace_s
            rank0 = float(vq.priority)
        mode = _mode(mode, v, config)
        if mode == PreemptMode.SUSPEND:
            grace = 0
        start = v.start_time if v.start_time is not None else 0.0
        rank = (rank0, float(v.admin_priority or 0), -start, -v.id)
        out.append(Victim(v, mode, grace, rank))
    out.sort(key=lambda x: x.rank)
    return out[: config.bf_max_preempt_candidates]


def choose(victims: list[Victim], pool: Pool, ending: Sequence[Job],
           fits: Callable[[Pool], bool], touches: Callable[[Job], bool]) -> list[Victim] | None:
    """Fewest, lowest victims whose eviction lets ``fits`` succeed.

    ``[]`` means the jobs already ending (``ending``) free enough; ``None`` means no set of
    candidates does.
    """
    what_if = pool.copy()
    for j in ending:
        what_if.give_job(j)
    if fits(what_if):
        return []
    candidates = [v for v in victims if touches(v.job)]
    for v in candidates:  # one victim is the fewest possible: the lowest that suffices
        _give(what_if, v)
        if fits(what_if):
            return [v]
        _take(what_if, v)
    chosen: list[Victim] = []
    ok = False
    for v in candidates:
        if not touches(v.job):
            continue
        _give(what_if, v)
        chosen.append(v)
        if fits(what_if):
            ok = True
            break
    if not ok:
        return None
    for v in reversed(chosen[:-1]):
        _take(what_if, v)
        if fits(what_if):
            chosen.remove(v)
        else:
            _give(what_if, v)
    return chosen


def _give(pool: Pool, v: Victim) -> None:
    assert v.job.allocation is not None
    only_cores = v.mode == PreemptMode.SUSPEND
    for u in compiled(pool.table, v.job.allocation):
        pool.give(u, cores=True, rest=not only_cores)


def _take(pool: Pool, v: Victim) -> None:
    assert v.job.allocation is not None
    only_cores = v.mode == PreemptMode.SUSPEND
    for u in compiled(pool.table, v.job.allocation):
        pool.take(u, cores=True, rest=not only_cores)


def decisions(victims: list[Victim], for_job: int) -> list[Preempt]:
    out: list[Preempt] = []
    for v in victims:
        multi = v.job.allocation is not None and len(v.job.allocation.node_names) > 1
        warning = SUSPEND_WARNING if v.mode == PreemptMode.SUSPEND and multi else ""
        out.append(Preempt(v.job.id, for_job, v.mode, v.grace_s, warning))
    return out
