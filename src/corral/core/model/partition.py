"""Partitions (queues) and QOS: the policy containers jobs are submitted into."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from corral.core.model.resources import Resources


class PreemptMode(str, Enum):
    OFF = "OFF"
    CANCEL = "CANCEL"
    REQUEUE = "REQUEUE"
    SUSPEND = "SUSPEND"  # only where configured; MPI jobs often cannot resume


class PartitionState(str, Enum):
    UP = "UP"  # accepts and runs jobs
    DOWN = "DOWN"  # accepts jobs, runs none
    DRAIN = "DRAIN"  # runs queued jobs, accepts no new ones
    INACTIVE = "INACTIVE"  # neither


@dataclass(frozen=True, slots=True)
class Partition:
    """A Slurm-style partition. ``max_time_s``/``max_nodes`` of ``None`` mean unlimited."""

    name: str
    nodes: tuple[str, ...]
    default_time_s: int | None = None
    max_time_s: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 1
    priority_tier: int = 1
    priority_job_factor: int = 1
    preempt_mode: PreemptMode = PreemptMode.OFF
    grace_time_s: int = 0
    is_default: bool = False
    state: PartitionState = PartitionState.UP
    allow_accounts: frozenset[str] | None = None  # None: all
    allow_qos: frozenset[str] | None = None  # None: all
    default_mem_per_cpu_mb: int | None = None
    max_mem_per_cpu_mb: int | None = None
    exclusive: bool = False  # OverSubscribe=EXCLUSIVE: whole nodes per job
    runtime: str | None = None  # every job runs in this class ("vm"); None: the job's


@dataclass(frozen=True, slots=True)
class QosLimits:
    """Limits enforced by holding jobs with a reason (``None`` means no limit)."""

    max_jobs_per_user: int | None = None  # running jobs (MaxJobsPU)
    max_submit_per_user: int | None = None  # pending+running (MaxSubmitJobsPU)
    max_tres_per_user: Resources | None = None  # MaxTRESPU
    max_jobs_per_account: int | None = None  # MaxJobsPA
    max_tres_per_account: Resources | None = None  # MaxTRESPA
    grp_jobs: int | None = None  # GrpJobs: all jobs in this QOS
    grp_tres: Resources | None = None  # GrpTRES
    max_tres_per_job: Resources | None = None  # MaxTRESPerJob
    max_nodes_per_job: int | None = None
    max_wall_s: int | None = None  # MaxWall


@dataclass(frozen=True, slots=True)
class Qos:
    name: str
    priority: int = 0
    preempt: frozenset[str] = field(default_factory=frozenset)  # QOS names this one may preempt
    preempt_mode: PreemptMode = PreemptMode.CANCEL
    grace_time_s: int = 0
    usage_factor: float = 1.0
    limits: QosLimits = field(default_factory=QosLimits)
