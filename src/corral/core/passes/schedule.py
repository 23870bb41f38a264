"""The queue pass: strict priority, EASY backfill and conservative backfill in one loop.

Jobs are visited once, in queue order (``passes.order``). For each: can it ever run
(``feasibility.plan``; otherwise ``Reject``)? Is it held, waiting for its begin time or a
dependency, in a down partition, over an array ``%`` limit, a QOS/account limit or the
free licenses (a pending reason)? Then the resource phase, by ``config.backfill``:

* **NONE (strict)**: a job starts if it fits now; the first one that does not *blocks* its
  partitions' nodes, so no later job may start there (jobs of disjoint partitions go on).
* **EASY** (Lifka 1995; Mu'alem & Feitelson 2001): a job starts now if it fits on the
  profile's window view for its time limit, i.e. without delaying any reservation; the
  first job that cannot start in each group of overlapping partitions gets a reservation
  at its earliest start (the shadow time) on specific nodes. Later jobs backfill when they
  end before that time or use only resources the reservation leaves spare (the
  extra-resources rule), both falling out of the per-node profile check.
* **CONSERVATIVE**: like EASY, but *every* tested job that cannot start now gets a
  reservation (within ``bf_window_s``), so no backfilled job delays any earlier one.

Backfill uses time limits only, never run times. At most ``bf_max_job_test`` jobs are tested
after the first blocked one; the rest wait with reason ``Priority``. The EASY reservation
of a partition group is made whatever ``bf_window_s`` says (a bounded window would starve
wide jobs); in conservative mode reservations beyond the window are not made.

Gangs (multi-node and task-group jobs) start all-or-nothing: a placement is taken from the
pool whole or not at all, and a waiting gang holds nothing, so gangs cannot deadlock.
Preemption (when configured) is tried for a job that cannot start now, before it blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from corral.core import preempt as P
from corral.core import reasons as R
from corral.core.config import (
    BackfillMode,
    PlacementMode,
    PreemptType,
    ReservationPolicy,
    SchedulerConfig,
)
from corral.core.counts import CountProfile
from corral.core.decisions import PendingInfo, Preempt, Reject, Reserve, Start
from corral.core.dependency import NEVER, WAIT, DependencyIndex
from corral.core.ends import INF, round_up
from corral.core.feasibility import Option, Plan, plan, request_tres
from corral.core.feasibility import _placer as cached_placer
from corral.core.limits import LimitState, Tres, job_tres, qos_name
from corral.core.model.job import HoldKind, Job, JobState
from corral.core.model.partition import PartitionState
from corral.core.nodes import NodeTable, iter_bits
from corral.core.placement.select import Pick, demand
from corral.core.pool import NodeUse, Pool, compiled, running_ends
from corral.core.profile import Profile, Release
from corral.core.shape import Shape, TaskSet, time_limit_s
from corral.core.snapshot import ClusterSnapshot

_RUNNABLE = (PartitionState.UP, PartitionState.DRAIN)
# end time (start + limit, rounded) per running job record: a bounded identity memo
_ENDS: dict[int, tuple[Job, SchedulerConfig, float, int]] = {}
_EARLIEST_CHECKS = 64  # candidate times examined for non-uniform shapes


@dataclass(slots=True)
class Outcome:
    starts: list[Start] = field(default_factory=list)
    reservations: list[Reserve] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    pending: dict[int, PendingInfo] = field(default_factory=dict)
    reserved: list[int] = field(default_factory=list)
    backfilled: int = 0
    tested: int = 0


class Pass:
    """One cycle's queue pass over a snapshot (see the module docstring)."""

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                 table: NodeTable, pool: Pool) -> None:
        self.snap = snapshot
        self.config = config
        self.now = now
        self.table = table
        self.pool = pool
        self.placer = cached_placer(table, config)
        self.annotate = config.annotate_pending
        self.mode = config.backfill
        self.out = Outcome()
        self.deps = DependencyIndex(snapshot.pending, snapshot.running, snapshot.finished)
        self.limits = LimitState(snapshot.qos, snapshot.accounts, snapshot.running)
        self.qos = {q.name: q for q in snapshot.qos}
        self._profile: Profile | CountProfile | None = None
        self.unit = is_unit_cluster(table)  # every node one core: count-only planning
        self.any_down = pool.up != table.all_mask
        res = config.bf_resolution_s
        self.floor = round_up(now + 1, res)  # overdue jobs end no sooner than this
        self._started: list[Release] = []
        self.blocked = 0  # nodes of partitions where a higher-priority job waits
        self.blocker: dict[str, int] = {}  # partition -> first blocked job id
        self.reserved_mask = 0  # EASY: partitions that already hold a reservation
        self.preempting: set[int] = set()
        self._lic_free: dict[str, int] | None = None
        self._array_running: dict[int, int] | None = None
        # conservative: last cycle's reservations, held until their job is visited
        self.carried: dict[int, tuple[Reserve, list[tuple[int, int, int, int]]]] = {}

    # -- helpers ----------------------------------------------------------------------------

    def plan_of(self, job: Job) -> Plan:
        memo = self.table.memo.setdefault("plans", {})
        assert isinstance(memo, dict)
        entry = memo.get(id(job.spec))
        snap = self.snap
        if (entry is not None and entry[0] is job.spec and entry[1] == job.time_limit_s
                and entry[2] is self.config and entry[3] is snap.qos
                and entry[4] is snap.accounts and entry[5] is snap.licenses):
            got: Plan = entry[6]
            return got
        got = plan(job.spec, job.time_limit_s, snap, self.table, self.config)
        if len(memo) > 200_000:
            memo.clear()
        memo[id(job.spec)] = (job.spec, job.time_limit_s, self.config, snap.qos,
                              snap.accounts, snap.licenses, got)
        return got

    def profile(self) -> Profile | CountProfile:
        if self._profile is None:
            res = self.config.bf_resolution_s
            if self.unit:
                up = self.pool.up
                free_now = (self.pool.ge_cores[1] & up).bit_count()
                if self.any_down:
                    counts: list[tuple[float, int]] = []
                    for j in self.snap.running:
                        if j.allocation is None or j.state == JobState.SUSPENDED:
                            continue
                        n = sum(1 for u in compiled(self.table, j.allocation) if up >> u.i & 1)
                        counts.append((self.release_time(j), n))
                    counts.sort()
                    cp = CountProfile(self.now, res, free_now, counts, self.floor)
                else:
                    cp = CountProfile.from_index(self.now, res, free_now,
                                                 running_ends(self.table, self.config),
                                                 self.floor)
                for end, uses, _ in self._started:  # started this cycle: back at their end
                    cp.add(len(uses), end, INF)
                self._profile = cp
            else:
                releases: list[Release] = []
                for j in self.snap.running:
                    if j.allocation is None or j.state == JobState.SUSPENDED:
                        continue
                    releases.append((self.release_time(j), compiled(self.table, j.allocation),
                                     True))
                releases.extend(self._started)
                self._profile = Profile(self.pool, self.now, res, releases)
        return self._profile

    def node_profile(self) -> Profile:
        prof = self.profile()
        assert isinstance(prof, Profile)
        return prof

    def release_time(self, job: Job) -> float:
        """When a running job's resources come back in the profile: start + time limit,
        rounded up to the resolution, and never before now + 1 s (overdue jobs end soon)."""
        assert job.allocation is not None
        res = self.config.bf_resolution_s
        entry = _ENDS.get(id(job))
        if entry is not None and entry[0] is job and entry[1] is self.config:
            end = entry[2]
        else:
            part = self.table.partitions.get(job.partition or job.allocation.partition)
            start = job.start_time if job.start_time is not None else self.now
            end = round_up(start + time_limit_s(job, part, self.config), res)
            if len(_ENDS) > 500_000:
                _ENDS.clear()
            _ENDS[id(job)] = (job, self.config, end, len(compiled(self.table, job.allocation)))
        return max(end, self.floor)

    def licenses_free(self) -> dict[str, int]:
        if self._lic_free is None:
            free = dict(self.snap.licenses)
            for j in self.snap.running:
                for name, n in j.spec.licenses:
                    free[name] = free.get(name, 0) - n
            self._lic_free = free
        return self._lic_free

    def array_running(self, array_id: int) -> int:
        if self._array_running is None:
            counts: dict[int, int] = {}
            for j in self.snap.running:
                if j.array_job_id is not None:
                    counts[j.array_job_id] = counts.get(j.array_job_id, 0) + 1
            self._array_running = counts
        return self._array_running.get(array_id, 0)

    def pend(self, job: Job, rank: int, prio: float, reason: str, detail: str = "",
             est: float | None = None) -> None:
        if self.annotate:
            self.out.pending[job.id] = PendingInfo(job.id, reason, prio, est, detail, rank)

    # -- the pass ---------------------------------------------------------------------------

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

    def run(self, order: list[Job], prio: dict[int, float]) -> Outcome:
        cfg = self.config
        max_test = max(0, cfg.bf_max_job_test)
        max_cycle = cfg.max_jobs_per_cycle
        attempts = 0
        if self.mode == BackfillMode.CONSERVATIVE and self.snap.reservations:
            self.preload(order)
        # without annotations, a job that cannot fit in all free cores is not examined
        prefilter = (not self.annotate and self.mode == BackfillMode.EASY
                     and cfg.preempt_type == PreemptType.NONE)
        max_tpc = max(self.table.tpc, default=1)
        for rank, job in enumerate(order, 1):
            p = job.admin_priority if job.admin_priority is not None else prio.get(job.id, 0.0)
            pr = float(p)
            held = self.release_carried(job) if self.carried else None
            pl = self.plan_of(job)
            if prefilter and self.blocked and pl.options and (
                    pl.options[0].shape.cpus_min > self.pool.free_total * max_tpc):
                continue  # cannot start now whatever else holds it (nothing to annotate)
            if not pl.options:
                self.out.rejects.append(Reject(job.id, pl.reason, pl.message))
                continue
            why = self.static_reason(job)
            if why is not None:
                self.pend(job, rank, pr, why[0], why[1])
                continue
            opts = [o for o in pl.options if o.partition.state in _RUNNABLE]
            if not opts:
                st = pl.options[0].partition.state
                code = R.PARTITION_INACTIVE if st == PartitionState.INACTIVE else R.PARTITION_DOWN
                self.pend(job, rank, pr, code,
                          f"partition {pl.options[0].partition.name} is {st.value}")
                continue
            why = self.dynamic_reason(job, opts[0])
            if why is not None:
                self.pend(job, rank, pr, why[0], why[1])
                continue
            if max_cycle is not None and attempts >= max_cycle:
                self.pend(job, rank, pr, R.PRIORITY,
                          f"not examined this cycle (max_jobs_per_cycle={max_cycle})")
                continue
            if self.blocked and self.mode != BackfillMode.NONE and self.out.tested >= max_test:
                if held is not None:  # not re-planned: keep last cycle's guarantee
                    self.recarry(job, held)
                if not self.annotate:
                    break
                self.pend(job, rank, pr, R.PRIORITY,
                          f"not tested by backfill this cycle (bf_max_job_test={max_test})")
                continue
            attempts += 1
            if self.blocked:
                self.out.tested += 1
            self.resource_phase(job, opts, rank, pr)
            if not self.annotate and self.blocked and self._nothing_more():
                break
        # jobs never visited keep last cycle's reservation (still held in the profile)
        for r, _ in self.carried.values():
            self.out.reservations.append(r)
            self.out.reserved.append(r.job_id)
        return self.out

    def _nothing_more(self) -> bool:
        """No later job can start (simulator fast path; only when nothing is annotated)."""
        up = self.pool.up
        if self.mode == BackfillMode.NONE:
            return self.blocked & up == up
        return not self.pool.ge_cores[1] and self.config.preempt_type == PreemptType.NONE

    def static_reason(self, job: Job) -> tuple[str, str] | None:
        if job.hold == HoldKind.USER:
            return R.HELD_USER, "held by its owner; release it to let it run"
        if job.hold == HoldKind.ADMIN:
            return R.HELD_ADMIN, "held by an administrator"
        if job.spec.begin_time is not None and job.spec.begin_time > self.now:
            return R.BEGIN_TIME, f"may not start before t={job.spec.begin_time:.0f}"
        if job.spec.dependency is not None and job.spec.dependency.items:
            state, detail = self.deps.status(job, self.now)
            if state == WAIT:
                return R.DEPENDENCY, detail
            if state == NEVER:
                return R.DEPENDENCY_NEVER, detail
        return None

    def dynamic_reason(self, job: Job, opt: Option) -> tuple[str, str] | None:
        if job.array_max_running is not None and job.array_job_id is not None:
            n = self.array_running(job.array_job_id)
            if n >= job.array_max_running:
                return (R.ARRAY_LIMIT,
                        f"{n} tasks of array {job.array_job_id} run "
                        f"(limit {job.array_max_running})")
        if self.limits.enabled:
            tres = request_tres(opt.shape, self.table, opt.partition.name)
            hit = self.limits.check(job, tres, opt.time_limit_s)
            if hit is not None:
                return hit
        if job.spec.licenses:
            free = self.licenses_free()
            for name, n in job.spec.licenses:
                if free.get(name, 0) < n:
                    return R.LICENSES, f"needs {n} {name} licenses, {free.get(name, 0)} free"
        return None

    # -- resources --------------------------------------------------------------------------

    def switch_limit(self, job: Job, opt: Option) -> int | None:
        sw = opt.shape.switches
        if sw is None:
            return None
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        return sw if self.now - since < opt.shape.switches_wait_s else None

    def recarry(self, job: Job, r: Reserve) -> None:
        if not r.nodes:
            amounts = [(-1, 1, 0, 0)] * len(r.amounts)
        else:
            amounts = [(self.table.index[n], c, m, g) for n, (c, m, g) in
                       zip(r.nodes, r.amounts, strict=True)]
        self.profile().reserve(amounts, r.start_time, r.end_time)
        self.carried[job.id] = (r, amounts)

    def resource_phase(self, job: Job, opts: list[Option], rank: int, pr: float) -> None:
        strict = self.mode == BackfillMode.NONE
        if strict:
            usable = [o for o in opts if not self.table.part_masks[o.partition.name] & self.blocked]
            if not usable:
                self.pend(job, rank, pr, R.PRIORITY, self._behind(opts))
                return
        else:
            usable = opts
        prof = self._profile
        for o in usable:
            view = self.pool
            if not strict and isinstance(prof, Profile) and prof.dirty:
                view = prof.window_view(o.time_limit_s)
            sl = self.switch_limit(job, o)
            chosen = self.placer.fits(o.shape, o.partition.name, view, sl)
            if chosen is not None and not strict and isinstance(prof, CountProfile) and (
                    prof.reserved_any and not prof.allows(sum(len(c) for c in chosen),
                                                         o.time_limit_s)):
                chosen = None  # would delay a reservation (count form of EASY's test)
            if chosen is not None:
                self.start(job, o, chosen, backfilled=bool(self.blocked))
                return
        # cannot start now
        if self.config.preempt_type != PreemptType.NONE and self.try_preempt(job, usable):
            self.block(job, usable, rank, pr, preempting=True)
            return
        self.block(job, usable, rank, pr)

    def _behind(self, opts: list[Option]) -> str:
        for o in opts:
            jid = self.blocker.get(o.partition.name)
            if jid is not None:
                return f"waits for higher-priority job {jid} in partition {o.partition.name}"
        return "waits for higher-priority jobs"

    def start(self, job: Job, o: Option, chosen: list[list[Pick]], backfilled: bool) -> None:
        placement = self.placer.commit(o.shape, o.partition.name, self.pool, chosen)
        tl = o.time_limit_s
        end = max(round_up(self.now + tl, self.config.bf_resolution_s),
                  round_up(self.now + 1, self.config.bf_resolution_s))
        if self._profile is not None:
            self._profile.started(placement.uses, end)
        else:
            self._started.append((end, placement.uses, True))
        self.out.starts.append(Start(job.id, placement.allocation, tl, backfilled))
        if backfilled:
            self.out.backfilled += 1
        if self.limits.enabled:
            started = Job(job.id, job.spec, job.submit_time, JobState.RUNNING, self.now,
                          allocation=placement.allocation, partition=o.partition.name)
            self.limits.add(job, job_tres(started))
        if job.array_job_id is not None and self._array_running is not None:
            self._array_running[job.array_job_id] = self.array_running(job.array_job_id) + 1
        if job.spec.licenses:
            free = self.licenses_free()
            for name, n in job.spec.licenses:
                free[name] = free.get(name, 0) - n
        self.deps.started(job)

    def block(self, job: Job, opts: list[Option], rank: int, pr: float,
              preempting: bool = False) -> None:
        """``job`` cannot start now: reserve if the mode says so, and explain."""
        masks = 0
        for o in opts:
            masks |= self.table.part_masks[o.partition.name]
        first = not (masks & self.blocked)
        for o in opts:
            self.blocker.setdefault(o.partition.name, job.id)
        self.blocked |= masks
        want_reservation = (
            self.mode == BackfillMode.CONSERVATIVE
            or (self.mode == BackfillMode.EASY and not masks & self.reserved_mask)
            or (self.mode == BackfillMode.NONE and first)
        )
        est: float | None = None
        detail = ""
        if want_reservation:
            need_profile = self.mode != BackfillMode.NONE or self.annotate
            if need_profile:
                window = None if (self.mode != BackfillMode.CONSERVATIVE or first) else (
                    self.now + self.config.bf_window_s)
                got = self.reserve(job, opts, window, commit=self.mode != BackfillMode.NONE)
                if got is not None:
                    est = got
                    self.reserved_mask |= masks
                    self.out.reserved.append(job.id)
                elif self.mode == BackfillMode.NONE:
                    self.out.reserved.append(job.id)
            else:
                self.out.reserved.append(job.id)
        if not self.annotate:
            return
        if preempting:
            n = sum(1 for p in self.out.preemptions if p.for_job_id == job.id)
            detail = (f"preempting {n} lower-priority job(s); starts when they have ended"
                      if n else "waiting for ending jobs to release their resources")
            self.pend(job, rank, pr, R.RESOURCES, detail, est)
            return
        if first:
            detail = self._resources_detail(job, opts)
            code = R.REQ_NODE_NOT_AVAIL if detail.startswith("requested nodes") else R.RESOURCES
            if est is not None:
                detail += f"; expected to start at t={est:.0f}"
            self.pend(job, rank, pr, code, detail, est)
        else:
            detail = self._behind(opts)
            if est is not None:
                detail += f"; reserved to start at t={est:.0f}"
            self.pend(job, rank, pr, R.PRIORITY, detail, est)

    def _resources_detail(self, job: Job, opts: list[Option]) -> str:
        o = opts[0]
        pmask = self.table.part_masks[o.partition.name]
        up = pmask & self.pool.up
        if o.shape.nodelist:
            req = self.table.names_mask(o.shape.nodelist)[0]
            down = req & ~self.pool.up
            if down:
                names = ",".join(self.table.names[i] for i in iter_bits(down)[:5])
                return f"requested nodes are not available: {names}"
        if up.bit_count() < o.shape.nodes_min:
            return (f"needs {o.shape.nodes_min} nodes; {up.bit_count()} of partition "
                    f"{o.partition.name}'s {pmask.bit_count()} nodes are up")
        free = self.pool.free_cores_in(pmask)
        return (f"not enough free resources in partition {o.partition.name} "
                f"({free} cores free now; it needs {o.shape.cpus_min} CPUs)")

    # -- reservations -----------------------------------------------------------------------

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
        nodes = tuple(self.table.names[i] for i, _, _, _ in amounts if i >= 0)
        self.out.reservations.append(Reserve(job.id, start, nodes, end,
                                             tuple((c, m, g) for _, c, m, g in amounts)))
        return start

    def earliest(self, job: Job, o: Option, prof: Profile | CountProfile
                 ) -> tuple[float, list[tuple[int, int, int, int]]] | None:
        shape = o.shape
        if isinstance(prof, CountProfile):
            ts0 = shape.sets[0]
            n = ts0.nodes_min if (len(shape.sets) == 1 and ts0.uniform) else shape.min_available
            t = prof.earliest(max(1, n), o.time_limit_s)
            return None if t is None else (t, [(-1, 1, 0, 0)] * max(1, n))
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

    # -- preemption -------------------------------------------------------------------------

    def try_preempt(self, job: Job, opts: list[Option]) -> bool:
        """Pick victims for ``job``; ``True`` when it will start once they (or ending jobs) go."""
        qos_of = self._qos_of
        job_qos_name = qos_of(job)
        job_qos = self.qos.get(job_qos_name) if job_qos_name else None
        ending = [j for j in self.snap.running if j.state == JobState.COMPLETING
                  and j.allocation is not None]
        for o in opts:
            victims = P.candidates(job, o.partition, job_qos, self.snap.running,
                                   self.table.partitions, self.qos, qos_of, self.config,
                                   self.preempting)
            if not victims:
                continue
            pmask = self.table.part_masks[o.partition.name]
            shape = o.shape
            name = o.partition.name
            sl = self.switch_limit(job, o)

            def fits(view: Pool, pmask: int = pmask, shape: Shape = shape, name: str = name,
                     sl: int | None = sl) -> bool:
                if view.free_cores_in(pmask) < shape.cpus_min // max(1, min(self.table.tpc)):
                    return False
                return self.placer.fits(shape, name, view, sl) is not None

            def touches(v: Job, pmask: int = pmask) -> bool:
                assert v.allocation is not None
                return any(pmask >> u.i & 1 for u in compiled(self.table, v.allocation))

            chosen = P.choose(victims, self.pool, ending, fits, touches)
            if chosen is None:
                continue
            for v in chosen:
                self.preempting.add(v.job.id)
                self._release_early(v)
            self.out.preemptions.extend(P.decisions(chosen, job.id))
            return True
        return False

    def _release_early(self, v: P.Victim) -> None:
        """In the profile, a victim's resources come back after its grace time."""
        assert v.job.allocation is not None
        uses: tuple[NodeUse, ...] = compiled(self.table, v.job.allocation)
        back = self.now + max(v.grace_s, 1)
        prof0 = self.profile()
        if isinstance(prof0, CountProfile):
            n = len(uses) if v.mode.value != "SUSPEND" else 0
            prof0.add(n, back, max(self.release_time(v.job), back))
            return
        prof = prof0
        prof._build()
        for u in uses:
            st = prof.steps[u.i]
            c = u.core_bits.bit_count() if u.core_bits > 0 else 0
            m = u.mem_mb if v.mode.value != "SUSPEND" else 0
            g = u.gpu_bits.bit_count() if v.mode.value != "SUSPEND" else 0
            st.add(back, max(self.release_time(v.job), back), c, m, g)

    def _qos_of(self, job: Job) -> str | None:
        return qos_name(job, self.qos)


def is_unit_cluster(table: NodeTable) -> bool:
    """Every node has one core and no GPU/GRES, one hardware class, and every partition
    spans all nodes: planning can count free nodes (``CountProfile``)."""
    got = table.memo.get("unit")
    if not isinstance(got, bool):
        got = (len(table) > 0 and table.unit_mask == table.all_mask
               and len(table.class_specs) == 1
               and all(m == table.all_mask for m in table.part_masks.values()))
        table.memo["unit"] = got
    return got


def reserved_ids(snapshot: ClusterSnapshot, config: SchedulerConfig) -> tuple[int, ...]:
    if config.reservation_policy != ReservationPolicy.HIGHEST:
        return ()
    return snapshot.reserved


__all__ = ["Outcome", "Pass", "reserved_ids", "Tres"]
