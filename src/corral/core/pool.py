"""``Pool``: the cycle's working copy of free cores, GPUs, memory and GRES per node.

Built from the snapshot (node capacities minus every running job's exact allocation) and
changed only through ``take``/``give`` with exact core and GPU bitmasks, so nothing can be
allocated twice. Besides per-node counts it keeps summary masks that placement uses to
reject or narrow candidates without touching single nodes:

* ``ge_cores[c]``: up nodes with at least ``c`` free cores (``ge_cores[0]`` = up nodes);
* ``ge_gpus[g]``: up nodes with at least ``g`` free GPUs;
* ``idle``: nodes with nothing allocated (exclusive jobs need them).

Invariants (checked by the property tests through ``check()``): per node
``0 <= cores_free <= cores``, ``cores_free == popcount(core_mask)``, the same for GPUs,
``0 <= mem_free <= mem``, and every summary mask agrees with the counts.

A SUSPENDED job keeps its memory, GPUs and GRES but gives its cores back (Slurm's
suspend releases CPUs); RUNNING and COMPLETING jobs hold everything.

Compiled allocations (node index and bitmasks) are memoized by allocation identity, and the
pool of the previous call is diffed against the new running set when the nodes are the same
objects, so a simulator calling once per event pays for what changed, not for the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.core.config import SchedulerConfig
from corral.core.ends import EndIndex
from corral.core.model.job import Allocation, Job, JobState
from corral.core.nodes import NodeTable, mask_of


@dataclass(frozen=True, slots=True)
class NodeUse:
    """One node's share of an allocation, compiled against a ``NodeTable``."""

    i: int
    core_bits: int
    mem_mb: int
    gpu_bits: int
    gres: tuple[tuple[str, int], ...]


