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

from corral.core.config import BackfillMode, SchedulerConfig
from corral.core.decisions import Start
from corral.core.model.job import HoldKind, Job
from corral.core.nodes import NodeTable
from corral.core.pool import Pool
from corral.core.snapshot import ClusterSnapshot


def start_alone(snapshot: ClusterSnapshot, config: SchedulerConfig, job: Job,
                table: NodeTable, pool: Pool) -> Start | None:
    """The pass's decision for ``job``, the only pending job, when it starts now on
    one-core nodes; ``None``: run the pass (see the module docstring)."""
    if (config.max_jobs_per_cycle == 0 or job.hold is not HoldKind.NONE
            or job.array_max_running is not None
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
    # the plan memo of ``Pass.planned``: (spec, limit, plan, runnable options, simple)
    spec = job.spec
    entry = plans[4].get(id(spec))
    if (entry is None or entry[0] is not spec or entry[1] != job.time_limit_s
            or not entry[4] or not entry[2].options):
        return None  # not planned yet, rejected, or something may hold it
    placer = memo[3]
    for o in entry[3]:  # as the resource phase tries them before any job blocks
        name = o.partition.name
        got = placer.unit_plan(o.shape, name, pool)
        if got is None:
            return None  # a shape only the general placement decides (nothing taken)
        placed = placer.unit_take(o.shape, name, pool, got[0], got[1])
        if placed is not None:
            return Start(job.id, placed.allocation, o.time_limit_s, False)
    return None  # no runnable option fits now: the pass blocks it
