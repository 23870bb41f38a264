"""Scheduler configuration: one frozen value passed into every cycle (never read globally).

Defaults follow Slurm 22.05 where Slurm has an equivalent (``bf_window=1440`` minutes,
``bf_max_job_test=500``, ``bf_resolution=60`` s, ``PriorityMaxAge=7-0``,
``PriorityDecayHalfLife=7-0``), so an admin's numbers mean the same thing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from corral.core.model.partition import PreemptMode


class Ordering(str, Enum):
    MULTIFACTOR = "multifactor"  # Slurm priority/multifactor
    FCFS = "fcfs"
    SJF = "sjf"  # shortest time limit first
    WFP3 = "wfp3"
    UNICEP = "unicep"
    F1 = "f1"  # Carastan-Santos & de Camargo, SC'17
    F2 = "f2"
    F3 = "f3"
    F4 = "f4"


class BackfillMode(str, Enum):
    NONE = "none"  # strict priority: the top blocked job blocks everyone
    EASY = "easy"  # one reservation (top blocked job), extra-resources rule
    CONSERVATIVE = "conservative"  # a reservation for every job tested


class PlacementMode(str, Enum):
    PACK = "pack"  # best fit (default)
    SPREAD = "spread"  # least loaded
    TOPOLOGY = "topology"  # fewest switches, then best fit


class ReservationPolicy(str, Enum):
    """Who holds a reservation across cycles (Maui ``RESERVATIONPOLICY``)."""

    CURRENT_HIGHEST = "current_highest"  # recomputed every cycle from priorities (Slurm-like)
    HIGHEST = "highest"  # a job that got a reservation stays first until it starts


class FairshareAlgorithm(str, Enum):
    FAIR_TREE = "fair_tree"
    CLASSIC = "classic"


class PreemptType(str, Enum):
    NONE = "none"
    PARTITION_PRIO = "partition_prio"  # preempt/partition_prio
    QOS = "qos"  # preempt/qos


@dataclass(frozen=True, slots=True)
class PriorityWeights:
    """Slurm ``PriorityWeight*`` values; each factor is in [0, 1] and multiplied by these."""

    age: int = 1000
    fairshare: int = 10000
    job_size: int = 1000
    partition: int = 1000
    qos: int = 1000
    assoc: int = 0
    max_age_s: int = 7 * 86400  # PriorityMaxAge
    favor_small: bool = False  # PriorityFavorSmall
    size_relative: bool = False  # PriorityFlags=SMALL_RELATIVE_TO_TIME


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    ordering: Ordering = Ordering.MULTIFACTOR
    backfill: BackfillMode = BackfillMode.EASY
    placement: PlacementMode = PlacementMode.PACK
    weights: PriorityWeights = field(default_factory=PriorityWeights)
    fairshare: FairshareAlgorithm = FairshareAlgorithm.FAIR_TREE
    decay_half_life_s: int = 7 * 86400
    bf_window_s: int = 86400
    bf_max_job_test: int = 500
    bf_resolution_s: int = 60
    bf_continue: bool = True
    max_jobs_per_cycle: int | None = None  # cap on jobs examined by the main pass
    # cap on jobs started by one cycle (Slurm's sched_max_job_start); None: no cap. The
    # pass stops starting once it is reached: its decisions are a prefix of the uncapped
    # pass's, and the rest waits (reason Priority) for the next cycle, which the shell runs
    max_starts_per_cycle: int | None = None
    preempt_type: PreemptType = PreemptType.NONE
    preempt_mode: PreemptMode = PreemptMode.REQUEUE
    preempt_grace_s: int = 0
    allow_suspend: bool = False  # SUSPEND only where configured
    default_time_s: int = 3600  # when neither job nor partition gives one
    default_mem_per_cpu_mb: int = 0  # 0: whole node memory split by CPUs is not assumed
    max_array_size: int = 4001
    # added by the scheduling engine (issue 2, items 4-6)
    reservation_policy: ReservationPolicy = ReservationPolicy.CURRENT_HIGHEST
    annotate_pending: bool = True  # False: no PendingInfo/est. starts (simulator fast path)
    bf_max_preempt_candidates: int = 256  # running jobs examined as victims per preemptor
    # a job waiting at least this long goes ahead of every job that has not, in submit
    # order (``priority.guard``); None: off. Not applied under FCFS (already that order)
    starvation_guard_s: int | None = None
    # memory a VM job needs on its node besides its request (qemu, guest kernel), MB
    vm_mem_overhead_mb: int = 64
