"""Node choice for one task set: fixed (uniform) and flexible sets, by pack/spread/topology.

* **Uniform** sets (the same tasks on each of ``nodes_min..nodes_max`` nodes): candidates are
  narrowed with the summary masks (free cores and GPUs at least the per-node need), counted
  in O(1) for early rejection, then walked in the mode's order, checking memory, typed
  GPUs and GRES per node, until ``nodes_max`` nodes are found (as many as are free, never
  fewer than ``nodes_min``).
* **Flexible** sets (``T`` tasks over ``nodes_min..nodes_max`` nodes, >= 1 task each): in
  pack mode the best-fitting single node that can hold all tasks wins; otherwise nodes are
  filled most-free first (fewest nodes), keeping one task back for every node still needed
  to reach ``nodes_min``. ``spread_tasks`` (``--spread-job``) deals tasks round-robin.
* **Topology**: nodes are grouped by leaf switch; a job that fits under one switch gets the
  best-fitting switch (fewest usable nodes that suffice); otherwise, with a switch tree,
  the lowest upper switch whose subtree holds the job (``tree.subtree_leaves``), and
  without one (or when no subtree suffices) leaf switches in decreasing capacity, so the
  job spans as few switches as possible.

Everything here reads counts and masks only; exact cores/GPUs come later (``within``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from corral.core.nodes import NodeTable, iter_bits, lowest_bits
from corral.core.placement.numa import slots as numa_slots
from corral.core.placement.order import pack_order, spread_order
from corral.core.placement.tree import subtree_leaves
from corral.core.pool import Pool
from corral.core.shape import TaskSet


@dataclass(slots=True)
class Pick:
    """Count-level choice for one node of one task set."""

    i: int
    tasks: int
    ncores: int
    mem_mb: int
    ngpus: int
    whole: bool = False
    # a task group with a NUMA policy: each task's (core mask, GPU mask) on this node,
    # chosen on the view the pick was made on (``corral.core.placement.numa``)
    numa_slots: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Demand:
    """A task set's needs on one node class."""

    cores_per_task: int
    mem_per_task: int  # 0 when memory is per node
    mem_per_node: int  # fixed per node (0 when per task)


def demand(ts: TaskSet, table: NodeTable, cls: int) -> Demand:
    """Per-node needs on node class ``cls``; a set with a memory overhead (a VM job, on
    one node) needs its whole memory plus the overhead as a fixed per-node amount
    (``--mem=0``, the whole node, already holds it)."""
    d = _demand(ts, table, cls)
    if not ts.mem_overhead_mb or ts.mem_per_node_mb == 0:
        return d
    per_node = d.mem_per_node or d.mem_per_task * max(1, ts.tasks)
    return Demand(d.cores_per_task, 0, per_node + ts.mem_overhead_mb)


