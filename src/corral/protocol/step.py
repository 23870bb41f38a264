"""Job steps across nodes: the launch spec and the I/O stream between ``srun`` and a node.

How a step runs (Slurm's srun/slurmstepd split):

1. ``srun`` opens a TCP listener (its *I/O address*), computes the task layout and posts
   the step to the controller (``POST /api/v1/jobs/<id>/steps`` with ``launch``).
2. The controller checks the step's nodes against the job's allocation, records the step
   and sends a ``step`` message (this ``StepLaunch``) to the agent of every step node.
3. Each agent hands it to the job's supervisor on that node, which forks a step process
   (``corral.agent.stepd``) inside the job's share of the node: its cgroup, its CPUs, its
   user. The step process connects back to srun's I/O address, authenticates with the
   step's key and runs its node's tasks.
4. Over that connection: task output and exits flow to srun; stdin and signals flow to
   the node. ``srun`` ends when every node said ``DONE``.

Frames on the I/O connection: a 9-byte header ``!BII`` (kind, task id, payload length)
then the payload. The first frame from a node is ``HELLO`` (JSON: key, node, node index);
a connection whose first frame is not a ``HELLO`` with the step's key is dropped.

Task layout (``task_layout``): ``block`` fills node 0 first up to its share, then node 1,
...; ``cyclic`` deals tasks round robin over the nodes; ``plane=N`` deals blocks of N.
Every node of the step gets at least one task when there are at least as many tasks as
nodes (Slurm's rule), and no node gets more than its cap when caps are given.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct("!BII")
MAX_PAYLOAD = 4 << 20  # a frame never carries more than 4 MiB (bounded memory per frame)

# node -> srun
HELLO = 1
STDOUT = 2
STDERR = 3
EXIT = 4  # payload: JSON {"status": waitstatus-derived exit code, "signal": n}
DONE = 5  # payload: JSON usage of the node's tasks {"cpu_time_s", "max_rss_mb", "pids"}
FAILED = 6  # payload: text: the step could not start on this node
# srun -> node
STDIN = 10  # payload: bytes for task ``task`` (0xFFFFFFFF: every task that reads stdin)
STDIN_EOF = 11
SIGNAL = 12  # payload: ASCII signal number, for every task of the node
WINCH = 13  # payload: "rows cols" (a pty step)

ALL_TASKS = 0xFFFFFFFF


def pack(kind: int, task: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(kind, task, len(payload)) + payload


class FrameReader:
    """Incremental decoder: ``feed`` bytes, get complete ``(kind, task, payload)``s."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self.buf += data
        out: list[tuple[int, int, bytes]] = []
        while len(self.buf) >= HEADER.size:
            kind, task, length = HEADER.unpack_from(self.buf)
            if length > MAX_PAYLOAD:
                raise ValueError(f"frame of {length} bytes exceeds {MAX_PAYLOAD}")
            end = HEADER.size + length
            if len(self.buf) < end:
                break
            out.append((kind, task, bytes(self.buf[HEADER.size:end])))
            del self.buf[:end]
        return out


@dataclass
class StepLaunch:
    """What every node of a step needs to run its tasks (sent by the controller)."""

    job_id: int
    restarts: int
    step_id: int
    argv: list[str]
    cwd: str
    env: dict[str, str]  # srun's environment (the tasks' base environment)
    ntasks: int
    nodes: list[str]  # the step's nodes, in order (SLURM_NODEID = index)
    tasks: list[list[int]]  # global task ids on each node (same order as ``nodes``)
    io_addr: str  # host:port of srun's I/O listener
    io_key: str  # the step's secret: first frame of every node connection
    cpus_per_task: int = 1
    cpu_bind: str = ""  # srun --cpu-bind value ("" = Slurm's default)
    distribution: str = "block"
    output: str | None = None  # per-node file patterns (None: stream to srun)
    error: str | None = None
    input: str | None = None  # "all"/None, "none", a task number, or a file pattern
    append: bool = True
    kill_on_bad_exit: bool = False
    pty: bool = False
    job_name: str = ""
    gpus_per_task: int = 0
    gpu_bind: str = ""
    mem_bind: str = ""  # srun --mem-bind (corral.agent.membind); "" = none
    extra_env: dict[str, str] = field(default_factory=dict)
    task_env: dict[str, dict[str, str]] = field(default_factory=dict)  # "task id" -> vars
    container: str = ""  # ContainerSpec text: the tasks run in that image (corral.containers)
    task_prolog: str = ""  # srun --task-prolog: run as the user before each task (its
    task_epilog: str = ""  # export/unset/print lines apply), --task-epilog after each task

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _FIELDS}

    @staticmethod
    def from_json(data: Any) -> StepLaunch:
        """Parse and check a launch (raises ValueError naming the bad field)."""
        if not isinstance(data, dict):
            raise ValueError("a step launch is a JSON object")
        d = {k: data[k] for k in _FIELDS if k in data}
        for key in ("job_id", "restarts", "step_id", "argv", "cwd", "env", "ntasks", "nodes",
                    "tasks", "io_addr", "io_key"):
            if key not in d:
                raise ValueError(f"step launch: missing field {key!r}")
        # empty only for a container step that runs its image's ENTRYPOINT and CMD
        # (srun --container-entrypoint without a command; the node checks the image has one)
        _check_str_list(d["argv"], "argv", nonempty=not _runs_entrypoint(d.get("container")))
        _check_str_list(d["nodes"], "nodes", nonempty=True)
        for key in ("env", "extra_env"):
            env = d.get(key, {})
            if not isinstance(env, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                raise ValueError(f"step launch: {key} must map strings to strings")
        for key in ("job_id", "restarts", "step_id", "ntasks", "cpus_per_task",
                    "gpus_per_task"):
            if key in d and (isinstance(d[key], bool) or not isinstance(d[key], int)
                             or not 0 <= d[key] < 1 << 31):
                raise ValueError(f"step launch: {key} must be a non-negative integer")
        tenv = d.get("task_env", {})
        if not isinstance(tenv, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) and all(
                    isinstance(a, str) and isinstance(b, str) for a, b in v.items())
                for k, v in tenv.items()):
            raise ValueError("step launch: task_env must map task ids to string maps")
        tasks = d["tasks"]
        if not isinstance(tasks, list) or len(tasks) != len(d["nodes"]) or not all(
                isinstance(t, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                            for i in t) for t in tasks):
            raise ValueError("step launch: tasks must be one list of task ids per node")
        flat = sorted(i for t in tasks for i in t)
        if flat != list(range(d["ntasks"])):
            raise ValueError("step launch: tasks must number 0..ntasks-1, each once")
        for key in ("cwd", "io_addr", "io_key", "cpu_bind", "distribution", "job_name",
                    "gpu_bind", "mem_bind", "container", "task_prolog", "task_epilog"):
            if key in d and not isinstance(d[key], str):
                raise ValueError(f"step launch: {key} must be a string")
        if len(d.get("mem_bind", "")) > 4096:
            raise ValueError("step launch: mem_bind is longer than 4096 characters")
        for key in ("task_prolog", "task_epilog"):
            if d.get(key) and (not d[key].startswith("/") or "\0" in d[key]):
                raise ValueError(f"step launch: {key} must be an absolute path")
        for key in ("output", "error", "input"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise ValueError(f"step launch: {key} must be a string or null")
        return StepLaunch(**d)

    @property
    def tasks_per_node(self) -> list[int]:
        return [len(t) for t in self.tasks]


_FIELDS = tuple(StepLaunch.__dataclass_fields__)


def _runs_entrypoint(container: Any) -> bool:
    """The step's container spec text asks for the image's ENTRYPOINT."""
    try:
        spec = json.loads(container) if isinstance(container, str) and container else {}
    except ValueError:
        return False
    return isinstance(spec, dict) and spec.get("entrypoint") is True


def _check_str_list(value: Any, name: str, *, nonempty: bool = False) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"step launch: {name} must be a list of strings")
    if nonempty and not value:
        raise ValueError(f"step launch: {name} must not be empty")


