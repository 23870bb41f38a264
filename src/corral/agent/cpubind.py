"""Per-task CPU binding of a step on one node (``srun --cpu-bind``), as Slurm's task/affinity.

Input: the job's CPUs on this node (logical CPU ids, grouped by core: ``cores`` is a list
of each allocated core's CPU ids, in core order), the node-local task index, the tasks on
this node, CPUs per task, and the ``--cpu-bind`` value. Output: the CPU set the task is
bound to (empty: no binding beyond the job's own) and the ``SLURM_CPU_BIND*`` variables.

Types (``verbose``/``quiet`` flags may precede, comma separated):
- ``none``/``no``: no per-task binding;
- ``cores`` (the default when a task needs no more than the cores there are): local task
  ``i`` gets the CPUs of cores ``i*c .. i*c+c-1`` where ``c`` = cores per task (CPUs per
  task rounded up to whole cores);
- ``threads``: local task ``i`` gets logical CPUs ``i*cpt .. i*cpt+cpt-1``;
- ``sockets``/``ldoms``: treated as ``cores`` (socket information is not passed here);
- ``map_cpu:<list>``: task ``i`` gets CPU ``list[i % len]`` (decimal or ``0x`` hex);
- ``mask_cpu:<list>``: task ``i`` gets the CPUs of hex mask ``list[i % len]``;
- ``rank``: like ``map_cpu`` over the job's CPUs in order.
Invariants: a bound set is never outside the job's CPUs on the node (CPUs named by a
map or mask that the job does not hold are dropped; a task whose set would be empty is
left unbound rather than given CPUs it may not use); tasks beyond the CPUs wrap around.
"""

from __future__ import annotations

from dataclasses import dataclass


class CpuBindError(ValueError):
    pass


@dataclass(frozen=True)
class Binding:
    cpus: tuple[int, ...]  # empty: not bound per task
    env: dict[str, str]


def split_value(value: str) -> tuple[list[str], str, str]:
    """``(words, type, list)`` of a ``--cpu-bind``/``--mem-bind`` value: ``[w,...,]type:list``
    gives the words before the type (lower case) and the type and list; a value without a
    ``:`` is all words (the type among them), type and list empty."""
    text = (value or "").strip()
    head, colon, tail = text.partition(":")
    kind = ""
    if colon:  # "[flags,]map_cpu:0,1,...": the list runs to the end of the value
        text, _, kind = head.rpartition(",")
        kind = kind.strip().lower()
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    return words, kind, tail if colon else ""


def _parse(value: str) -> tuple[str, str, bool]:
    """(type, list, verbose) of a ``--cpu-bind`` value."""
    verbose = False
    words, kind, arg = split_value(value)
    colon = bool(kind)
    for low in words:
        if low in ("v", "verbose"):
            verbose = True
        elif low in ("q", "quiet"):
            verbose = False
        elif not colon:
            kind = "no" if low == "none" else low
    if kind and kind not in ("no", "cores", "threads", "sockets", "ldoms", "rank",
                             "map_cpu", "mask_cpu", "boards"):
        raise CpuBindError(f"invalid --cpu-bind type {kind!r} (none, cores, threads, "
                           "sockets, ldoms, rank, map_cpu:<list>, mask_cpu:<list>)")
    if kind in ("map_cpu", "mask_cpu") and not arg:
        raise CpuBindError(f"--cpu-bind={kind} needs a list: {kind}:<list>")
    return kind, arg, verbose


def check(value: str) -> None:
    """Raise CpuBindError for a value ``srun`` must refuse."""
    kind, arg, _ = _parse(value)
    if kind == "map_cpu":
        _map_list(arg)
    elif kind == "mask_cpu":
        _mask_list(arg)


def _map_list(arg: str) -> list[int]:
    out = []
    for item in arg.split(","):
        item = item.strip()
        try:
            out.append(int(item, 16) if item.lower().startswith("0x") else int(item))
        except ValueError:
            raise CpuBindError(f"bad CPU id {item!r} in map_cpu list") from None
    return out


def _mask_list(arg: str) -> list[set[int]]:
    out = []
    for item in arg.split(","):
        item = item.strip()
        try:
            mask = int(item, 16)
        except ValueError:
            raise CpuBindError(f"bad CPU mask {item!r} in mask_cpu list") from None
        out.append({b for b in range(mask.bit_length()) if mask >> b & 1})
    return out


def bind_task(value: str, cores: list[tuple[int, ...]], local: int, ntasks_here: int,
              cpus_per_task: int) -> Binding:
    """Binding of local task ``local`` (see the module docstring)."""
    kind, arg, verbose = _parse(value)
    all_cpus = [c for core in cores for c in core]
    mine: list[int] = []
    cpt = max(1, cpus_per_task)
    if not all_cpus:
        kind = "no"
    if not kind:
        threads = max(1, len(cores[0])) if cores else 1
        cores_needed = -(-cpt // threads) * ntasks_here
        kind = "cores" if cores_needed <= len(cores) else "no"
        shown = "cores" if kind == "cores" else "none"
    else:
        shown = {"no": "none"}.get(kind, kind)
    if kind in ("cores", "sockets", "ldoms", "boards"):
        threads = max(1, len(cores[0]))
        per = -(-cpt // threads)
        start = (local * per) % len(cores)
        for k in range(per):
            mine.extend(cores[(start + k) % len(cores)])
    elif kind == "threads":
        start = (local * cpt) % len(all_cpus)
        mine = [all_cpus[(start + k) % len(all_cpus)] for k in range(cpt)]
    elif kind == "rank":
        mine = [all_cpus[local % len(all_cpus)]]
    elif kind == "map_cpu":
        ids = _map_list(arg)
        mine = [ids[local % len(ids)]]
    elif kind == "mask_cpu":
        masks = _mask_list(arg)
        mine = sorted(masks[local % len(masks)])
    allowed = set(all_cpus)
    bound = tuple(sorted(set(c for c in mine if c in allowed)))
    env = {"SLURM_CPU_BIND_VERBOSE": "verbose" if verbose else "quiet",
           "SLURM_CPU_BIND_TYPE": f"{shown}," if shown != "none" else "none,"}
    if bound:
        mask = sum(1 << c for c in bound)
        env["SLURM_CPU_BIND_LIST"] = hex(mask)
        env["SLURM_CPU_BIND"] = f"{env['SLURM_CPU_BIND_VERBOSE']},{shown}"
    else:
        env["SLURM_CPU_BIND_LIST"] = ""
        env["SLURM_CPU_BIND"] = f"{env['SLURM_CPU_BIND_VERBOSE']},none"
    return Binding(bound, env)


def cores_of(cpus: tuple[int, ...],
             core_cpus: list[tuple[int, ...]] | None) -> list[tuple[int, ...]]:
    """Group the job's logical CPUs by core (``core_cpus``: the node's CPU ids per core,
    from its spec; without it every CPU is its own core)."""
    if not core_cpus:
        return [(c,) for c in cpus]
    held = set(cpus)
    out = []
    for core in core_cpus:
        mine = tuple(c for c in core if c in held)
        if mine:
            out.append(mine)
    seen = {c for core in out for c in core}
    out.extend((c,) for c in cpus if c not in seen)
    return out
