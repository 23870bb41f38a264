"""Count-only fast paths of the queue pass: EASY on one-core nodes behind a blocked head.

The general pass (``passes.schedule``) visits every queued job and, for each, plans,
checks its reasons and tries to place it. In a trace replay (no annotations, EASY, no
preemption, no limits, no ``max_jobs_per_cycle``) on a machine of one-core nodes, most of
a long queue behind a blocked head is jobs that can only be *counted*: too wide for the
free cores, or refused by the reservation's count profile, with nothing to record. This
module works those runs out at C level (``map``/``compress`` pipelines over the queue,
per-spec six-field tuples instead of plans) and hands the general loop only the jobs it
must visit:

* ``walk``: the jobs the pass visits, in order. Once a head blocks, the rest of the queue
  is narrowed to the jobs that may fit (``_fitting``: a job whose smallest start needs
  more CPUs than are free now stays over that bound for the whole pass), and runs of
  *lean* jobs (plain job, plain spec, one runnable option that ``SetPlacer._unit`` places
  on any node) that the loop would only count are counted at once (``_lean_run``).
* ``remember_counts``: what the planning memo keeps per spec for the two (the smallest
  start's CPUs, and the lean tuple ``(1, CPUs, nodes wanted, required nodes, time limit,
  partition)``).
* ``_nothing_more``: no later job can start (the loop may stop).

Invariant: with these paths (``Pass.count_only_paths = True``, the default) the pass
makes exactly the decisions it makes without them (starts, reservations, rejects); only
its ``jobs_tested`` bookkeeping is counted rather than visited. Pinned by a property test
(``tests/core/passes/test_lean_equivalence.py``) and by the golden replays. Nothing here
applies when the controller annotates pending jobs (it always does), so the controller
runs the general pass only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
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

from corral.core.config import BackfillMode, PreemptType
from corral.core.counts import CountProfile
from corral.core.feasibility import Option, Plan
from corral.core.model.job import HoldKind, Job
from corral.core.passes.state import PassState

_NOT_LEAN = (0, 0, 0, 0, 0, "")
_LEAN_CHUNK = 2048
_LEAN_SMALL = 8  # slices up to this size are counted job by job (``LeanWalk._lean_few``)
_L_FLAG, _L_NEED, _L_WANT, _L_NREQ, _L_DUR, _L_PART = (itemgetter(k) for k in range(6))
_SPEC = attrgetter("spec")
_TIME_LIMIT = attrgetter("time_limit_s")
_PLAIN_KEY = attrgetter("time_limit_s", "hold", "array_max_running")
_PLAIN = (None, HoldKind.NONE, None)  # what ``_PLAIN_KEY`` reads off a plain job

LeanInfo = tuple[int, int, int, int, int, str]


class LeanWalk(PassState):
    """The count-only queue walk of the pass (see the module docstring)."""

    count_only_paths = True  # False: the general loop visits every job (tests)

    def walk(self, order: list[Job], prefilter: bool, lean: bool, max_test: int,
             max_tpc: int) -> Iterator[tuple[int, Job]]:
        """(rank, job) of every job the pass must visit, in queue order. ``prefilter``:
        nothing is annotated, so once a head blocks the queue may be narrowed; ``lean``:
        runs of count-only jobs may be counted at once (see the module docstring). Behind
        a blocked head the rank stays the head's (ranks are not kept without
        annotations)."""
        items = enumerate(order, 1)
        narrow = prefilter and self.count_only_paths
        lean = lean and self.count_only_paths
        rest: list[Job] | None = None
        pos = rank = 0
        while True:
            if narrow and self.blocked and rest is None:
                rest = self._fitting(order[rank:], self.pool.free_total * max_tpc)
            if rest is None:
                nxt = next(items, None)
                if nxt is None:
                    return
                rank, job = nxt
                yield rank, job
                continue
            if lean and pos < len(rest):
                used, _, stop = self._lean_run(rest, pos, max_test,
                                               self.pool.free_total * max_tpc)
                pos += used
                if stop:
                    return
            if pos >= len(rest):
                return
            job = rest[pos]
            pos += 1
            yield rank, job

    def remember_counts(self, job: Job, got: Plan, runnable: list[Option], simple: bool,
                        needs: dict[int, int], leans: dict[int, LeanInfo]) -> None:
        """Record, for a spec planned without a job time limit (the spec alone decides),
        its smallest start's CPUs (``_fitting``) and its lean tuple (``_lean_run``)."""
        spec = job.spec
        if job.time_limit_s is None:
            needs[id(spec)] = got.options[0].shape.cpus_min if got.options else 0
            info = self._lean_info(got, runnable, simple)
            if info is not None:
                leans[id(spec)] = info
            else:
                leans.pop(id(spec), None)
        else:
            needs.pop(id(spec), None)
            leans.pop(id(spec), None)

    def _needs(self) -> dict[int, int]:
        """CPUs at the smallest start per spec id (0: rejected), for specs whose memoized
        plan (which holds the spec) was made without a job time limit."""
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        got: dict[int, int] = memo[5]
        return got

    def _leans(self) -> dict[int, LeanInfo]:
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        got: dict[int, LeanInfo] = memo[6]
        return got

    def _lean_info(self, pl: Plan, runnable: list[Option],
                   simple: bool) -> LeanInfo | None:
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
                  leans: dict[int, LeanInfo], noop: set[str],
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
                    leans: dict[int, LeanInfo], noop: set[str],
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
