"""What a launch derives from a ``LaunchRequest`` on this node, as Slurm's slurmstepd does.

- ``output_paths``: stdout/stderr file names with Slurm's filename patterns expanded
  (``%j %x %u %A %a %N %n %t %s %J %%``, zero padding as in ``%4j``; a pattern containing
  a backslash is taken literally minus the backslashes), relative to the working
  directory; the default is ``slurm-%j.out`` (``slurm-%A_%a.out`` for array tasks).
- ``job_environment``: the request's environment (submit env + ``SLURM_*``/``CORRAL_*``
  from the controller) plus what only the node knows: ``SLURMD_NODENAME``,
  ``SLURM_CPUS_ON_NODE``, ``SLURM_TASK_PID`` (set in the job process), GPU binding
  (``CUDA_VISIBLE_DEVICES``, ``GPU_DEVICE_ORDINAL``, ``SLURM_JOB_GPUS``,
  ``SLURM_GPUS_ON_NODE``, and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless set, so CUDA numbers
  devices as NVML does), and, only where the controller did not send them, the job
  identity variables a Slurm batch job always sees (compare
  ``shared/compat/slurm-22.05/job_env_*.txt``).
- ``parse_warning_signal``: ``--signal=[{R|B}:]SIG[@secs]`` (default 60 s).
- ``script_command``: the interpreter line of a batch script (``#!``), ``/bin/sh`` without.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from corral.agent.launch import LaunchRequest
from corral.agent.proctree import signal_number

NO_VAL = 4294967294  # what Slurm prints for %a of a job that is not an array task


def expand_pattern(pattern: str, req: LaunchRequest, node_name: str) -> str:
    """Expand one Slurm filename pattern for ``req`` running on ``node_name``."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    array_job = req.array_job_id if req.array_job_id is not None else req.job_id
    array_task = req.array_task_id if req.array_task_id is not None else NO_VAL
    values: dict[str, str | int] = {
        "j": req.job_id,
        "J": f"{req.job_id}.batch",
        "s": "batch",
        "x": req.name,
        "u": req.user,
        "A": array_job,
        "a": array_task,
        "N": node_name,
        "n": req.node_index,
        "t": 0,
    }
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        j = i + 1
        while j < n and pattern[j].isdigit():
            j += 1
        if j >= n:  # trailing '%' or '%<digits>': keep as written
            out.append(pattern[i:])
            break
        key, width = pattern[j], pattern[i + 1 : j]
        if key == "%":
            out.append("%")
        elif key in values:
            val = values[key]
            if isinstance(val, int) and width:
                out.append(str(val).zfill(min(int(width), 10)))
            else:
                out.append(str(val))
        else:  # unknown letter: Slurm leaves it alone
            out.append(pattern[i : j + 1])
        i = j + 1
    return "".join(out)


def output_paths(req: LaunchRequest, node_name: str) -> tuple[str, str]:
    """Absolute stdout and stderr paths of a batch job (equal when they share a file)."""
    if req.stdout:
        out_pat = req.stdout
    elif req.array_task_id is not None:
        out_pat = "slurm-%A_%a.out"
    else:
        out_pat = "slurm-%j.out"
    out = os.path.join(req.workdir, expand_pattern(out_pat, req, node_name))
    err = out
    if req.stderr:
        err = os.path.join(req.workdir, expand_pattern(req.stderr, req, node_name))
    return os.path.normpath(out), os.path.normpath(err)


def input_path(req: LaunchRequest, node_name: str) -> str:
    """The batch script's stdin: the expanded ``--input`` pattern, or /dev/null."""
    if not req.stdin:
        return "/dev/null"
    return os.path.normpath(os.path.join(req.workdir, expand_pattern(req.stdin, req, node_name)))


_cpus_online: list[str] = []


def _cpu_count() -> str:
    """``os.cpu_count()`` as text, read once per process (it reads a /sys file)."""
    if not _cpus_online:
        _cpus_online.append(str(os.cpu_count() or 1))
    return _cpus_online[0]


