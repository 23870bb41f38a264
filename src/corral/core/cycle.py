"""``run_cycle``: the one entry point of the scheduling core.

``run_cycle(snapshot, config, now) -> CycleResult``. Pure and deterministic: the same
snapshot, config and ``now`` always give the same decisions. The controller daemon and the
simulator both call this function.
"""

from __future__ import annotations

from corral.core.config import SchedulerConfig
from corral.core.decisions import CycleResult
from corral.core.snapshot import ClusterSnapshot


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float) -> CycleResult:
    raise NotImplementedError("scheduling core under construction")
