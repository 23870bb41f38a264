"""Job efficiency, like Slurm's ``seff``: how much of what a job held it really used.

- **CPU efficiency** ``= cpu_time / (elapsed * allocated CPUs)``: the CPU time the agent
  measured (cgroup ``cpuacct``/``cpu.stat``, else rusage of the job's processes) over the
  core-walltime the job held. 100 % means every allocated core was busy the whole run.
- **Memory efficiency** ``= peak RSS / requested memory``: the peak the agent measured
  (cgroup memory peak, else the largest resident set seen) over what the job asked for
  (``--mem`` per node times nodes, or ``--mem-per-cpu`` times CPUs; the allocated memory
  when no request was made). Without any memory figure the efficiency is unknown.

Both are ``None`` when their denominator is zero (a job that never ran, or asked for no
memory). A running job is shown with its elapsed time so far, but its CPU time and peak
are only known once it ends (the agent reports them in its exit), as with ``seff``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral.ops.jobs import AcctJob


@dataclass(frozen=True, slots=True)
class Efficiency:
    job_id: str
    name: str
    user: str
    account: str
    state: str
    exit_code: int | None
    signal: int
    nodes: int
    nodelist: str
    cpus: int
    elapsed_s: float
    cpu_time_s: float
    core_walltime_s: float
    cpu_efficiency: float | None  # 0..1 (can exceed 1 slightly through measurement)
    max_rss_mb: float
    req_mem_mb: float
    mem_efficiency: float | None
    finished: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "name": self.name, "user": self.user,
            "account": self.account, "state": self.state, "exit_code": self.exit_code,
            "signal": self.signal, "nodes": self.nodes, "nodelist": self.nodelist,
            "cpus": self.cpus, "elapsed_s": self.elapsed_s, "cpu_time_s": self.cpu_time_s,
            "core_walltime_s": self.core_walltime_s, "cpu_efficiency": self.cpu_efficiency,
            "max_rss_mb": self.max_rss_mb, "req_mem_mb": self.req_mem_mb,
            "mem_efficiency": self.mem_efficiency, "finished": self.finished,
        }


def efficiency(record: Mapping[str, Any] | AcctJob, now: float) -> Efficiency:
    """The ``seff`` figures of one job record (``corral.client`` shape) or ``AcctJob``."""
    j = record if isinstance(record, AcctJob) else AcctJob.from_record(record)
    elapsed = j.elapsed_s(now)
    core_wall = elapsed * j.cpus
    cpu_eff = j.cpu_time_s / core_wall if core_wall > 0 and j.finished else None
    mem_eff = j.max_rss_mb / j.req_mem_mb if j.req_mem_mb > 0 and j.finished else None
    return Efficiency(
        job_id=j.job_id, name=j.name, user=j.user, account=j.account, state=j.state,
        exit_code=j.exit_code, signal=j.signal, nodes=j.num_nodes, nodelist=j.nodelist,
        cpus=j.cpus, elapsed_s=elapsed, cpu_time_s=j.cpu_time_s, core_walltime_s=core_wall,
        cpu_efficiency=cpu_eff, max_rss_mb=j.max_rss_mb, req_mem_mb=j.req_mem_mb,
        mem_efficiency=mem_eff, finished=j.finished)


def hms(seconds: float) -> str:
    """``[D-]HH:MM:SS`` as Slurm prints durations (with hundredths under a minute)."""
    if 0 < seconds < 60 and seconds != int(seconds):
        return f"00:00:{seconds:05.2f}"
    total = int(round(max(0.0, seconds)))
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def _mem(mb: float) -> str:
    if mb >= 1024 * 1024:
        return f"{mb / 1024 / 1024:.2f} TB"
    if mb >= 1024:
        return f"{mb / 1024:.2f} GB"
    return f"{mb:.2f} MB"


def seff_lines(e: Efficiency, cluster: str = "") -> list[str]:
    """The report as ``seff`` prints it, line by line."""
    state = e.state
    if e.finished:
        state += f" (exit code {e.exit_code if e.exit_code is not None else 0})"
    per_node = e.cpus // e.nodes if e.nodes and e.cpus % e.nodes == 0 else None
    lines = [f"Job ID: {e.job_id}"]
    if cluster:
        lines.append(f"Cluster: {cluster}")
    lines += [
        f"User/Account: {e.user}/{e.account}",
        f"Job Name: {e.name}",
        f"State: {state}",
        f"Nodes: {e.nodes}" + (f" ({e.nodelist})" if e.nodelist else ""),
        (f"Cores per node: {per_node}" if per_node is not None and e.nodes > 1
         else f"Cores: {e.cpus}"),
    ]
    if e.cpu_efficiency is not None:
        lines += [f"CPU Utilized: {hms(e.cpu_time_s)}",
                  f"CPU Efficiency: {100 * e.cpu_efficiency:.2f}% of "
                  f"{hms(e.core_walltime_s)} core-walltime"]
    elif not e.finished:
        lines.append("CPU Efficiency: not known until the job ends "
                     f"({hms(e.core_walltime_s)} core-walltime so far)")
    else:
        lines.append("CPU Efficiency: unknown (the job did not run)")
    lines.append(f"Job Wall-clock time: {hms(e.elapsed_s)}")
    if e.mem_efficiency is not None:
        lines += [f"Memory Utilized: {_mem(e.max_rss_mb)}",
                  f"Memory Efficiency: {100 * e.mem_efficiency:.2f}% of {_mem(e.req_mem_mb)}"]
    elif e.finished:
        lines.append(f"Memory Utilized: {_mem(e.max_rss_mb)}")
        lines.append("Memory Efficiency: unknown (no memory was requested)")
    else:
        lines.append("Memory Efficiency: not known until the job ends")
    return lines
