"""Shared state of one queue pass, and its availability profile (built on first use).

``PassState`` holds what every part of the pass reads: the snapshot, the pool, the placer,
per-cycle counters, and the profile: the per-node ``Profile`` in general, or the
count-only ``CountProfile`` when every node is a one-core node (``is_unit_cluster``).
The pass itself (``schedule.Pass``) adds the queue loop; ``plan.Planner`` reservations;
``preemption.Preemptor`` victim selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.config import SchedulerConfig
from corral.core.counts import CountProfile
from corral.core.decisions import PendingInfo, PendingTail, Preempt, Reject, Reserve, Start
from corral.core.dependency import DependencyIndex
from corral.core.ends import INF, round_up
from corral.core.feasibility import Option
from corral.core.feasibility import _placer as cached_placer
from corral.core.limits import LimitState
from corral.core.model.job import Job, JobState
from corral.core.model.partition import Qos
from corral.core.nodes import NodeTable
from corral.core.placement import Placer
from corral.core.pool import Pool, PoolKeeper, compiled, running_ends
from corral.core.profile import Profile, Release
from corral.core.shape import time_limit_s
from corral.core.snapshot import ClusterSnapshot

# end time (start + limit, rounded) per running job record: a bounded identity memo
_ENDS: dict[int, tuple[Job, SchedulerConfig, float, int]] = {}


@dataclass(slots=True)
class Outcome:
    starts: list[Start] = field(default_factory=list)
    reservations: list[Reserve] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    pending: dict[int, PendingInfo] = field(default_factory=dict)
    tail: PendingTail | None = None  # waiting jobs left out of ``pending`` (``passes.tail``)
    reserved: list[int] = field(default_factory=list)
    backfilled: int = 0
    tested: int = 0


class PassState:
    """What the parts of one cycle's pass share (see the module docstring)."""

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                 table: NodeTable, pool: Pool, keeper: PoolKeeper | None = None) -> None:
        self.snap = snapshot
        self.keeper = keeper
        self.config = config
        self.now = now
        self.table = table
        self.pool = pool
        self.annotate = config.annotate_pending
        self.mode = config.backfill
        self.out = Outcome()
        self._deps: DependencyIndex | None = None  # built on first use (``deps``)
        # what depends only on the table, the config and the frozen QOS/account records is
        # kept on the table across cycles (a disabled LimitState is never written to)
        memo = table.memo.get("pass")
        if not (isinstance(memo, tuple) and memo[0] is config and memo[1] is snapshot.qos
                and memo[2] is snapshot.accounts):
            off = LimitState(snapshot.qos, snapshot.accounts, ())
            memo = (config, snapshot.qos, snapshot.accounts, cached_placer(table, config),
                    None if off.enabled else off, {q.name: q for q in snapshot.qos},
                    is_unit_cluster(table))
            table.memo["pass"] = memo
        self.placer: Placer = memo[3]
        limits: LimitState | None = memo[4]
        self.limits = limits if limits is not None else LimitState(
            snapshot.qos, snapshot.accounts, snapshot.running)
        self.qos: dict[str, Qos] = memo[5]
        self._profile: Profile | CountProfile | None = None
        self.unit: bool = memo[6]  # every node one core: count-only planning
        # future advance reservations: each node's whole capacity held in the profile over
        # the window (``corral.core.advance``); node-by-node, so no count-only planning
        self.windows: list[tuple[list[tuple[int, int, int, int]], float, float]] = []
        for r in snapshot.advance:
            if r.start_time <= now or r.end_time <= r.start_time:
                continue
            amounts = [(i, table.cores[i], table.mem[i], table.ngpus[i])
                       for i in (table.index.get(n) for n in r.nodes) if i is not None]
            if amounts:
                self.windows.append((amounts, r.start_time, r.end_time))
        # booting nodes (``corral.core.boot``): held from now until they are ready, so
        # nothing starts on them now and plans (estimated starts) include the boot
        self.boot_mask = 0
        self.boot_until = now
        for name, ready in snapshot.boot_ready.items():
            i = table.index.get(name)
            if i is None or ready <= now:
                continue
            self.windows.append(([(i, table.cores[i], table.mem[i], table.ngpus[i])], now,
                                 ready))
            self.boot_mask |= 1 << i
            self.boot_until = max(self.boot_until, ready)
        if self.windows:
            self.unit = False
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

    def planned_memo(self) -> None:
        snap = self.snap
        memo = self.table.memo.get("plans")
        if not (isinstance(memo, tuple) and memo[0] is self.config and memo[1] is snap.qos
                and memo[2] is snap.accounts and memo[3] is snap.licenses):
            self.table.memo["plans"] = (self.config, snap.qos, snap.accounts, snap.licenses,
                                        {}, {}, {}, {})

    @property
    def deps(self) -> DependencyIndex:
        """Dependency lookups over the snapshot (most cycles never need one)."""
        if self._deps is None:
            s = self.snap
            self._deps = DependencyIndex(s.pending + s.held if s.held else s.pending,
                                         s.running, s.finished)
        return self._deps

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
                    ends = (self.keeper.running_ends(self.table, self.config,
                                                     self.snap.running)
                            if self.keeper is not None
                            else running_ends(self.table, self.config))
                    cp = CountProfile.from_index(self.now, res, free_now, ends, self.floor)
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
                prof = Profile(self.pool, self.now, res, releases)
                for amounts, start, end in self.windows:
                    prof.reserve(amounts, start, end)
                self._profile = prof
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
        return self.floor if self.floor > end else end

    def switch_limit(self, job: Job, opt: Option) -> int | None:
        sw = opt.shape.switches
        if sw is None:
            return None
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        return sw if self.now - since < opt.shape.switches_wait_s else None


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
