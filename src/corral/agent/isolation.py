"""How a job is confined on this node: a cgroup when one is writable, rlimits otherwise.

``make_isolation(mode, cgroup_root, req, mem_poll_s)`` — ``mode`` is ``"auto"`` (cgroup if
the layout allows, else the fallback, with a note), ``"cgroup"`` (cgroup or the launch
fails) or ``"none"`` (always the fallback; used by tests and unprivileged agents).

Fallback when no cgroup is writable (documented choice):

- **Memory**: a watchdog in the supervisor sums the RSS of the job's processes every
  ``mem_poll_s`` and SIGKILLs the job at the limit, reporting OUT_OF_MEMORY (Slurm's
  ``JobAcctGatherParams=OverMemoryKill``). Each process also gets ``RLIMIT_DATA`` = 2 × the
  limit as a hard backstop against an allocation burst faster than the watchdog samples.
  ``RLIMIT_DATA`` counts private writable mappings (heap, anonymous mmap) but not file
  mappings or ``PROT_NONE`` reservations, so CUDA and JVM address-space reservations
  still work — ``RLIMIT_AS`` would break them. A process that hits the backstop sees
  ENOMEM (Python: MemoryError) and the job usually ends FAILED rather than OUT_OF_MEMORY.
  Limits are only ever lowered (root here lacks CAP_SYS_RESOURCE: it cannot raise them).
- **CPUs**: ``sched_setaffinity`` to the allocated CPUs (a job may widen it again; a
  cpuset cannot be widened).
- **Tree**: the supervisor is a child subreaper, so it still finds and kills every process.
"""

from __future__ import annotations

import os
import resource

from corral.agent.cgroups import (
    CgroupError,
    CgroupLayout,
    CgroupUsage,
    JobCgroup,
    detect_layout,
    prepare,
)
from corral.agent.cgslot import PREFIX as SLOT_PREFIX
from corral.agent.cgslot import SlotCgroup
from corral.agent.launch import LaunchRequest, memory_limits_mb

RLIMIT_DATA_FACTOR = 2
_layout_cache: dict[str, CgroupLayout] = {}


def node_layout(cgroup_root: str, refresh: bool = False) -> CgroupLayout:
    """The prepared cgroup layout for jobs under ``cgroup_root`` (cached per process)."""
    if refresh or cgroup_root not in _layout_cache:
        _layout_cache[cgroup_root] = prepare(detect_layout(), cgroup_root)
    return _layout_cache[cgroup_root]


class Isolation:
    def __init__(self, req: LaunchRequest, cgroup: JobCgroup | None) -> None:
        self.req = req
        self.cgroup = cgroup
        ctls = cgroup.controllers if cgroup is not None else set()
        self.has_memory_cgroup = "memory" in ctls
        # the limit enforced (the request's mem_mb under Slurm's knobs; 0: none)
        self.mem_limit_mb = memory_limits_mb(req)[0]
        self.needs_watchdog = self.mem_limit_mb > 0 and not self.has_memory_cgroup

    @property
    def kind(self) -> str:
        if self.cgroup is None:
            return "none"
        return f"cgroup-{self.cgroup.layout.mode}"

    def attach(self, pid: int) -> None:
        """Called in the job process before it execs (still as root)."""
        if self.cgroup is not None:
            self.cgroup.attach(pid)

    @property
    def needs_rlimit(self) -> bool:
        return self.mem_limit_mb > 0 and not self.has_memory_cgroup

    def child_limits(self, pid: int = 0) -> None:
        """The rlimit backstop when needed: called in the job process before it execs
        (``pid`` 0), or for a job process stopped before its exec (``prlimit``)."""
        if self.needs_rlimit:
            limit = self.mem_limit_mb * 1024 * 1024 * RLIMIT_DATA_FACTOR
            _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            if pid:
                resource.prlimit(pid, resource.RLIMIT_DATA, (limit, limit))
            else:
                resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    def procs(self) -> set[int]:
        return self.cgroup.procs() if self.cgroup is not None else set()

    def kill_all(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def freeze(self) -> bool:
        """Freeze the job's cgroup; False when there is no freezer (use SIGSTOP)."""
        return self.cgroup.freeze() if self.cgroup is not None else False

    def thaw(self) -> None:
        if self.cgroup is not None:
            self.cgroup.thaw()

    def usage(self) -> CgroupUsage | None:
        return self.cgroup.usage() if self.cgroup is not None else None

    def remove(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "watchdog": self.needs_watchdog}
        if self.cgroup is not None:
            out["cgroup"] = self.cgroup.describe()
        return out


def make_isolation(mode: str, cgroup_root: str, req: LaunchRequest,
                   mem_poll_s: float, *, reuse: bool = False) -> tuple[Isolation, str]:
    """The job's isolation and a note for the log ("" when all is as asked). With
    ``reuse`` (a supervisor that runs job after job), the job's cgroup is this process's
    slot (``cgslot.py``), reset for the job, instead of a directory made for it."""
    del mem_poll_s  # the supervisor drives the watchdog
    if mode == "none":
        return Isolation(req, None), ""
    layout = node_layout(cgroup_root)
    if layout.mode == "none":
        if mode == "cgroup":
            raise CgroupError(f"cgroups required but unavailable: {layout.reason}")
        return Isolation(req, None), f"no cgroup isolation: {layout.reason}; using rlimits"
    try:
        cg: JobCgroup
        if reuse and not req.hidden_devices:  # a slot is reset, not remade: no device list
            cg = _slot_for(layout, cgroup_root.strip("/"), req)
        else:
            ram_mb, memsw_mb = memory_limits_mb(req)
            cg = JobCgroup.create(layout, f"{cgroup_root.strip('/')}/job_{req.job_id}",
                                  mem_mb=ram_mb, cpus=req.cpus, max_pids=req.max_pids,
                                  memsw_mb=memsw_mb, deny_devices=req.hidden_devices)
    except CgroupError as exc:
        if mode == "cgroup":
            raise
        return Isolation(req, None), f"no cgroup isolation: {exc}; using rlimits"
    return Isolation(req, cg), ""


_slot: SlotCgroup | None = None
_slot_gen = 0


def _slot_for(layout: CgroupLayout, parent: str, req: LaunchRequest) -> SlotCgroup:
    """This process's slot, reset for ``req``; a new one when it cannot be reused."""
    global _slot, _slot_gen
    ram_mb, memsw_mb = memory_limits_mb(req)
    if _slot is not None:
        if _slot.reset(ram_mb, req.cpus, req.max_pids, memsw_mb):
            return _slot
        release_slot()
    _slot_gen += 1
    suffix = "" if _slot_gen == 1 else f"_{_slot_gen}"
    _slot = SlotCgroup.open(layout, f"{parent}/{SLOT_PREFIX}{os.getpid()}{suffix}",
                            mem_mb=ram_mb, cpus=req.cpus, max_pids=req.max_pids,
                            memsw_mb=memsw_mb)
    return _slot


def release_slot() -> None:
    """Remove this process's slot (when the supervisor leaves)."""
    global _slot
    slot, _slot = _slot, None
    if slot is not None:
        try:
            slot.discard(wait_s=1.0)
        except OSError:
            pass
