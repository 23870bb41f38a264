"""Job priority: Slurm multifactor and research orderings (FCFS, SJF, WFP3, UNICEP, F1-F4).

``compute(snapshot, config, now) -> dict[job_id, float]``: a priority per pending job;
higher runs first. Ties are broken by the caller by (submit time, job id).
"""

from __future__ import annotations

from corral.core.config import SchedulerConfig
from corral.core.snapshot import ClusterSnapshot


def compute(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float) -> dict[int, float]:
    """Placeholder (FCFS) until the multifactor module lands: earlier submit ranks higher."""
    return {j.id: -j.submit_time for j in snapshot.pending}
