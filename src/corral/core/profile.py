"""``Profile``: free cores, memory and GPUs per node over time, for backfill and estimates.

Each node has a step function: ``times[k]`` (ascending, ``times[0] = now``) and the free
counts valid on ``[times[k], times[k+1])`` (the last step lasts forever). It starts from the
pool (free now) and adds back what every running job holds at its end, which is its start
plus its *time limit* (never a real run time: backfill must not rely on what it cannot
know). Jobs started this cycle end the same way; reservations subtract over
``[start, start + time limit)``. End times are rounded up to ``bf_resolution_s`` (a
resolution of 0 or 1 keeps exact times), which can only make plans more cautious.

Two questions are asked of it:

* ``window_view(d)``: the pool as a job starting *now* for ``d`` seconds may use it, i.e.
  each node's minimum over ``[now, now + d)``. Only reservations ever lower a node's free
  counts in the future, so only nodes holding one ("dirty" nodes) differ from the pool;
  the view is a copy of the pool with those nodes capped, cached per horizon.
  A job placed on this view delays no reservation (the extra-resources rule of EASY
  falls out: nodes and cores the reservation does not need are usable at any length).
* ``earliest(...)``: the first time a job fits for its whole duration. Uniform jobs (same
  need on every node) use an exact sweep over each node's feasible start intervals,
  O(total steps). Other shapes (flexible, gangs, topology, switch limits) check candidate
  times where the aggregate free cores suffice, on a view of per-node window minimums.

Typed GPUs and GRES are tracked as plain counts here (exact at start time), and suspended
jobs never release in the profile (they do not end on their own).

Reference: the availability profile of Mu'alem & Feitelson, "Utilization, predictability,
workloads, and user runtime estimates in scheduling the IBM SP2 with backfilling" (IEEE
TPDS 2001); Slurm's ``node_space_map`` plays the same part in ``sched/backfill``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from corral.core.ends import INF, round_up
from corral.core.nodes import bits_of, iter_bits
from corral.core.pool import NodeUse, Pool
from corral.core.shape import TaskSet

Release = tuple[float, Sequence[NodeUse], bool]  # end time, uses, cores held (not suspended)


class NodeSteps:
    __slots__ = ("times", "cores", "mem", "gpus")

    def __init__(self, now: float, cores: int, mem: int, gpus: int) -> None:
        self.times: list[float] = [now]
        self.cores: list[int] = [cores]
        self.mem: list[int] = [mem]
        self.gpus: list[int] = [gpus]

    def split(self, t: float) -> int:
        """Index of the step starting exactly at ``t`` (inserted if needed; ``t >= now``)."""
        times = self.times
        k = bisect_left(times, t)
        if k < len(times) and times[k] == t:
            return k
        self.times.insert(k, t)
        self.cores.insert(k, self.cores[k - 1])
        self.mem.insert(k, self.mem[k - 1])
        self.gpus.insert(k, self.gpus[k - 1])
        return k

    def add(self, start: float, end: float, c: int, m: int, g: int) -> None:
        """Add ``(c, m, g)`` on ``[start, end)`` (negative values subtract)."""
        if end <= start:
            return
        a = self.split(start)
        b = self.split(end) if end != INF else len(self.times)
        cores, mem, gpus = self.cores, self.mem, self.gpus
        for k in range(a, b):
            cores[k] += c
            mem[k] += m
            gpus[k] += g

    def window_min(self, start: float, end: float,
                   through: bool = False) -> tuple[int, int, int]:
        """Minimum free counts over ``[start, end)``, or ``[start, end]`` with ``through``
        (a closed end, so that a step starting exactly at ``end`` counts: no epsilon, which
        would vanish at trace-sized absolute times such as 2e7 s)."""
        times = self.times
        k = bisect_right(times, start) - 1
        c, m, g = self.cores[k], self.mem[k], self.gpus[k]
        k += 1
        n = len(times)
        while k < n and (times[k] < end or (through and times[k] == end)):
            c = min(c, self.cores[k])
            m = min(m, self.mem[k])
            g = min(g, self.gpus[k])
            k += 1
        return c, m, g


class Profile:
    """Per-node availability over time (see the module docstring)."""

    __slots__ = ("pool", "now", "resolution", "releases", "steps", "dirty", "res_starts",
                 "_views", "_built")

    def __init__(self, pool: Pool, now: float, resolution: int,
                 releases: list[Release]) -> None:
        self.pool = pool
        self.now = now
        self.resolution = resolution
        self.releases = releases  # running jobs; extended by jobs started this cycle
        self.steps: dict[int, NodeSteps] = {}
        self.dirty: set[int] = set()  # nodes with a future decrease (a reservation)
        self.res_starts: list[float] = []  # sorted distinct reservation start times
        # window views keyed by the last reservation start inside their window
        self._views: dict[float, Pool] = {}
        self._built = False

    def end_of(self, start: float, duration_s: float) -> float:
        return round_up(start + duration_s, self.resolution)

    # -- building ---------------------------------------------------------------------------

    def _build(self) -> None:
        if self._built:
            return
        self._built = True
        pool = self.pool
        now = self.now
        per_node: dict[int, list[tuple[float, int, int, int]]] = {}
        t = pool.table
        for end, uses, cores in self.releases:
            end = max(end, now)
            if end == INF:
                continue
            for u in uses:
                nc = u.core_bits.bit_count() if (cores and u.core_bits > 0) else (
                    -u.core_bits if cores and u.core_bits < 0 else 0)
                per_node.setdefault(u.i, []).append(
                    (end, nc, u.mem_mb, u.gpu_bits.bit_count()))
        for i in range(len(t)):
            st = NodeSteps(now, pool.cores_free[i], pool.mem_free[i], pool.gpus_free[i])
            rel = per_node.get(i)
            if rel:
                rel.sort()
                c, m, g = st.cores[0], st.mem[0], st.gpus[0]
                for end, nc, nm, ng in rel:
                    c += nc
                    m += nm
                    g += ng
                    if end <= now:
                        st.cores[0], st.mem[0], st.gpus[0] = c, m, g
                    elif st.times[-1] == end:
                        st.cores[-1], st.mem[-1], st.gpus[-1] = c, m, g
                    else:
                        st.times.append(end)
                        st.cores.append(c)
                        st.mem.append(m)
                        st.gpus.append(g)
            self.steps[i] = st

    # -- updates ----------------------------------------------------------------------------

    def started(self, uses: Sequence[NodeUse], end: float) -> None:
        """A job started now (already taken from the pool) and ends at ``end``."""
        if not self._built:
            self.releases.append((end, uses, True))
            return
        for u in uses:
            st = self.steps[u.i]
            nc, nm, ng = u.core_bits.bit_count(), u.mem_mb, u.gpu_bits.bit_count()
            st.add(self.now, end, -nc, -nm, -ng)
        # keep cached window views in step with the pool instead of rebuilding them
        for h, view in self._views.items():
            for u in uses:
                if u.i in self.dirty:
                    self._recap(view, h, u.i)
                else:
                    view.take(u)

    def _recap(self, view: Pool, h: float, i: int) -> None:
        _copy_node(view, self.pool, i)
        c, m, g = self.steps[i].window_min(self.now, h, through=True)
        _cap_node(view, i, c, m, g)

    def _refresh_views(self, nodes: Iterable[int], start: float) -> None:
        """Reservations changed on ``nodes`` from ``start``: fix the views that see it."""
        if len(self._views) > 32:
            self._views.clear()
        for h, view in self._views.items():
            if h >= start:
                for i in nodes:
                    self._recap(view, h, i)

    def reserve(self, amounts: Iterable[tuple[int, int, int, int]], start: float,
                end: float) -> None:
        """Hold ``(node, cores, mem, gpus)`` amounts on ``[start, end)``."""
        self._build()
        start = max(start, self.now)
        nodes = []
        for i, c, m, g in amounts:
            self.steps[i].add(start, end, -c, -m, -g)
            if i not in self.dirty:
                self.dirty.add(i)
            nodes.append(i)
        k = bisect_left(self.res_starts, start)
        if k == len(self.res_starts) or self.res_starts[k] != start:
            self.res_starts.insert(k, start)
        self._refresh_views(nodes, start)

    def unreserve(self, amounts: Iterable[tuple[int, int, int, int]], start: float,
                  end: float) -> None:
        """Give back a reservation made with ``reserve`` (same arguments)."""
        start = max(start, self.now)
        nodes = []
        for i, c, m, g in amounts:
            self.steps[i].add(start, end, c, m, g)
            nodes.append(i)
        self._refresh_views(nodes, start)

    # -- queries ----------------------------------------------------------------------------

    def window_view(self, duration_s: float) -> Pool:
        """The pool capped by each node's minimum over ``[now, now + duration)``."""
        if not self.dirty:
            return self.pool
        end = self.end_of(self.now, duration_s)
        k = bisect_left(self.res_starts, end)
        if k == 0:
            return self.pool
        h = self.res_starts[k - 1]  # every end in (h, next start] sees the same minimums
        view = self._views.get(h)
        if view is None:
            view = self.pool.copy()
            for i in sorted(self.dirty):
                c, m, g = self.steps[i].window_min(self.now, h, through=True)
                _cap_node(view, i, c, m, g)
            if len(self._views) > 32:
                self._views.clear()
            self._views[h] = view
        return view

    def view_at(self, start: float, end: float, mask: int) -> Pool:
        """A pool-like view of per-node minimums over ``[start, end)`` for ``mask`` nodes."""
        self._build()
        pool = self.pool
        t = pool.table
        cores = [0] * len(t)
        mem = [0] * len(t)
        gpus = [0] * len(t)
        for i in bits_of(mask & pool.up):
            c, m, g = self.steps[i].window_min(start, end)
            cores[i], mem[i], gpus[i] = max(c, 0), max(m, 0), max(g, 0)
        return virtual_pool(pool, mask & pool.up, cores, mem, gpus)

    def earliest_uniform(self, ts: TaskSet, mask: int, needs: Sequence[tuple[int, int, int]],
                         duration_s: float, required: int = 0,
                         whole: bool = False) -> tuple[float, list[int]] | None:
        """Earliest start and nodes for ``ts.nodes_min..nodes_max`` nodes, a node of class
        ``c`` needing ``needs[c]`` (cores, MB, GPUs), for ``duration_s``; ``None`` when it
        never fits. Exact: every node's feasible start intervals are swept in time order."""
        self._build()
        now = self.now
        pool = self.pool
        t = pool.table
        class_of = t.class_of
        steps = self.steps
        events: list[tuple[float, int, int]] = []  # (time, kind 0=open 1=close, node)
        for i in bits_of((mask | required) & pool.up):
            if whole:
                nc, nm, ng = t.cores[i], t.mem[i], t.ngpus[i]
            else:
                nc, nm, ng = needs[class_of[i]]
            st = steps[i]
            times, cores, mem, gpus = st.times, st.cores, st.mem, st.gpus
            n = len(times)
            k = 0
            while k < n:
                if cores[k] >= nc and mem[k] >= nm and gpus[k] >= ng:
                    a = times[k]
                    k2 = k + 1
                    while k2 < n and cores[k2] >= nc and mem[k2] >= nm and gpus[k2] >= ng:
                        k2 += 1
                    b = times[k2] if k2 < n else INF
                    last = b - duration_s
                    if last >= a:
                        events.append((a, 0, i))
                        if last != INF:
                            events.append((last, 1, i))
                    k = k2
                else:
                    k += 1
        events.sort()
        active: dict[int, float] = {}  # node -> since when it could host the job
        want = max(ts.nodes_min, required.bit_count(), 1)
        k = 0
        n = len(events)
        while k < n:
            tnow = events[k][0]
            while k < n and events[k][0] == tnow and events[k][1] == 0:
                active[events[k][2]] = tnow
                k += 1
            if len(active) >= want and all(r in active for r in iter_bits(required)):
                # nodes that became usable last first: nodes free for longer (often free
                # now) stay available to backfill
                others = sorted((a for a in active if not required >> a & 1),
                                key=lambda a: (-active[a], a))
                chosen = iter_bits(required) + others[: max(0, ts.nodes_max - required.bit_count())]
                return max(tnow, now), chosen
            while k < n and events[k][0] == tnow:
                if events[k][1] == 1:
                    active.pop(events[k][2], None)
                else:
                    active[events[k][2]] = tnow
                k += 1
        return None

    def candidate_times(self, mask: int, horizon: float) -> list[float]:
        """Distinct step times of ``mask`` nodes in ``[now, horizon]``, ascending."""
        self._build()
        seen: set[float] = {self.now}
        for i in bits_of(mask & self.pool.up):
            for x in self.steps[i].times:
                if x <= horizon:
                    seen.add(x)
        return sorted(seen)

    def free_cores_at(self, mask: int, at: float) -> int:
        total = 0
        for i in bits_of(mask & self.pool.up):
            st = self.steps[i]
            total += st.cores[bisect_right(st.times, at) - 1]
        return total


