"""Discrete-event replay of a workload through the real scheduling core.

Events on a virtual clock (trace seconds): job arrivals (submit times), completions
(``start + run``) and kills at the time limit (``start + limit`` when the job would run
longer and the exceed policy is ``kill``). After events, a scheduling cycle calls
``corral.core.run_cycle(snapshot, config, now=clock)`` -- the very function the controller
calls -- and the engine applies its decisions: ``Start`` (occupy the allocation, schedule
the end), ``Reject`` (the job can never run), ``Preempt`` (the victim stops after its grace
time; REQUEUE puts it back in the queue, CANCEL ends it).

Cycle timing:

* ``batch`` (default): all events at one instant are applied, then one cycle runs, like a
  controller that coalesces a burst of events;
* ``event``: one cycle after every single event, arrivals before completions at equal
  times (RLScheduler's loop; needed to reproduce its published numbers).

With strict priority or EASY, a cycle is skipped when it provably cannot start anything:
no pending job needs at most the free CPUs (whole nodes: the idle nodes), no new arrival
needs rejecting, and, with persistent reservations, a reservation already exists. Under
FCFS a new arrival ranks after every pending job, so after a cycle the earlier jobs stay
blocked until resources are freed (time alone only shrinks backfill windows); an instant
that brings nothing but arrivals then needs a cycle only if one of *them* fits. The core
is pure and keeps no state between cycles besides what the engine passes back
(reservations, usage), so a skipped cycle changes nothing (``tests/sim/test_engine.py``
checks this against running every cycle). Conservative backfill re-plans from last
cycle's reservations (its guarantees), so there every instant with pending jobs gets a
cycle, and so does every instant when preemption is configured. Everything is
deterministic: ties are broken by workload order and no randomness is used.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from corral.core import ClusterSnapshot, SchedulerConfig, run_cycle
from corral.core.config import BackfillMode, Ordering, PreemptType
from corral.core.cycle import clear_caches, trim_caches  # bound the core's memos
from corral.core.decisions import Reserve
from corral.core.model.account import AccountTree
from corral.core.model.job import Allocation, HoldKind, Job, JobSpec, JobState
from corral.core.model.partition import PreemptMode
from corral.core.pool import PoolKeeper
from corral.sim.cluster import SimCluster, account_tree_for
from corral.sim.result import COMPLETED, PREEMPTED, REJECTED, TIMEOUT, UNFINISHED, SimResult
from corral.sim.settings import as_dict as scheduler_settings
from corral.sim.usage_book import UsageBook
from corral.sim.workload import ExceedPolicy, Workload

ProgressFn = Callable[[int, int], None]
_NODE_CPUS = attrgetter("cpus")
# the core's memos on long traces: the per-job ones are trimmed every TRIM_EVERY cycles,
# the per-request ones (plans, shapes: one per distinct request) cleared only once
# CLEAR_SPECS new requests have been seen since the last clear
TRIM_EVERY = 5_000
CLEAR_SPECS = 10_000
GC_THRESHOLDS = (50_000, 50, 100)  # during a replay (see ``Engine.run``)
# the leading fields of ``Job`` in order: the replay builds running records positionally
# (pinned by tests/sim/test_engine_fields.py)
RUNNING_FIELDS = ("id", "spec", "submit_time", "state", "start_time", "end_time", "hold",
                  "allocation", "time_limit_s", "admin_priority", "site_factor",
                  "array_job_id", "array_task_id", "array_max_running", "restarts",
                  "exit_code", "partition")



@dataclass(frozen=True)
class EngineOptions:
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    exceed: ExceedPolicy = ExceedPolicy.KILL
    cycle_mode: str = "batch"  # "batch" | "event"
    skip_idle_cycles: bool = True
    record_allocations: bool = False
    label: str = ""
    until_s: float | None = None
    # keep the core's pool across cycles, updated with the jobs that start and end
    # (``corral.core.pool.PoolKeeper``); off: the core diffs the running set every cycle
    keep_pool: bool = True


def _config_supports(config: SchedulerConfig, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(config))


def _persistent(config: SchedulerConfig) -> bool:
    """True when the core keeps reservations across cycles (Maui ``HIGHEST``)."""
    policy = getattr(config, "reservation_policy", None)
    return policy is not None and str(getattr(policy, "value", policy)).lower() == "highest"


def _snapshot_field(name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(ClusterSnapshot))


def _snapshot_factory(template: ClusterSnapshot) -> Callable[[dict[str, Any]], ClusterSnapshot]:
    """A maker of ``ClusterSnapshot``s from a complete field map, as the dataclass
    constructor would build them with those keyword arguments but without its per-field
    frozen ``object.__setattr__`` calls (one dict copy). ``ClusterSnapshot`` has no slots
    and no ``__post_init__``, so its state is its instance ``__dict__``; if that ever
    changes, the plain constructor is used."""
    names = [f.name for f in dataclasses.fields(ClusterSnapshot)]
    plain = (not hasattr(ClusterSnapshot, "__slots__")
             and not hasattr(ClusterSnapshot, "__post_init__")
             and sorted(vars(template)) == sorted(names))

    def make(values: dict[str, Any]) -> ClusterSnapshot:
        if not plain:
            return ClusterSnapshot(**values)
        snap = object.__new__(ClusterSnapshot)
        vars(snap).update(values)
        return snap

    return make


class Engine:
    """One simulation of ``workload`` on ``cluster``; call ``run()`` once."""

    def __init__(self, workload: Workload, cluster: SimCluster,
                 options: EngineOptions | None = None) -> None:
        self.wl = workload
        self.cluster = cluster
        self.opt = options or EngineOptions()
        if self.opt.cycle_mode not in ("batch", "event"):
            raise ValueError(f"cycle mode {self.opt.cycle_mode!r}: use batch or event")
        w = self.opt.config.weights
        self.track_usage = (self.opt.config.ordering is Ordering.MULTIFACTOR
                            and w.fairshare > 0)
        if self.track_usage or cluster.accounts.accounts:
            # fair share needs the tree; a configured cluster checks accounts against it
            pairs = zip(
                ("g%d" % g if g >= 0 else "unknown" for g in workload.group_id.tolist()),
                ("u%d" % u if u >= 0 else "unknown" for u in workload.user_id.tolist()),
                strict=True)
            self.tree = account_tree_for(pairs, cluster.accounts)
        else:
            self.tree = AccountTree()  # nothing reads it: skip per-job account checks
        # FCFS ranks a new arrival after every pending job, so an arrival can only start
        # itself: an instant with nothing but arrivals that do not fit needs no cycle
        self.arrivals_rank_last = self.opt.config.ordering is Ordering.FCFS
        self.persistent = _persistent(self.opt.config)
        # what the engine hands back from one cycle to the next (see ClusterSnapshot)
        self.pass_reserved = _snapshot_field("reserved")
        self.pass_reservations = _snapshot_field("reservations")
        # conservative backfill re-plans from last cycle's guarantees, so every instant
        # with pending jobs gets its cycle; strict and EASY may skip provably idle ones
        # (with preemption, a job that does not fit may start by evicting others)
        self.may_skip = (self.opt.skip_idle_cycles
                         and self.opt.config.backfill is not BackfillMode.CONSERVATIVE
                         and self.opt.config.preempt_type is PreemptType.NONE)

    # -- the event loop -------------------------------------------------------------------
    def run(self, progress: ProgressFn | None = None) -> SimResult:
        """Replay the workload. The garbage collector is tuned for the replay and restored
        after it: what exists before it (workload, cluster, modules) is frozen out of
        collections, and young collections run every 50,000 allocations instead of 700
        (the replay allocates short-lived decision objects by the million; the young
        generation it scans stays a few MB)."""
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            return self._run(progress)
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()

    def _run(self, progress: ProgressFn | None) -> SimResult:  # noqa: C901
        wl, cl, opt = self.wl, self.cluster, self.opt
        n = len(wl)
        submit = wl.submit_s.tolist()
        run_s = wl.run_s.tolist()
        limit = wl.limit_s.tolist()
        procs = wl.procs.tolist()
        names: dict[tuple[str, int], str] = {}

        def name_of(prefix: str, k: int) -> str:
            got = names.get((prefix, k))
            if got is None:
                got = names[(prefix, k)] = f"{prefix}{k}" if k >= 0 else "unknown"
            return got

        users = [name_of("u", u) for u in wl.user_id.tolist()]  # one str per user, shared
        accts = [name_of("g", g) for g in wl.group_id.tolist()]
        demand = [cl.alloc_cpus_for(p) for p in procs]
        queues = wl.queue_id.tolist() if cl.queue_map else [-1] * n
        whole = cl.whole_nodes
        ppn = cl.procs_per_node
        total_cpus = cl.total_cpus
        node_index = {name: i for i, name in enumerate(cl.node_names)}
        node_used = [0] * cl.total_nodes
        idle_nodes = cl.total_nodes
        kill = opt.exceed is ExceedPolicy.KILL
        per_event = opt.cycle_mode == "event"
        config = opt.config
        if _config_supports(config, "annotate_pending"):
            # the simulator reads no pending reasons: skip computing them
            config = dataclasses.replace(config, annotate_pending=False)
        until = math.inf if opt.until_s is None else opt.until_s

        # per-job outcome: plain lists while running (cheaper element writes than numpy)
        start: list[float] = [math.nan] * n
        end: list[float] = [math.nan] * n
        state: list[int] = [UNFINISHED] * n
        alloc_cpus: list[int] = [0] * n
        allocations: dict[int, tuple[int, ...]] = {}

        pending: dict[int, Job] = {}
        running: dict[int, Job] = {}
        alloc_nodes: dict[int, list[tuple[int, int]]] = {}
        heap: list[tuple[float, int, int]] = []  # (end time, sequence, job index)
        version: dict[int, int] = {}  # job -> sequence of its live end event
        seq = 0
        # pending demand multiset for the skip rule
        size_count: dict[int, int] = {}
        size_heap: list[int] = []
        free_cpus = total_cpus
        reserved: tuple[int, ...] = ()
        last_reservations: tuple[Reserve, ...] = ()
        book = UsageBook(config.decay_half_life_s, submit[0] if n else 0.0)
        if self.track_usage:  # the tree's order: the table's keys are the ranking's users
            book.place_all((a.account, a.user) for a in self.tree.associations)

        samples_t: array[float] = array("d")
        samples_q: array[float] = array("d")
        samples_b: array[float] = array("d")
        cycles = skipped = 0
        core_s = 0.0
        t_wall = time.perf_counter()
        nxt = 0  # next arrival
        clock = submit[0] if n else 0.0
        done = 0
        force = False
        dirty = False  # something other than last-ranked arrivals happened since a cycle
        fresh_need = 1 << 62  # smallest need among arrivals since the last cycle

        # what a job needs free to start: CPUs, or whole nodes
        needs = [-(-p // ppn) for p in procs] if whole else demand

        def add_pending(i: int) -> None:
            k = needs[i]
            c = size_count.get(k, 0)
            if c == 0:
                heapq.heappush(size_heap, k)
            size_count[k] = c + 1

        def remove_pending(i: int) -> None:
            size_count[needs[i]] -= 1

        def min_need() -> int:
            while size_heap and size_count.get(size_heap[0], 0) == 0:
                heapq.heappop(size_heap)
            return size_heap[0] if size_heap else 1 << 62

        held_cpus: dict[int, int] = {}  # running job -> CPUs it holds
        # every node has one CPU (the usual trace machine): an allocation holds one per node
        one_cpu_nodes = all(nd.spec.cpus == 1 for nd in cl.nodes)

        def cpus_of(alloc: Allocation) -> int:
            return len(alloc.nodes) if one_cpu_nodes else sum(map(_NODE_CPUS, alloc.nodes))

        track_nodes = whole or opt.record_allocations
        # nothing but the free CPU count (and the usage rate) to update: done inline
        # (``occupy`` otherwise)
        count_only = not track_nodes
        charge = book.change if self.track_usage else None

        def occupy(i: int, job: Job, sign: int) -> None:
            nonlocal free_cpus, idle_nodes
            if sign > 0:
                alloc = job.allocation
                assert alloc is not None
                cpus = held_cpus[i] = cpus_of(alloc)
            else:
                cpus = held_cpus.pop(i)
            free_cpus -= sign * cpus
            if self.track_usage:
                assoc = (accts[i], users[i])
                book.change(assoc, clock, sign * cpus)
            if not track_nodes:
                return
            if sign > 0:
                assert job.allocation is not None
                used = [(node_index[na.node], na.cpus) for na in job.allocation.nodes]
                alloc_nodes[i] = used
            else:
                used = alloc_nodes.pop(i)
            for ni, c in used:
                before = node_used[ni]
                node_used[ni] = before + sign * c
                if before == 0:
                    idle_nodes -= 1
                elif node_used[ni] == 0:
                    idle_nodes += 1

        keeper = PoolKeeper() if opt.keep_pool else None

        def finish(i: int, t: float, st: int) -> None:
            nonlocal free_cpus
            job = running.pop(i)
            if keeper is not None:
                keeper.remove(job)
            if count_only:
                cpus = held_cpus.pop(i)
                free_cpus += cpus
                if charge is not None:
                    charge((accts[i], users[i]), clock, -cpus)
            else:
                occupy(i, job, -1)
            end[i] = t
            state[i] = st

        template = ClusterSnapshot(nodes=cl.nodes, partitions=cl.partitions, qos=cl.qos,
                                   accounts=self.tree)
        fields = dict(vars(template))
        new_snapshot = _snapshot_factory(template)

        pass_reserved, pass_reservations = self.pass_reserved, self.pass_reservations
        track_usage, record_allocations = self.track_usage, opt.record_allocations
        perf_counter, heappush, running_state = time.perf_counter, heapq.heappush, JobState.RUNNING
        no_hold = HoldKind.NONE
        keeper_add = keeper.add if keeper is not None else None

        def cycle(now: float) -> None:
            nonlocal cycles, core_s, reserved, last_reservations, seq, done, free_cpus
            cycles += 1
            fields["pending"] = tuple(pending.values())
            if out_of_order:  # requeued jobs still pending break the arrival order
                out_of_order.intersection_update(pending)
            fields["pending_in_submit_order"] = not out_of_order
            fields["running"] = tuple(running.values())
            fields["generation"] = cycles
            if pass_reserved:
                fields["reserved"] = reserved
            if pass_reservations:
                fields["reservations"] = last_reservations
            if track_usage:
                fields["usage"] = book.table(now)
            snap = new_snapshot(fields)
            t0 = perf_counter()
            res = run_cycle(snap, config, now, keeper)
            core_s += perf_counter() - t0
            if cycles % TRIM_EVERY == 0:
                if len(specs) >= CLEAR_SPECS:
                    specs.clear()  # equal requests made from now on get new specs
                    clear_caches()
                else:
                    trim_caches()
            for rj in res.rejects:
                if rj.job_id in pending:
                    remove_pending(rj.job_id)
                    del pending[rj.job_id]
                    state[rj.job_id] = REJECTED
                    done += 1
            for pr in res.preemptions:
                v = pr.victim_id
                if v not in running or v in preempt_mode:
                    continue
                # being killed: COMPLETING holds its resources but is no victim again
                old = running[v]
                running[v] = dataclasses.replace(old, state=JobState.COMPLETING)
                if keeper is not None:
                    keeper.replace(old, running[v])
                t_stop = now + pr.grace_s
                seq += 1
                version[v] = seq
                heapq.heappush(heap, (t_stop, seq, v))
                # mark: a preempted stop, handled in the completion branch
                preempt_mode[v] = pr.mode
            for s in res.starts:
                i = s.job_id
                job = pending.pop(i)
                size_count[needs[i]] -= 1  # ``remove_pending``
                tl = s.time_limit_s
                lim = limit[i] if tl is None else float(tl)
                alloc = s.allocation
                # positional, in the order of ``RUNNING_FIELDS`` (keywords cost twice as much)
                started = Job(i, job.spec, job.submit_time, running_state, now, None, no_hold,
                              alloc, int(lim), None, 0, None, None, None, job.restarts, None,
                              alloc.partition)
                running[i] = started
                if keeper_add is not None:
                    keeper_add(started)
                if count_only:
                    cpus = held_cpus[i] = cpus_of(alloc)
                    free_cpus -= cpus
                    if charge is not None:
                        charge((accts[i], users[i]), now, cpus)
                else:
                    occupy(i, started, +1)
                    cpus = held_cpus[i]
                start[i] = now
                alloc_cpus[i] = cpus
                if record_allocations:
                    allocations[i] = tuple(ni for ni, _ in alloc_nodes[i])
                r = run_s[i]
                killed = kill and r > lim
                seq += 1
                version[i] = seq
                timeout_flag[i] = killed
                heappush(heap, (now + (lim if killed else r), seq, i))
            last_reservations = res.reservations
            reserved = res.reserved

        preempt_mode: dict[int, PreemptMode] = {}
        # pending jobs out of (submit time, id) order; ``pending`` is in arrival order,
        # which is that order (the workload is sorted by submit time, ids are positions),
        # and no replayed job has an admin priority: what ``pending_in_submit_order`` says
        out_of_order: set[int] = set()
        timeout_flag: dict[int, bool] = {}

        # one JobSpec object per distinct request: the core memoizes plans and shapes by
        # spec identity, so equal requests share them (a spec is a pure value)
        specs: dict[tuple[int, int, str, str, int], JobSpec] = {}

        rank_last = self.arrivals_rank_last
        limit_int = [int(x) for x in limit]

        def arrive(i: int) -> None:
            nonlocal force, dirty, fresh_need
            key = (procs[i], limit_int[i], users[i], accts[i], queues[i])
            spec = specs.get(key)
            if spec is None:
                spec = specs[key] = cl.spec_for(*key)
            pending[i] = Job(i, spec, submit[i])  # id, spec, submit_time
            add_pending(i)
            if demand[i] > total_cpus:
                force = True  # let the core reject it
            if rank_last:
                k = needs[i]
                if k < fresh_need:
                    fresh_need = k
            else:
                dirty = True

        def complete(i: int, t: float) -> None:
            nonlocal done, dirty
            dirty = True
            version.pop(i, None)
            mode = preempt_mode.pop(i, None)
            if mode is None:
                finish(i, t, TIMEOUT if timeout_flag.pop(i, False) else COMPLETED)
                done += 1
                return
            timeout_flag.pop(i, None)
            if mode is PreemptMode.REQUEUE:
                job = running.pop(i)
                if keeper is not None:
                    keeper.remove(job)
                occupy(i, job, -1)
                requeued = dataclasses.replace(job, state=JobState.PENDING, start_time=None,
                                               allocation=None, restarts=job.restarts + 1)
                pending[i] = requeued
                out_of_order.add(i)  # appended after later arrivals
                add_pending(i)
                start[i] = math.nan
            else:
                finish(i, t, PREEMPTED)
                done += 1

        may_skip, persistent = self.may_skip, self.persistent

        def should_cycle() -> bool:
            if not pending:
                return False
            if force or not may_skip:
                return True
            if persistent and not any(r in pending for r in reserved):
                return True
            room = idle_nodes if whole else free_cpus
            if dirty:
                return min_need() <= room
            return fresh_need <= room

        last_q = last_b = math.nan  # the last sample (none yet: NaN equals nothing)
        report_every = max(1, n // 200)
        next_report = report_every
        inf, heappop = math.inf, heapq.heappop
        while nxt < n or heap:
            t_arr = submit[nxt] if nxt < n else inf
            while heap and version.get(heap[0][2]) != heap[0][1]:
                heappop(heap)  # stale (the job was preempted and restarted)
            t_end = heap[0][0] if heap else inf
            if t_arr == inf and t_end == inf:
                break
            if per_event:
                if t_arr <= t_end:
                    if t_arr > clock:
                        clock = t_arr
                    arrive(nxt)
                    nxt += 1
                else:
                    if t_end > clock:
                        clock = t_end
                    _, _, i = heappop(heap)
                    complete(i, t_end)
            else:
                # builtin min/max cost several times a comparison on this path
                t = t_end if t_end < t_arr else t_arr
                if t > clock:
                    clock = t
                while heap and heap[0][0] <= t:
                    _, sq, i = heappop(heap)
                    if version.get(i) == sq:
                        complete(i, t)
                while nxt < n and submit[nxt] <= t:
                    arrive(nxt)
                    nxt += 1
            if clock > until:
                break
            if should_cycle():
                cycle(clock)
            else:
                skipped += 1
            force = dirty = False
            fresh_need = 1 << 62
            q, b = float(len(pending)), float(total_cpus - free_cpus)
            if q != last_q or b != last_b:
                samples_t.append(clock)  # a step function: repeats add nothing
                samples_q.append(q)
                samples_b.append(b)
                last_q, last_b = q, b
            if progress is not None and done >= next_report:
                progress(done, n)
                next_report += report_every
        if progress is not None:
            progress(done, n)

        wall = time.perf_counter() - t_wall
        stats = {"cycles": cycles, "cycles_skipped": skipped, "wall_s": round(wall, 3),
                 "core_s": round(core_s, 3), "scheduling_points": cycles + skipped}
        settings = {"exceed": opt.exceed.value, "cycle_mode": opt.cycle_mode,
                    "ordering": config.ordering.value, "backfill": config.backfill.value,
                    "placement": config.placement.value, "machine": cl.description,
                    "scheduler": scheduler_settings(config)}
        return SimResult(
            label=opt.label or f"{config.ordering.value}/{config.backfill.value}",
            workload=wl, start_s=np.array(start, dtype=np.float64),
            end_s=np.array(end, dtype=np.float64), state=np.array(state, dtype=np.int8),
            alloc_cpus=np.array(alloc_cpus, dtype=np.int64),
            total_cpus=total_cpus, total_nodes=cl.total_nodes, node_names=cl.node_names,
            samples_t=np.frombuffer(samples_t, dtype=np.float64).copy(),
            samples_pending=np.frombuffer(samples_q, dtype=np.float64).copy(),
            samples_busy_cpus=np.frombuffer(samples_b, dtype=np.float64).copy(),
            allocations=allocations, stats=stats, settings=settings,
        )


def simulate(workload: Workload, cluster: SimCluster, options: EngineOptions | None = None,
             progress: ProgressFn | None = None) -> SimResult:
    """Run one simulation (see ``Engine``)."""
    return Engine(workload, cluster, options).run(progress)