def _demand(ts: TaskSet, table: NodeTable, cls: int) -> Demand:
    spec = table.class_specs[cls]
    tpc = max(1, spec.threads_per_core)
    cptc = -(-ts.cpus_per_task // tpc)
    if ts.mem_per_node_mb is not None:
        return Demand(cptc, 0, spec.mem_mb if ts.mem_per_node_mb == 0 else ts.mem_per_node_mb)
    if ts.mem_per_task_mb is not None:
        return Demand(cptc, ts.mem_per_task_mb, 0)
    share = spec.mem_mb // max(1, spec.cpus)
    return Demand(cptc, share * ts.cpus_per_task, 0)


def unit_nodes(ts: TaskSet, free: int, required: int) -> list[int] | None:
    """One-core nodes for ``ts`` (a task per node) among the ``free`` ones: the
    ``required`` nodes, then the lowest free, ``tasks`` of them (down to ``min_tasks`` for
    gangs); ``None`` when too few are free."""
    if required & ~free:
        return None
    want = ts.nodes_max if ts.nodes_max < ts.tasks else ts.tasks  # min/max, no builtins
    least = ts.nodes_min if ts.nodes_min > ts.min_tasks else ts.min_tasks
    if free.bit_count() < least:
        return None
    chosen = iter_bits(required) if required else []
    if len(chosen) < want:
        chosen += lowest_bits(free & ~required, want - len(chosen))
    return None if len(chosen) < least else chosen


class SetPlacer:
    """Selection of nodes for task sets on a pool-like view (counts and masks)."""

    __slots__ = ("table", "_demands", "_unit_picks")

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._demands: dict[tuple[int, int], tuple[TaskSet, Demand]] = {}
        # one-core nodes: the (immutable in use) pick of every node, per (memory, whole)
        self._unit_picks: dict[tuple[int, bool], list[Pick]] = {}

    def demand_of(self, ts: TaskSet, cls: int) -> Demand:
        key = (id(ts), cls)
        got = self._demands.get(key)
        if got is None or got[0] is not ts:
            if len(self._demands) > 100_000:
                self._demands.clear()
            got = (ts, demand(ts, self.table, cls))
            self._demands[key] = got
        return got[1]

    def cap(self, view: Pool, i: int, ts: TaskSet, whole: bool) -> int:
        """Tasks of ``ts`` node ``i`` can take now (0 when its per-node part does not fit)."""
        d = self.demand_of(ts, self.table.class_of[i])
        if whole:
            # an exclusive node must be idle; it is taken whole, so only hardware counts
            t = self.table
            if not view.idle >> i & 1:
                return 0
            c = t.cores[i] // d.cores_per_task
            if d.mem_per_node > t.mem[i]:
                return 0
            if d.mem_per_task:
                c = min(c, t.mem[i] // d.mem_per_task)
            g = (t.gpu_type_masks[i].get(ts.gpu_type, 0).bit_count() if ts.gpu_type
                 else t.ngpus[i]) - ts.gpus_per_node
        else:
            c = view.cores_free[i] // d.cores_per_task
            if d.mem_per_node:
                if d.mem_per_node > view.mem_free[i]:
                    return 0
            elif d.mem_per_task:
                c = min(c, view.mem_free[i] // d.mem_per_task)
            g = view.typed_gpus_free(i, ts.gpu_type) - ts.gpus_per_node
        if g < 0:
            return 0
        if ts.gpus_per_task:
            c = min(c, g // ts.gpus_per_task)
        if ts.hi and c > ts.hi:
            c = ts.hi
        if ts.gres and c > 0 and not view.gres_fit(i, ts.gres):
            return 0
        if ts.numa and c > 0:
            c = len(numa_slots(view, i, ts.numa, c, d.cores_per_task, ts.gpus_per_task,
                               ts.gpu_type, whole))
        return c

    def _pick(self, view: Pool, i: int, ts: TaskSet, tasks: int, whole: bool,
              extra_gpus: int = 0) -> Pick:
        d = self.demand_of(ts, self.table.class_of[i])
        mem = d.mem_per_node or tasks * d.mem_per_task
        ngpus = ts.gpus_per_node + tasks * ts.gpus_per_task + extra_gpus
        if ts.numa:
            got = tuple(numa_slots(view, i, ts.numa, tasks, d.cores_per_task,
                                   ts.gpus_per_task, ts.gpu_type, whole))
            return Pick(i, tasks, tasks * d.cores_per_task, mem, ngpus, whole, got)
        return Pick(i, tasks, tasks * d.cores_per_task, mem, ngpus, whole)

    def _min_cores(self, ts: TaskSet, mask: int, tasks: int) -> int:
        t = self.table
        if len(t.class_specs) == 1:
            return tasks * self.demand_of(ts, 0).cores_per_task
        best = 1 << 30
        for cls, cm in enumerate(t.class_masks):
            if cm & mask:
                best = min(best, tasks * self.demand_of(ts, cls).cores_per_task)
        return best if best < 1 << 30 else 0

    def _order(self, view: Pool, mask: int, min_cores: int, spread: bool,
               avoid: int) -> Iterator[int]:
        if spread:
            return spread_order(view, mask, min_cores, avoid)
        return pack_order(view, mask, min_cores, avoid)

    def _narrow(self, view: Pool, ts: TaskSet, mask: int, tasks_per_node: int,
                whole: bool) -> tuple[int, int]:
        """Candidates with enough free cores/GPUs for ``tasks_per_node``; and that core need."""
        min_c = self._min_cores(ts, mask, tasks_per_node)
        if whole:
            return mask & view.idle, min_c
        top = len(view.ge_cores) - 1
        if min_c > top:
            return 0, min_c
        mask &= view.ge_cores[min_c]
        need_g = ts.gpus_per_node + tasks_per_node * ts.gpus_per_task
        if need_g:
            if need_g >= len(view.ge_gpus):
                return 0, min_c
            mask &= view.ge_gpus[need_g]
        return mask, min_c

    # -- uniform ----------------------------------------------------------------------------

    def uniform(self, view: Pool, ts: TaskSet, cand: int, required: int, spread: bool,
                whole: bool, avoid: int) -> list[Pick] | None:
        hi = ts.hi
        picks: list[Pick] = []
        for i in iter_bits(required):
            if self.cap(view, i, ts, whole) < hi:
                return None
            picks.append(self._pick(view, i, ts, hi, whole))
        target = ts.nodes_max
        if len(picks) > target:
            return None
        if len(picks) >= target:
            return picks
        mask, min_c = self._narrow(view, ts, cand & ~required, hi, whole)
        if mask.bit_count() < ts.nodes_min - len(picks):
            return None
        for i in self._order(view, mask, min_c, spread, avoid):
            if self.cap(view, i, ts, whole) >= hi:
                picks.append(self._pick(view, i, ts, hi, whole))
                if len(picks) >= target:
                    break
        return picks if len(picks) >= ts.nodes_min else None

    # -- flexible ---------------------------------------------------------------------------

    def flexible(self, view: Pool, ts: TaskSet, cand: int, required: int, spread: bool,
                 whole: bool, avoid: int, spread_tasks: bool) -> list[Pick] | None:
        total = ts.tasks
        if total <= 0:
            return []
        if (ts.cpus_per_task == 1 and not cand & ~self.table.unit_mask
                and not (ts.gpus_per_node or ts.gpus_per_task or ts.gpus_total or ts.gres)):
            return self._unit(view, ts, cand, required, whole)
        mask, min_c = self._narrow(view, ts, cand & ~required, 1, whole)
        if not required and mask.bit_count() < ts.nodes_min:
            return None
        if (not required and not spread and not spread_tasks and ts.nodes_min <= 1
                and not ts.gpus_total and (not ts.hi or ts.hi >= total)):
            for i in pack_order(view, mask, self._min_cores(ts, mask, total), avoid):
                if self.cap(view, i, ts, whole) >= total:
                    return [self._pick(view, i, ts, total, whole)]
        caps: list[tuple[int, int]] = []
        for i in iter_bits(required):
            c = self.cap(view, i, ts, whole)
            if c < 1:
                return None
            caps.append((i, c))
        if ts.gpus_total:
            order: Iterator[int] = self._gpu_order(view, mask)
        else:
            order = spread_order(view, mask, min_c, avoid)
        if spread_tasks:
            return self._deal(view, ts, caps, order, whole)
        got = self._greedy(view, ts, caps, order, whole)
        if got is None and not ts.gpus_total and ts.nodes_max < mask.bit_count():
            # the node bound bites: retry with the largest capacities first (exact order)
            ranked = sorted(((self.cap(view, i, ts, whole), i) for i in iter_bits(mask)),
                            key=lambda ci: (-ci[0], avoid >> ci[1] & 1, ci[1]))
            got = self._greedy(view, ts, caps, (i for c, i in ranked if c >= 1), whole)
        return got

    def _greedy(self, view: Pool, ts: TaskSet, caps: list[tuple[int, int]],
                order: Iterator[int], whole: bool) -> list[Pick] | None:
        """Fill nodes in ``order`` (``caps``: required nodes first), keeping a task back for
        every node still needed to reach ``nodes_min``."""
        total = ts.tasks
        picks: list[Pick] = []
        left = total
        gleft = ts.gpus_total

        def add(i: int, c: int) -> None:
            nonlocal left, gleft
            reserve = max(0, ts.nodes_min - len(picks) - 1)
            if gleft and ts.gpus_per_task == 0:
                # keep a task for every further node the remaining GPUs will need
                here = max(0, min(gleft, view.typed_gpus_free(i, ts.gpu_type)
                                  - ts.gpus_per_node))
                per_node = max(1, self.table.max_gpus - ts.gpus_per_node)
                reserve = max(reserve, -(-(gleft - here) // per_node))
            tk = max(1, min(c, left - reserve))
            extra = 0
            if gleft:
                spare = (view.typed_gpus_free(i, ts.gpu_type) - ts.gpus_per_node
                         - tk * ts.gpus_per_task)
                extra = max(0, min(gleft, spare))
            picks.append(self._pick(view, i, ts, tk, whole, extra))
            left -= tk
            gleft -= extra

        for i, c in caps:
            if left <= 0 or len(picks) >= ts.nodes_max:
                return None
            add(i, c)
        if left > 0 or gleft > 0 or len(picks) < ts.nodes_min:
            for i in order:
                if len(picks) >= ts.nodes_max or left <= 0:
                    break
                c = self.cap(view, i, ts, whole)
                if c >= 1:
                    add(i, c)
                    if left <= 0 and gleft <= 0 and len(picks) >= ts.nodes_min:
                        break
        placed = total - left
        if placed < ts.min_tasks or gleft > 0 or len(picks) < ts.nodes_min:
            return None
        return picks

    def _unit(self, view: Pool, ts: TaskSet, cand: int, required: int,
              whole: bool) -> list[Pick] | None:
        """One-core nodes: each task takes a whole free node, so ``tasks`` nodes are needed
        (fewer, down to ``min_tasks``, for gangs); no per-node search at all: the required
        nodes, then the lowest free ones."""
        t = self.table
        chosen = unit_nodes(ts, cand & view.ge_cores[1] if len(view.ge_cores) > 1 else 0,
                            required)
        if chosen is None:
            return None
        mem_free = view.mem_free
        cache = self._unit_picks
        if len(t.class_specs) == 1:
            d = self.demand_of(ts, 0)
            mem = d.mem_per_node or d.mem_per_task
            if chosen and min(map(mem_free.__getitem__, chosen)) < mem:
                return None  # memory held by a suspended job, or a node too small
            key = (mem, whole)
            row = cache.get(key)
            if row is None:
                row = cache[key] = [Pick(i, 1, 1, mem, 0, whole) for i in range(len(t))]
            return list(map(row.__getitem__, chosen))
        class_of = t.class_of
        picks: list[Pick] = []
        for i in chosen:
            d = self.demand_of(ts, class_of[i])
            mem = d.mem_per_node or d.mem_per_task
            if mem > mem_free[i]:
                return None
            picks.append(Pick(i, 1, 1, mem, 0, whole))
        return picks

    def _gpu_order(self, view: Pool, mask: int) -> Iterator[int]:
        ge = view.ge_gpus
        rest = mask
        g = len(ge) - 1
        while rest and g >= 0:
            bucket = rest & ge[g]
            if bucket:
                yield from iter_bits(bucket)
                rest ^= bucket
            g -= 1

    def _deal(self, view: Pool, ts: TaskSet, caps: list[tuple[int, int]],
              order: Iterator[int], whole: bool) -> list[Pick] | None:
        for i in order:
            if len(caps) >= min(ts.nodes_max, ts.tasks):
                break
            c = self.cap(view, i, ts, whole)
            if c >= 1:
                caps.append((i, c))
        if len(caps) < ts.nodes_min:
            return None
        counts = [0] * len(caps)
        left = ts.tasks
        while left:
            moved = False
            for k, (_, c) in enumerate(caps):
                if left and counts[k] < c:
                    counts[k] += 1
                    left -= 1
                    moved = True
            if not moved:
                break
        if ts.tasks - left < ts.min_tasks:
            return None
        return [self._pick(view, i, ts, n, whole)
                for (i, _), n in zip(caps, counts, strict=True) if n]

    # -- topology ---------------------------------------------------------------------------

    def topology(self, view: Pool, ts: TaskSet, cand: int, required: int, whole: bool,
                 avoid: int) -> list[Pick] | None:
        """Fewest switches: best-fitting single switch, else switches by capacity."""
        t = self.table
        per = ts.hi if ts.fixed else 1
        mask, _ = self._narrow(view, ts, cand | required, per, whole)
        mask |= required
        caps: dict[int, list[tuple[int, int]]] = {}
        for i in iter_bits(mask):
            c = self.cap(view, i, ts, whole)
            if c >= per:
                caps.setdefault(t.switch_of[i], []).append((i, c))
        for i in iter_bits(required):
            if all(i != k for k, _ in caps.get(t.switch_of[i], [])):
                return None
        fixed = ts.fixed and not ts.gpus_total
        need = ts.nodes_max if fixed else ts.tasks

        def value(items: list[tuple[int, int]]) -> int:
            if fixed:
                return len(items)
            return sum(sorted((c for _, c in items), reverse=True)[: ts.nodes_max])

        req_sw = {t.switch_of[i] for i in iter_bits(required)}
        switches = sorted(caps, key=lambda s: (s not in req_sw, -value(caps[s]), s))
        single = [s for s in caps if value(caps[s]) >= need and req_sw <= {s}]
        tree = None
        if not single and any(t.switch_up[s] for s in caps):
            tree = subtree_leaves({s: value(caps[s]) for s in caps}, need, req_sw,
                                  t.switch_up, t.switch_names)
        if single:
            best = min(single, key=lambda s: (value(caps[s]), s))
            chosen = [best]
        elif tree is not None:
            chosen = tree
        else:
            chosen = []
            got = 0
            for s in switches:
                chosen.append(s)
                got += value(caps[s])
                if got >= need:
                    break
        sub = 0
        for s in chosen:
            for i, _ in caps[s]:
                sub |= 1 << i
        if fixed:
            return self.uniform(view, ts, sub & ~required, required, False, whole, avoid)
        return self.flexible(view, ts, sub & ~required, required, False, whole, avoid, False)

    def switch_count(self, picks: list[Pick]) -> int:
        return len({self.table.switch_of[p.i] for p in picks})
