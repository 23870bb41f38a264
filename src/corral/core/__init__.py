"""corral.core: the pure scheduling core (standard library only; no clock, I/O or env)."""

from corral.core.config import SchedulerConfig
from corral.core.cycle import run_cycle
from corral.core.decisions import CycleResult, PendingInfo, Preempt, Reject, Reserve, Start
from corral.core.feasibility import validate
from corral.core.snapshot import ClusterSnapshot, FinishedJob

__all__ = [
    "SchedulerConfig", "run_cycle", "CycleResult", "PendingInfo", "Preempt", "Reject",
    "Reserve", "Start", "ClusterSnapshot", "FinishedJob", "validate",
]
