"""Accounting reports over job records: cluster utilization, usage by user/account, top users.

Algorithm (what ``sreport`` calls "allocated" time): a job charges ``cpus`` (and ``gpus``)
for every second of its run that falls inside the report window ``[since, until]``; a
running job runs until ``now``. Utilization is charged CPU-seconds over the capacity,
``total_cpus * (until - since)``. The capacity is the cluster's CPUs as configured now
(node history is not kept), so a window that spans a cluster change is approximate.

Invariants: every charged second lies inside the window, so utilization is in ``[0, 1]``
whenever jobs never over-allocate a node; the usage rows of ``usage_by`` sum to the
``allocated_cpu_s`` of ``utilization`` over the same records and window.

``series`` cuts the window into equal bins and gives, per bin, the mean allocated CPUs
and GPUs and the number of jobs waiting at the bin's end: the utilization-over-time plot
and the web dashboard's chart.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from corral.ops.jobs import AcctJob


@dataclass(frozen=True, slots=True)
class Utilization:
    since: float
    until: float
    total_cpus: int
    total_gpus: int
    allocated_cpu_s: float
    allocated_gpu_s: float
    used_cpu_s: float  # CPU time the jobs really consumed inside the window (estimated)
    jobs_started: int
    jobs_ended: int
    jobs_submitted: int
    wait_mean_s: float | None  # over jobs that started in the window
    wait_median_s: float | None

    @property
    def window_s(self) -> float:
        return max(0.0, self.until - self.since)

    @property
    def cpu_utilization(self) -> float:
        cap = self.total_cpus * self.window_s
        return self.allocated_cpu_s / cap if cap > 0 else 0.0

    @property
    def gpu_utilization(self) -> float:
        cap = self.total_gpus * self.window_s
        return self.allocated_gpu_s / cap if cap > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "since": self.since, "until": self.until, "window_s": self.window_s,
            "total_cpus": self.total_cpus, "total_gpus": self.total_gpus,
            "allocated_cpu_hours": self.allocated_cpu_s / 3600.0,
            "allocated_gpu_hours": self.allocated_gpu_s / 3600.0,
            "used_cpu_hours": self.used_cpu_s / 3600.0,
            "cpu_utilization": self.cpu_utilization,
            "gpu_utilization": self.gpu_utilization,
            "jobs_submitted": self.jobs_submitted, "jobs_started": self.jobs_started,
            "jobs_ended": self.jobs_ended, "wait_mean_s": self.wait_mean_s,
            "wait_median_s": self.wait_median_s,
        }


@dataclass(frozen=True, slots=True)
class UsageRow:
    key: str  # user or account name
    jobs: int  # jobs that ran inside the window
    cpu_s: float  # allocated CPU-seconds inside the window
    gpu_s: float
    used_cpu_s: float  # consumed CPU time inside the window (estimated)
    share: float  # cpu_s / total allocated cpu_s of all rows
    wait_mean_s: float | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.key, "jobs": self.jobs, "cpu_hours": self.cpu_s / 3600.0,
                "gpu_hours": self.gpu_s / 3600.0, "used_cpu_hours": self.used_cpu_s / 3600.0,
                "share": self.share, "wait_mean_s": self.wait_mean_s}


def _used_in_window(j: AcctJob, since: float, until: float, now: float) -> float:
    """The job's CPU time, spread evenly over its run, for the part inside the window."""
    elapsed = j.elapsed_s(now)
    if elapsed <= 0 or j.cpu_time_s <= 0:
        return 0.0
    return j.cpu_time_s * j.overlap_s(since, until, now) / elapsed


