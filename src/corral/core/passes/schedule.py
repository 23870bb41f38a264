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
``Priority``. The EASY reservation of a partition group is made whatever ``bf_window_s``
says (a bounded window would starve wide jobs); in conservative mode reservations beyond
the window are not made.

Gangs (multi-node and task-group jobs) start all-or-nothing: a placement is taken from the
pool whole or not at all, and a waiting gang holds nothing, so gangs cannot deadlock.
Preemption (when configured) is tried for a job that cannot start now, before it blocks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from itertools import compress, count, repeat
from math import ceil
from operator import (
    add,
    and_,
    attrgetter,
    contains,
    eq,
    gt,
    is_not,
    itemgetter,
    le,
    mul,
    not_,
    or_,
    truediv,
)
from operator import ge as ge_

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
from corral.core.passes.plan import Planner
from corral.core.passes.preemption import Preemptor
from corral.core.passes.state import Outcome, is_unit_cluster
from corral.core.placement import Placement
from corral.core.placement.select import Pick
from corral.core.profile import Profile
from corral.core.snapshot import ClusterSnapshot

_RUNNABLE = (PartitionState.UP, PartitionState.DRAIN)
_NOT_LEAN = (0, 0, 0, 0, 0, "")
_LEAN_CHUNK = 2048
_LEAN_SMALL = 8  # slices up to this size are counted job by job (``Pass._lean_few``)
_L_FLAG, _L_NEED, _L_WANT, _L_NREQ, _L_DUR, _L_PART = (itemgetter(k) for k in range(6))
_SPEC = attrgetter("spec")
_TIME_LIMIT = attrgetter("time_limit_s")
_PLAIN_KEY = attrgetter("time_limit_s", "hold", "array_max_running")
_PLAIN = (None, HoldKind.NONE, None)  # what ``_PLAIN_KEY`` reads off a plain job


