"""What the controller asks an agent to run, and what the agent reports back.

``LaunchRequest`` carries everything needed to start a batch job (or a step) on this node:
identity, script, environment, output patterns, the exact allocation on this node, and the
limits to enforce. ``JobExit`` is the final report. Both travel as JSON (``to_json``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LaunchRequest:
    job_id: int
    name: str
    user: str
    uid: int
    gid: int
    workdir: str
    script: str | None = None  # batch script text; run under its shebang interpreter
    argv: tuple[str, ...] = ()  # or a command line (when there is no script)
    # submit env + SLURM_*/CORRAL_* from the controller
    env: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None  # pattern, expanded by the agent (%j %x %u %A %a %N %n %t %%)
    stderr: str | None = None  # None: same as stdout
    stdin: str | None = None
    open_mode: str = "truncate"
    cores: tuple[int, ...] = ()  # allocated core ids on this node (core numbering of NodeSpec)
    cpus: tuple[int, ...] = ()  # logical CPU ids to pin (derived from cores by the controller)
    mem_mb: int = 0  # memory limit on this node (0: none)
    gpus: tuple[int, ...] = ()  # GPU indices for CUDA_VISIBLE_DEVICES
    time_limit_s: int | None = None
    kill_grace_s: int = 30  # KillWait: SIGTERM, then SIGKILL after this
    signal: str | None = None  # "[B:]SIG@secs": warning signal before the time limit
    tasks: int = 1
    array_job_id: int | None = None
    array_task_id: int | None = None
    nodes: tuple[str, ...] = ()  # all nodes of the job (for SLURM_JOB_NODELIST etc.)
    node_index: int = 0
    restarts: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    max_pids: int = 0  # pids limit of the job's cgroup (0: none)
    # device files the job may not open: this node's GPUs that are not the job's (set by
    # the agent from its own GPU list; ``corral.agent.devices``)
    hidden_devices: tuple[str, ...] = ()
    max_output_mb: int = 0  # [cgroup] max_output_mb: output/error file size cap (0: none)
    # Slurm's cgroup.conf memory knobs ([cgroup] of corral.toml; ``memory_limits_mb``)
    constrain_ram: bool = True  # ConstrainRAMSpace: mem_mb is enforced (else no RAM limit)
    min_ram_mb: int = 30  # MinRAMSpace: the lowest limit a job gets
    allowed_ram_pct: float = 100.0  # AllowedRAMSpace: the limit in percent of mem_mb
    constrain_swap: bool = False  # ConstrainSwapSpace: RAM + swap limited as well
    allowed_swap_pct: float = 0.0  # AllowedSwapSpace: swap on top, in percent of mem_mb
    # [scripts] of corral.toml (``corral.agent.jobscripts``): paths on this node, "" none
    prolog: str = ""  # as root before the job starts here; failure: requeue, node drained
    epilog: str = ""  # as root after the job ended here; failure: node drained
    task_prolog: str = ""  # as the user before the batch script (export/unset/print)
    task_epilog: str = ""  # as the user after the batch script
    script_timeout_s: int = 0  # PrologEpilogTimeout (0: none)
    # the prolog's and epilog's environment, from the controller's record (never from the
    # user's submit environment): SLURM_JOB_ID, SLURM_JOB_USER, ... (``script_environment``)
    script_env: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # not dataclasses.asdict: this is on the launch hot path and asdict deep-copies
        out = {name: getattr(self, name) for name in _LAUNCH_FIELDS}
        out["env"] = dict(self.env)
        out["extra"] = dict(self.extra)
        out["script_env"] = dict(self.script_env)
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> LaunchRequest:
        d = dict(data)
        for key in ("argv", "cores", "cpus", "gpus", "nodes", "hidden_devices"):
            d[key] = tuple(d.get(key) or ())
        return LaunchRequest(**d)


_LAUNCH_FIELDS = tuple(f.name for f in dataclasses.fields(LaunchRequest))


def memory_limits_mb(req: LaunchRequest) -> tuple[int, int]:
    """The job's (RAM limit, RAM + swap limit) in MB on this node, 0 meaning none, from its
    ``mem_mb`` and Slurm's knobs: RAM ``max(MinRAMSpace, mem × AllowedRAMSpace %)`` when
    ConstrainRAMSpace; RAM + swap that plus ``mem × AllowedSwapSpace %`` when
    ConstrainSwapSpace (with RAM unconstrained, RAM alone may then use all of it, as
    Slurm does on cgroup v1). A job without ``mem_mb`` gets no limit."""
    if req.mem_mb <= 0 or not (req.constrain_ram or req.constrain_swap):
        return 0, 0
    ram = max(req.min_ram_mb, math.ceil(req.mem_mb * req.allowed_ram_pct / 100))
    total = 0
    if req.constrain_swap:
        total = ram + math.ceil(req.mem_mb * req.allowed_swap_pct / 100)
    return (ram if req.constrain_ram else total), total


@dataclass(frozen=True)
class JobExit:
    """Final state of a job on this node. ``state`` is a JobState value name."""

    job_id: int
    state: str  # COMPLETED FAILED TIMEOUT CANCELLED OUT_OF_MEMORY NODE_FAIL
    exit_code: int = 0  # process exit status (0-255)
    signal: int = 0  # terminating signal, 0 if none
    start_time: float = 0.0
    end_time: float = 0.0
    cpu_time_s: float = 0.0
    max_rss_mb: float = 0.0
    reason: str = ""
    stdout_path: str = ""  # the expanded output file names (absolute), "" if none was opened
    stderr_path: str = ""
    restarts: int = 0  # LaunchRequest.restarts of the run this exit belongs to
    # "prolog" or "epilog" when that program failed on this node (the controller drains the
    # node with Slurm's "Prolog error"/"Epilog error"; a prolog failure requeues the job)
    script_failure: str = ""
    script_message: str = ""  # why: its exit status or timeout, and its last output line

    @property
    def exit_code_text(self) -> str:
        """Slurm's ``ExitCode=code:signal`` form."""
        return f"{self.exit_code}:{self.signal}"

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _EXIT_FIELDS}

    @staticmethod
    def from_json(data: dict[str, Any]) -> JobExit:
        return JobExit(**{k: v for k, v in data.items() if k in _EXIT_FIELDS})


_EXIT_FIELDS = tuple(f.name for f in dataclasses.fields(JobExit))
