"""PBS resource requests (``qsub -l``) to the job model's shape.

``-l`` takes ``name=value[,name=value...]``; later values of a name replace earlier ones
(the command line beats ``#PBS`` lines). The names that shape the job:

- ``select=[N:]chunk[+[N:]chunk...]`` (PBS Pro), chunk = ``res=value[:res=value...]`` with
  ``ncpus``, ``mem``, ``ngpus``, ``mpiprocs``, ``host``, ``vnode`` and boolean features
  (``avx512=True``). One chunk kind becomes ``ntasks = N * mpiprocs`` tasks of
  ``ncpus / mpiprocs`` CPUs; several kinds (``+``) become one ``TaskGroup`` each.
  ``place=`` decides how chunks share nodes: ``free`` (default: anywhere, 1..N nodes),
  ``pack`` (one node), ``scatter``/``vscatter`` (one chunk per node); ``excl``/``exclhost``
  make the job exclusive.
- ``nodes=N[:ppn=P][:gpus=G][:feature...][+...]`` (Torque): N whole nodes with P tasks each;
  a host name instead of N asks for that host.
- ``walltime`` (``[[H:]M:]S``, a bare number is SECONDS), ``mem`` (a bare number is BYTES;
  ``kb``/``mb``/``gb``...), ``ncpus``, ``ngpus``, ``pmem``/``pvmem`` (per process).

Everything else is kept as ``extra["pbs_l_<name>"]``. Bad values raise ``ValueError`` naming
the resource; ``pbs_options`` turns that into qsub's message.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from corral.core.model.job import TaskGroup
from corral.core.parse.errors import ParseError
from corral.core.parse.memory import parse_pbs_size_mb
from corral.core.parse.timefmt import parse_pbs_walltime_s

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_GPU_TYPE_KEYS = ("gpu_type", "gputype", "gpu_model", "gpu")


class ResourceError(ValueError):
    def __init__(self, resource: str, reason: str) -> None:
        super().__init__(f"{resource}: {reason}")
        self.resource = resource
        self.reason = reason


def split_resource_list(text: str, *, join_bare: bool = False) -> list[tuple[str, str]]:
    """``"select=1:ncpus=2,walltime=1:00:00"`` -> ``[("select", "1:ncpus=2"), ...]``.

    Commas inside quotes do not split. With ``join_bare`` (``-W``) an item without ``=``
    continues the previous value: ``depend=afterok:1,afterany:2`` is one attribute.
    Raises ``ValueError`` on a malformed item.
    """
    items: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise ValueError(f"unmatched quote in {text!r}")
    items.append("".join(cur))
    out: list[tuple[str, str]] = []
    for item in items:
        item = item.strip()
        if not item:
            raise ValueError(f"empty resource in {text!r}")
        if join_bare and out and "=" not in item:
            out[-1] = (out[-1][0], f"{out[-1][1]},{item}")
            continue
        name, eq, value = item.partition("=")
        name = name.strip()
        if not _NAME.match(name):
            raise ValueError(f"bad resource name {name!r}")
        out.append((name.lower(), value.strip() if eq else ""))
    return out


@dataclass
class Shape:
    """The job-size fields a resource request decides (``None``: not decided)."""

    nodes_min: int | None = None
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    gpus: int = 0
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    gpu_type: str | None = None
    time_limit_s: int | None = None
    exclusive: bool = False
    features: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    task_groups: tuple[TaskGroup, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)


def _int(resource: str, value: str, minimum: int = 0) -> int:
    v = value.strip()
    if not v.isdigit() or int(v) < minimum:
        raise ResourceError(resource, f"{value!r} is not a whole number >= {minimum}")
    return int(v)


def _mem_mb(resource: str, value: str) -> int:
    try:
        return parse_pbs_size_mb(value)
    except ParseError:
        raise ResourceError(resource, f"{value!r} is not a size (bytes, or kb/mb/gb/tb)") from None


@dataclass
class Chunk:
    count: int = 1
    ncpus: int = 1
    mem_mb: int | None = None
    ngpus: int = 0
    mpiprocs: int = 1
    gpu_type: str | None = None
    host: str | None = None
    features: list[str] = field(default_factory=list)
    other: dict[str, str] = field(default_factory=dict)


def parse_select(value: str) -> list[Chunk]:
    """``"2:ncpus=8:mem=4gb+1:ncpus=1"`` -> two ``Chunk`` kinds."""
    if not value.strip():
        raise ResourceError("select", "empty select")
    chunks: list[Chunk] = []
    for spec in value.split("+"):
        parts = [p.strip() for p in spec.split(":")]
        chunk = Chunk()
        if parts and parts[0].isdigit():
            chunk.count = _int("select", parts[0], 1)
            parts = parts[1:]
        for part in parts:
            name, eq, v = part.partition("=")
            name = name.lower()
            if not eq or not _NAME.match(name):
                raise ResourceError("select", f"chunk item {part!r} is not name=value")
            if name == "ncpus":
                chunk.ncpus = _int("select", v, 0)
            elif name in ("mem", "vmem"):
                if name == "mem":
                    chunk.mem_mb = _mem_mb("select", v)
                else:
                    chunk.other[name] = v
            elif name in ("ngpus", "gpus", "naccelerators"):
                chunk.ngpus = _int("select", v, 0)
            elif name == "mpiprocs":
                chunk.mpiprocs = _int("select", v, 1)
            elif name in ("host", "vnode"):
                chunk.host = v
            elif name in _GPU_TYPE_KEYS:
                chunk.gpu_type = v
            elif v.lower() == "true":
                chunk.features.append(name)
            else:
                chunk.other[name] = v
        chunks.append(chunk)
    return chunks


def _apply_select(shape: Shape, chunks: list[Chunk], place: str) -> None:
    arrangement = place.split(":")[0].lower() if place else "free"
    one_per_node = arrangement in ("scatter", "vscatter")
    for c in chunks:
        shape.features.extend(c.features)
        if c.host:
            shape.hosts.append(c.host)
        for k, v in c.other.items():
            shape.extra[f"pbs_select_{k}"] = v
        if c.gpu_type:
            shape.gpu_type = c.gpu_type
    total_chunks = sum(c.count for c in chunks)
    if len(chunks) > 1:  # several chunk kinds: a heterogeneous gang
        groups = []
        for i, c in enumerate(chunks):
            groups.append(TaskGroup(
                name=f"chunk{i}", replicas=c.count, cpus_per_task=max(1, c.ncpus),
                mem_per_task_mb=c.mem_mb or 0, gpus_per_task=c.ngpus, gpu_type=c.gpu_type,
            ))
        shape.task_groups = tuple(groups)
        shape.ntasks = total_chunks
        shape.nodes_min = total_chunks if one_per_node else 1
        shape.nodes_max = 1 if arrangement == "pack" else total_chunks
        return
    c = chunks[0]
    procs = max(1, c.mpiprocs)
    shape.ntasks = c.count * procs
    shape.cpus_per_task = max(1, c.ncpus // procs)
    if c.count == 1 or one_per_node:
        shape.nodes_min = c.count if one_per_node else 1
        shape.nodes_max = c.count if one_per_node else None
        if one_per_node:
            shape.ntasks_per_node = procs
        shape.mem_per_node_mb = c.mem_mb
        shape.gpus_per_node = c.ngpus
    else:
        shape.nodes_min = 1
        shape.nodes_max = 1 if arrangement == "pack" else c.count
        if c.mem_mb is not None:
            if arrangement == "pack":
                shape.mem_per_node_mb = c.mem_mb * c.count
            else:
                shape.mem_per_cpu_mb = math.ceil(c.mem_mb / max(1, c.ncpus))
        if c.ngpus:
            if c.ngpus % procs == 0:
                shape.gpus_per_task = c.ngpus // procs
            else:
                shape.gpus = c.ngpus * c.count
    if shape.nodes_max == shape.nodes_min:
        shape.nodes_max = None


def _apply_nodes(shape: Shape, value: str) -> None:
    total = 0
    ppn_max = 1
    gpus_max = 0
    for spec in value.split("+"):
        parts = [p.strip() for p in spec.split(":") if p.strip()]
        if not parts:
            raise ResourceError("nodes", f"empty node spec in {value!r}")
        head, rest = parts[0], parts[1:]
        if head.isdigit():
            count = _int("nodes", head, 1)
        else:
            shape.hosts.append(head)
            count = 1
        total += count
        for part in rest:
            name, eq, v = part.partition("=")
            name = name.lower()
            if eq and name == "ppn":
                ppn_max = max(ppn_max, _int("nodes", v, 1))
            elif eq and name == "gpus":
                gpus_max = max(gpus_max, _int("nodes", v, 0))
            elif eq:
                shape.extra[f"pbs_nodes_{name}"] = v
            else:
                shape.features.append(part)
    shape.nodes_min = total
    shape.nodes_max = None
    shape.ntasks_per_node = ppn_max
    shape.ntasks = total * ppn_max
    shape.cpus_per_task = 1
    shape.gpus_per_node = gpus_max


def resources_to_shape(resources: dict[str, str]) -> Shape:
    """Interpret a merged ``-l`` dictionary (names lower-case)."""
    shape = Shape()
    place = resources.get("place", "")
    if place:
        parts = [p.lower() for p in place.split(":")]
        if parts[0] not in ("free", "pack", "scatter", "vscatter", "excl", "shared",
                            "exclhost"):
            raise ResourceError("place", f"unknown arrangement {parts[0]!r}")
        shape.exclusive = any(p in ("excl", "exclhost") for p in parts)
    if "select" in resources:
        _apply_select(shape, parse_select(resources["select"]), place)
    elif "nodes" in resources:
        _apply_nodes(shape, resources["nodes"])
    for name, value in resources.items():
        if name in ("select", "nodes", "place"):
            continue
        if name == "walltime":
            try:
                shape.time_limit_s = parse_pbs_walltime_s(value)
            except ParseError:
                raise ResourceError("walltime", f"{value!r} is not [[H:]M:]S") from None
        elif name == "mem":
            mb = _mem_mb("mem", value)
            if "select" not in resources:  # job-wide total; select chunks say it better
                nodes = shape.nodes_min or 1
                shape.mem_per_node_mb = math.ceil(mb / nodes)
            else:
                shape.extra["pbs_l_mem"] = value
        elif name in ("pmem", "pvmem"):
            if name == "pmem":
                shape.mem_per_cpu_mb = _mem_mb(name, value)
            else:
                shape.extra["pbs_l_pvmem"] = value
        elif name == "ncpus":
            n = _int("ncpus", value, 1)
            if "select" not in resources and "nodes" not in resources:
                shape.cpus_per_task = n
        elif name in ("ngpus", "gpus", "naccelerators"):
            n = _int(name, value, 0)
            if "select" not in resources:
                shape.gpus_per_node = n
        elif name in _GPU_TYPE_KEYS:
            shape.gpu_type = value
        else:
            shape.extra[f"pbs_l_{name}"] = value
    return shape
