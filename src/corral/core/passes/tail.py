"""The waiting tail of the queue pass: the jobs behind the backfill test limit, at once.

When pending jobs are annotated (the controller always does), the general pass visits
every job of the queue to give it a reason. In a deep queue nearly all of them are behind
the limit: once a job has blocked and ``bf_max_job_test`` jobs have been tested (EASY or
conservative backfill), no later job is placed, reserved or changes the pass's state, and
a job that is neither held nor limited can only get ``Priority`` "not tested by backfill
this cycle". Visiting 100,000 of them one by one costs more than the rest of the cycle.

``tail_walk`` yields ``(rank, job)`` as ``enumerate(order, 1)`` does until that point,
and from there only the jobs that need a visit; the others go into one ``PendingTail``
(reason and detail once, then ids, ranks and priorities in queue order), worked out at C
level. A job goes into the tail when the general loop has already given this very job
object (jobs are frozen: a changed job is a new object) that reason in an earlier cycle
of the same planning context, as a *plain* job (no hold, array task limit or admin
priority; a simple spec: no begin time, dependency, licenses or ``--time-min``; a
runnable option), and it holds no reservation carried from the last cycle (conservative
backfill). The loop records such jobs in ``waits`` (kept with the planning memo, so a new
context starts empty, and bounded by the queue). The pass takes the tail only with
QOS/account limits off, no ``max_jobs_per_cycle`` and backfill on.

The same holds behind the start cap (``max_starts_per_cycle``): once that many jobs have
started, no later job is tested, and a plain job can only get ``Priority`` "not started
this cycle". Which of the two limits a pass is behind never changes once one is reached
(behind the test limit nothing starts any more; behind the cap nothing is tested), so
``limit_detail`` gives one detail for the whole tail, the one the loop gives each job.

Such a job passes every check of the loop before the test limit (its plan, held by the
memo, is the same; it has no static or dynamic reason, a runnable partition), so the
tail's reason is exactly the loop's.

Invariant: the ``PendingMap`` built from the tail reads exactly as the per-job dict of the
general loop (``Pass.compact_tail = False``): same keys, same ``PendingInfo`` per job.
Pinned by ``tests/core/passes/test_tail.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import compress, repeat
from operator import and_, attrgetter, contains, neg, not_

from corral.core import reasons as R
from corral.core.config import BackfillMode
from corral.core.decisions import PendingTail
from corral.core.model.job import Job
from corral.core.passes.state import PassState
from corral.core.priority.multifactor import Priorities

_SPEC = attrgetter("spec")
_ID = attrgetter("id")
_SUBMIT = attrgetter("submit_time")


def untested_detail(max_test: int) -> str:
    return f"not tested by backfill this cycle (bf_max_job_test={max_test})"


def capped_detail(max_starts: int) -> str:
    return f"not started this cycle (max_starts_per_cycle={max_starts}); next cycle"


class TailWalk(PassState):
    """The queue walk with a compact waiting tail (see the module docstring)."""

    compact_tail = True  # False: the general loop visits every job (tests)

    def limited(self, max_test: int) -> bool:
        """No later job of the queue is tested: the start cap is reached, or (backfill on)
        a job has blocked and ``max_test`` jobs have been tested since."""
        cap = self.config.max_starts_per_cycle
        if cap is not None and len(self.out.starts) >= cap:
            return True
        return (bool(self.blocked) and self.mode != BackfillMode.NONE
                and self.out.tested >= max_test)

    def limit_detail(self, max_test: int) -> str:
        """Why a job behind ``limited`` waits (the same for every job of one pass)."""
        cap = self.config.max_starts_per_cycle
        if cap is not None and len(self.out.starts) >= cap:
            return capped_detail(cap)
        return untested_detail(max_test)

    def tail_walk(self, order: list[Job], prio: Mapping[int, float] | None,
                  max_test: int) -> Iterator[tuple[int, Job]]:
        """``enumerate(order, 1)``, except that once no further job can be tested, the
        jobs that can only wait for it are left out and recorded in ``out.tail``.
        ``prio``: the priorities the pass reads (``None``: FCFS, ``-submit_time``)."""
        rank = 0
        n = len(order)
        while rank < n:
            if self.limited(max_test):
                yield from self._tail(order, rank, prio, max_test)
                return
            job = order[rank]
            rank += 1
            yield rank, job

    def _tail(self, order: list[Job], start: int, prio: Mapping[int, float] | None,
              max_test: int) -> Iterator[tuple[int, Job]]:
        rest = order[start:]
        self.planned_memo()
        memo = self.table.memo["plans"]
        assert isinstance(memo, tuple)
        waits: dict[int, Job] = memo[7]
        if len(waits) > 2 * len(order) + 10_000:  # bounded by the queue
            waits.clear()
        # a job object seen waiting here in this planning context (it is held, so its id
        # stays its own; a changed job is a new object) waits here again
        ok = map(contains, repeat(waits), map(id, rest))
        if self.carried:
            carried = self.carried
            ok = map(and_, ok, map(not_, map(contains, repeat(carried), map(_ID, rest))))
        mask = list(ok)
        tail = list(compress(rest, mask))
        ids = tuple(map(_ID, tail))
        if prio is None:  # FCFS: what the loop computes, float(-submit_time)
            prios = tuple(map(float, map(neg, map(_SUBMIT, tail))))
        else:
            # a ``Priorities``' own dict: its ``get`` at C level, not a method per job
            get = prio.by_id().get if isinstance(prio, Priorities) else prio.get
            prios = tuple(map(float, map(get, ids, repeat(0.0))))
        first = start + 1
        self.out.tail = PendingTail(R.PRIORITY, self.limit_detail(max_test), ids,
                                    tuple(compress(range(first, first + len(rest)), mask)),
                                    prios)
        for k in compress(range(len(rest)), map(not_, mask)):
            yield first + k, rest[k]
