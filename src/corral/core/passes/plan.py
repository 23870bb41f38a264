"""Reservations: earliest starts on the profile, and conservative backfill's guarantees.

``Planner.earliest`` finds when a job can first run for its whole time limit: the exact
per-node sweep of ``Profile.earliest_uniform`` for uniform jobs, the same sweep on a
cautious uniform *proxy* (n nodes of k tasks) for flexible ones, the count-only
``CountProfile.earliest`` on one-core clusters, and otherwise (gangs, switch limits,
topology, GRES) a check of candidate times on per-node window minimums.

Conservative backfill keeps last cycle's reservations as guarantees (``preload``): they
are held in the profile until their own job is visited, which re-plans it no later than
before (Mu'alem & Feitelson's compression).
"""

from __future__ import annotations

from dataclasses import replace

from corral.core.config import PlacementMode
from corral.core.counts import CountProfile
from corral.core.decisions import Reserve
from corral.core.ends import INF
from corral.core.feasibility import Option
from corral.core.model.job import Job
from corral.core.passes.state import PassState
from corral.core.placement.select import demand
from corral.core.profile import Profile
from corral.core.shape import TaskSet

_EARLIEST_CHECKS = 64  # candidate times examined for non-uniform shapes


class Planner(PassState):
    """Reservations and earliest starts (see the module docstring)."""

    def preload(self, order: list[Job]) -> None:
        """Conservative backfill: hold last cycle's reservations of still-pending jobs, so
        jobs visited earlier cannot take a later job's slot (Mu'alem & Feitelson's
        compression: each job is re-planned only after its own old slot is given back)."""
        pending = {j.id for j in order}
        prof: Profile | CountProfile | None = None
        for r in self.snap.reservations:
            if r.job_id not in pending or r.job_id in self.carried:
                continue
            if r.end_time <= self.now:
                continue
            if not r.nodes and r.amounts and self.unit:  # a count-only reservation
                amounts_c = [(-1, 1, 0, 0)] * len(r.amounts)
                self.profile().reserve(amounts_c, r.start_time, r.end_time)
                self.carried[r.job_id] = (r, amounts_c)
                continue
            if len(r.amounts) != len(r.nodes):
                continue
            amounts: list[tuple[int, int, int, int]] = []
            for name, (c, m, g) in zip(r.nodes, r.amounts, strict=True):
                i = self.table.index.get(name)
                if i is None or not self.pool.up >> i & 1:
                    break
                amounts.append((i, c, m, g))
            else:
                prof = prof or self.profile()
                prof.reserve(amounts, r.start_time, r.end_time)
                self.carried[r.job_id] = (r, amounts)

    def release_carried(self, job: Job) -> Reserve | None:
        got = self.carried.pop(job.id, None)
        if got is None:
            return None
        r, amounts = got
        self.profile().unreserve(amounts, r.start_time, r.end_time)
        return r

    def recarry(self, job: Job, r: Reserve) -> None:
        if not r.nodes:
            amounts = [(-1, 1, 0, 0)] * len(r.amounts)
        else:
            amounts = [(self.table.index[n], c, m, g) for n, (c, m, g) in
                       zip(r.nodes, r.amounts, strict=True)]
        self.profile().reserve(amounts, r.start_time, r.end_time)
        self.carried[job.id] = (r, amounts)

    def reserve(self, job: Job, opts: list[Option], window: float | None,
                commit: bool) -> float | None:
        """Earliest start over ``opts``; record a ``Reserve`` (and hold it in the profile)."""
        prof = self.profile()
        best: tuple[float, Option, list[tuple[int, int, int, int]]] | None = None
        for o in opts:
            got = self.earliest(job, o, prof)
            if got is not None and (best is None or got[0] < best[0]):
                best = (got[0], o, got[1])
        if best is None:
            return None
        start, o, amounts = best
        if start <= self.now:  # fits the profile but not the pool (e.g. GRES): soon
            start = self.floor
        if window is not None and start > window:
            return None
        end = prof.end_of(start, o.time_limit_s)
        if commit:
            prof.reserve(amounts, start, end)
        if isinstance(prof, CountProfile):  # count form: no node names, one entry per node
            nodes: tuple[str, ...] = ()
            first = amounts[0] if amounts else None
            if first is not None and amounts.count(first) == len(amounts):  # the usual case
                per_node = ((first[1], first[2], first[3]),) * len(amounts)
            else:
                per_node = tuple((c, m, g) for _, c, m, g in amounts)
        else:
            nodes = tuple(self.table.names[i] for i, _, _, _ in amounts if i >= 0)
            per_node = tuple((c, m, g) for _, c, m, g in amounts)
        self.out.reservations.append(Reserve(job.id, start, nodes, end, per_node))
        return start

    def earliest(self, job: Job, o: Option, prof: Profile | CountProfile
                 ) -> tuple[float, list[tuple[int, int, int, int]]] | None:
        shape = o.shape
        if isinstance(prof, CountProfile):
            ts0 = shape.sets[0]
            n = ts0.nodes_min if (len(shape.sets) == 1 and ts0.uniform) else shape.min_available
            if n < 1:
                n = 1
            t = prof.earliest(n, o.time_limit_s)
            return None if t is None else (t, [(-1, 1, 0, 0)] * n)
        placer = self.placer
        ts = shape.sets[0]
        cand, required = placer.static_candidates(shape, ts, o.partition.name)
        cand &= self.pool.up
        plain = (len(shape.sets) == 1 and shape.switches is None and not ts.gres
                 and placer.mode != PlacementMode.TOPOLOGY)
        if plain and ts.uniform:
            return self._earliest_uniform(ts, cand, required, shape.exclusive, o, prof)
        if plain and not ts.gpus_total and not required:
            proxy = self._uniform_proxy(ts, cand)
            if proxy is not None:
                got = self._earliest_uniform(proxy, cand, 0, shape.exclusive, o, prof)
                if got is not None:
                    return got
        # general shapes: check candidate times where the aggregate free cores suffice
        cpus_needed = shape.cpus_min // max(1, min(self.table.tpc) if self.table.tpc else 1)
        times = prof.candidate_times(cand | required, INF)
        checks = 0
        for t in times:
            if prof.free_cores_at(cand | required, t) < cpus_needed:
                continue
            end = prof.end_of(t, o.time_limit_s)
            view = prof.view_at(t, end, cand | required)
            since = job.eligible_time if job.eligible_time is not None else job.submit_time
            sl = shape.switches if (shape.switches is not None
                                    and t - since < shape.switches_wait_s) else None
            chosen = placer.fits(shape, o.partition.name, view, sl)
            if chosen is not None:
                amounts = []
                for picks in chosen:
                    for pk in picks:
                        if pk.whole:
                            amounts.append((pk.i, self.table.cores[pk.i], self.table.mem[pk.i],
                                            self.table.ngpus[pk.i]))
                        else:
                            amounts.append((pk.i, pk.ncores, pk.mem_mb, pk.ngpus))
                return t, amounts
            checks += 1
            if checks >= _EARLIEST_CHECKS:
                break
        return None

    def _earliest_uniform(self, ts: TaskSet, cand: int, required: int, whole: bool,
                          o: Option, prof: Profile
                          ) -> tuple[float, list[tuple[int, int, int, int]]] | None:
        t = self.table
        needs = []
        for cls in range(len(t.class_specs)):
            d = demand(ts, t, cls)
            needs.append((ts.hi * d.cores_per_task, d.mem_per_node or ts.hi * d.mem_per_task,
                          ts.gpus_per_node + ts.hi * ts.gpus_per_task))
        got = prof.earliest_uniform(ts, cand, needs, o.time_limit_s, required, whole)
        if got is None:
            return None
        start, nodes = got
        if whole:
            return start, [(i, t.cores[i], t.mem[i], t.ngpus[i]) for i in nodes]
        return start, [(i, *needs[t.class_of[i]]) for i in nodes]

    def _uniform_proxy(self, ts: TaskSet, cand: int) -> TaskSet | None:
        """A flexible set planned as ``n`` nodes of ``k`` tasks each (``n * k >= tasks``), as
        many tasks per node as an idle node of every candidate class holds: a valid (if
        cautious) placement for a reservation, found by the exact uniform sweep."""
        t = self.table
        k = ts.tasks if not ts.hi else min(ts.tasks, ts.hi)
        for cls, cm in enumerate(t.class_masks):
            if not cm & cand:
                continue
            spec = t.class_specs[cls]
            d = demand(ts, t, cls)
            cap = spec.cores // d.cores_per_task
            if d.mem_per_task:
                cap = min(cap, (spec.mem_mb - d.mem_per_node) // d.mem_per_task)
            if ts.gpus_per_task:
                cap = min(cap, (len(spec.gpus) - ts.gpus_per_node) // ts.gpus_per_task)
            k = min(k, cap)
        if k < 1:
            return None
        n = -(-ts.tasks // k)
        if n < ts.nodes_min:
            n = ts.nodes_min
            k = -(-ts.tasks // n)
        if n > ts.nodes_max:
            return None
        return replace(ts, fixed=True, hi=k, tasks=n * k, nodes_min=n, nodes_max=n,
                       min_tasks=n * k)
