"""The outcome of one simulation: per-job times and states plus time series."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from corral.sim.workload import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

COMPLETED = 0  # ran its logged run time
TIMEOUT = 1  # killed at its time limit
REJECTED = 2  # the core said it can never run as asked
UNFINISHED = 3  # still pending or running when the simulation stopped
PREEMPTED = 4  # cancelled by preemption (PreemptMode CANCEL)
STATE_NAMES = ("COMPLETED", "TIMEOUT", "REJECTED", "UNFINISHED", "PREEMPTED")


@dataclass
class SimResult:
    """Per-job arrays aligned with ``workload`` (``nan`` where a time does not exist).

    ``samples_*`` record, after every scheduling point, the time, the number of pending
    jobs and the CPUs in use (a step function: each value holds until the next sample).
    ``allocations`` maps a job index to the node indices it ran on, when recorded.
    """

    label: str
    workload: Workload
    start_s: FloatArray
    end_s: FloatArray
    state: npt.NDArray[np.int8]
    alloc_cpus: IntArray
    total_cpus: int
    total_nodes: int
    node_names: tuple[str, ...] = ()
    samples_t: FloatArray = field(default_factory=lambda: np.empty(0))
    samples_pending: FloatArray = field(default_factory=lambda: np.empty(0))
    samples_busy_cpus: FloatArray = field(default_factory=lambda: np.empty(0))
    allocations: dict[int, tuple[int, ...]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.workload)

    @property
    def started(self) -> npt.NDArray[np.bool_]:
        return ~np.isnan(self.start_s)
