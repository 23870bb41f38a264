"""``run_cycle``: the one entry point of the scheduling core.

``run_cycle(snapshot, config, now) -> CycleResult``. Pure and deterministic: the same
snapshot, config and ``now`` always give the same decisions. The controller daemon and the
simulator both call this function. A caller that tracks exactly which jobs start and end
may pass a ``PoolKeeper`` (``keeper=``, see ``corral.core.pool``): the pool of free
resources is then kept across cycles and updated with those deltas instead of being
rebuilt or diffed against the running set, and the pass takes its starts from the kept
pool itself (no copy per cycle); the decisions are the same.

Steps: index the nodes (cached across cycles), build the pool of free resources (diffed
against the previous call when the nodes are unchanged), compute priorities
(``corral.core.priority.compute``), order the queue (``passes.order``), and run the queue
pass (``passes.schedule``) for the configured backfill mode.

Advance reservations (``snapshot.advance``) run the cycle as several passes
(``corral.core.advance``), future ones as windows in the profile (``passes.state``).

Fast paths: when preemption is off, no core is free on any up node and nothing needs to
be annotated (``annotate_pending=False``), nothing can start, so the cycle returns at once
(carrying persistent reservations over). Under ``ReservationPolicy.HIGHEST`` this happens
only once a reservation exists, so the job that blocks first keeps its place. One pending
job that starts at once on one-core nodes is decided without building the pass
(``passes.alone``: the same decision, from the pass's own memos).

Reading the result: ``starts`` (exact allocations), ``reservations`` (planned starts),
``preemptions``, ``rejects`` (can never run as asked), ``pending`` (a ``PendingInfo`` per
waiting job when ``annotate_pending``; a ``PendingMap`` when the jobs behind the backfill
test limit come as one compact ``PendingTail``, see ``passes.tail``), ``reserved`` (ids to
pass back as ``ClusterSnapshot.reserved``) and ``stats``.
"""

from __future__ import annotations

from corral.core import priority
from corral.core.config import Ordering, PreemptType, ReservationPolicy, SchedulerConfig
from corral.core.decisions import CycleResult, CycleStats, PendingMap
from corral.core.nodes import node_table
from corral.core.passes.alone import start_alone
from corral.core.passes.order import order_jobs
from corral.core.passes.schedule import Pass, reserved_ids
from corral.core.pool import PoolKeeper, build_pool
from corral.core.snapshot import ClusterSnapshot


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
              keeper: PoolKeeper | None = None) -> CycleResult:
    if snapshot.advance or snapshot.job_reservations:
        # advance reservations: a pass per set of nodes (``corral.core.advance``)
        from corral.core.advance import run_with_reservations

        if keeper is not None:
            keeper.invalidate()  # the passes see other node states than the kept pool
        return run_with_reservations(snapshot, config, now, _plain_cycle)
    return _plain_cycle(snapshot, config, now, keeper)


def _plain_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                 keeper: PoolKeeper | None = None) -> CycleResult:
    table, up = node_table(snapshot.nodes, snapshot.partitions)
    if keeper is not None:
        pool = keeper.lend(table, up, snapshot.running)  # the pass takes from it directly
    else:
        pool = build_pool(table, up, snapshot.running)
    if not snapshot.pending:
        return CycleResult(stats=CycleStats(running=len(snapshot.running)))
    highest = config.reservation_policy == ReservationPolicy.HIGHEST
    if (
        not config.annotate_pending
        and config.preempt_type == PreemptType.NONE
        and not pool.ge_cores[1]
        and (not highest or snapshot.reserved)
    ):
        return CycleResult(
            stats=CycleStats(pending=len(snapshot.pending), running=len(snapshot.running)),
            reserved=snapshot.reserved if highest else (),
        )
    if len(snapshot.pending) == 1 and config.preempt_type == PreemptType.NONE \
            and not snapshot.advance and not snapshot.boot_ready:  # windows: in the profile
        # one job that starts now: the pass's decision without the pass (``passes.alone``)
        start = start_alone(snapshot, config, snapshot.pending[0], table, pool)
        if start is not None:
            if keeper is not None:
                keeper.lent((start.allocation,))
            # positional: keyword arguments cost as much as the rest of this path
            return CycleResult((start,), (), (), (), {},
                               CycleStats(1, len(snapshot.running), 1), ())
    fcfs = config.ordering is Ordering.FCFS
    # FCFS: every priority is -submit_time; the pass reads it off the job (no O(queue) map)
    prio = {} if fcfs else priority.compute(snapshot, config, now)
    order = order_jobs(snapshot.pending, prio, reserved_ids(snapshot, config),
                       config.reservation_policy, snapshot.partitions, fcfs=fcfs,
                       in_submit_order=snapshot.pending_in_submit_order)
    if keeper is None:
        out = Pass(snapshot, config, now, table, pool).run(order, None if fcfs else prio)
    else:
        try:
            out = Pass(snapshot, config, now, table, pool, keeper).run(
                order, None if fcfs else prio)
        except BaseException:
            keeper.invalidate()  # the lent pool may hold part of a pass
            raise
        keeper.lent([s.allocation for s in out.starts])
    # positional, in field order (pending, running, started, backfilled, reserved,
    # preempted, rejected, jobs_tested; then starts, reservations, preemptions, rejects,
    # pending, stats, reserved): keyword arguments cost more than building both
    stats = CycleStats(len(snapshot.pending), len(snapshot.running), len(out.starts),
                       out.backfilled, len(out.reservations), len(out.preemptions),
                       len(out.rejects), out.tested)
    pending = out.pending if out.tail is None else PendingMap(out.pending, out.tail)
    return CycleResult(tuple(out.starts), tuple(out.reservations), tuple(out.preemptions),
                       tuple(out.rejects), pending, stats, tuple(out.reserved))


def clear_caches() -> None:
    """Drop every cross-cycle memo (node tables, pools, shapes). Results never depend on
    them; tests use this to prove it, and long-lived shells may call it to free memory."""
    from corral.core import nodes, pool, shape
    from corral.core.passes import order

    nodes._CACHE.clear()
    order._TIERS.clear()
    pool._LAST.clear()
    shape._SHAPES.clear()
    trim_caches()  # compiled allocations, planned ends, bit lists


def trim_caches() -> None:
    """Drop the memos that grow with every job seen (compiled allocations, running jobs'
    planned ends, bit lists of masks) and keep those that grow only with distinct nodes
    and requests (node tables with their plans and placer rows, shapes). A long-lived
    caller trims often and clears (``clear_caches``) rarely: the kept memos would only be
    rebuilt, while the trimmed ones hold records of jobs long gone. Results never depend
    on either."""
    from corral.core import nodes, pool
    from corral.core.passes import state

    pool._COMPILED.clear()
    state._ENDS.clear()
    nodes._BITS.clear()