def _cap_node(view: Pool, i: int, c: int, m: int, g: int) -> None:
    """Lower node ``i``'s free counts in ``view`` to at most ``(c, m, g)``, masks included."""
    bit = 1 << i
    c = max(c, 0)
    g = max(g, 0)
    if c < view.cores_free[i]:
        old = view.cores_free[i]
        view.core_mask[i] = _lowest(view.core_mask[i], c)
        view.cores_free[i] = c
        if view.up & bit:
            view.free_total += c - old
            for k in range(c + 1, old + 1):
                view.ge_cores[k] &= ~bit
        view.idle &= ~bit
    if m < view.mem_free[i]:
        view.mem_free[i] = max(m, 0)
        view.idle &= ~bit
        view.loose_mem = True
    if g < view.gpus_free[i]:
        old = view.gpus_free[i]
        view.gpu_mask[i] = _lowest(view.gpu_mask[i], g)
        view.gpus_free[i] = g
        if view.up & bit:
            for k in range(g + 1, old + 1):
                view.ge_gpus[k] &= ~bit
        view.idle &= ~bit


def _lowest(mask: int, count: int) -> int:
    """The ``count`` lowest set bits of ``mask``."""
    drop = mask.bit_count() - count
    if drop <= 0:
        return mask
    if drop < count:
        while drop:
            mask &= ~(1 << (mask.bit_length() - 1))
            drop -= 1
        return mask
    out = 0
    while mask and count:
        low = mask & -mask
        out |= low
        mask ^= low
        count -= 1
    return out


