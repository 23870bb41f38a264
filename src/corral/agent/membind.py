"""Per-task memory binding of a step on one node (``srun --mem-bind``), as Slurm's task/affinity.

Input: the ``--mem-bind`` value, the node-local task index, the CPUs the task runs on and
the host's NUMA nodes (each with its CPUs, from ``/sys/devices/system/node``). Output: the
NUMA nodes the task's memory comes from (empty: not bound), whether they are only
preferred, and the ``SLURM_MEM_BIND*`` variables of the task.

Types (the flags ``verbose``/``quiet``, ``prefer`` and ``sort``/``nosort`` may precede,
comma separated):
- ``none``/``no`` (the default): no binding;
- ``local``: the nodes that hold the task's CPUs;
- ``map_mem:<list>``: task ``i`` gets node ``list[i % len]`` (decimal or ``0x`` hex);
- ``mask_mem:<list>``: task ``i`` gets the nodes of hex mask ``list[i % len]``;
- ``rank``: task ``i`` gets the ``i % n``-th of the host's ``n`` nodes.
With ``prefer`` the task's first node is preferred (``MPOL_PREFERRED``: other nodes serve
when it is full); without, the nodes are all it may use (``MPOL_BIND``). ``sort`` and
``nosort`` (Slurm's zone sorting) are accepted and change nothing here.

Invariants: a binding never names a node the host lacks, nor one outside the task's
allowed memory nodes (the job's cpuset ``mems``): such nodes are dropped, and a task left
with none is not bound (as a CPU binding drops CPUs the job does not hold). The policy is
set with ``set_mempolicy(2)`` in the task's process before its exec, so the program and
everything it starts inherit it; it cannot be applied to another process afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from dataclasses import dataclass
from typing import Any

from corral.agent.cgroups import numa_nodes_of, parse_cpulist
from corral.agent.cpubind import split_value

MPOL_PREFERRED = 1
MPOL_BIND = 2
_MASK_LONGS = 16  # nodes 0..1023
_SYSCALL = {"x86_64": 238, "aarch64": 237, "riscv64": 237, "ppc64le": 261, "ppc64": 261,
            "s390x": 270, "i686": 276, "i386": 276}


class MemBindError(ValueError):
    pass


@dataclass(frozen=True)
class MemBinding:
    nodes: tuple[int, ...]  # empty: not bound
    prefer: bool
    verbose: bool
    env: dict[str, str]

    @property
    def mode(self) -> int:
        return MPOL_PREFERRED if self.prefer else MPOL_BIND

    def plan_text(self) -> str:
        """The binding as the compiled step process reads it: ``b:0,1`` / ``p:0`` / ``""``."""
        if not self.nodes:
            return ""
        return ("p:" if self.prefer else "b:") + ",".join(map(str, self.nodes))


_KINDS = ("none", "no", "local", "map_mem", "mask_mem", "rank")


def _parse(value: str) -> tuple[str, str, bool, bool, bool]:
    """(type, list, verbose, prefer, sort) of a ``--mem-bind`` value."""
    words, kind, arg = split_value(value)
    if kind:
        if kind not in ("map_mem", "mask_mem"):
            raise MemBindError(f"invalid --mem-bind argument {value!r} "
                               "(only map_mem and mask_mem take a list)")
        if not arg.strip():
            raise MemBindError(f"--mem-bind={kind} needs a list")
    verbose = prefer = sort = False
    for p in words:
        if p in ("verbose", "v"):
            verbose = True
        elif p in ("quiet", "q"):
            verbose = False
        elif p in ("prefer", "p"):
            prefer = True
        elif p in ("sort", "nosort"):
            sort = p == "sort"
        elif p in _KINDS and not kind:
            kind = p
        elif p == "help":
            raise MemBindError(help_text())
        else:
            raise MemBindError(f"invalid --mem-bind argument {p!r} (use none, "
                               "local, rank, map_mem:<list>, mask_mem:<list>; flags "
                               "verbose, quiet, prefer, sort, nosort)")
    return (kind or "none"), arg, verbose, prefer, sort


def help_text() -> str:
    return ("Memory bind options:\n"
            "    --mem-bind=         Bind memory to locality domains (ldom)\n"
            "    nosort              avoid sorting pages at startup\n"
            "    sort                sort pages at startup\n"
            "    q[uiet],            quietly bind before task runs (default)\n"
            "    v[erbose],          verbosely report binding before task runs\n"
            "    p[refer],           prefer the first node of the list, allow the others\n"
            "    no[ne]              don't bind tasks to memory (default)\n"
            "    rank                bind by task rank\n"
            "    local               bind to memory local to processor\n"
            "    map_mem:<list>      specify a memory binding for each task\n"
            "                        where <list> is <numa_id1>,<numa_id2>,...<numa_idN>\n"
            "    mask_mem:<list>     specify a memory binding mask for each tasks\n"
            "                        where <list> is <mask1>,<mask2>,...<maskN>")


def _ints(arg: str, mask: bool) -> list[set[int]]:
    out: list[set[int]] = []
    for item in arg.split(","):
        item = item.strip()
        try:
            if mask:
                bits = int(item, 16)
                if bits <= 0 or bits >> (_MASK_LONGS * 64):
                    raise ValueError
                out.append({i for i in range(bits.bit_length()) if bits >> i & 1})
            else:
                node = int(item, 16) if item.lower().startswith("0x") else int(item)
                if not 0 <= node < _MASK_LONGS * 64:
                    raise ValueError
                out.append({node})
        except ValueError:
            what = "NUMA node mask" if mask else "NUMA node"
            raise MemBindError(f"bad {what} {item!r} in --mem-bind list") from None
    return out


def check(value: str) -> None:
    """Raise MemBindError (srun's message) for a value ``srun`` must refuse."""
    kind, arg, _, _, _ = _parse(value)
    if kind in ("map_mem", "mask_mem"):
        _ints(arg, kind == "mask_mem")


def host_nodes(sys_root: str = "/sys") -> tuple[int, ...]:
    """The host's NUMA nodes that have memory (``has_memory``; ``online`` without it)."""
    base = os.path.join(sys_root, "devices/system/node")
    for name in ("has_memory", "online"):
        try:
            with open(os.path.join(base, name)) as f:
                return tuple(parse_cpulist(f.read()))
        except OSError:
            continue
    return ()


def bind_task(value: str, local: int, task_cpus: tuple[int, ...],
              allowed: tuple[int, ...], sys_root: str = "/sys") -> MemBinding:
    """Binding of local task ``local`` running on ``task_cpus``; ``allowed``: the NUMA
    nodes it may use at all (the host's, within the job's ``mems``)."""
    kind, arg, verbose, prefer, sort = _parse(value)
    want: list[int] = []
    if kind == "local":
        want = numa_nodes_of(task_cpus, sys_root) if task_cpus else []
    elif kind == "rank":
        want = [allowed[local % len(allowed)]] if allowed else []
    elif kind in ("map_mem", "mask_mem"):
        lists = _ints(arg, kind == "mask_mem")
        want = sorted(lists[local % len(lists)])
    ok = set(allowed)
    nodes = tuple(n for n in want if n in ok)
    if prefer:
        nodes = nodes[:1]
    env = task_env(kind, arg, verbose, prefer, sort)
    if nodes:
        with contextlib.suppress(OSError):
            _syscall()
    return MemBinding(nodes, prefer, verbose, env)


def task_env(kind: str, arg: str, verbose: bool, prefer: bool, sort: bool) -> dict[str, str]:
    """The ``SLURM_MEM_BIND*`` variables of a task, as slurmstepd sets them:
    ``SLURM_MEM_BIND`` is ``quiet|verbose[,prefer],<type><list>`` (``quiet,local``,
    ``quiet,map_mem:0,1``), ``_LIST`` the list as given (empty for the types without
    one), ``_PREFER`` and ``_SORT`` only with those flags."""
    shown = ("none" if kind == "no" else kind) + (":" if kind in ("map_mem", "mask_mem")
                                                   else "")
    word = "verbose" if verbose else "quiet"
    env = {"SLURM_MEM_BIND": ",".join([word] + (["prefer"] if prefer else []) + [shown + arg]),
           "SLURM_MEM_BIND_LIST": arg, "SLURM_MEM_BIND_TYPE": shown,
           "SLURM_MEM_BIND_VERBOSE": word}
    if prefer:
        env["SLURM_MEM_BIND_PREFER"] = "prefer"
    if sort:
        env["SLURM_MEM_BIND_SORT"] = "sort"
    return env


def allowed_nodes(sys_root: str = "/sys") -> tuple[int, ...]:
    """The host's memory nodes this process may use (its cpuset's ``Mems_allowed``)."""
    mine: set[int] | None = None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Mems_allowed_list:"):
                    mine = set(parse_cpulist(line.split(":", 1)[1]))
                    break
    except OSError:
        pass
    host = host_nodes(sys_root)
    return tuple(n for n in host if mine is None or n in mine)


def apply(binding: MemBinding) -> None:
    """Set the calling process's memory policy (``set_mempolicy(2)``); OSError on failure."""
    if not binding.nodes:
        return
    syscall, number = _syscall()
    mask = (ctypes.c_ulong * _MASK_LONGS)()
    for node in binding.nodes:
        mask[node // 64] |= 1 << (node % 64)
    rc = syscall(ctypes.c_long(number), ctypes.c_int(binding.mode), mask,
                 ctypes.c_ulong(_MASK_LONGS * 64 + 1))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy: {os.strerror(err)}")


_LIBC: list[tuple[Any, int]] = []


def _syscall() -> tuple[Any, int]:
    """libc's ``syscall`` and set_mempolicy's number, looked up once: ``bind_task`` does
    it in the parent, so a task's pre-exec step never loads a library after its fork."""
    if not _LIBC:
        number = _SYSCALL.get(platform.machine())
        if number is None:
            raise OSError(f"set_mempolicy: no system call number known on {platform.machine()}")
        _LIBC.append((ctypes.CDLL(None, use_errno=True).syscall, number))
    return _LIBC[0]


def report(binding: MemBinding, node: str, gid: int, local: int) -> None:
    """srun's ``verbose`` line for a task (written to fd 2: call it in the task's process,
    after its stderr is in place)."""
    if not binding.verbose:
        return
    kind = binding.env["SLURM_MEM_BIND_TYPE"].rstrip(":").upper()
    mask = sum(1 << n for n in binding.nodes)
    state = f"mask {mask:#x} set" if binding.nodes else "no binding"
    line = f"mem-bind={kind} - {node}, task {gid:2d} {local:2d} [{os.getpid()}]: {state}\n"
    with contextlib.suppress(OSError):
        os.write(2, line.encode())
