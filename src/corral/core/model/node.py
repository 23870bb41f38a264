"""Nodes: static hardware description (``NodeSpec``) and the node record (``Node``).

Core numbering: a node has ``sockets * cores_per_socket`` physical cores numbered from 0,
socket-major (core ``c`` sits on socket ``c // cores_per_socket``). The unit of CPU
allocation is the core (``select/cons_tres`` with ``CR_Core_Memory``); a core provides
``threads_per_core`` logical CPUs, so a node's CPU count is cores × threads.
``core_cpus[c]`` lists the logical CPU ids (as the OS numbers them) of core ``c``: that is
what the agent pins. NUMA domains and GPU affinity refer to core ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from corral.core.model.resources import Resources


class NodeState(str, Enum):
    """Lifecycle state of a node, as Slurm users read it in ``sinfo``.

    IDLE/MIXED/ALLOCATED follow from the allocations on an up node; DRAINING is an admin
    drain with jobs still running, DRAINED a drain with none; DOWN is failed or
    unreachable; FUTURE is configured but not yet registered; UNKNOWN before first contact.
    """

    UNKNOWN = "UNKNOWN"
    FUTURE = "FUTURE"
    IDLE = "IDLE"
    MIXED = "MIXED"
    ALLOCATED = "ALLOCATED"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    DOWN = "DOWN"

    @property
    def schedulable(self) -> bool:
        """New work may be placed here."""
        return self in (NodeState.IDLE, NodeState.MIXED)

    @property
    def runs_jobs(self) -> bool:
        """Jobs already placed here keep running."""
        return self in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED, NodeState.DRAINING)


@dataclass(frozen=True, slots=True)
class NumaDomain:
    id: int
    cores: tuple[int, ...]
    mem_mb: int = 0


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU. ``index`` is the device index the agent exposes (CUDA_VISIBLE_DEVICES)."""

    index: int
    type: str = "gpu"
    mem_mb: int = 0
    numa: int | None = None
    uuid: str = ""
    device: str = ""  # its device file on the node (/dev/nvidia<minor>), "" when unknown


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What a node is: configured or discovered, never changed by scheduling."""

    name: str
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    mem_mb: int = 1024
    gpus: tuple[GpuSpec, ...] = ()
    numa: tuple[NumaDomain, ...] = ()
    features: frozenset[str] = field(default_factory=frozenset)
    gres: tuple[tuple[str, int], ...] = ()
    switch: str | None = None  # the leaf switch the node hangs off
    weight: int = 1
    arch: str = "x86_64"
    core_cpus: tuple[tuple[int, ...], ...] = ()
    uplinks: tuple[str, ...] = ()  # switches above the leaf, nearest first (switch tree)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus(self) -> int:
        return self.cores * self.threads_per_core

    def socket_of(self, core: int) -> int:
        return core // self.cores_per_socket

    def numa_of(self, core: int) -> int:
        for dom in self.numa:
            if core in dom.cores:
                return dom.id
        return self.socket_of(core)

    def numa_domains(self) -> tuple[NumaDomain, ...]:
        """NUMA domains, one per socket when none were given."""
        if self.numa:
            return self.numa
        per = self.cores_per_socket
        return tuple(
            NumaDomain(s, tuple(range(s * per, (s + 1) * per)), self.mem_mb // max(self.sockets, 1))
            for s in range(self.sockets)
        )

    def cpus_of_core(self, core: int) -> tuple[int, ...]:
        """Logical CPU ids of a core; defaults to Linux's usual sibling numbering."""
        if self.core_cpus:
            return self.core_cpus[core]
        return tuple(core + t * self.cores for t in range(self.threads_per_core))

    def gpu_types(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self.gpus:
            out[g.type] = out.get(g.type, 0) + 1
        return out

    @property
    def capacity(self) -> Resources:
        gres = dict(self.gres)
        for t, n in self.gpu_types().items():
            gres[f"gpu:{t}"] = gres.get(f"gpu:{t}", 0) + n
        return Resources.of(self.cpus, self.mem_mb, len(self.gpus), gres)


@dataclass(frozen=True, slots=True)
class Node:
    """A node record: its spec plus the administrative/health state and reason."""

    spec: NodeSpec
    state: NodeState = NodeState.IDLE
    reason: str = ""
    partitions: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name