def _copy_node(view: Pool, pool: Pool, i: int) -> None:
    """Make node ``i`` of ``view`` equal to node ``i`` of ``pool``, summary masks included."""
    bit = 1 << i
    old_c, new_c = view.cores_free[i], pool.cores_free[i]
    old_g, new_g = view.gpus_free[i], pool.gpus_free[i]
    view.core_mask[i] = pool.core_mask[i]
    view.cores_free[i] = new_c
    if view.up & bit:
        view.free_total += new_c - old_c
    view.mem_free[i] = pool.mem_free[i]
    view.gpu_mask[i] = pool.gpu_mask[i]
    view.gpus_free[i] = new_g
    if view.up & bit:
        ge = view.ge_cores
        for k in range(new_c + 1, old_c + 1):
            ge[k] &= ~bit
        for k in range(old_c + 1, new_c + 1):
            ge[k] |= bit
        geg = view.ge_gpus
        for k in range(new_g + 1, old_g + 1):
            geg[k] &= ~bit
        for k in range(old_g + 1, new_g + 1):
            geg[k] |= bit
    view.idle = (view.idle & ~bit) | (pool.idle & bit)


def virtual_pool(base: Pool, mask: int, cores: list[int], mem: list[int],
                 gpus: list[int]) -> Pool:
    """A count-level pool (arbitrary lowest core/GPU bits) over the ``mask`` nodes."""
    t = base.table
    p = Pool.__new__(Pool)
    p.table = t
    p.up = mask
    p.cores_free = cores
    p.mem_free = mem
    p.gpus_free = gpus
    p.core_mask = [(1 << c) - 1 for c in cores]
    p.gpu_mask = [_lowest(t.full_gpu_mask[i], g) for i, g in enumerate(gpus)]
    p.gres_free = [dict(g) for g in t.gres] if t.has_gres else None
    idle = 0
    for i in bits_of(mask):
        if cores[i] == t.cores[i] and mem[i] == t.mem[i] and gpus[i] == t.ngpus[i]:
            idle |= 1 << i
    p.idle = idle
    p.version = 0
    p.approx = False
    p.free_total = 0
    p.loose_mem = True  # per-node minimums: memory and cores need not agree
    p._rebuild_masks()
    return p
