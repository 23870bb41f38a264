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

Backfill uses time limits only, never run times. A job with ``--time-min`` that cannot
start with its full limit starts with the longest limit down to that minimum which fits
without delaying a reservation (Slurm's TimeMin; not in strict mode). At most
``bf_max_job_test`` jobs are tested after the first blocked one; the rest wait with reason
``Priority``. With ``max_starts_per_cycle``, once that many jobs have started no later job
is tested either (reason ``Priority``, "not started this cycle"): nothing the pass decided
before the cap depends on the jobs after it, so a capped cycle decides for the jobs
before the cap exactly what the uncapped pass decides for them (starts, reservations,
preemptions), the jobs after it start nothing and so delay no reservation (under
conservative backfill they keep last cycle's, as behind the test limit); the shell runs
the next cycle for the rest.

The EASY reservation of a partition group is made whatever ``bf_window_s``
says (a bounded window would starve wide jobs); in conservative mode reservations beyond
the window are not made.

Gangs (multi-node and task-group jobs) start all-or-nothing: a placement is taken from the
pool whole or not at all, and a waiting gang holds nothing, so gangs cannot deadlock.
Preemption (when configured) is tried for a job that cannot start now, before it blocks.

This module is the general pass: the loop above, job by job. The simulator's count-only
shortcuts behind a blocked head (narrowing the queue, counting runs of jobs that can only
be refused) live in ``passes.lean`` and enter here only through ``walk`` (which yields
every job in order when they do not apply); a lone job that starts at once is decided in
``passes.alone``. Both are pinned to this loop by equivalence tests.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.core import reasons as R
from corral.core.config import BackfillMode, PreemptType, ReservationPolicy, SchedulerConfig
from corral.core.counts import CountProfile
from corral.core.decisions import PendingInfo, Reject, Start
from corral.core.dependency import NEVER, WAIT
from corral.core.ends import round_up
from corral.core.feasibility import Option, Plan, plan, request_tres
from corral.core.limits import job_tres
from corral.core.model.job import HoldKind, Job, JobState
from corral.core.model.partition import PartitionState
from corral.core.nodes import iter_bits
from corral.core.passes.lean import LeanWalk
from corral.core.passes.plan import Planner
from corral.core.passes.preemption import Preemptor
from corral.core.passes.state import Outcome, is_unit_cluster
from corral.core.passes.tail import TailWalk
from corral.core.placement import Placement
from corral.core.placement.numa import slots as numa_slots
from corral.core.placement.select import Pick, demand
from corral.core.profile import Profile
from corral.core.shape import NUMA_SINGLE, TaskSet
from corral.core.snapshot import ClusterSnapshot

_RUNNABLE = (PartitionState.UP, PartitionState.DRAIN)


class Pass(LeanWalk, TailWalk, Planner, Preemptor):
    """One cycle's queue pass over a snapshot (see the module docstring)."""

    def plan_of(self, job: Job) -> Plan:
        return self.planned(job)[0]

    def planned(self, job: Job) -> tuple[Plan, list[Option], bool]:
        """The job's plan and its options in partitions that may start jobs now; memoized
        per spec on the node table for one planning context (config, QOS, accounts and
        licenses objects), so a new context starts a fresh memo."""
        snap = self.snap
        memo = self.table.memo.get("plans")
        if not (isinstance(memo, tuple) and memo[0] is self.config and memo[1] is snap.qos
                and memo[2] is snap.accounts and memo[3] is snap.licenses):
            memo = (self.config, snap.qos, snap.accounts, snap.licenses, {}, {}, {}, {})
            self.table.memo["plans"] = memo
        plans: dict[int, tuple[object, int | None, Plan, list[Option], bool]] = memo[4]
        spec = job.spec
        entry = plans.get(id(spec))
        if entry is not None and entry[0] is spec and entry[1] == job.time_limit_s:
            return entry[2], entry[3], entry[4]
        got = plan(spec, job.time_limit_s, snap, self.table, self.config)
        needs: dict[int, int] = memo[5]
        if len(plans) > 200_000:
            plans.clear()
            needs.clear()
            memo[6].clear()
            memo[7].clear()
        # the options' partitions come from the table, whose partitions (and their states)
        # are fixed, so the runnable ones are memoized with the plan
        runnable = [o for o in got.options if o.partition.state in _RUNNABLE]
        # no begin time, dependency or licenses: only the job record can hold it; and no
        # --time-min (a refused job may still start shortened): see ``passes.lean``
        simple = (spec.begin_time is None and not (spec.dependency and spec.dependency.items)
                  and not spec.licenses and not spec.time_min_s)
        plans[id(spec)] = (spec, job.time_limit_s, got, runnable, simple)
        self.remember_counts(job, got, runnable, simple, needs, memo[6])
        return got, runnable, simple

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

    def run(self, order: list[Job], prio: Mapping[int, float] | None) -> Outcome:
        """One pass over ``order``; ``prio`` as ``priority.compute`` gives it, or ``None``
        under FCFS (every job's priority is then ``-submit_time``)."""
        cfg = self.config
        max_test = cfg.bf_max_job_test if cfg.bf_max_job_test > 0 else 0
        max_cycle = cfg.max_jobs_per_cycle
        cap = cfg.max_starts_per_cycle
        backfill = self.mode != BackfillMode.NONE
        behind: str | None = None  # why the jobs behind ``limited`` wait
        attempts = 0
        if self.mode == BackfillMode.CONSERVATIVE and self.snap.reservations:
            self.preload(order)
        if self.windows:
            self.profile()  # advance reservations' windows hold nodes in the future
        # without annotations, a job that cannot fit in all free cores is not examined
        prefilter = (not self.annotate and self.mode == BackfillMode.EASY
                     and cfg.preempt_type == PreemptType.NONE)
        max_tpc = self.table.memo.get("max_tpc")
        if not isinstance(max_tpc, int):
            max_tpc = self.table.memo["max_tpc"] = max(self.table.tpc, default=1)
        limits_on = self.limits.enabled
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        plans_get = memo[4].get  # the memo of ``planned``, read inline (the hot loop)
        # behind a blocked head, a replay's queue walk skips and counts what it only
        # would count (``passes.lean``); otherwise every job in order
        lean = (prefilter and max_cycle is None and cfg.max_starts_per_cycle is None
                and not limits_on and not self.boot_mask)
        # annotated: the jobs behind the test limit that can only wait come as one
        # compact tail (``passes.tail``); otherwise every job in order
        waits: dict[int, Job] | None = None  # jobs that only wait behind the limit
        if (self.annotate and self.compact_tail and self.mode != BackfillMode.NONE
                and max_cycle is None and not limits_on):
            waits = memo[7]
            jobs = self.tail_walk(order, prio, max_test)
        else:
            jobs = self.walk(order, prefilter, lean, max_test, max_tpc)
        for rank, job in jobs:
            if not self.annotate:
                pr = 0.0  # only ``pend`` reads it, and it records nothing unannotated
            elif job.admin_priority is not None:
                pr = float(job.admin_priority)
            else:  # FCFS (``prio`` is None): -submit time, what ``priority.compute`` gives
                pr = float(prio.get(job.id, 0.0) if prio is not None else -job.submit_time)
            held = self.release_carried(job) if self.carried else None
            entry = plans_get(id(job.spec))
            if entry is not None and entry[0] is job.spec and entry[1] == job.time_limit_s:
                pl, runnable, simple = entry[2], entry[3], entry[4]
            else:
                pl, runnable, simple = self.planned(job)
            if prefilter and self.blocked and pl.options and (
                    pl.options[0].shape.cpus_min > self.pool.free_total * max_tpc):
                continue  # cannot start now whatever else holds it (nothing to annotate)
            if not pl.options:
                self.out.rejects.append(Reject(job.id, pl.reason, pl.message))
                continue
            plain = (simple and job.hold is HoldKind.NONE and job.array_max_running is None
                     and not limits_on)  # neither static nor dynamic reasons apply
            why = None if plain else self.static_reason(job)
            if why is not None:
                self.pend(job, rank, pr, why[0], why[1])
                continue
            opts = runnable
            if not opts:
                st = pl.options[0].partition.state
                code = R.PARTITION_INACTIVE if st == PartitionState.INACTIVE else R.PARTITION_DOWN
                self.pend(job, rank, pr, code,
                          f"partition {pl.options[0].partition.name} is {st.value}")
                continue
            why = None if plain else self.dynamic_reason(job, opts[0])
            if why is not None:
                self.pend(job, rank, pr, why[0], why[1])
                continue
            if max_cycle is not None and attempts >= max_cycle:
                self.pend(job, rank, pr, R.PRIORITY,
                          f"not examined this cycle (max_jobs_per_cycle={max_cycle})")
                continue
            if (self.blocked and backfill and self.out.tested >= max_test) or (
                    cap is not None and len(self.out.starts) >= cap):  # ``limited``
                if held is not None:  # not re-planned: keep last cycle's guarantee
                    self.recarry(job, held)
                if not self.annotate:
                    break
                if waits is not None and plain and held is None and (
                        job.admin_priority is None):
                    waits[id(job)] = job  # it goes into the compact tail next time
                if behind is None:  # one detail for every job behind the limit
                    behind = self.limit_detail(max_test)
                self.pend(job, rank, pr, R.PRIORITY, behind)
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
        counted = prof if (not strict and isinstance(prof, CountProfile)
                            and prof.reserved_any) else None
        for o in usable:
            view = self.pool
            if (not strict or self.windows) and isinstance(prof, Profile) and prof.dirty:
                view = prof.window_view(o.time_limit_s)
            # a shape ``SetPlacer._unit`` places (one-core nodes, no switch limit, one task
            # set): the same choice as ``fits`` without its general dispatch
            got = self.placer.unit_plan(o.shape, o.partition.name, view)
            if got is not None:
                # counted: the size of the placement decides EASY's test, so a job that
                # would delay a reservation is refused before it is placed
                if counted is not None and not counted.allows(got[2], o.time_limit_s):
                    continue
                if view is self.pool:
                    placed = self.placer.unit_take(o.shape, o.partition.name, view,
                                                   got[0], got[1])
                    if placed is not None:
                        self.record_start(job, o, placed, bool(self.blocked))
                        return
                    continue
                chosen = self.placer.unit_fits(o.shape, view, got[0], got[1])
                if chosen is not None:
                    self.start(job, o, chosen, backfilled=bool(self.blocked))
                    return
                continue
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
        if not strict and job.spec.time_min_s and self._start_shortened(job, usable):
            return
        if self.config.preempt_type != PreemptType.NONE and self.try_preempt(job, usable):
            self.block(job, usable, rank, pr, preempting=True)
            return
        self.block(job, usable, rank, pr)

    def _fit_for(self, job: Job, o: Option, limit_s: int) -> list[list[Pick]] | None:
        """A placement that holds ``o.shape`` for ``limit_s`` without delaying any
        reservation, or ``None``."""
        prof = self._profile
        view = prof.window_view(limit_s) if isinstance(prof, Profile) and prof.dirty \
            else self.pool
        chosen = self.placer.fits(o.shape, o.partition.name, view, self.switch_limit(job, o))
        if chosen is not None and isinstance(prof, CountProfile) and prof.reserved_any and \
                not prof.allows(sum(len(c) for c in chosen), limit_s):
            return None
        return chosen

    def _start_shortened(self, job: Job, opts: list[Option]) -> bool:
        """``--time-min`` (Slurm's TimeMin): start with the longest time limit between the
        job's minimum and its limit that fits now without delaying a reservation (found by
        bisection: a shorter limit never fits worse). The ``Start`` carries that limit."""
        tmin = job.spec.time_min_s or 0
        for o in opts:
            lo, hi = tmin, o.time_limit_s - 1
            chosen = self._fit_for(job, o, lo) if lo <= hi else None
            if chosen is None:
                continue
            while lo < hi:
                mid = (lo + hi + 1) // 2
                got = self._fit_for(job, o, mid)
                if got is not None:
                    lo, chosen = mid, got
                else:
                    hi = mid - 1
            self.start(job, Option(o.partition, o.shape, lo), chosen,
                       backfilled=bool(self.blocked))
            return True
        return False

    def _behind(self, opts: list[Option]) -> str:
        for o in opts:
            jid = self.blocker.get(o.partition.name)
            if jid is not None:
                return f"waits for higher-priority job {jid} in partition {o.partition.name}"
        return "waits for higher-priority jobs"

    def start(self, job: Job, o: Option, chosen: list[list[Pick]], backfilled: bool) -> None:
        self.record_start(job, o, self.placer.commit(o.shape, o.partition.name, self.pool,
                                                     chosen), backfilled)

    def record_start(self, job: Job, o: Option, placement: Placement,
                     backfilled: bool) -> None:
        """``job`` starts with ``placement`` (already taken from the pool)."""
        tl = o.time_limit_s
        end = round_up(self.now + tl, self.config.bf_resolution_s)
        if end < self.floor:  # ``floor``: now + 1 s, rounded up
            end = self.floor
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
        if self._deps is not None:  # an index not built yet has nothing to record
            self._deps.started(job)

    def block(self, job: Job, opts: list[Option], rank: int, pr: float,
              preempting: bool = False) -> None:
        """``job`` cannot start now: reserve if the mode says so, and explain."""
        if self.mode == BackfillMode.EASY and not self.annotate and not preempting \
                and not self.boot_mask:
            # nothing to record when its partitions are already blocked, each with its
            # first blocked job, and hold the EASY reservation (the usual case behind a
            # blocked head, tested for every backfill candidate)
            pm = self.table.part_masks
            blocked, blocker = self.blocked, self.blocker
            masks = 0
            for o in opts:
                name = o.partition.name
                m = pm[name]
                if m & ~blocked or name not in blocker:
                    break
                masks |= m
            else:
                if masks & self.reserved_mask:
                    return
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
                got = self.reserve(job, opts, window, self.mode != BackfillMode.NONE)
                if got is not None:
                    est = got
                    self.reserved_mask |= masks
                    self.out.reserved.append(job.id)
                elif self.mode == BackfillMode.NONE:
                    self.out.reserved.append(job.id)
            else:
                self.out.reserved.append(job.id)
        elif self.mode == BackfillMode.EASY and masks & self.boot_mask and not preempting:
            # a job behind the EASY reservation that waits only for booting nodes holds
            # them too (``corral.core.boot``): the next job plans on other nodes, and the
            # shell resumes every node a waiting job needs, not one job's at a time
            res = self.config.bf_resolution_s
            est = self.reserve(job, opts, round_up(self.boot_until, res), True)
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
        boot = pmask & self.boot_mask  # free in the pool, but not before their boot
        free = self.pool.free_cores_in(pmask & ~boot)
        text = (f"not enough free resources in partition {o.partition.name} "
                f"({free} cores free now; it needs {o.shape.cpus_min} CPUs)")
        if boot:
            text += (f"; {boot.bit_count()} powered-down or booting node(s) are available "
                     "after their boot")
        for ts in o.shape.sets:
            if ts.numa:
                need = ts.min_tasks or min(ts.tasks, o.shape.min_available)
                text += self._numa_detail(ts, up & ~boot, need)
        return text

    def _numa_detail(self, ts: TaskSet, mask: int, need: int) -> str:
        """Why a task group with a NUMA policy waits: the aligned replicas the nodes of
        ``mask`` hold now are fewer than ``need`` ("" when they are not)."""
        t = self.table
        if ts.constraint:
            mask &= t.feature_mask(ts.constraint)
        got = 0
        for i in iter_bits(mask):
            cpt = demand(ts, t, t.class_of[i]).cores_per_task
            got += len(numa_slots(self.pool, i, ts.numa, need - got, cpt, ts.gpus_per_task,
                                  ts.gpu_type))
            if got >= need:
                return ""
        policy = "single-numa-node" if ts.numa == NUMA_SINGLE else "restricted"
        where = ("one NUMA domain" if ts.numa == NUMA_SINGLE
                 else "the fewest NUMA domains that can hold one")
        gpus = f" and {ts.gpus_per_task} GPUs" if ts.gpus_per_task else ""
        return (f"; TopologyAffinityError: task group {ts.name!r} (topologyPolicy {policy}) "
                f"needs {need} replica(s) of {ts.cpus_per_task} CPUs{gpus}, each from {where}"
                f" of a node, and the free NUMA domains hold {got} now")


def reserved_ids(snapshot: ClusterSnapshot, config: SchedulerConfig) -> tuple[int, ...]:
    if config.reservation_policy != ReservationPolicy.HIGHEST:
        return ()
    return snapshot.reserved


__all__ = ["Outcome", "Pass", "reserved_ids", "is_unit_cluster"]