def utilization(jobs: Iterable[AcctJob], total_cpus: int, total_gpus: int,
                since: float, until: float, now: float) -> Utilization:
    """Cluster utilization of ``jobs`` over ``[since, until]`` (see the module docstring)."""
    if until < since:
        raise ValueError(f"the report window ends ({until}) before it starts ({since})")
    cpu_s = gpu_s = used = 0.0
    started = ended = submitted = 0
    waits: list[float] = []
    for j in jobs:
        ov = j.overlap_s(since, until, now)
        cpu_s += j.cpus * ov
        gpu_s += j.gpus * ov
        used += _used_in_window(j, since, until, now)
        if since <= j.submit_time < until:
            submitted += 1
        if j.start_time is not None and since <= j.start_time < until:
            started += 1
            waits.append(j.wait_s(now))
        if j.end_time is not None and j.finished and since <= j.end_time < until:
            ended += 1
    return Utilization(
        since, until, total_cpus, total_gpus, cpu_s, gpu_s, used, started, ended, submitted,
        statistics.fmean(waits) if waits else None,
        statistics.median(waits) if waits else None)


def usage_by(jobs: Iterable[AcctJob], key: str, since: float, until: float,
             now: float) -> list[UsageRow]:
    """Usage per ``key`` (``"user"`` or ``"account"``), most CPU-hours first."""
    if key not in ("user", "account"):
        raise ValueError(f"usage is grouped by user or account, not {key!r}")
    acc: dict[str, list[float]] = {}
    waits: dict[str, list[float]] = {}
    for j in jobs:
        ov = j.overlap_s(since, until, now)
        if ov <= 0:
            continue
        name = j.user if key == "user" else j.account
        row = acc.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += j.cpus * ov
        row[2] += j.gpus * ov
        row[3] += _used_in_window(j, since, until, now)
        if j.start_time is not None and since <= j.start_time < until:
            waits.setdefault(name, []).append(j.wait_s(now))
    total = sum(r[1] for r in acc.values())
    rows = [UsageRow(name, int(r[0]), r[1], r[2], r[3], r[1] / total if total > 0 else 0.0,
                     statistics.fmean(waits[name]) if waits.get(name) else None)
            for name, r in acc.items()]
    rows.sort(key=lambda r: (-r.cpu_s, -r.gpu_s, r.key))
    return rows


def top_users(jobs: Iterable[AcctJob], since: float, until: float, now: float,
              count: int = 10) -> list[UsageRow]:
    """The ``count`` users with the most allocated CPU-hours in the window."""
    if count < 1:
        raise ValueError(f"the number of top users must be at least 1, got {count}")
    return usage_by(jobs, "user", since, until, now)[:count]


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    start: float  # bin start (epoch seconds)
    end: float
    cpus: float  # mean allocated CPUs over the bin
    gpus: float
    pending: int  # jobs submitted but not started at the bin end

    def to_json(self) -> dict[str, float]:
        return {"t": self.start, "end": self.end, "cpus": self.cpus, "gpus": self.gpus,
                "pending": self.pending}


def series(jobs: Iterable[AcctJob], since: float, until: float, now: float,
           bins: int = 48) -> list[SeriesPoint]:
    """Allocated CPUs/GPUs (bin means) and pending jobs (at bin ends) over the window."""
    if bins < 1:
        raise ValueError(f"a series needs at least one bin, got {bins}")
    if until <= since:
        return []
    width = (until - since) / bins
    cpu = [0.0] * bins
    gpu = [0.0] * bins
    pend = [0] * bins
    for j in jobs:
        if j.start_time is not None:
            end = min(j.end_time if j.end_time is not None else now, until)
            s = max(j.start_time, since)
            if end > s:
                first = int((s - since) // width)
                last = min(bins - 1, int((end - since) // width))
                for b in range(max(first, 0), last + 1):
                    lo = since + b * width
                    ov = min(end, lo + width) - max(s, lo)
                    if ov > 0:
                        cpu[b] += j.cpus * ov
                        gpu[b] += j.gpus * ov
        # waiting from submit until start (or end, for jobs cancelled while pending)
        wait_end = j.start_time if j.start_time is not None else (
            j.end_time if j.end_time is not None else float("inf"))
        b = max(0, math.ceil((j.submit_time - since) / width - 1))
        while b < bins:
            t = since + (b + 1) * width
            if t >= wait_end or t > now:
                break
            if j.submit_time <= t:
                pend[b] += 1
            b += 1
    return [SeriesPoint(since + b * width, since + (b + 1) * width, cpu[b] / width,
                        gpu[b] / width, pend[b]) for b in range(bins)]