def compile_allocation(table: NodeTable, alloc: Allocation) -> tuple[NodeUse, ...]:
    """Node indexes and core/GPU bitmasks of ``alloc`` (unknown nodes are skipped)."""
    out: list[NodeUse] = []
    for na in alloc.nodes:
        i = table.index.get(na.node)
        if i is None:
            continue
        if na.cores:
            core_bits = mask_of([c for c in na.cores if 0 <= c < table.cores[i]])
        else:  # cores unknown: count only; bits are chosen when taken
            core_bits = -max(1, -(-na.cpus // table.tpc[i]))
        gpu_bits = 0
        if na.gpus:
            ids = table.gpu_ids[i]
            for g in na.gpus:
                if g in ids:
                    gpu_bits |= 1 << ids.index(g)
        out.append(NodeUse(i, core_bits, na.mem_mb, gpu_bits, na.gres))
    return tuple(out)


_Entry = tuple[Allocation, NodeTable, tuple[NodeUse, ...], int]
_COMPILED: dict[int, _Entry] = {}
_COMPILED_MAX = 100_000


def unit_mask_of(table: NodeTable, uses: Sequence[NodeUse]) -> int:
    """The nodes of ``uses`` when every use takes the single core of a distinct one-core
    node (``NodeTable.unit_mask``) and nothing else but memory; 0 otherwise. Such uses are
    taken and given back in one batch (``Pool.take_units``/``give_units``)."""
    unit = table.unit_mask
    m = 0
    for u in uses:
        bit = 1 << u.i
        if not unit & bit or u.core_bits != 1 or u.gpu_bits or u.gres or m & bit:
            return 0
        m |= bit
    return m


def _entry(table: NodeTable, alloc: Allocation) -> _Entry:
    entry = _COMPILED.get(id(alloc))
    if entry is not None and entry[0] is alloc and entry[1] is table:
        return entry
    uses = compile_allocation(table, alloc)
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.clear()
    entry = _COMPILED[id(alloc)] = (alloc, table, uses, unit_mask_of(table, uses))
    return entry


def compiled(table: NodeTable, alloc: Allocation) -> tuple[NodeUse, ...]:
    return _entry(table, alloc)[2]


def remember(table: NodeTable, alloc: Allocation, uses: tuple[NodeUse, ...],
             unit_mask: int | None = None) -> None:
    """Record the compiled form of an allocation the placer just made."""
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.clear()
    if unit_mask is None:
        unit_mask = unit_mask_of(table, uses)
    _COMPILED[id(alloc)] = (alloc, table, uses, unit_mask)


class Pool:
    """Free resources per node plus summary masks (see the module docstring)."""

    __slots__ = (
        "table", "up", "core_mask", "cores_free", "mem_free", "gpu_mask", "gpus_free",
        "gres_free", "ge_cores", "ge_gpus", "idle", "version", "approx", "free_total",
        "loose_mem",
    )

    def __init__(self, table: NodeTable, up: int) -> None:
        self.table = table
        self.up = up
        self.core_mask: list[int] = list(table.full_core_mask)
        self.cores_free: list[int] = list(table.cores)
        self.mem_free: list[int] = list(table.mem)
        self.gpu_mask: list[int] = list(table.full_gpu_mask)
        self.gpus_free: list[int] = list(table.ngpus)
        self.gres_free: list[dict[str, int]] | None = (
            [dict(g) for g in table.gres] if table.has_gres else None
        )
        self.idle: int = table.all_mask
        self.ge_cores: list[int] = []
        self.ge_gpus: list[int] = []
        self.version = 0
        self.approx = False  # took an allocation without core ids (cannot be diffed)
        self.free_total = 0  # free cores on up nodes
        # some memory was taken without a core (a suspended job, or a use without core
        # ids): a node with a free core may then lack memory
        self.loose_mem = False
        self._rebuild_masks()

    def _rebuild_masks(self) -> None:
        t = self.table
        ge_c = [0] * (t.max_cores + 2)
        ge_g = [0] * (t.max_gpus + 2)
        total = 0
        for i in range(len(t)):
            bit = 1 << i
            if not self.up & bit:
                continue
            total += self.cores_free[i]
            ge_c[self.cores_free[i]] |= bit
            ge_g[self.gpus_free[i]] |= bit
        for c in range(len(ge_c) - 2, -1, -1):
            ge_c[c] |= ge_c[c + 1]
        for g in range(len(ge_g) - 2, -1, -1):
            ge_g[g] |= ge_g[g + 1]
        self.ge_cores = ge_c
        self.ge_gpus = ge_g
        self.free_total = total

    def copy(self) -> Pool:
        p = Pool.__new__(Pool)
        p.table = self.table
        p.up = self.up
        p.core_mask = list(self.core_mask)
        p.cores_free = list(self.cores_free)
        p.mem_free = list(self.mem_free)
        p.gpu_mask = list(self.gpu_mask)
        p.gpus_free = list(self.gpus_free)
        p.gres_free = [dict(g) for g in self.gres_free] if self.gres_free is not None else None
        p.idle = self.idle
        p.ge_cores = list(self.ge_cores)
        p.ge_gpus = list(self.ge_gpus)
        p.version = self.version
        p.approx = self.approx
        p.free_total = self.free_total
        p.loose_mem = self.loose_mem
        return p

    # -- mutation ---------------------------------------------------------------------------

    def take(self, use: NodeUse, cores: bool = True, rest: bool = True) -> None:
        """Remove ``use`` from the free resources (``cores``/``rest`` select which parts)."""
        i = use.i
        bit = 1 << i
        t = self.table
        self.version += 1
        if cores:
            bits = use.core_bits
            if bits < 0:  # a count without core ids: take the lowest free cores
                self.approx = True
                want = -bits
                m = self.core_mask[i]
                bits = 0
                while m and want:
                    low = m & -m
                    bits |= low
                    m ^= low
                    want -= 1
            old = self.cores_free[i]
            self.core_mask[i] &= ~bits
            new = self.core_mask[i].bit_count()
            self.cores_free[i] = new
            if self.up & bit:
                self.free_total += new - old
                ge = self.ge_cores
                for c in range(new + 1, old + 1):
                    ge[c] &= ~bit
        if rest:
            self.mem_free[i] -= use.mem_mb
            if use.mem_mb and (not cores or not use.core_bits):
                self.loose_mem = True
            if use.gpu_bits:
                old = self.gpus_free[i]
                self.gpu_mask[i] &= ~use.gpu_bits
                new = self.gpu_mask[i].bit_count()
                self.gpus_free[i] = new
                if self.up & bit:
                    geg = self.ge_gpus
                    for g in range(new + 1, old + 1):
                        geg[g] &= ~bit
            if use.gres and self.gres_free is not None:
                free = self.gres_free[i]
                for name, n in use.gres:
                    free[name] = free.get(name, 0) - n
        if self.idle & bit and (
            self.cores_free[i] != t.cores[i]
            or self.mem_free[i] != t.mem[i]
            or self.gpus_free[i] != t.ngpus[i]
            or (use.gres and rest)
        ):
            self.idle &= ~bit

    def give(self, use: NodeUse, cores: bool = True, rest: bool = True) -> None:
        """Return ``use`` to the free resources (the exact inverse of ``take``)."""
        i = use.i
        bit = 1 << i
        t = self.table
        self.version += 1
        if cores and use.core_bits > 0:
            old = self.cores_free[i]
            self.core_mask[i] |= use.core_bits & t.full_core_mask[i]
            new = self.core_mask[i].bit_count()
            self.cores_free[i] = new
            if self.up & bit:
                self.free_total += new - old
                ge = self.ge_cores
                for c in range(old + 1, new + 1):
                    ge[c] |= bit
        if rest:
            self.mem_free[i] += use.mem_mb
            if use.gpu_bits:
                old = self.gpus_free[i]
                self.gpu_mask[i] |= use.gpu_bits & t.full_gpu_mask[i]
                new = self.gpu_mask[i].bit_count()
                self.gpus_free[i] = new
                if self.up & bit:
                    geg = self.ge_gpus
                    for g in range(old + 1, new + 1):
                        geg[g] |= bit
            if use.gres and self.gres_free is not None:
                free = self.gres_free[i]
                for name, n in use.gres:
                    free[name] = free.get(name, 0) + n
        elif use.mem_mb and cores:
            self.loose_mem = True  # a core back without its memory
        if (
            self.cores_free[i] == t.cores[i]
            and self.mem_free[i] == t.mem[i]
            and self.gpus_free[i] == t.ngpus[i]
            and (self.gres_free is None or self.gres_free[i] == t.gres[i])
        ):
            self.idle |= bit

    def take_units(self, uses: Sequence[NodeUse], mask: int) -> None:
        """``take`` of every use in one batch; ``mask = unit_mask_of(table, uses)`` (non-zero:
        each use is the one core of a distinct one-core node, plus memory)."""
        cm, cf, mf = self.core_mask, self.cores_free, self.mem_free
        for u in uses:
            i = u.i
            cm[i] = 0
            cf[i] = 0
            mf[i] -= u.mem_mb
        self.version += len(uses)
        ge = self.ge_cores
        self.free_total -= (mask & ge[1]).bit_count()  # ge_cores[1]: up with a free core
        for c in range(1, len(ge)):
            ge[c] &= ~mask
        self.idle &= ~mask

    def give_units(self, uses: Sequence[NodeUse], mask: int) -> None:
        """The exact inverse of ``take_units`` (same arguments)."""
        cm, cf, mf = self.core_mask, self.cores_free, self.mem_free
        t = self.table
        tmem = t.mem
        gf = self.gres_free
        ge = self.ge_cores
        back = mask & self.up & ~ge[1]  # up nodes whose core comes back
        idle = 0
        for u in uses:
            i = u.i
            cm[i] = 1
            cf[i] = 1
            m = mf[i] + u.mem_mb
            mf[i] = m
            if m == tmem[i] and (gf is None or gf[i] == t.gres[i]):
                idle |= 1 << i
        self.version += len(uses)
        self.free_total += back.bit_count()
        ge[1] |= back
        self.idle |= idle

    def take_job(self, job: Job) -> None:
        if job.allocation is None:
            return
        suspended = job.state == JobState.SUSPENDED
        _, _, uses, unit = _entry(self.table, job.allocation)
        if unit and not suspended:
            self.take_units(uses, unit)
            return
        for use in uses:
            self.take(use, cores=not suspended)

    def give_allocation(self, alloc: Allocation) -> None:
        """``give_job`` of a RUNNING job holding ``alloc``."""
        _, _, uses, unit = _entry(self.table, alloc)
        if unit:
            self.give_units(uses, unit)
            return
        for use in uses:
            self.give(use)

    def give_job(self, job: Job) -> None:
        if job.allocation is None:
            return
        suspended = job.state == JobState.SUSPENDED
        _, _, uses, unit = _entry(self.table, job.allocation)
        if unit and not suspended:
            self.give_units(uses, unit)
            return
        for use in uses:
            self.give(use, cores=not suspended)

    # -- queries ----------------------------------------------------------------------------

    def typed_gpus_free(self, i: int, gpu_type: str | None) -> int:
        if gpu_type is None:
            return self.gpus_free[i]
        return (self.gpu_mask[i] & self.table.gpu_type_masks[i].get(gpu_type, 0)).bit_count()

    def gres_fit(self, i: int, gres: Iterable[tuple[str, int]], times: int = 1) -> bool:
        if self.gres_free is None:
            return not any(n for _, n in gres)
        free = self.gres_free[i]
        return all(free.get(name, 0) >= n * times for name, n in gres)

    def free_cores_in(self, mask: int) -> int:
        """Total free cores on the up nodes of ``mask`` (O(popcount))."""
        total = 0
        m = mask & self.up
        cf = self.cores_free
        while m:
            low = m & -m
            total += cf[low.bit_length() - 1]
            m ^= low
        return total

    def check(self) -> list[str]:
        """Violated invariants (empty when consistent); used by tests."""
        t = self.table
        bad: list[str] = []
        total = sum(self.cores_free[i] for i in range(len(t)) if self.up >> i & 1)
        if total != self.free_total:
            bad.append(f"free_total {self.free_total} != {total}")
        for i in range(len(t)):
            name = t.names[i]
            if self.core_mask[i] & ~t.full_core_mask[i]:
                bad.append(f"{name}: core bits outside the node")
            if self.cores_free[i] != self.core_mask[i].bit_count():
                bad.append(f"{name}: core count {self.cores_free[i]} != mask")
            if self.gpus_free[i] != self.gpu_mask[i].bit_count():
                bad.append(f"{name}: gpu count != mask")
            if not 0 <= self.mem_free[i] <= t.mem[i]:
                bad.append(f"{name}: free memory {self.mem_free[i]} outside 0..{t.mem[i]}")
            if self.gres_free is not None:
                for k, v in self.gres_free[i].items():
                    if not 0 <= v <= t.gres[i].get(k, 0):
                        bad.append(f"{name}: gres {k} free {v} out of range")
            bit = 1 << i
            for c in range(len(self.ge_cores)):
                want = bool(self.up & bit) and self.cores_free[i] >= c
                if bool(self.ge_cores[c] & bit) != want:
                    bad.append(f"{name}: ge_cores[{c}] disagrees")
                    break
        return bad


class _Cache:
    """The previous call's running set and pool (and end index), for diffing."""

    __slots__ = ("table", "up", "jobs", "pool", "ends")

    def __init__(self, table: NodeTable, up: int, jobs: dict[int, Job], pool: Pool) -> None:
        self.table = table
        self.up = up
        self.jobs = jobs  # id(job) -> job
        self.pool = pool
        self.ends: EndIndex | None = None


_LAST: list[_Cache] = []


def _apply_deltas(pool: Pool, ends: EndIndex | None, table: NodeTable, removed: list[Job],
                  added: list[Job]) -> None:
    """Give back the ``removed`` jobs' resources, take the ``added`` ones'."""
    for j in removed:
        pool.give_job(j)
    for j in added:
        pool.take_job(j)
    if ends is not None:
        ends.update(table, removed, added)


def build_pool(table: NodeTable, up: int, running: Sequence[Job]) -> Pool:
    """The pool for ``running`` jobs on ``table``; reuses the previous one by diffing.

    Jobs are matched by identity: a job whose record object changed is given back and
    taken again, which is exact. The returned pool is the caller's to mutate.
    """
    cur = {id(j): j for j in running}
    c = _LAST[0] if _LAST else None
    if (c is not None and c.table is table and c.up == up and not c.pool.approx
            and len(running) < 4 * len(c.jobs) + 64):
        old = c.jobs
        gone = old.keys() - cur.keys()
        new = cur.keys() - old.keys()
        if gone or new:
            pool = c.pool
            _apply_deltas(pool, c.ends, table, [old[k] for k in gone],
                          [cur[k] for k in new])
            c.jobs = cur
        return c.pool.copy()
    pool = Pool(table, up)
    for j in running:
        pool.take_job(j)
    _LAST[:] = [_Cache(table, up, cur, pool)]
    return pool.copy()


def running_ends(table: NodeTable, config: SchedulerConfig) -> EndIndex:
    """Planned ends of the running set of the last ``build_pool`` call (kept up to date)."""
    c = _LAST[0]
    assert c.table is table
    if c.ends is None or c.ends.config is not config:
        c.ends = EndIndex(config, table, c.jobs.values())
    return c.ends


class PoolKeeper:
    """The pool of the running set, kept by the *caller* across cycles.

    A shell that knows exactly which jobs start and end (the simulator) reports them with
    ``add``/``remove`` (``replace`` when a running record changes) and passes the keeper to
    ``run_cycle(..., keeper=...)``: the cycle then applies those deltas to the kept pool
    instead of diffing the whole running set (``build_pool``), so it pays for what changed,
    not for the cluster. The keeper's running set must be the snapshot's ``running``;
    whenever the nodes change (another ``NodeTable`` or up mask) or an allocation without
    core ids was taken, it is rebuilt from the snapshot. It is plain data updated by these
    methods: no clock, no I/O, and the decisions are the same as without it.

    Lending (``lend``/``lent``): ``run_cycle`` lets its pass work on the kept pool itself,
    not on a copy, and then reports the allocations of the cycle's starts, which the pass
    has already taken from it. A job ``add``-ed with one of those very allocation objects
    (RUNNING or COMPLETING) is then already in the pool; a lent allocation no job was added
    with by the next cycle is given back. A pass that fails part-way leaves the pool
    unknown: ``invalidate`` makes the next cycle rebuild it from the snapshot.
    """

    __slots__ = ("table", "up", "pool", "ends", "_added", "_removed", "_lent", "_held",
                 "_dropped")

    def __init__(self) -> None:
        self.table: NodeTable | None = None
        self.up = 0
        self.pool: Pool | None = None
        self.ends: EndIndex | None = None
        self._added: dict[int, Job] = {}  # id(job) -> job, since the last cycle
        self._removed: list[Job] = []
        # id(allocation) -> allocation: taken by the last cycle's pass, no job added yet
        self._lent: dict[int, Allocation] = {}
        # id(job) -> job: added with a lent allocation (in the pool, not in ``ends`` yet)
        self._held: dict[int, Job] = {}
        self._dropped: list[Job] = []  # such jobs removed again: in the pool only

    def add(self, job: Job) -> None:
        """``job`` (this record) is now part of the running set."""
        a = job.allocation
        if (self._lent and a is not None and job.state != JobState.SUSPENDED
                and self._lent.pop(id(a), None) is a):
            self._held[id(job)] = job
            return
        self._added[id(job)] = job

    def remove(self, job: Job) -> None:
        """``job`` (the very record that was added, or was running at the first cycle) is
        no longer running."""
        if self._added.pop(id(job), None) is not None:
            return
        if self._held.pop(id(job), None) is not None:
            self._dropped.append(job)
            return
        self._removed.append(job)

    def replace(self, old: Job, new: Job) -> None:
        """A running job's record changed (e.g. RUNNING -> COMPLETING)."""
        self.remove(old)
        self.add(new)

    def invalidate(self) -> None:
        """Forget the kept pool: the next cycle rebuilds it from the snapshot."""
        self.pool = None

    def _current(self, table: NodeTable, up: int, running: Sequence[Job]) -> Pool:
        """The kept pool brought up to date with the reported changes."""
        pool = self.pool
        if pool is None or self.table is not table or self.up != up or pool.approx:
            pool = Pool(table, up)
            for j in running:
                pool.take_job(j)
            self.table, self.up, self.pool, self.ends = table, up, pool, None
        else:
            for a in self._lent.values():  # taken by the pass, never started
                pool.give_allocation(a)
            for j in self._dropped:
                pool.give_job(j)
            if self._added or self._removed:
                _apply_deltas(pool, self.ends, table, self._removed,
                              list(self._added.values()))
            if self._held and self.ends is not None:
                self.ends.update(table, (), self._held.values())
        # emptied in place (the values above were consumed), only when something is there
        if self._added:
            self._added.clear()
        if self._removed:
            self._removed.clear()
        if self._lent:
            self._lent = {}
        if self._held:
            self._held.clear()
        if self._dropped:
            self._dropped.clear()
        return pool

    def pool_for(self, table: NodeTable, up: int, running: Sequence[Job]) -> Pool:
        """A copy of the kept pool, brought up to date (the caller's to mutate)."""
        return self._current(table, up, running).copy()

    def lend(self, table: NodeTable, up: int, running: Sequence[Job]) -> Pool:
        """The kept pool itself, brought up to date, for one pass to take its starts from;
        the caller reports them with ``lent`` (or calls ``invalidate``)."""
        return self._current(table, up, running)

    def lent(self, allocations: Iterable[Allocation]) -> None:
        """The allocations the pass on the lent pool took (its starts)."""
        self._lent = {id(a): a for a in allocations}

    def running_ends(self, table: NodeTable, config: SchedulerConfig,
                     running: Sequence[Job]) -> EndIndex:
        """Planned ends of the running set (kept up to date with the pool)."""
        assert self.table is table
        if self.ends is None or self.ends.config is not config:
            self.ends = EndIndex(config, table, running)
        return self.ends
