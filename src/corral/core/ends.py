"""When running jobs end, as backfill sees it: start + time limit, rounded up.

``raw_end(job, table, config)`` is a running job's planned end: its start plus its
effective time limit (the job's own, else the partition's default or maximum, else the
configured default), rounded *up* to ``bf_resolution_s`` (0 or 1 keeps exact times).
Suspended jobs never end on their own (``inf``).

``EndIndex`` keeps ``(raw_end, nodes, key)`` of every running job sorted, updated from the
pool's per-call diff (``pool.build_pool``), so a simulator that changes one job per event
pays O(log n) here instead of O(n).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable

from corral.core.config import SchedulerConfig
from corral.core.model.job import Job, JobState
from corral.core.nodes import NodeTable
from corral.core.shape import time_limit_s

INF = math.inf


def round_up(t: float, resolution: int) -> float:
    if resolution <= 1 or t == INF:
        return t
    return math.ceil(t / resolution) * resolution


def raw_end(job: Job, table: NodeTable, config: SchedulerConfig) -> float:
    if job.state == JobState.SUSPENDED:
        return INF
    part = None
    if job.partition is not None or job.allocation is not None:
        name = job.partition or (job.allocation.partition if job.allocation else "")
        part = table.partitions.get(name)
    start = job.start_time if job.start_time is not None else 0.0
    return round_up(start + time_limit_s(job, part, config), config.bf_resolution_s)


class EndIndex:
    """Distinct planned end times of running jobs (sorted) and the nodes each frees."""

    __slots__ = ("config", "ends", "nodes", "_end_of")

    def __init__(self, config: SchedulerConfig, table: NodeTable, jobs: Iterable[Job]) -> None:
        self.config = config
        self.ends: list[float] = []
        self.nodes: dict[float, int] = {}
        # id(job) -> (job, its planned end) for the jobs added, so removing one does not
        # work its end out again (the record is held: its id cannot be reused meanwhile)
        self._end_of: dict[int, tuple[Job, float]] = {}
        self.update(table, (), jobs)

    def update(self, table: NodeTable, removed: Iterable[Job], added: Iterable[Job]) -> None:
        ends, nodes, config, end_of = self.ends, self.nodes, self.config, self._end_of
        for j in removed:
            if j.allocation is None:
                continue
            got = end_of.pop(id(j), None)
            e = got[1] if got is not None and got[0] is j else raw_end(j, table, config)
            if e == INF:
                continue
            left = nodes[e] - len(j.allocation.nodes)
            if left:
                nodes[e] = left
            else:
                del nodes[e]
                del ends[bisect_left(ends, e)]
        for j in added:
            if j.allocation is None:
                continue
            e = raw_end(j, table, config)
            end_of[id(j)] = (j, e)
            if e == INF:
                continue
            n = nodes.get(e)
            if n is None:
                insort(ends, e)
                nodes[e] = len(j.allocation.nodes)
            else:
                nodes[e] = n + len(j.allocation.nodes)
