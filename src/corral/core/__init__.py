"""corral.core: the pure scheduling core (standard library only; no clock, I/O or env).

The names below are loaded on first use (PEP 562), so a module that needs only the data
model (``corral.core.model``, ``corral.core.parse``: the shims, the agent) does not pay for
importing the whole scheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.core.config import SchedulerConfig
    from corral.core.cycle import run_cycle
    from corral.core.decisions import CycleResult, PendingInfo, Preempt, Reject, Reserve, Start
    from corral.core.feasibility import validate
    from corral.core.snapshot import ClusterSnapshot, FinishedJob

_WHERE = {
    "SchedulerConfig": "corral.core.config", "run_cycle": "corral.core.cycle",
    "CycleResult": "corral.core.decisions", "PendingInfo": "corral.core.decisions",
    "Preempt": "corral.core.decisions", "Reject": "corral.core.decisions",
    "Reserve": "corral.core.decisions", "Start": "corral.core.decisions",
    "ClusterSnapshot": "corral.core.snapshot", "FinishedJob": "corral.core.snapshot",
    "validate": "corral.core.feasibility",
}

__all__ = [
    "SchedulerConfig", "run_cycle", "CycleResult", "PendingInfo", "Preempt", "Reject",
    "Reserve", "Start", "ClusterSnapshot", "FinishedJob", "validate",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
