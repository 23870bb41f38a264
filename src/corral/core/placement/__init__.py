"""Placement: which nodes, cores, GPUs and memory a job gets (``select/cons_tres`` style).

``Placer.place(shape, partition, pool, ...)`` returns a ``Placement`` (the exact
``Allocation`` plus the compiled per-node uses) or ``None``. Node choice follows the
configured mode: ``pack`` (best fit), ``spread`` (least loaded) or ``topology`` (fewest
leaf switches, under the lowest common switch of the tree when nodes have ``uplinks``).
``--switches=N@wait`` is honoured in every mode: a placement over more than N switches is
refused until the job has waited ``wait`` seconds.

Gangs (task groups) are placed all-or-nothing on a scratch copy of the pool: either every
group reaches its minimum and the job's ``min_available`` is met, or nothing is taken.
A group with a NUMA policy (``restricted``, ``single-numa-node``) counts on a node only
the tasks that fit aligned there, and its picks carry each task's exact cores and GPUs
(``corral.core.placement.numa``); those are taken first on commit, and its allocation
entry lists the cores task by task (``task_cores``).

Candidate nodes: the partition's up nodes that satisfy the job's (and the group's)
constraint, minus ``exclude``; nodes with GPUs of the wanted type only; idle nodes only for
exclusive jobs. ``nodelist`` nodes must all be part of a plain job's allocation.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from corral.core.config import PlacementMode
from corral.core.model.job import Allocation, NodeAllocation
from corral.core.nodes import NodeTable, iter_bits
from corral.core.placement.numa import slots as numa_slots
from corral.core.placement.select import Pick, SetPlacer, unit_nodes
from corral.core.placement.within import node_use
from corral.core.pool import NodeUse, Pool, remember
from corral.core.shape import Shape, TaskSet

__all__ = ["Placement", "Placer", "Pick", "SetPlacer"]


@dataclass(frozen=True, slots=True)
class Placement:
    allocation: Allocation
    uses: tuple[NodeUse, ...]


class Placer:
    """Per-cycle placement context (caches keyed by shape identity live one cycle)."""

    __slots__ = ("table", "mode", "sets", "_cand", "gpu_nodes", "_unit_alloc", "_unit_static",
                 "_unit_rows")

    def __init__(self, table: NodeTable, mode: PlacementMode) -> None:
        self.table = table
        self.mode = mode
        self.sets = SetPlacer(table)
        self._cand: dict[tuple[int, int, str], tuple[TaskSet, int, int]] = {}
        self._unit_alloc: dict[tuple[int, int, int, str | None],
                               tuple[NodeUse, NodeAllocation]] = {}
        self._unit_static: dict[tuple[int, str],
                                tuple[Shape, tuple[int, int, int, int] | None]] = {}
        # per (memory, task group): every one-core node's use and allocation objects
        self._unit_rows: dict[tuple[int, str | None],
                              tuple[list[NodeUse | None], list[NodeAllocation | None]]] = {}
        g = 0
        for i, n in enumerate(table.ngpus):
            if n:
                g |= 1 << i
        self.gpu_nodes = g

    def static_candidates(self, shape: Shape, ts: TaskSet, partition: str) -> tuple[int, int]:
        """(candidates, required) before node state and load: partition, features, lists.

        Raises ``ValueError`` from a malformed constraint.
        """
        key = (id(shape), id(ts), partition)
        got = self._cand.get(key)
        if got is not None and got[0] is ts:
            return got[1], got[2]
        t = self.table
        if len(self._cand) > 100_000:
            self._cand.clear()
        mask = t.part_masks.get(partition, 0)
        mask &= t.feature_mask(shape.constraint)
        if ts.constraint:
            mask &= t.feature_mask(ts.constraint)
        if shape.exclude:
            mask &= ~t.names_mask(shape.exclude)[0]
        if ts.gpu_type is not None and (ts.gpus_per_node or ts.gpus_per_task or ts.gpus_total):
            mask &= t.gpu_type_nodes.get(ts.gpu_type, 0)
        required = 0
        if shape.nodelist:
            required = t.names_mask(shape.nodelist)[0]
            if shape.grouped:
                mask &= required
                required = 0
        self._cand[key] = (ts, mask, required)
        return mask, required

    def unit_plan(self, shape: Shape, partition: str, view: Pool) -> tuple[int, int, int] | None:
        """For a shape that ``fits`` places on one-core nodes (``SetPlacer._unit``): its
        candidates on ``view``, its required nodes, and how many nodes it gets when it is
        placed; ``None`` for any other shape. Lets the pass refuse a placement by its size
        before building it, then build it with ``unit_fits``."""
        info = self.unit_static(shape, partition)
        if info is None:
            return None
        cand, required, want, nreq = info
        cand &= view.up
        if cand & ~self.table.unit_mask:
            return None
        ge = view.ge_cores
        free = (cand & ge[1]).bit_count() if len(ge) > 1 else 0
        n = want if want < free else free
        return cand, required, nreq if nreq > n else n

    def unit_static(self, shape: Shape, partition: str) -> tuple[int, int, int, int] | None:
        """What ``unit_plan`` knows before the pool: (static candidates, required nodes,
        nodes wanted, required count), memoized per shape; ``None``: not a unit shape."""
        key = (id(shape), partition)
        got = self._unit_static.get(key)
        if got is None or got[0] is not shape:
            if len(self._unit_static) > 100_000:
                self._unit_static.clear()
            got = self._unit_static[key] = (shape, self._unit_static_of(shape, partition))
        return got[1]

    def _unit_static_of(self, shape: Shape, partition: str) -> tuple[int, int, int, int] | None:
        if len(shape.sets) != 1 or shape.grouped or shape.switches is not None or shape.prefer:
            return None
        ts = shape.sets[0]
        if (ts.uniform or ts.cpus_per_task != 1 or ts.tasks <= 0
                or ts.gpus_per_node or ts.gpus_per_task or ts.gpus_total or ts.gres
                or (self.mode == PlacementMode.TOPOLOGY and ts.nodes_max > 1)):
            return None
        cand, required = self.static_candidates(shape, ts, partition)
        return cand, required, min(ts.tasks, ts.nodes_max), required.bit_count()

    def unit_fits(self, shape: Shape, view: Pool, cand: int,
                  required: int) -> list[list[Pick]] | None:
        """``fits`` for a shape ``unit_plan`` accepted (its ``cand`` and ``required``)."""
        picks = self.sets._unit(view, shape.sets[0], cand, required, shape.exclusive)
        return None if picks is None else [picks]

    def select(self, shape: Shape, ts: TaskSet, view: Pool, cand: int, required: int,
               switch_limit: int | None) -> list[Pick] | None:
        """Count-level node choice for one task set on ``view``."""
        sp = self.sets
        whole = shape.exclusive
        avoid = self.gpu_nodes if not (ts.gpus_per_node or ts.gpus_per_task
                                       or ts.gpus_total) else 0
        cand &= view.up
        if shape.prefer:  # preferred nodes first: every other candidate goes to the back
            prefer = self.table.names_mask(shape.prefer)[0]
            if prefer & cand:
                avoid |= cand & ~prefer
        if required & ~cand:
            return None
        if self.mode == PlacementMode.TOPOLOGY and ts.nodes_max > 1:
            picks = sp.topology(view, ts, cand, required, whole, avoid)
        else:
            spread = self.mode == PlacementMode.SPREAD
            if ts.uniform:
                picks = sp.uniform(view, ts, cand, required, spread, whole, avoid)
            else:
                picks = sp.flexible(view, ts, cand, required, spread, whole, avoid, shape.spread)
        if picks is None:
            return None
        if switch_limit is not None and len(picks) > 1 and sp.switch_count(picks) > switch_limit:
            if self.mode != PlacementMode.TOPOLOGY:
                picks = sp.topology(view, ts, cand, required, whole, avoid)
            if picks is None or sp.switch_count(picks) > switch_limit:
                return None
        return picks

    def fits(self, shape: Shape, partition: str, view: Pool,
             switch_limit: int | None = None) -> list[list[Pick]] | None:
        """Count-level choice for every task set (gangs on a scratch copy), or ``None``."""
        if len(shape.sets) == 1:
            ts = shape.sets[0]
            cand, required = self.static_candidates(shape, ts, partition)
            picks = self.select(shape, ts, view, cand, required, switch_limit)
            if picks is None or (shape.grouped
                                 and sum(p.tasks for p in picks) < shape.min_available):
                return None
            return [picks]
        scratch = view.copy()
        out: list[list[Pick]] = [[] for _ in shape.sets]
        placed = 0
        # scarcest first: groups that need GPUs, then the widest tasks
        order = sorted(range(len(shape.sets)), key=lambda k: (
            -(shape.sets[k].gpus_per_task or shape.sets[k].gpus_per_node),
            -shape.sets[k].cpus_per_task, k))
        for k in order:
            ts = shape.sets[k]
            cand, required = self.static_candidates(shape, ts, partition)
            picks = self.select(shape, ts, scratch, cand, required, switch_limit)
            if picks is None:
                if ts.min_tasks > 0:
                    return None
                picks = []
            for p in picks:
                scratch.take(self._use(scratch, ts, p))
            placed += sum(p.tasks for p in picks)
            out[k] = picks
        return out if placed >= shape.min_available else None

    def _use(self, pool: Pool, ts: TaskSet, p: Pick) -> NodeUse:
        if p.numa_slots and not p.whole:  # the tasks' cores and GPUs, chosen by ``numa``
            cores = gpus = 0
            for c, g in p.numa_slots:
                cores |= c
                gpus |= g
            if cores & ~pool.core_mask[p.i] or gpus & ~pool.gpu_mask[p.i]:
                # chosen on a view whose bits this pool does not hold free (never the
                # case for the passes' views, a subset of the pool): choose again here
                cpt = self.sets.demand_of(ts, self.table.class_of[p.i]).cores_per_task
                again = numa_slots(pool, p.i, ts.numa, p.tasks, cpt, ts.gpus_per_task,
                                   ts.gpu_type)
                p.numa_slots = tuple(again) if len(again) == p.tasks else ()
                return self._use(pool, ts, p)
            return NodeUse(p.i, cores, p.mem_mb, gpus, ts.gres)
        return node_use(pool, p.i, p.ncores, p.mem_mb, p.ngpus, ts.gpu_type, ts.gres, p.whole)

    def place(self, shape: Shape, partition: str, pool: Pool,
              switch_limit: int | None = None) -> Placement | None:
        """Choose and take exact resources from ``pool``; ``None`` leaves ``pool`` untouched."""
        chosen = self.fits(shape, partition, pool, switch_limit)
        if chosen is None:
            return None
        return self.commit(shape, partition, pool, chosen)

    def commit(self, shape: Shape, partition: str, pool: Pool,
               chosen: list[list[Pick]]) -> Placement:
        if len(chosen) == 1 and chosen[0]:
            fast = self._commit_units(shape, partition, pool, chosen[0])
            if fast is not None:
                return fast
        t = self.table
        unit = t.unit_mask
        units: list[NodeUse] = []  # whole one-core nodes: taken in one batch at the end
        umask = 0
        cache = self._unit_alloc
        per_set: list[list[NodeAllocation]] = [[] for _ in shape.sets]
        set_uses: list[list[NodeUse]] = [[] for _ in shape.sets]
        # sets whose tasks' cores were fixed by a NUMA policy are taken first: the others
        # choose their exact cores among what is left (their counts fit either way)
        order = (0,) if len(shape.sets) == 1 else sorted(
            range(len(shape.sets)), key=lambda k: (not shape.sets[k].numa, k))
        for k in order:
            ts, picks = shape.sets[k], chosen[k]
            nodes, uses = per_set[k], set_uses[k]
            for p in picks:
                if unit >> p.i & 1 and not p.whole:  # a one-core node: same objects every time
                    key = (p.i, p.mem_mb, p.tasks, ts.name)
                    got = cache.get(key)
                    if got is None:
                        use = self._use(pool, ts, p)
                        got = (use, _node_allocation(t, use, p, ts))
                        if len(cache) > 100_000:
                            cache.clear()
                        cache[key] = got
                    use, na = got
                    if use.core_bits == 1 and not use.gpu_bits and not use.gres:
                        units.append(use)
                        umask |= 1 << p.i
                    else:
                        pool.take(use)
                    uses.append(use)
                    nodes.append(na)
                    continue
                use = self._use(pool, ts, p)
                pool.take(use)
                uses.append(use)
                nodes.append(_node_allocation(t, use, p, ts))
        if units:
            pool.take_units(units, umask)
        alloc = Allocation(partition, tuple(na for got in per_set for na in got))
        placed = tuple(u for got in set_uses for u in got)
        # the next cycle finds it running: no need to re-compile
        remember(t, alloc, placed, umask if len(units) == len(placed) else 0)
        return Placement(alloc, placed)


    def _commit_units(self, shape: Shape, partition: str, pool: Pool,
                      picks: list[Pick]) -> Placement | None:
        """``commit`` of one task set on whole one-core nodes, one task and the same memory
        each (what ``SetPlacer._unit`` chooses): the per-node uses and allocations are the
        same objects every time, looked up and taken in one batch; ``None`` otherwise."""
        ts = shape.sets[0]
        if ts.gres or len(set(map(_PICK_KIND, picks))) != 1:
            return None
        p0 = picks[0]
        if p0.tasks != 1 or p0.whole or p0.ncores != 1 or p0.ngpus:
            return None
        t = self.table
        idx = list(map(_PICK_NODE, picks))
        mask = sum(map((1).__lshift__, idx))
        if len(set(idx)) != len(idx) or mask & ~t.unit_mask or mask & ~pool.ge_cores[1]:
            return None  # not distinct free one-core nodes: the general path decides
        row = self._unit_rows.get((p0.mem_mb, ts.name)) or self._unit_row(p0, ts)
        return self._take_row(partition, pool, row, idx, mask)

    def _take_row(self, partition: str, pool: Pool,
                  row: tuple[list[NodeUse | None], list[NodeAllocation | None]],
                  idx: list[int], mask: int) -> Placement:
        """Take nodes ``idx`` (``mask``) with the row's per-node uses and allocations."""
        uses = tuple(map(row[0].__getitem__, idx))
        nodes = tuple(map(row[1].__getitem__, idx))
        pool.take_units(uses, mask)  # type: ignore[arg-type]
        alloc = Allocation(partition, nodes)  # type: ignore[arg-type]
        remember(self.table, alloc, uses, mask)  # type: ignore[arg-type]
        return Placement(alloc, uses)  # type: ignore[arg-type]

    def _unit_row(self, p0: Pick, ts: TaskSet) -> tuple[list[NodeUse | None],
                                                        list[NodeAllocation | None]]:
        """Per node index: the use and the allocation of one task of ``ts`` on that
        one-core node (``p0``'s memory), the same objects every time."""
        t = self.table
        key = (p0.mem_mb, ts.name)
        row = self._unit_rows.get(key)
        if row is None:
            if len(self._unit_rows) > 64:
                self._unit_rows.clear()
            uses_row: list[NodeUse | None] = [None] * len(t)
            nas_row: list[NodeAllocation | None] = [None] * len(t)
            for i in iter_bits(t.unit_mask):
                use = NodeUse(i, 1, p0.mem_mb, 0, ())
                uses_row[i] = use
                nas_row[i] = _node_allocation(t, use, p0, ts)
            row = self._unit_rows[key] = (uses_row, nas_row)
        return row

    def unit_take(self, shape: Shape, partition: str, pool: Pool, cand: int,
                  required: int) -> Placement | None:
        """``unit_fits`` on ``pool`` then ``commit`` to it (``cand``/``required`` from
        ``unit_plan``), in one step on a one-class cluster: the nodes ``SetPlacer._unit``
        chooses (required first, then the lowest free) are taken from the per-node rows of
        ``_commit_units`` without building picks. The same placement either way."""
        t = self.table
        ts = shape.sets[0]
        ge = pool.ge_cores
        if shape.exclusive or len(t.class_specs) != 1 or len(ge) < 2:
            chosen = self.unit_fits(shape, pool, cand, required)
            return None if chosen is None else self.commit(shape, partition, pool, chosen)
        free = cand & ge[1]
        idx = unit_nodes(ts, free, required)
        if idx is None:
            return None
        if not idx:
            return self.commit(shape, partition, pool, [[]])
        d = self.sets.demand_of(ts, 0)
        mem = d.mem_per_node or d.mem_per_task
        # one class: every node has t.mem[idx[0]]; a node with a free core has all of it
        # unless memory was taken without a core (``Pool.loose_mem``)
        if (pool.loose_mem or mem > t.mem[idx[0]]) and (
                min(map(pool.mem_free.__getitem__, idx)) < mem):
            return None  # memory held by a suspended job, or a node too small
        row = self._unit_rows.get((mem, ts.name)) or self._unit_row(
            Pick(idx[0], 1, 1, mem, 0, False), ts)
        if required:
            mask = sum(map((1).__lshift__, idx))
        else:  # the lowest free nodes up to the last one chosen
            mask = free & ((2 << idx[-1]) - 1)
        return self._take_row(partition, pool, row, idx, mask)


