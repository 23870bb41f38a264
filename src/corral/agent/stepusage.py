"""What each running ``srun`` step of a job uses on this node now (``sstat -j JOB.STEP``).

A step's tasks are descendants of the job's supervisor here (``corral.agent.stepd`` or
the compiled step process forks them) and every task starts with ``SLURM_STEP_ID`` and
``SLURM_PROCID`` in its environment (``stepd.task_environment``), which its children
inherit. So the job's processes are grouped by those two variables, read from
``/proc/<pid>/environ`` (the environment each process was started with; the agent runs
as root, or as the jobs' user in a test cluster, so it can read it). Processes without
``SLURM_STEP_ID`` (the batch script, ``srun`` itself, the step processes) belong to no
step.

Per step: CPU seconds of its live processes (with what they already reaped, as
``agent_metrics._proc_cpu_seconds`` counts), resident memory of its biggest task (Slurm's
``MaxRSS`` is a task's), how many tasks run here and their pids. A process that vanishes
mid-read is skipped. At most ``MAX_PROCS`` processes are read per job (the agent also
bounds the reads of one heartbeat over all its jobs, ``USAGE_REPORT_MAX_PROCS``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_PROCS = 512
MAX_STEPS = 64


def _environ_ids(pid: int) -> tuple[str, str] | None:
    """(step id, task rank) from a process's starting environment, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    step = rank = None
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_STEP_ID="):
            step = item[14:].decode("ascii", "replace")
        elif item.startswith(b"SLURM_PROCID="):
            rank = item[13:].decode("ascii", "replace")
    if not step or not step.isdigit():
        return None
    return step, rank or "0"


def group_by_step(pids: Iterable[int], max_procs: int = MAX_PROCS
                  ) -> dict[str, dict[str, list[int]]]:
    """``{step id: {task rank: [pids]}}`` of the processes that belong to a step (at
    most ``max_procs`` processes read)."""
    out: dict[str, dict[str, list[int]]] = {}
    for n, pid in enumerate(sorted(pids)):
        if n >= max_procs:
            break
        ids = _environ_ids(pid)
        if ids is None:
            continue
        step, rank = ids
        if step not in out and len(out) >= MAX_STEPS:
            continue
        out.setdefault(step, {}).setdefault(rank, []).append(pid)
    return out


def step_samples(pids: Iterable[int], max_procs: int = MAX_PROCS) -> list[dict[str, Any]]:
    """One entry per step running here: ``{step_id, cpu_time_s, rss_mb, ntasks, pids}``."""
    from corral.agent.proctree import rss_bytes
    from corral.ops.agent_metrics import _proc_cpu_seconds

    out: list[dict[str, Any]] = []
    groups = group_by_step(pids, max_procs)
    for step, tasks in sorted(groups.items(), key=lambda kv: int(kv[0])):
        every = sorted(p for ps in tasks.values() for p in ps)
        top = max((rss_bytes(ps) for ps in tasks.values()), default=0)
        out.append({"step_id": step, "cpu_time_s": round(_proc_cpu_seconds(every), 3),
                    "rss_mb": round(top / 1048576, 3), "ntasks": len(tasks),
                    "pids": every[:64]})
    return out