def job_environment(req: LaunchRequest, node_name: str) -> dict[str, str]:
    """The environment of the batch script (``SLURM_TASK_PID`` is added in the job itself)."""
    env = dict(req.env)
    defaults = {
        "SLURM_JOB_ID": str(req.job_id),
        "SLURM_JOBID": str(req.job_id),
        "SLURM_JOB_NAME": req.name,
        "SLURM_JOB_USER": req.user,
        "SLURM_JOB_UID": str(req.uid),
        "SLURM_JOB_GID": str(req.gid),
        "SLURM_SUBMIT_DIR": req.workdir,
        "SLURM_NODEID": str(req.node_index),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0",
        "SLURM_PRIO_PROCESS": "0",
        "SLURM_TOPOLOGY_ADDR": node_name,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "ENVIRONMENT": "BATCH",
        "CORRAL_JOB_ID": str(req.job_id),
    }
    if req.nodes:
        nodelist = ",".join(req.nodes)
        defaults.update(SLURM_JOB_NODELIST=nodelist, SLURM_NODELIST=nodelist,
                        SLURM_JOB_NUM_NODES=str(len(req.nodes)), SLURM_NNODES=str(len(req.nodes)))
    if req.array_job_id is not None and req.array_task_id is not None:
        defaults.update(SLURM_ARRAY_JOB_ID=str(req.array_job_id),
                        SLURM_ARRAY_TASK_ID=str(req.array_task_id))
    for key, val in defaults.items():
        env.setdefault(key, val)
    env["SLURMD_NODENAME"] = node_name
    env["CORRAL_NODE_NAME"] = node_name
    if req.task_prolog or req.task_epilog:  # srun: the agents run the steps' tasks, so
        env["CORRAL_TASK_SCRIPTS"] = "1"  # the cluster's TaskProlog/TaskEpilog run too
    if req.cpus:
        env["SLURM_CPUS_ON_NODE"] = str(len(req.cpus))
    else:
        env.setdefault("SLURM_CPUS_ON_NODE", _cpu_count())
    if req.gpus:
        ids = ",".join(str(g) for g in req.gpus)
        env["CUDA_VISIBLE_DEVICES"] = ids
        env["GPU_DEVICE_ORDINAL"] = ids
        env["SLURM_JOB_GPUS"] = ids
        env["SLURM_GPUS_ON_NODE"] = str(len(req.gpus))
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbering = NVML numbering
    return env


@dataclass(frozen=True)
class WarningSignal:
    signum: int
    before_s: int
    batch_only: bool  # B: only the batch shell; otherwise every job process except it


def parse_warning_signal(text: str) -> WarningSignal:
    """Parse ``[{R|B}:]SIG[@secs]`` as sbatch's ``--signal``. Raises ValueError."""
    spec = text.strip()
    flags = ""
    if ":" in spec:
        flags, spec = spec.split(":", 1)
        if not flags or set(flags.upper()) - {"B", "R"}:
            raise ValueError(f"invalid --signal flags {flags!r} in {text!r} (use B: or R:)")
    sig_text, _, secs_text = spec.partition("@")
    try:
        signum = signal_number(sig_text)
        before_s = int(secs_text) if secs_text else 60
    except ValueError as exc:
        raise ValueError(f"invalid --signal specification {text!r}: {exc}") from None
    if before_s < 0 or before_s > 65535:
        raise ValueError(f"invalid --signal time in {text!r}: 0..65535 seconds")
    return WarningSignal(signum, before_s, "B" in flags.upper())


def script_command(script: str, script_path: str) -> list[str]:
    """argv that runs ``script`` (stored at ``script_path``) under its ``#!`` interpreter."""
    first = script.split("\n", 1)[0]
    if first.startswith("#!"):
        parts = first[2:].strip().split(None, 1)  # the kernel passes one optional argument
        if parts:
            return [parts[0], *parts[1:], script_path]
    return ["/bin/sh", script_path]


def argv_text(argv: list[str]) -> str:
    return shlex.join(argv)
