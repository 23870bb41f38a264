"""Accounting view of a job record: the fields reports need, typed, from the API's dicts.

Reports work on job records shaped like ``corral.client`` documents them (``history()``,
``jobs()``, ``job()``), so they run the same over a live cluster, a JSON dump or test
data. ``AcctJob.from_record`` reads one; a missing or ``None`` field means "unknown" and
never raises, because records written by older controllers may lack newer fields.

Resource conventions:

- **allocated CPUs** are ``num_cpus`` once the job started (the allocation), else the
  request; **GPUs** likewise ``gpus``;
- **requested memory** (the basis of memory efficiency, as ``seff`` uses) is
  ``mem_per_node_mb * nodes`` or ``mem_per_cpu_mb * cpus``, else the allocated
  ``alloc_mem_mb``; 0 when none is known;
- **elapsed** is ``end - start`` (``now - start`` while running).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FINISHED_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
})
ACTIVE_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})


def _f(rec: Mapping[str, Any], key: str) -> float | None:
    v = rec.get(key)
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _i(rec: Mapping[str, Any], key: str, default: int = 0) -> int:
    v = _f(rec, key)
    return default if v is None else int(v)


def _s(rec: Mapping[str, Any], key: str, default: str = "") -> str:
    v = rec.get(key)
    return default if v is None else str(v)


@dataclass(frozen=True, slots=True)
class AcctJob:
    id: int
    job_id: str  # display id ("12", "12_3")
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    submit_time: float
    eligible_time: float | None
    start_time: float | None
    end_time: float | None
    time_limit_s: float | None
    num_nodes: int
    nodelist: str
    cpus: int
    gpus: int
    req_mem_mb: float
    alloc_mem_mb: float
    cpu_time_s: float
    max_rss_mb: float
    exit_code: int | None
    signal: int
    uid: int
    gid: int

    @staticmethod
    def from_record(rec: Mapping[str, Any]) -> AcctJob:
        cpus = _i(rec, "num_cpus")
        nodes = _i(rec, "num_nodes", 1)
        per_node = _f(rec, "mem_per_node_mb")
        per_cpu = _f(rec, "mem_per_cpu_mb")
        alloc_mem = _f(rec, "alloc_mem_mb") or 0.0
        if per_node:
            req_mem = per_node * max(nodes, 1)
        elif per_cpu:
            req_mem = per_cpu * cpus
        else:
            req_mem = alloc_mem
        exit_code = rec.get("exit_code")
        return AcctJob(
            id=_i(rec, "id"),
            job_id=_s(rec, "job_id") or _s(rec, "id"),
            name=_s(rec, "name"),
            user=_s(rec, "user"),
            account=_s(rec, "account") or "(none)",
            partition=_s(rec, "partition"),
            qos=_s(rec, "qos"),
            state=_s(rec, "state", "UNKNOWN"),
            submit_time=_f(rec, "submit_time") or 0.0,
            eligible_time=_f(rec, "eligible_time"),
            start_time=_f(rec, "start_time"),
            end_time=_f(rec, "end_time"),
            time_limit_s=_f(rec, "time_limit_s"),
            num_nodes=nodes,
            nodelist=_s(rec, "nodelist"),
            cpus=cpus,
            gpus=_i(rec, "gpus"),
            req_mem_mb=req_mem,
            alloc_mem_mb=alloc_mem,
            cpu_time_s=_f(rec, "cpu_time_s") or 0.0,
            max_rss_mb=_f(rec, "max_rss_mb") or 0.0,
            exit_code=None if exit_code is None else int(exit_code),
            signal=_i(rec, "signal"),
            uid=_i(rec, "uid", -1),
            gid=_i(rec, "gid", -1),
        )

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def started(self) -> bool:
        return self.start_time is not None

    def elapsed_s(self, now: float) -> float:
        """Run time: ``end - start`` (``now - start`` while running), 0 if never started."""
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else now
        return max(0.0, end - self.start_time)

    def wait_s(self, now: float) -> float:
        """Queue time: ``start - submit`` (``now - submit`` while it has not started)."""
        start = self.start_time if self.start_time is not None else (
            self.end_time if self.end_time is not None else now)
        return max(0.0, start - self.submit_time)

    def overlap_s(self, since: float, until: float, now: float) -> float:
        """Seconds of this job's run inside ``[since, until]``."""
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else now
        return max(0.0, min(end, until) - max(self.start_time, since))


def acct_jobs(records: Iterable[Mapping[str, Any]]) -> list[AcctJob]:
    """``AcctJob`` for each record, de-duplicated by id (the last copy wins)."""
    seen: dict[int, AcctJob] = {}
    for r in records:
        j = AcctJob.from_record(r)
        seen[j.id] = j
    return [seen[k] for k in sorted(seen)]
