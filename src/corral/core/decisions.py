"""Decisions: what one scheduling cycle tells the shell to do, as plain data.

The core never acts. It returns ``Start`` (with the exact allocation), ``Reserve`` (a
planned start from the availability profile), ``Preempt`` (a victim, the mode and the grace
time: signal first, kill after the grace), ``Reject`` (the job can never run as asked) and
a ``PendingInfo`` for every job still pending: a Slurm-style reason, the priority and the
estimated start when the profile knows one. "Cannot run now" (a pending reason) and "can
never run" (``Reject``) are different verdicts and never mixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.model.job import Allocation
from corral.core.model.partition import PreemptMode


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    allocation: Allocation
    time_limit_s: int | None
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class Reserve:
    job_id: int
    start_time: float
    nodes: tuple[str, ...] = ()
    end_time: float = 0.0  # start + time limit (rounded up to the backfill resolution)
    amounts: tuple[tuple[int, int, int], ...] = ()  # per entry of ``nodes``: cores, MB, GPUs


@dataclass(frozen=True, slots=True)
class Preempt:
    victim_id: int
    for_job_id: int
    mode: PreemptMode
    grace_s: int = 0
    warning: str = ""  # e.g. SUSPEND of a multi-node job: MPI jobs often cannot resume


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: int
    reason: str  # Slurm-style code, e.g. "PartitionTimeLimit", "BadConstraints"
    message: str  # one sentence a user can act on


@dataclass(frozen=True, slots=True)
class PendingInfo:
    job_id: int
    reason: str  # Priority, Resources, Dependency, JobHeldUser, BeginTime, ...
    priority: float = 0.0
    est_start: float | None = None
    detail: str = ""  # plain-words explanation (what blocks it)
    rank: int = 0  # position in priority order among pending jobs (1 = next)


@dataclass(frozen=True, slots=True)
class CycleStats:
    pending: int = 0
    running: int = 0
    started: int = 0
    backfilled: int = 0
    reserved: int = 0
    preempted: int = 0
    rejected: int = 0
    jobs_tested: int = 0


@dataclass(frozen=True, slots=True)
class CycleResult:
    starts: tuple[Start, ...] = ()
    reservations: tuple[Reserve, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    rejects: tuple[Reject, ...] = ()
    pending: dict[int, PendingInfo] = field(default_factory=dict)
    stats: CycleStats = field(default_factory=CycleStats)
    # ids holding a reservation after this cycle, in the order they got it (feed back as
    # ``ClusterSnapshot.reserved``; only ReservationPolicy.HIGHEST reads it)
    reserved: tuple[int, ...] = ()
