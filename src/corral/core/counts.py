"""``CountProfile``: the availability profile of a cluster of interchangeable one-core nodes.

When every node is a *unit* node (one core, no GPUs or GRES) of one hardware class and
every partition spans all of them, a node is either wholly free or wholly busy and node
identity does not matter for planning: the profile is the number of free nodes over time,
a step function. This is the textbook EASY setting (Lifka 1995; Mu'alem & Feitelson 2001)
and what trace replays of SWF workloads use, so it is the simulator's hot path:
O(running jobs) to build, O(steps) per query, no per-node work at all.

It answers the same questions as ``Profile`` in count terms: ``earliest(n, d)`` (first time
``n`` nodes stay free for ``d`` seconds), ``allows(n, d)`` (a job of ``n`` nodes starting
now for ``d`` seconds delays no reservation: the EASY "shadow time / extra nodes" test),
and it is updated by ``started``, ``reserve`` and ``unreserve``. Reservations carry no node
names (``Reserve.nodes`` is empty, ``amounts`` has one entry per node).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain

from corral.core.ends import INF, EndIndex, round_up
from corral.core.pool import NodeUse

_HUGE = 1 << 62


class CountProfile:
    """Free-node count over time (see the module docstring)."""

    __slots__ = ("now", "resolution", "times", "free", "reserved_any", "_mins")
    times: list[float]
    free: list[int]

    def __init__(self, now: float, resolution: int, free_now: int,
                 releases: Iterable[tuple[float, int]], floor: float | None = None) -> None:
        """``releases``: ``(end, nodes)`` sorted by end; ends before ``floor`` (overdue
        jobs) count from ``floor``."""
        self.now = now
        self.resolution = resolution
        self.reserved_any = False
        self._mins: list[int] | None = None  # running minimum of ``free`` (for ``allows``)
        times = [now]
        free = [free_now]
        floor = now if floor is None else floor
        c = free_now
        last = now
        for end, n in releases:
            if end == INF:
                break
            c += n
            if end < floor:
                end = floor
            if end <= now:
                free[0] = c
            elif last == end:
                free[-1] = c
            else:
                times.append(end)
                free.append(c)
                last = end
        self.times = times
        self.free = free

    @classmethod
    def from_index(cls, now: float, resolution: int, free_now: int, index: EndIndex,
                   floor: float) -> CountProfile:
        """Built from a running-job ``EndIndex`` with C-level list operations only."""
        self = cls.__new__(cls)
        self.now = now
        self.resolution = resolution
        self.reserved_any = False
        self._mins = None
        ends = index.ends
        get = index.nodes.__getitem__
        k0 = bisect_right(ends, floor)
        if k0:
            self.times = [now, floor, *ends[k0:]]
            self.free = list(accumulate(chain((free_now, sum(map(get, ends[:k0]))),
                                              map(get, ends[k0:]))))
        else:
            self.times = [now, *ends]
            self.free = list(accumulate(chain((free_now,), map(get, ends))))
        return self

    def end_of(self, start: float, duration_s: float) -> float:
        return round_up(start + duration_s, self.resolution)

    def _split(self, t: float) -> int:
        times = self.times
        k = bisect_left(times, t)
        if k < len(times) and times[k] == t:
            return k
        times.insert(k, t)
        self.free.insert(k, self.free[k - 1])
        return k

    def add(self, n: int, start: float, end: float) -> None:
        """Add ``n`` free nodes on ``[start, end)`` (negative: take them)."""
        if self.now > start:
            start = self.now
        if end <= start or n == 0:
            return
        self._mins = None
        a = self._split(start)
        b = self._split(end) if end != INF else len(self.times)
        free = self.free
        for k in range(a, b):
            free[k] += n

    def started(self, uses: Sequence[NodeUse], end: float) -> None:
        self.add(-len(uses), self.now, end)

    def reserve(self, amounts: Sequence[tuple[int, int, int, int]], start: float,
                end: float) -> None:
        self.reserved_any = True
        self.add(-len(amounts), start, end)

    def unreserve(self, amounts: Sequence[tuple[int, int, int, int]], start: float,
                  end: float) -> None:
        self.add(len(amounts), start, end)

    def allows(self, n: int, duration_s: float) -> bool:
        """``n`` nodes may be taken from now for ``duration_s`` without delaying any plan."""
        end = self.end_of(self.now, duration_s)
        # the steps that start before the end must all have n free nodes
        return self.running_min()[bisect_left(self.times, end)] >= n

    def running_min(self) -> list[int]:
        """Element ``k``: the fewest free nodes over the first ``k`` steps (element 0, no
        step, is a huge number), so ``allows`` is a bisection; kept until a change."""
        mins = self._mins
        if mins is None:
            # a plain loop: ``accumulate(..., min)`` pays builtin min's argument parsing
            # per step, several times this comparison
            m = _HUGE
            mins = [m]
            push = mins.append
            for v in self.free:
                if v < m:
                    m = v
                push(m)
            self._mins = mins
        return mins

    def earliest(self, n: int, duration_s: float) -> float | None:
        """First step time from which ``n`` nodes stay free for ``duration_s``."""
        times, free = self.times, self.free
        size = len(times)
        k = 0
        while k < size:
            if free[k] < n:
                k += 1
                continue
            start = times[k]
            end = self.end_of(start, duration_s)
            j = k + 1
            while j < size and times[j] < end and free[j] >= n:
                j += 1
            if j >= size or times[j] >= end:
                return start
            k = j + 1
        return None

    def free_at(self, t: float) -> int:
        return self.free[bisect_right(self.times, t) - 1]