def task_layout(ntasks: int, nnodes: int, distribution: str = "block",
                caps: list[int] | None = None) -> list[list[int]]:
    """Global task ids per node for ``ntasks`` over ``nnodes`` (see the module docstring).

    ``caps``: the most tasks each node may take (``--ntasks-per-node`` or the node's
    CPUs / cpus-per-task); None: no cap. Raises ValueError when the tasks do not fit."""
    if ntasks < 1 or nnodes < 1:
        raise ValueError("a step needs at least one task and one node")
    nnodes = min(nnodes, ntasks)
    limit = list(caps[:nnodes]) if caps else [ntasks] * nnodes
    if sum(limit) < ntasks:
        raise ValueError(f"{ntasks} tasks do not fit on {nnodes} nodes "
                         f"(at most {sum(limit)})")
    kind, _, arg = distribution.partition("=")
    kind = kind.split(":", 1)[0].split(",", 1)[0] or "block"
    out: list[list[int]] = [[] for _ in range(nnodes)]
    if kind == "cyclic":
        task, node = 0, 0
        while task < ntasks:
            if len(out[node]) < limit[node]:
                out[node].append(task)
                task += 1
            node = (node + 1) % nnodes
        return out
    if kind == "plane":
        size = int(arg) if arg.isdigit() and int(arg) > 0 else 1
        task, node = 0, 0
        while task < ntasks:
            room = limit[node] - len(out[node])
            for _ in range(min(size, room, ntasks - task)):
                out[node].append(task)
                task += 1
            node = (node + 1) % nnodes
        return out
    if kind == "arbitrary":
        raise ValueError("-m arbitrary (tasks placed by SLURM_HOSTFILE) is not supported "
                         "(block, cyclic, plane=N)")
    if kind not in ("block", "*"):
        raise ValueError(f"unknown distribution {distribution!r} (block, cyclic, plane=N)")
    # block: every node one task first (so none stays empty), then fill in node order,
    # spread as evenly as the caps allow (Slurm's block layout of -n over -N)
    counts = [1] * nnodes
    left = ntasks - nnodes
    base, extra = divmod(ntasks, nnodes)
    for i in range(nnodes):
        want = base + (1 if i < extra else 0) - 1
        take = min(want, limit[i] - 1, left)
        counts[i] += take
        left -= take
    i = 0
    while left > 0:
        room = limit[i] - counts[i]
        if room > 0:
            take = min(room, left)
            counts[i] += take
            left -= take
        i += 1
    task = 0
    for i, c in enumerate(counts):
        out[i] = list(range(task, task + c))
        task += c
    return out


def expand_values(pattern: str, values: dict[str, str]) -> str:
    """Expand srun's file-name pattern letters (``%j %J %s %t %n %N %A %a %u %x``,
    ``%%``; a width such as ``%4t`` zero-pads numbers; an unknown letter stays as
    written) from ``values`` (letter -> text)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch != "%" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        j = i + 1
        while j < n and pattern[j].isascii() and pattern[j].isdigit():
            j += 1
        if j >= n:
            out.append(pattern[i:])
            break
        key = pattern[j]
        if key == "%":
            out.append("%")
        elif key in values:
            v = values[key]
            width = min(int(pattern[i + 1:j]), 10) if j > i + 1 else 0
            out.append(v.zfill(width) if width and v.isdigit() else v)
        else:
            out.append(pattern[i:j + 1])
        i = j + 1
    return "".join(out)


def encode_json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
