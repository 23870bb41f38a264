"""Advance reservations in a cycle: who may run where, now and in the plan.

Input: ``ClusterSnapshot.advance`` (the reservations) and ``job_reservations`` (the
reservation each pending job asked for by name, ``--reservation``). Output: the same
``CycleResult`` as any cycle. Algorithm:

1. Jobs that asked for a reservation that does not exist (any more), that does not allow
   their user or account, or that has not started wait with reason ``Reservation`` (the
   last with its start as their estimated start).
2. The other jobs run in the *main* pass on a snapshot where the nodes of every active
   reservation are unavailable (they cannot start there, the "can never run" verdict
   still counts them), and where every future reservation is a *window*: its nodes'
   whole capacity is held in the availability profile over ``[start, end)``
   (``PassState`` builds the profile with them). A job may then start on a reserved
   node only if its time limit ends before the window opens; backfill and the estimated
   starts plan around the windows (in every backfill mode, strict included).
3. Each active reservation's jobs run in a pass of their own on a snapshot where only
   that reservation's nodes are available (the running jobs everywhere, so its pool is
   exact); later windows on those nodes stay in force. The passes share no node (active
   reservations' node sets are disjoint in what they give: a node in two active
   reservations belongs to the first by start time, then name).
4. ``FLEX`` reservations (Slurm's ``Flags=FLEX``): their jobs may start before the
   reservation does, run past its end and use nodes outside it. As in Slurm, whose job
   queue puts the jobs that asked for a reservation before all others
   (``sort_job_queue2``), they are scheduled first: one pass per FLEX reservation (by
   start, then name) before the main pass, on its own nodes plus every node no active
   reservation holds, their reservation's nodes tried first (``prefer_nodes``). Other
   reservations' windows stay in force; its own is no window for it. The passes after
   them (the later FLEX passes and the main pass) see the jobs they started as running
   (what is left of those nodes stays usable, and their ends are planned), and their
   planned starts (``Reserve`` with nodes) are windows there like the reservations',
   so a FLEX job waiting for nodes outside its reservation is backfilled around, never
   starved by the jobs without a reservation.
5. The results are merged. A job of the main pass waiting for resources that a
   maintenance reservation (flag ``MAINT``) holds now or within its time limit shows
   Slurm's reason ``ReqNodeNotAvail, Reserved for maintenance``.

Invariants: no job outside a reservation is ever placed on its nodes during its window
(its time limit counted from now); no job of a reservation runs outside its nodes or
before it starts. Licenses and QOS limits are counted per pass (a known approximation).
Reference: Slurm 22.05 ``reservations.html``; the windows are the profile reservations of
Mu'alem & Feitelson's backfilling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from corral.core import reasons as R
from corral.core.config import SchedulerConfig
from corral.core.decisions import (
    CycleResult,
    CycleStats,
    PendingInfo,
    Preempt,
    Reject,
    Reserve,
    Start,
)
from corral.core.model.job import Job, JobState
from corral.core.model.node import Node, NodeState
from corral.core.model.reservation import FLEX, MAINT, AdvanceReservation
from corral.core.snapshot import ClusterSnapshot

Cycle = Callable[[ClusterSnapshot, SchedulerConfig, float], CycleResult]


def _away(node: Node) -> Node:
    """The node as not available for new work in one pass (its running jobs stay)."""
    if node.state in (NodeState.DOWN, NodeState.DRAINED, NodeState.UNKNOWN,
                      NodeState.FUTURE):
        return node
    return replace(node, state=NodeState.DRAINED if node.state is NodeState.IDLE
                   else NodeState.DRAINING)


def run_with_reservations(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                          cycle: Cycle) -> CycleResult:
    """One cycle with advance reservations (see the module docstring); ``cycle`` runs
    one pass (``corral.core.cycle``'s plain cycle)."""
    live = sorted((r for r in snapshot.advance if r.end_time > now),
                  key=lambda r: (r.start_time, r.name))
    by_name = {r.name: r for r in live}
    active = [r for r in live if r.active(now)]
    future = tuple(r for r in live if r.start_time > now)
    owner: dict[str, str] = {}  # node -> the active reservation that holds it now
    for r in active:
        for n in r.nodes:
            owner.setdefault(n, r.name)
    waiting: dict[int, PendingInfo] = {}
    main: list[Job] = []
    groups: dict[str, list[Job]] = {r.name: [] for r in active}
    flex: dict[str, list[Job]] = {}
    for job in snapshot.pending:
        name = snapshot.job_reservations.get(job.id)
        if not name:
            main.append(job)
            continue
        got = by_name.get(name)
        if got is None:
            waiting[job.id] = PendingInfo(job.id, R.RESERVATION, 0.0, None,
                                          f"reservation {name} does not exist or has ended")
            continue
        r = got
        if not r.allows(job.spec.user, job.spec.account):
            waiting[job.id] = PendingInfo(job.id, R.RESERVATION, 0.0, None,
                                          f"reservation {name} does not allow user "
                                          f"{job.spec.user} (account {job.spec.account})")
        elif FLEX in r.flags:  # may start before it and outside its nodes
            flex.setdefault(name, []).append(job)
        elif not r.active(now):
            waiting[job.id] = PendingInfo(job.id, R.RESERVATION, 0.0, r.start_time,
                                          f"reservation {name} starts at "
                                          f"t={r.start_time:.0f}")
        else:
            groups[name].append(job)
    results: list[CycleResult] = []
    started: list[Job] = []  # what the FLEX passes started: running for the passes after
    plans: list[AdvanceReservation] = []  # ... and their planned starts, as windows
    if flex:
        results.extend(_flex_passes(snapshot, config, now, cycle, flex, by_name, owner,
                                    future, started, plans))
    main_snap = replace(
        snapshot, nodes=tuple(_away(n) if n.spec.name in owner else n
                              for n in snapshot.nodes),
        pending=tuple(main), running=snapshot.running + tuple(started),
        advance=future + tuple(plans), job_reservations={})
    results.append(cycle(main_snap, config, now))
    for r in active:
        jobs = groups[r.name]
        if not jobs:
            continue
        mine = {n for n, o in owner.items() if o == r.name}
        sub = replace(snapshot, nodes=tuple(n if n.spec.name in mine else _away(n)
                                            for n in snapshot.nodes),
                      pending=tuple(jobs), advance=future, job_reservations={})
        results.append(cycle(sub, config, now))
    out = _merge(results, waiting, len(snapshot.pending), len(snapshot.running))
    if config.annotate_pending and any(MAINT in r.flags for r in live):
        _maintenance_reasons(out, main, live, snapshot, config, now)
    return out


def _plan_windows(res: CycleResult, default_s: int) -> list[AdvanceReservation]:
    """A pass's planned starts as windows over their nodes (for the passes after it)."""
    out = []
    for x in res.reservations:
        if x.nodes:
            end = x.end_time if x.end_time > x.start_time else x.start_time + default_s
            out.append(AdvanceReservation(f"(plan {x.job_id})", x.start_time, end, x.nodes))
    return out


def _flex_passes(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                 cycle: Cycle, flex: dict[str, list[Job]],
                 by_name: dict[str, AdvanceReservation], owner: dict[str, str],
                 future: tuple[AdvanceReservation, ...], started: list[Job],
                 plans: list[AdvanceReservation]) -> list[CycleResult]:
    """One pass per FLEX reservation with jobs (step 4 of the module docstring); the
    jobs they start go into ``started`` (as running), their planned starts into
    ``plans``."""
    out: list[CycleResult] = []
    for r in sorted((by_name[n] for n in flex), key=lambda r: (r.start_time, r.name)):
        def usable(node: Node, r: AdvanceReservation = r) -> bool:
            return owner.get(node.spec.name, r.name) == r.name
        mine = {j.id: j for j in flex[r.name]}
        jobs = tuple(replace(j, spec=replace(j.spec, prefer_nodes=r.nodes + tuple(
            p for p in j.spec.prefer_nodes if p not in r.nodes))) for j in mine.values())
        windows = tuple(w for w in future if w.name != r.name) + tuple(plans)
        sub = replace(snapshot, nodes=tuple(n if usable(n) else _away(n)
                                            for n in snapshot.nodes),
                      pending=jobs, running=snapshot.running + tuple(started),
                      advance=windows, job_reservations={})
        res = cycle(sub, config, now)
        out.append(res)
        started.extend(_as_running(mine[s.job_id], s, now) for s in res.starts
                       if s.job_id in mine)
        plans.extend(_plan_windows(res, config.default_time_s))
    return out


def _as_running(job: Job, start: Start, now: float) -> Job:
    """A job a pass started, as the passes after it see it: running on its allocation."""
    return replace(job, state=JobState.RUNNING, start_time=now, allocation=start.allocation,
                   partition=start.allocation.partition,
                   time_limit_s=start.time_limit_s if start.time_limit_s is not None
                   else job.time_limit_s)


def _merge(results: list[CycleResult], waiting: dict[int, PendingInfo], pending: int,
           running: int) -> CycleResult:
    starts: list[Start] = []
    reservations: list[Reserve] = []
    preemptions: list[Preempt] = []
    rejects: list[Reject] = []
    reserved: list[int] = []
    infos: dict[int, PendingInfo] = dict(waiting)
    backfilled = tested = 0
    for res in results:
        starts.extend(res.starts)
        reservations.extend(res.reservations)
        preemptions.extend(res.preemptions)
        rejects.extend(res.rejects)
        reserved.extend(res.reserved)
        infos.update(res.pending)
        backfilled += res.stats.backfilled
        tested += res.stats.jobs_tested
    stats = CycleStats(pending, running, len(starts), backfilled, len(reservations),
                       len(preemptions), len(rejects), tested)
    return CycleResult(tuple(starts), tuple(reservations), tuple(preemptions),
                       tuple(rejects), infos, stats, tuple(reserved))


def _maintenance_reasons(out: CycleResult, jobs: list[Job],
                         live: list[AdvanceReservation], snapshot: ClusterSnapshot,
                         config: SchedulerConfig, now: float) -> None:
    """Jobs waiting for resources that a MAINT reservation holds within their time limit:
    Slurm's ``ReqNodeNotAvail, Reserved for maintenance``."""
    maint = [r for r in live if MAINT in r.flags]
    default = snapshot.default_partition()
    pending = out.pending
    assert isinstance(pending, dict)  # ``_merge`` gives a dict (tails read into it)
    for job in jobs:
        info = pending.get(job.id)
        if info is None or info.reason != R.RESOURCES:
            continue
        names = job.spec.partitions or ((default.name,) if default is not None else ())
        nodes: set[str] = set()
        for p in snapshot.partitions:
            if p.name in names:
                nodes.update(p.nodes)
        limit = job.time_limit_s or job.spec.time_limit_s or config.default_time_s
        for r in maint:
            if r.start_time < now + limit and nodes & set(r.nodes):
                pending[job.id] = replace(
                    info, reason=R.RESERVED_MAINT,
                    detail=f"nodes are reserved for maintenance by {r.name} from "
                           f"t={r.start_time:.0f} to t={r.end_time:.0f}")
                break
