"""Decisions: what one scheduling cycle tells the shell to do, as plain data.

The core never acts. It returns ``Start`` (with the exact allocation), ``Reserve`` (a
planned start from the availability profile), ``Preempt`` (a victim, the mode and the grace
time: signal first, kill after the grace), ``Reject`` (the job can never run as asked) and
a ``PendingInfo`` for every job still pending: a Slurm-style reason, the priority and the
estimated start when the profile knows one. "Cannot run now" (a pending reason) and "can
never run" (``Reject``) are different verdicts and never mixed.

With a deep queue most pending jobs wait for one shared reason (not tested by backfill
this cycle): those come as one ``PendingTail`` (the reason and detail once, then ids,
ranks and priorities in queue order) inside a ``PendingMap``, which reads as the
per-job mapping (a ``PendingInfo`` is made for a tail job only when asked for) and lets a
shell apply the tail in bulk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from corral.core.model.job import Allocation
from corral.core.model.partition import PreemptMode


@dataclass(frozen=True, slots=True, init=False)
class Start:
    job_id: int
    allocation: Allocation
    time_limit_s: int | None
    backfilled: bool = False

    def __init__(self, job_id: int, allocation: Allocation, time_limit_s: int | None,
                 backfilled: bool = False) -> None:
        """Fields stored through their slots (see ``_SLOTS``)."""
        s_job, s_alloc, s_limit, s_bf = _SLOTS["Start"]
        s_job(self, job_id)
        s_alloc(self, allocation)
        s_limit(self, time_limit_s)
        s_bf(self, backfilled)


@dataclass(frozen=True, slots=True)
class Reserve:
    job_id: int
    start_time: float
    nodes: tuple[str, ...] = ()
    end_time: float = 0.0  # start + time limit (rounded up to the backfill resolution)
    amounts: tuple[tuple[int, int, int], ...] = ()  # per entry of ``nodes``: cores, MB, GPUs


@dataclass(frozen=True, slots=True)
class Preempt:
    victim_id: int
    for_job_id: int
    mode: PreemptMode
    grace_s: int = 0
    warning: str = ""  # e.g. SUSPEND of a multi-node job: MPI jobs often cannot resume


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: int
    reason: str  # Slurm-style code, e.g. "PartitionTimeLimit", "BadConstraints"
    message: str  # one sentence a user can act on


@dataclass(frozen=True, slots=True)
class PendingInfo:
    job_id: int
    reason: str  # Priority, Resources, Dependency, JobHeldUser, BeginTime, ...
    priority: float = 0.0
    est_start: float | None = None
    detail: str = ""  # plain-words explanation (what blocks it)
    rank: int = 0  # position in priority order among pending jobs (1 = next)


@dataclass(frozen=True, slots=True)
class PendingTail:
    """Pending jobs that wait for one shared reason and detail, with no estimated start:
    the compact form of their ``PendingInfo`` records (``info(k)`` is job ``k``'s).
    ``job_ids``, ``ranks`` and ``priorities`` are parallel, in queue order."""

    reason: str
    detail: str
    job_ids: tuple[int, ...]
    ranks: tuple[int, ...]
    priorities: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.job_ids)

    def info(self, k: int) -> PendingInfo:
        return PendingInfo(self.job_ids[k], self.reason, self.priorities[k], None,
                           self.detail, self.ranks[k])


class PendingMap(Mapping[int, PendingInfo]):
    """``CycleResult.pending`` with a compact tail: the jobs with their own
    ``PendingInfo`` (``explicit``, in the order the pass visited them) and a
    ``PendingTail`` (after them when iterating). Reads exactly as the per-job dict would
    (tested against it); no job is in both."""

    __slots__ = ("explicit", "tail", "_index")

    def __init__(self, explicit: dict[int, PendingInfo], tail: PendingTail) -> None:
        self.explicit = explicit
        self.tail = tail
        self._index: dict[int, int] | None = None

    def __getitem__(self, job_id: int) -> PendingInfo:
        got = self.explicit.get(job_id)
        if got is not None:
            return got
        if self._index is None:
            self._index = {jid: k for k, jid in enumerate(self.tail.job_ids)}
        return self.tail.info(self._index[job_id])

    def __iter__(self) -> Iterator[int]:
        yield from self.explicit
        yield from self.tail.job_ids

    def __len__(self) -> int:
        return len(self.explicit) + len(self.tail.job_ids)

    def __contains__(self, job_id: object) -> bool:
        if job_id in self.explicit:
            return True
        if self._index is None:
            self._index = {jid: k for k, jid in enumerate(self.tail.job_ids)}
        return job_id in self._index

    def __repr__(self) -> str:
        return (f"PendingMap({len(self.explicit)} explicit, {len(self.tail)} waiting: "
                f"{self.tail.reason})")


@dataclass(frozen=True, slots=True, init=False)
class CycleStats:
    pending: int = 0
    running: int = 0
    started: int = 0
    backfilled: int = 0
    reserved: int = 0
    preempted: int = 0
    rejected: int = 0
    jobs_tested: int = 0

    def __init__(self, pending: int = 0, running: int = 0, started: int = 0,
                 backfilled: int = 0, reserved: int = 0, preempted: int = 0,
                 rejected: int = 0, jobs_tested: int = 0) -> None:
        """Fields stored through their slots (see ``_SLOTS``)."""
        s_pend, s_run, s_start, s_bf, s_res, s_pre, s_rej, s_test = _SLOTS["CycleStats"]
        s_pend(self, pending)
        s_run(self, running)
        s_start(self, started)
        s_bf(self, backfilled)
        s_res(self, reserved)
        s_pre(self, preempted)
        s_rej(self, rejected)
        s_test(self, jobs_tested)


@dataclass(frozen=True, slots=True, init=False)
class CycleResult:
    starts: tuple[Start, ...] = ()
    reservations: tuple[Reserve, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    rejects: tuple[Reject, ...] = ()
    # per waiting job: a dict, or a ``PendingMap`` whose tail is shared (read both alike)
    pending: Mapping[int, PendingInfo] = field(default_factory=dict)
    stats: CycleStats = field(default_factory=CycleStats)
    # ids holding a reservation after this cycle, in the order they got it (feed back as
    # ``ClusterSnapshot.reserved``; only ReservationPolicy.HIGHEST reads it)
    reserved: tuple[int, ...] = ()

    def __init__(self, starts: tuple[Start, ...] = (), reservations: tuple[Reserve, ...] = (),
                 preemptions: tuple[Preempt, ...] = (), rejects: tuple[Reject, ...] = (),
                 pending: Mapping[int, PendingInfo] | None = None,
                 stats: CycleStats | None = None, reserved: tuple[int, ...] = ()) -> None:
        """Fields stored through their slots (see ``_SLOTS``); ``pending`` and ``stats``
        default to a new empty dict and ``CycleStats()``, as their factories say."""
        s_starts, s_res, s_pre, s_rej, s_pend, s_stats, s_held = _SLOTS["CycleResult"]
        s_starts(self, starts)
        s_res(self, reservations)
        s_pre(self, preemptions)
        s_rej(self, rejects)
        s_pend(self, {} if pending is None else pending)
        s_stats(self, CycleStats() if stats is None else stats)
        s_held(self, reserved)


# The decisions made once per start and per cycle store their fields through their slot
# descriptors instead of the frozen dataclass's ``object.__setattr__`` per field (half the
# cost; the simulator makes them by the hundred thousand). Same fields, order and
# defaults as the dataclass fields say (pinned by tests/core/test_slot_inits.py).
_SLOTS: dict[str, tuple[Callable[[Any, Any], None], ...]] = {
    cls.__name__: tuple(cls.__dict__[f.name].__set__ for f in fields(cls))
    for cls in (Start, CycleStats, CycleResult)
}
