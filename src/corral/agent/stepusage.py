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

The batch script's own share (``batch_sample``, the ``.batch`` row of ``sstat``): as in
Slurm, where a step's tasks run in the step's cgroup and not the batch step's, the
``.batch`` figures count only the batch script and what it started outside any step:
the processes below the batch process, and those started with the job's
``SLURM_JOB_ID`` that the supervisor adopted (a daemonized child), less every process of
a step (its ``SLURM_STEP_ID``). The step processes the supervisor forks (no job
environment) are not the batch script's either. ``srun`` itself is (Slurm runs it in the
batch step). A step that ``srun`` ran as its own children (its local launch) leaves its
tasks' CPU in ``srun``'s (and then the shell's) reaped time once they end: the
controller's side takes the step's recorded CPU off again (``corral.shims.sstat``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corral.agent.proctree import descendants

MAX_PROCS = 512
MAX_STEPS = 64


def _environ_ids(pid: int) -> tuple[str | None, str | None, str | None] | None:
    """(job id, step id, task rank) from a process's starting environment (each None
    when unset); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    job = step = rank = None
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_STEP_ID="):
            step = item[14:].decode("ascii", "replace")
        elif item.startswith(b"SLURM_PROCID="):
            rank = item[13:].decode("ascii", "replace")
        elif item.startswith(b"SLURM_JOB_ID="):
            job = item[13:].decode("ascii", "replace")
    return job, step, rank


def split_processes(pids: Iterable[int], max_procs: int = MAX_PROCS, *, job_id: int = 0,
                    batch_pid: int = 0) -> tuple[dict[str, dict[str, list[int]]], list[int]]:
    """``({step id: {task rank: [pids]}}, batch pids)``: the processes of each step, and
    (given the job's id and its batch process) those of the batch script (the module
    docstring). At most ``max_procs`` environments are read; a process past that bound,
    below the batch process, counts as the batch script's."""
    below = set(descendants(batch_pid)) | {batch_pid} if batch_pid else set()
    steps: dict[str, dict[str, list[int]]] = {}
    batch: list[int] = []
    for n, pid in enumerate(sorted(pids)):
        if n >= max_procs:
            if pid in below:
                batch.append(pid)
            continue
        ids = _environ_ids(pid)
        if ids is None:
            continue
        job, step, rank = ids
        if step and step.isdigit():
            if step not in steps and len(steps) >= MAX_STEPS:
                continue
            steps.setdefault(step, {}).setdefault(rank or "0", []).append(pid)
        elif step is None and (pid in below or (job_id and job == str(job_id))):
            batch.append(pid)
    return steps, batch


def group_by_step(pids: Iterable[int], max_procs: int = MAX_PROCS
                  ) -> dict[str, dict[str, list[int]]]:
    """``{step id: {task rank: [pids]}}`` of the processes that belong to a step (at
    most ``max_procs`` processes read)."""
    return split_processes(pids, max_procs)[0]


def batch_sample(pids: list[int]) -> dict[str, Any]:
    """The batch script's figures (``split_processes``' batch pids): CPU seconds (with
    what they reaped), resident memory (the sum: one task), pids."""
    from corral.agent.proctree import rss_bytes
    from corral.ops.agent_metrics import _proc_cpu_seconds

    every = sorted(pids)
    return {"cpu_time_s": round(_proc_cpu_seconds(every), 3),
            "rss_mb": round(rss_bytes(every) / 1048576, 3), "pids": every[:64]}


def step_samples(pids: Iterable[int], max_procs: int = MAX_PROCS, *,
                 groups: dict[str, dict[str, list[int]]] | None = None
                 ) -> list[dict[str, Any]]:
    """One entry per step running here: ``{step_id, cpu_time_s, rss_mb, ntasks, pids}``
    (``groups``: ``split_processes``' steps, when read already)."""
    from corral.agent.proctree import rss_bytes
    from corral.ops.agent_metrics import _proc_cpu_seconds

    out: list[dict[str, Any]] = []
    if groups is None:
        groups = group_by_step(pids, max_procs)
    for step, tasks in sorted(groups.items(), key=lambda kv: int(kv[0])):
        every = sorted(p for ps in tasks.values() for p in ps)
        top = max((rss_bytes(ps) for ps in tasks.values()), default=0)
        out.append({"step_id": step, "cpu_time_s": round(_proc_cpu_seconds(every), 3),
                    "rss_mb": round(top / 1048576, 3), "ntasks": len(tasks),
                    "pids": every[:64]})
    return out