_PICK_KIND = attrgetter("mem_mb", "tasks", "ncores", "ngpus", "whole")
_PICK_NODE = attrgetter("i")


def _node_allocation(t: NodeTable, use: NodeUse, p: Pick, ts: TaskSet) -> NodeAllocation:
    if p.numa_slots:
        return _numa_allocation(t, use, p, ts)
    i = use.i
    cores: list[int] = []
    m = use.core_bits
    while m:
        low = m & -m
        cores.append(low.bit_length() - 1)
        m ^= low
    gpus: list[int] = []
    types: list[str] = []
    m = use.gpu_bits
    while m:
        low = m & -m
        pos = low.bit_length() - 1
        gpus.append(t.gpu_ids[i][pos])
        types.append(t.gpu_types[i][pos])
        m ^= low
    return NodeAllocation(
        node=t.names[i], cores=tuple(cores), cpus=len(cores) * t.tpc[i], mem_mb=use.mem_mb,
        gpus=tuple(gpus), gpu_types=tuple(types), gres=use.gres, tasks=p.tasks, group=ts.name,
    )


def _numa_allocation(t: NodeTable, use: NodeUse, p: Pick, ts: TaskSet) -> NodeAllocation:
    """The allocation of a pick with per-task slots: cores (and GPUs) listed task by
    task, task ``k`` of this node holding the ``k``-th run of ``cores_per_task`` cores
    (``ts.gpus_per_task`` GPUs); whatever else a whole node gives follows, ascending."""
    i = use.i
    cores: list[int] = []
    gpu_pos: list[int] = []
    for c, g in p.numa_slots:
        cores.extend(iter_bits(c))
        gpu_pos.extend(iter_bits(g))
    seen_c, seen_g = set(cores), set(gpu_pos)
    cores.extend(b for b in iter_bits(use.core_bits) if b not in seen_c)
    gpu_pos.extend(b for b in iter_bits(use.gpu_bits) if b not in seen_g)
    return NodeAllocation(
        node=t.names[i], cores=tuple(cores), cpus=len(cores) * t.tpc[i], mem_mb=use.mem_mb,
        gpus=tuple(t.gpu_ids[i][b] for b in gpu_pos),
        gpu_types=tuple(t.gpu_types[i][b] for b in gpu_pos), gres=use.gres, tasks=p.tasks,
        group=ts.name,
    )


def task_cores(alloc: NodeAllocation, cores_per_task: int) -> list[tuple[int, ...]]:
    """Each task's cores on an allocation entry of a task group with a NUMA policy
    (``_numa_allocation``'s order): task ``k`` holds the ``k``-th run."""
    c = alloc.cores
    return [c[k * cores_per_task:(k + 1) * cores_per_task] for k in range(alloc.tasks)]
