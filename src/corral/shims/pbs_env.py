"""The PBS job environment (``PBS_JOBID``, ``PBS_NODEFILE``, ``PBS_ARRAY_INDEX``...).

Derived from the ``SLURM_*`` variables every Corral job gets, for jobs submitted with
``qsub`` (``dialect == "pbs"``). ``pbs_variables`` returns the variables; the node file
(one line per task slot, PBS Pro / Torque style) is ``nodefile_text``, which the agent
writes next to the job and names in ``PBS_NODEFILE``.
"""

from __future__ import annotations

from collections.abc import Mapping


def tasks_per_node(text: str, nnodes: int) -> list[int]:
    """Slurm's ``2(x3),1`` -> ``[2, 2, 2, 1]`` (padded/cut to ``nnodes``)."""
    out: list[int] = []
    for part in (p for p in text.split(",") if p):
        count, _, rep = part.partition("(x")
        n = int(rep.rstrip(")")) if rep else 1
        out.extend([int(count)] * n)
    if not out:
        out = [1]
    while len(out) < nnodes:
        out.append(out[-1])
    return out[:nnodes] if nnodes else out


def nodefile_text(env: Mapping[str, str]) -> str:
    from corral.core.parse.hostlist import expand

    nodes = expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURMD_NODENAME") or "localhost")
    per = tasks_per_node(env.get("SLURM_TASKS_PER_NODE") or
                         env.get("SLURM_JOB_CPUS_PER_NODE") or "1", len(nodes))
    return "".join(f"{n}\n" * max(1, c) for n, c in zip(nodes, per, strict=False))


def pbs_variables(env: Mapping[str, str], *, server: str,
                  nodefile: str | None = None) -> dict[str, str]:
    jid = env.get("SLURM_JOB_ID", "0")
    aj, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    nodes = env.get("SLURM_JOB_NUM_NODES", "1")
    ncpus = env.get("SLURM_CPUS_ON_NODE") or "1"
    out = {
        "PBS_JOBID": f"{aj}[{task}].{server}" if aj and task else f"{jid}.{server}",
        "PBS_JOBNAME": env.get("SLURM_JOB_NAME", ""),
        "PBS_QUEUE": env.get("SLURM_JOB_PARTITION", ""),
        "PBS_ENVIRONMENT": "PBS_BATCH",
        "PBS_NODENUM": env.get("SLURM_NODEID", "0"),
        "PBS_TASKNUM": "1",
        "PBS_SERVER": server,
        "PBS_JOBDIR": env.get("HOME") or env.get("SLURM_SUBMIT_DIR", "/"),
        "PBS_NUM_NODES": nodes,
        "PBS_NUM_PPN": ncpus,
        "PBS_NP": env.get("SLURM_NTASKS", ncpus),
        "NCPUS": ncpus,
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", ncpus),
    }
    out.setdefault("PBS_O_QUEUE", env.get("PBS_O_QUEUE") or out["PBS_QUEUE"])
    if aj and task:
        out["PBS_ARRAY_INDEX"] = task
        out["PBS_ARRAYID"] = task
        out["PBS_ARRAY_ID"] = f"{aj}[].{server}"
    if nodefile is not None:
        out["PBS_NODEFILE"] = nodefile
    return out
