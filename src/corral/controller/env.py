"""The job environment the controller sends with a launch (Slurm 22.05 names + CORRAL_*).

The agent adds what only the node knows (``SLURMD_NODENAME``, ``SLURM_CPUS_ON_NODE``, GPU
binding, ``SLURM_TASK_PID``). Reference: ``shared/compat/slurm-22.05/job_env_*.txt``.
Rules as Slurm's: the submit environment comes first (``sbatch`` exports everything by
default), then the job's variables override it; memory is ``SLURM_MEM_PER_NODE`` or
``SLURM_MEM_PER_CPU`` as requested.
"""

from __future__ import annotations

from corral.controller.records import JobRecord
from corral.core.parse.hostlist import compress


def tasks_per_node_text(counts: list[int]) -> str:
    """Slurm's compressed form: ``2(x3),1``."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        n = j - i + 1
        out.append(f"{counts[i]}(x{n})" if n > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)


_NODELISTS: dict[tuple[str, ...], str] = {}


def _nodelist(names: tuple[str, ...]) -> str:
    """``compress(names)``, remembered: most jobs land on node sets seen before."""
    got = _NODELISTS.get(names)
    if got is None:
        got = compress(list(names), sort=False)
        if len(_NODELISTS) >= 4096:
            _NODELISTS.clear()
        _NODELISTS[names] = got
    return got


def job_environment(rec: JobRecord, cluster_name: str, controller_host: str) -> dict[str, str]:
    assert rec.allocation is not None
    spec = rec.sub.spec
    alloc = rec.allocation
    names = list(alloc.node_names)
    nodelist = _nodelist(tuple(names))
    per_node_cpus: dict[str, int] = {}
    per_node_tasks: dict[str, int] = {}
    for na in alloc.nodes:
        per_node_cpus[na.node] = per_node_cpus.get(na.node, 0) + na.cpus
        per_node_tasks[na.node] = per_node_tasks.get(na.node, 0) + na.tasks
    ntasks = spec.ntasks or sum(per_node_tasks.values()) or len(names)
    env = dict(rec.sub.env)
    jid = str(rec.id)
    env.update({
        "SLURM_JOB_ID": jid,
        "SLURM_JOBID": jid,
        "SLURM_JOB_NAME": spec.name,
        "SLURM_JOB_USER": spec.user,
        "SLURM_JOB_UID": str(spec.uid),
        "SLURM_JOB_GID": str(spec.gid),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(names)),
        "SLURM_NNODES": str(len(names)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node_text([per_node_tasks[n] for n in names]),
        "SLURM_JOB_CPUS_PER_NODE": tasks_per_node_text([per_node_cpus[n] for n in names]),
        "SLURM_SUBMIT_DIR": rec.sub.workdir,
        "SLURM_SUBMIT_HOST": rec.submit_host or controller_host,
        "SLURM_JOB_PARTITION": alloc.partition,
        "SLURM_CLUSTER_NAME": cluster_name,
        "SLURM_RESTART_COUNT": str(rec.restarts),
        "SLURM_PRIO_PROCESS": "0",
        "SLURM_NODE_ALIASES": "(null)",
        "CORRAL_JOB_ID": jid,
        "CORRAL_JOB_NAME": spec.name,
        "CORRAL_JOB_NODELIST": nodelist,
        "CORRAL_JOB_NUM_NODES": str(len(names)),
        "CORRAL_NTASKS": str(ntasks),
        "CORRAL_SUBMIT_DIR": rec.sub.workdir,
        "CORRAL_JOB_PARTITION": alloc.partition,
        "CORRAL_RESTART_COUNT": str(rec.restarts),
        "CORRAL_CLUSTER_NAME": cluster_name,
    })
    if spec.cpus_per_task and (spec.cpus_per_task > 1 or "cpus_per_task" in rec.sub.extra):
        env["SLURM_CPUS_PER_TASK"] = str(spec.cpus_per_task)
        env["CORRAL_CPUS_PER_TASK"] = str(spec.cpus_per_task)
    if spec.ntasks_per_node:
        env["SLURM_NTASKS_PER_NODE"] = str(spec.ntasks_per_node)
    if spec.mem_per_cpu_mb:
        env["SLURM_MEM_PER_CPU"] = str(spec.mem_per_cpu_mb)
    elif spec.mem_per_node_mb:
        env["SLURM_MEM_PER_NODE"] = str(spec.mem_per_node_mb)
    else:
        mem = alloc.nodes[0].mem_mb if alloc.nodes else 0
        if mem:
            env["SLURM_MEM_PER_NODE"] = str(mem)
    env["CORRAL_MEM_PER_NODE_MB"] = str(alloc.nodes[0].mem_mb if alloc.nodes else 0)
    if spec.account:
        env["SLURM_JOB_ACCOUNT"] = spec.account
        env["CORRAL_JOB_ACCOUNT"] = spec.account
    if spec.qos:
        env["SLURM_JOB_QOS"] = spec.qos
    if rec.array_job_id is not None and rec.array_task_id is not None:
        env.update({
            "SLURM_ARRAY_JOB_ID": str(rec.array_job_id),
            "SLURM_ARRAY_TASK_ID": str(rec.array_task_id),
            "SLURM_ARRAY_TASK_COUNT": str(rec.array_task_count),
            "SLURM_ARRAY_TASK_MIN": str(rec.array_task_min),
            "SLURM_ARRAY_TASK_MAX": str(rec.array_task_max),
            "SLURM_ARRAY_TASK_STEP": str(_step(rec)),
            "CORRAL_ARRAY_JOB_ID": str(rec.array_job_id),
            "CORRAL_ARRAY_TASK_ID": str(rec.array_task_id),
        })
    if spec.gpus or spec.gpus_per_node or spec.gpus_per_task:
        total = sum(len(n.gpus) for n in alloc.nodes)
        env["SLURM_GPUS"] = str(total)
    if rec.time_limit_s:
        env["CORRAL_TIME_LIMIT_S"] = str(rec.time_limit_s)
    if rec.sub.extra.get("open_mode"):  # sbatch --open-mode: srun's files follow it
        env["SLURM_OPEN_MODE"] = "a" if rec.sub.extra["open_mode"] == "append" else "t"
    if rec.sub.dialect == "pbs":
        pbs_environment(rec, env, controller_host)
    elif rec.sub.dialect == "volcano":  # each replica's node (corral.frontends.volcano_run)
        from corral.controller.kube_objects import layout_text

        env["CORRAL_VC_LAYOUT"] = layout_text(rec)
    return env


# what a PBS job sees even without qsub -V (PBS sets them from the user's account)
_PBS_ACCOUNT_VARS = ("HOME", "SHELL", "LANG", "TZ")


def pbs_environment(rec: JobRecord, env: dict[str, str], server: str) -> None:
    """Add the ``PBS_*`` variables of a job submitted with ``qsub`` (``dialect == "pbs"``).

    ``PBS_NODEFILE`` is not here: the agent writes the node file (``pbs_nodefile_text``)
    on the node and names it. ``server`` is the PBS server name in job ids
    (``<seq>.<server>``): the controller's short host name, as ``qsub`` prints it.
    """
    from corral.shims.pbs_env import pbs_variables

    assert rec.allocation is not None
    for var in _PBS_ACCOUNT_VARS:
        if f"PBS_O_{var}" in env:
            env.setdefault(var, env[f"PBS_O_{var}"])
    env.setdefault("PATH", env.get("PBS_O_PATH") or "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LOGNAME", rec.sub.spec.user)
    env.setdefault("USER", rec.sub.spec.user)
    probe = dict(env)
    probe["SLURM_CPUS_ON_NODE"] = str(rec.allocation.nodes[0].cpus)
    env.update(pbs_variables(probe, server=server))


def pbs_nodefile_text(env: dict[str, str]) -> str:
    """PBS_NODEFILE's content: each allocated host once per task slot (PBS Pro's
    ``mpiprocs``, Torque's ``ppn``)."""
    from corral.shims.pbs_env import nodefile_text

    return nodefile_text(env)


def _step(rec: JobRecord) -> int:
    if rec.array_task_count <= 1:
        return 1
    span = rec.array_task_max - rec.array_task_min
    return span // (rec.array_task_count - 1) if span % (rec.array_task_count - 1) == 0 else 1
