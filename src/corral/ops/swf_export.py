"""Export a cluster's finished jobs as SWF, so ``corral sim`` can replay its own history.

Field mapping (Standard Workload Format v2.2, written with ``corral.sim.swf``):

=================  =========================================================================
SWF field          from the job record
=================  =========================================================================
job number         the Corral job id (unique, increasing with submit time)
submit time        ``submit_time - UnixStartTime`` (the earliest submit, whole seconds)
wait time          ``start - submit`` (-1 if it never started)
run time           ``end - start`` (-1 if it never started)
allocated procs    allocated CPUs (-1 if it never started)
avg CPU time       ``cpu_time_s / CPUs`` (-1 when not measured)
used memory        peak RSS per CPU in KB (-1 when not measured)
requested procs    CPUs asked for
requested time     the time limit (-1 when unlimited)
requested memory   requested memory per CPU in KB (-1 when none)
status             1 COMPLETED; 5 CANCELLED; 0 every other end (failed, timeout, OOM, ...)
user / group       users and accounts numbered 1, 2, ... in order of first appearance
                   (anonymized: the header does not name them)
executable         job names numbered the same way
queue / partition  partitions numbered the same way (named in the header)
=================  =========================================================================

Only finished jobs are written (active ones have no final times), in submit order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from corral.ops.jobs import AcctJob

if TYPE_CHECKING:
    from corral.sim.swf import SwfTrace

STATUS_COMPLETED = 1
STATUS_FAILED = 0
STATUS_CANCELLED = 5


def _num(table: dict[str, int], key: str) -> int:
    n = table.get(key)
    if n is None:
        n = table[key] = len(table) + 1
    return n


def swf_status(state: str) -> int:
    if state == "COMPLETED":
        return STATUS_COMPLETED
    if state == "CANCELLED":
        return STATUS_CANCELLED
    return STATUS_FAILED


def history_trace(jobs: Iterable[AcctJob], *, cluster: str = "corral", total_nodes: int = 0,
                  total_cpus: int = 0, now: float | None = None) -> SwfTrace:
    """An ``SwfTrace`` (``corral.sim.swf``) of the finished ``jobs``."""
    from corral.sim.swf import SwfHeader, trace_from_columns

    done = sorted((j for j in jobs if j.finished), key=lambda j: (j.submit_time, j.id))
    t0 = int(done[0].submit_time) if done else int(now if now is not None else time.time())
    users: dict[str, int] = {}
    groups: dict[str, int] = {}
    exes: dict[str, int] = {}
    parts: dict[str, int] = {}
    cols: dict[str, list[float]] = {name: [] for name in (
        "job_id", "submit_s", "wait_s", "run_s", "procs_alloc", "cpu_avg_s", "mem_used_kb",
        "procs_req", "time_req_s", "mem_req_kb", "status", "user_id", "group_id", "exe_id",
        "queue_id", "partition_id")}
    for j in done:
        ran = j.start_time is not None and j.end_time is not None
        cpus = max(j.cpus, 1)
        part = _num(parts, j.partition or "default")
        row = {
            "job_id": float(j.id),
            "submit_s": round(j.submit_time - t0, 3),
            "wait_s": round(j.start_time - j.submit_time, 3) if ran and j.start_time else -1.0,
            "run_s": round(j.end_time - j.start_time, 3)
            if ran and j.end_time is not None and j.start_time is not None else -1.0,
            "procs_alloc": float(j.cpus) if ran else -1.0,
            "cpu_avg_s": round(j.cpu_time_s / cpus, 3) if ran and j.cpu_time_s > 0 else -1.0,
            "mem_used_kb": round(j.max_rss_mb * 1024 / cpus) if j.max_rss_mb > 0 else -1.0,
            "procs_req": float(j.cpus),
            "time_req_s": float(j.time_limit_s) if j.time_limit_s else -1.0,
            "mem_req_kb": round(j.req_mem_mb * 1024 / cpus) if j.req_mem_mb > 0 else -1.0,
            "status": float(swf_status(j.state)),
            "user_id": float(_num(users, j.user)),
            "group_id": float(_num(groups, j.account)),
            "exe_id": float(_num(exes, j.name)),
            "queue_id": float(part),
            "partition_id": float(part),
        }
        for k, v in row.items():
            cols[k].append(v)
    end = max((j.end_time or 0.0 for j in done), default=float(t0))
    items: list[tuple[str, object]] = [
        ("Version", "2.2"),
        ("Computer", f"Corral cluster {cluster}"),
        ("Installation", "exported by corral report swf"),
        ("UnixStartTime", t0),
        ("TimeZoneString", "UTC"),
        ("StartTime", time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(t0))),
        ("EndTime", time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(end))),
        ("MaxNodes", total_nodes),
        ("MaxProcs", total_cpus),
        ("MaxJobs", len(done)),
        ("MaxRecords", len(done)),
        ("Preemption", "No"),
        ("MaxPartitions", len(parts)),
    ]
    items += [("Partition", f"{n} {name}") for name, n in parts.items()]
    header = SwfHeader.build(items, [
        "Note: job numbers are Corral job ids; users, accounts (as groups), job names (as",
        "Note: executables) and partitions are numbered in order of first appearance.",
    ])
    return trace_from_columns(header, dict(cols), len(done))


def write_history_swf(path: str | Path, jobs: Iterable[AcctJob], *, cluster: str = "corral",
                      total_nodes: int = 0, total_cpus: int = 0) -> int:
    """Write ``history_trace(jobs, ...)`` to ``path`` (``.gz``: compressed); returns the
    number of jobs written."""
    from corral.sim.swf import write_swf

    trace = history_trace(jobs, cluster=cluster, total_nodes=total_nodes,
                          total_cpus=total_cpus)
    write_swf(path, trace)
    return len(trace)