class Pass(Planner, Preemptor):
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
            memo = (self.config, snap.qos, snap.accounts, snap.licenses, {}, {}, {})
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
        # the options' partitions come from the table, whose partitions (and their states)
        # are fixed, so the runnable ones are memoized with the plan
        runnable = [o for o in got.options if o.partition.state in _RUNNABLE]
        # no begin time, dependency or licenses: only the job record can hold it; and no
        # --time-min (a refused job may still start shortened): see ``_lean_info``
        simple = (spec.begin_time is None and not (spec.dependency and spec.dependency.items)
                  and not spec.licenses and not spec.time_min_s)
        plans[id(spec)] = (spec, job.time_limit_s, got, runnable, simple)
        leans: dict[int, tuple[int, int, int, int, int, str]] = memo[6]
        if job.time_limit_s is None:  # the spec alone decides: see ``_fitting``
            needs[id(spec)] = got.options[0].shape.cpus_min if got.options else 0
            info = self._lean_info(got, runnable, simple)
            if info is not None:
                leans[id(spec)] = info
            else:
                leans.pop(id(spec), None)
        else:
            needs.pop(id(spec), None)
            leans.pop(id(spec), None)
        return got, runnable, simple

    def _needs(self) -> dict[int, int]:
        """CPUs at the smallest start per spec id (0: rejected), for specs whose memoized
        plan (which holds the spec) was made without a job time limit."""
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        got: dict[int, int] = memo[5]
        return got

    def _leans(self) -> dict[int, tuple[int, int, int, int, int, str]]:
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        got: dict[int, tuple[int, int, int, int, int, str]] = memo[6]
        return got

    def _lean_info(self, pl: Plan, runnable: list[Option],
                   simple: bool) -> tuple[int, int, int, int, int, str] | None:
        """(1, CPUs at the smallest start, nodes wanted, required nodes, time limit,
        partition) of a spec ``_lean_run`` may count: plain, one runnable option whose
        shape ``SetPlacer._unit`` places on any of the cluster's one-core nodes."""
        t = self.table
        if not simple or len(pl.options) != 1 or len(runnable) != 1 or (
                t.unit_mask != t.all_mask):
            return None
        o = runnable[0]
        got = self.placer.unit_static(o.shape, o.partition.name)
        if got is None:
            return None
        cand, required, want, nreq = got
        if cand != t.all_mask or required:
            return None
        return 1, o.shape.cpus_min, want, nreq, o.time_limit_s, o.partition.name

    def planned_memo(self) -> None:
        snap = self.snap
        memo = self.table.memo.get("plans")
        if not (isinstance(memo, tuple) and memo[0] is self.config and memo[1] is snap.qos
                and memo[2] is snap.accounts and memo[3] is snap.licenses):
            self.table.memo["plans"] = (self.config, snap.qos, snap.accounts, snap.licenses,
                                        {}, {}, {})

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
        attempts = 0
        if self.mode == BackfillMode.CONSERVATIVE and self.snap.reservations:
            self.preload(order)
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
        items: Iterator[tuple[int, Job]] = enumerate(order, 1)
        # the narrowed queue behind the head (only without annotations: ranks are not kept)
        rest: list[Job] | None = None
        pos = rank = 0
        lean = prefilter and max_cycle is None and not limits_on
        while True:
            if prefilter and self.blocked and rest is None:
                rest = self._fitting(order[rank:], self.pool.free_total * max_tpc)
            if rest is not None:
                if lean and pos < len(rest):
                    used, tested, stop = self._lean_run(rest, pos, max_test,
                                                        self.pool.free_total * max_tpc)
                    pos += used
                    attempts += tested
                    if stop:
                        break
                if pos >= len(rest):
                    break
                job = rest[pos]
                pos += 1
            else:
                nxt = next(items, None)
                if nxt is None:
                    break
                rank, job = nxt
            if job.admin_priority is not None:
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

    def _fitting(self, jobs: list[Job], limit: int) -> list[Job]:
        """The rest of the queue without the jobs the prefilter would skip anyway.

        A job is skipped when its smallest start needs more CPUs than ``limit`` (free
        cores now times threads per core). Free cores only decrease during the pass, so a
        job over the limit now is over it when visited. Its need is known only for specs
        already planned without a job time limit (``need_of``); other jobs are kept and
        checked as usual. All of it runs at C level: a long queue behind a blocked head
        costs little more than a list copy."""
        if not jobs:
            return jobs
        need = self._needs()
        if len(jobs) <= _LEAN_SMALL:  # a few: cheaper than building the pipeline
            get = need.get
            return [j for j in jobs
                    if get(id(j.spec), 0) <= limit or j.time_limit_s is not None]
        small = map(le, map(need.get, map(id, map(_SPEC, jobs)), repeat(0)), repeat(limit))
        own_limit = map(is_not, map(_TIME_LIMIT, jobs), repeat(None))
        return list(compress(jobs, map(or_, small, own_limit)))

    def _lean_run(self, rest: list[Job], pos: int, max_test: int,
                  limit: int) -> tuple[int, int, bool]:
        """EASY on one-core nodes behind a reserved head: the jobs from ``rest[pos]`` on
        that the loop would only count, worked out at C level.

        A *lean* job (``_leans``: a plain job of a plain spec, one runnable option on
        every node, placed by ``SetPlacer._unit``) either is skipped by the prefilter
        (wider than ``limit``) or is tested: its placement size ``k`` is refused by
        ``CountProfile.allows`` and ``block`` has nothing to record (its partition is
        blocked, has its first blocked job and holds the reservation). Neither changes
        the pool or the profile, so the run of such jobs is computed at once from the
        profile's running minimum. Returns (jobs consumed, jobs tested, stop the loop:
        ``bf_max_job_test`` reached). Exactly what the loop would do job by job."""
        prof = self._profile
        if not (isinstance(prof, CountProfile) and prof.reserved_any) or self._nothing_more():
            return 0, 0, False
        pm = self.table.part_masks
        blocked, reserved = self.blocked, self.reserved_mask
        noop = {name for name in self.blocker
                if not pm.get(name, 0) & ~blocked and pm.get(name, 0) & reserved}
        if not noop:
            return 0, 0, False
        leans = self._leans()
        pool = self.pool
        ge = pool.ge_cores
        free = (pool.up & ge[1]).bit_count() if len(ge) > 1 else 0
        used = tested = 0
        size = 8  # slices grow while whole slices are counted: a run that stops at once
        while pos + used < len(rest):  # (a job to place, or not lean) costs little
            start = pos + used
            if size <= _LEAN_SMALL:
                got, t = self._lean_few(rest, start, min(len(rest), start + size), leans,
                                        noop, limit, free, prof)
            else:
                got, t = self._lean_chunk(rest[start:start + size], leans, noop, limit,
                                          free, prof.now, prof.resolution,
                                          prof.running_min(), prof.times)
            used += got
            tested += t
            if self.out.tested + tested > max_test:  # the loop stops at the job over it
                done = max(0, max_test - self.out.tested)
                self.out.tested += done
                return used, done, True
            if got < size:
                break
            size = min(size * 4, _LEAN_CHUNK)
        self.out.tested += tested
        return used, tested, False

    def _lean_few(self, rest: list[Job], lo: int, hi: int,
                  leans: dict[int, tuple[int, int, int, int, int, str]], noop: set[str],
                  limit: int, free: int, prof: CountProfile) -> tuple[int, int]:
        """``_lean_chunk`` on ``rest[lo:hi]`` job by job, for the first few jobs: the same
        verdicts (in the run: lean, plain and either skipped or refused by the running
        minimum) without building the C-level pipeline, which costs more than a few jobs."""
        tested = 0
        mins: list[int] | None = None
        now, res = prof.now, prof.resolution
        for k in range(lo, hi):
            job = rest[k]
            info = leans.get(id(job.spec))
            if (info is None or not info[0] or job.time_limit_s is not None
                    or job.hold is not HoldKind.NONE or job.array_max_running is not None
                    or info[5] not in noop):
                return k - lo, tested
            if info[1] > limit:
                continue  # skipped by the prefilter
            want, nreq = info[2], info[3]
            n = free if free < want else want  # max(nreq, min(want, free)) without builtins
            if nreq > n:
                n = nreq
            end = now + info[4]
            if res > 1:
                end = ceil(end / res) * res
            if mins is None:
                mins = prof.running_min()
            if mins[bisect_left(prof.times, end)] >= n:
                return k - lo, tested  # allowed: the loop places it
            tested += 1
        return hi - lo, tested

    def _lean_chunk(self, jobs: list[Job],
                    leans: dict[int, tuple[int, int, int, int, int, str]], noop: set[str],
                    limit: int, free: int, now: float, res: int, mins: list[int],
                    times: list[float]) -> tuple[int, int]:
        """``_lean_run`` on a slice of the queue: (jobs in the run, jobs tested)."""
        infos = list(map(leans.get, map(id, map(_SPEC, jobs)), repeat(_NOT_LEAN)))
        # lean spec, and no own time limit, hold or array limit (a record merely *equal*
        # to those, not identical, goes the loop's general way to the same verdict)
        ok = map(and_, map(_L_FLAG, infos), map(eq, map(_PLAIN_KEY, jobs), repeat(_PLAIN)))
        if not noop.issuperset(self.table.part_masks):  # else every partition is in it
            ok = map(and_, ok, map(contains, repeat(noop), map(_L_PART, infos)))
        skipped = list(map(gt, map(_L_NEED, infos), repeat(limit)))
        ends: Iterator[float] = map(add, repeat(now), map(_L_DUR, infos))
        if res > 1:
            ends = map(mul, map(ceil, map(truediv, ends, repeat(res))), repeat(res))
        ms = list(map(mins.__getitem__, map(bisect_left, repeat(times), ends)))
        # m >= max(nreq, min(want, free)), i.e. m >= nreq and (m >= want or m >= free):
        # comparisons only (builtin min/max cost several times as much per job)
        allowed = map(and_, map(ge_, ms, map(_L_NREQ, infos)),
                      map(or_, map(ge_, ms, map(_L_WANT, infos)), map(ge_, ms, repeat(free))))
        in_run = map(and_, ok, map(or_, skipped, map(not_, allowed)))
        stop = next(compress(count(), map(not_, in_run)), len(jobs))
        return stop, stop - sum(skipped[:stop])

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
            if not strict and isinstance(prof, Profile) and prof.dirty:
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
        if self.mode == BackfillMode.EASY and not self.annotate and not preempting:
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


def reserved_ids(snapshot: ClusterSnapshot, config: SchedulerConfig) -> tuple[int, ...]:
    if config.reservation_policy != ReservationPolicy.HIGHEST:
        return ()
    return snapshot.reserved


__all__ = ["Outcome", "Pass", "reserved_ids", "is_unit_cluster"]
