"""One pending job that starts at once: the queue pass's decision without the pass.

Algorithm: when exactly one job is pending, the pass (``passes.schedule.Pass``) visits
only that job. If its request is plain (no hold, begin time, dependency, licenses,
``--time-min`` or array limit, QOS/account limits off) and already planned, and one of its
runnable options is a shape placed on one-core nodes (``Placer.unit_plan``), the pass
starts it on the first option whose ``Placer.unit_take`` succeeds, and decides nothing
else: no reservation, reject, preemption or pending reason. ``start_alone`` makes exactly
that decision, reading the pass's memos (plans, placer) instead of building the pass.

Invariant: it returns a ``Start`` only where the pass would return the same single start
(same allocation, limit and ``backfilled=False``) and leaves the pool as the pass would;
in every other case it returns ``None`` with the pool untouched (a failed ``unit_take``
takes nothing), and the caller runs the pass. A memo that is missing or made for another
configuration or QOS/account/license set also gives ``None``: the pass builds it. Pinned
by ``tests/core/passes/test_alone.py`` against the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.core.config import BackfillMode, SchedulerConfig
from corral.core.decisions import Start
from corral.core.feasibility import Option
from corral.core.model.job import HoldKind, Job
from corral.core.nodes import NodeTable
from corral.core.placement import Placement, Placer
from corral.core.pool import Pool
from corral.core.snapshot import ClusterSnapshot

PlansGet = Callable[[int], Any]  # ``dict.get`` of the pass's plan memo (``Pass.planned``)


def plain_options(job: Job, plans_get: PlansGet) -> list[Option] | None:
    """The runnable options of a plain job whose plan is memoized, or ``None``: not
    planned yet, rejected, no runnable partition, or anything that may hold it (hold,
    array limit, begin time, dependency, licenses, ``--time-min``)."""
    spec = job.spec
    entry = plans_get(id(spec))
    if (entry is None or entry[0] is not spec or entry[1] != job.time_limit_s
            or not entry[4] or not entry[2].options or not entry[3]
            or job.hold is not HoldKind.NONE or job.array_max_running is not None):
        return None
    runnable: list[Option] = entry[3]
    return runnable


def unit_start(placer: Placer, pool: Pool,
               options: list[Option]) -> tuple[Option, Placement] | None:
    """The resource phase before any job blocks, for one-core shapes: the first option
    whose ``Placer.unit_take`` succeeds, with its placement (taken from ``pool``).
    ``None``: none fits, or an option is a shape only the general placement decides;
    nothing is taken then."""
    for o in options:
        name = o.partition.name
        got = placer.unit_plan(o.shape, name, pool)
        if got is None:
            return None
        placed = placer.unit_take(o.shape, name, pool, got[0], got[1])
        if placed is not None:
            return o, placed
    return None


def start_alone(snapshot: ClusterSnapshot, config: SchedulerConfig, job: Job,
                table: NodeTable, pool: Pool) -> Start | None:
    """The pass's decision for ``job``, the only pending job, when it starts now on
    one-core nodes; ``None``: run the pass (see the module docstring)."""
    if (config.max_jobs_per_cycle == 0
            or (config.backfill is BackfillMode.CONSERVATIVE and snapshot.reservations)):
        return None
    memo = table.memo.get("pass")
    if not (isinstance(memo, tuple) and memo[0] is config and memo[1] is snapshot.qos
            and memo[2] is snapshot.accounts and memo[4] is not None):
        return None  # no placer memo yet, or QOS/account limits are on
    plans = table.memo.get("plans")
    if not (isinstance(plans, tuple) and plans[0] is config and plans[1] is snapshot.qos
            and plans[2] is snapshot.accounts and plans[3] is snapshot.licenses):
        return None
    options = plain_options(job, plans[4].get)
    if options is None:
        return None
    got = unit_start(memo[3], pool, options)
    if got is None:
        return None
    return Start(job.id, got[1].allocation, got[0].time_limit_s, False)
