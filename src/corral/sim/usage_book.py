"""Decayed usage per association during a replay, handed to the core as a ``UsageTable``.

Usage of an association ``a`` grows by its running jobs' CPUs (its ``rate``) and decays
with half-life ``H``: brought from its last update at ``t0`` to ``now`` (``dt = now - t0``)
it becomes ``u * d + rate * H / ln 2 * (1 - d)`` with ``d = exp(-ln 2 * dt / H)``, or
``u + rate * dt`` without decay (``H <= 0``). ``change`` does this for one association (a
start or an end changes its rate); ``table`` for every association, at each cycle.

``table`` gives exactly the floats this gives each association on its own, cheaply: those
not touched since the last ``table`` were last updated at its time, so they share one
``d``: every place gets ``u * d`` in one comprehension over the values list (idle ones stop
there: their rate term is ``+0.0`` and ``u * d >= 0``), those with running jobs then add
their rate term (its first factor ``rate * H / ln 2`` kept per place, the same float);
those touched since (``change``) go on from their own time.

Associations get a place (``index``) the first time they are seen and keep it, so the
table's ``keys`` stays the same tuple object while no association is new (what
``UsageTable`` promises its readers). Each table holds its own copy of the values: later
updates never change a table already handed out.

Pinned by ``tests/sim/test_usage_book.py`` (every float equals a per-association reference
of the arithmetic above, over random sequences of starts, ends and cycles).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from corral.core.priority.usage_table import UsageTable

Key = tuple[str, str]
LN2 = math.log(2.0)


class UsageBook:
    """Every association's usage, rate and last-update time in aligned lists."""

    __slots__ = ("half_life", "keys", "index", "vals", "rate", "growth", "own_t", "active",
                 "since_all")

    def __init__(self, half_life_s: float, start: float) -> None:
        self.half_life = float(half_life_s)
        self.keys: tuple[Key, ...] = ()
        self.index: dict[Key, int] = {}
        self.vals: list[float] = []
        self.rate: list[float] = []
        self.growth: list[float] = []  # rate * H / ln 2, the first factor of the rate term
        # the time of a place's last update, only while it differs from ``since_all``
        # (the time of the last ``table``)
        self.own_t: dict[int, float] = {}
        self.active: set[int] = set()  # places with a non-zero rate
        self.since_all = start

    def place_all(self, assocs: Iterable[Key]) -> None:
        """Give ``assocs`` their places now, in that order, with zero usage (what a place
        made later starts with; an idle place stays ``0.0`` through every decay). The
        simulator places its account tree's associations first, in tree order, so the
        table's keys are the fair-share ranking's users in its order and a reader
        (``fs_flat.FlatList.usage_of``) takes the values as they are; the floats are
        the same as with places made on first use."""
        for assoc in assocs:
            if assoc not in self.index:
                self._place(assoc, self.since_all)

    def _place(self, assoc: Key, now: float) -> int:
        i = self.index.get(assoc)
        if i is None:  # new: zero usage as of now (a new keys tuple and index)
            i = len(self.keys)
            self.keys = (*self.keys, assoc)
            self.index = {**self.index, assoc: i}
            self.vals.append(0.0)
            self.rate.append(0.0)
            self.growth.append(0.0)
            self.own_t[i] = now
        return i

    def _bring(self, i: int, now: float) -> None:
        """Place ``i``'s usage brought to ``now`` from its own last update."""
        u = self.vals[i]
        dt = now - self.own_t.get(i, self.since_all)
        if dt > 0:
            rate = self.rate[i]
            half_life = self.half_life
            if half_life > 0:
                d = math.exp(-LN2 * dt / half_life)
                u = u * d + rate * half_life / LN2 * (1.0 - d)
            else:
                u += rate * dt
        self.vals[i] = u
        self.own_t[i] = now

    def change(self, assoc: Key, now: float, cpus: int) -> None:
        """A job of ``assoc`` holding ``cpus`` started at ``now`` (``cpus < 0``: one
        ended): its usage brought to ``now`` at the old rate, then the rate changed."""
        i = self._place(assoc, now)
        self._bring(i, now)
        rate = self.rate[i] = self.rate[i] + cpus
        self.growth[i] = rate * self.half_life / LN2
        if rate:
            self.active.add(i)
        else:
            self.active.discard(i)

    def table(self, now: float) -> UsageTable:
        """Every association's usage at ``now``: the floats ``_bring`` gives for each."""
        vals, own_t, half_life = self.vals, self.own_t, self.half_life
        dt = now - self.since_all
        if dt > 0 and half_life > 0 and vals:
            d = math.exp(-LN2 * dt / half_life)  # what ``_bring`` computes for dt
            new = [u * d for u in vals]  # every place
            growth, omd = self.growth, 1.0 - d
            for i in self.active:  # running and not touched since: + the rate term
                if i not in own_t:
                    new[i] += growth[i] * omd
            for i in own_t:  # touched since: from their own time, below
                new[i] = vals[i]
            self.vals = new
            for i in list(own_t):
                self._bring(i, now)
        else:
            special = list(self.active)
            special.extend(i for i in own_t if i not in self.active)
            for i in special:
                self._bring(i, now)
        own_t.clear()
        self.since_all = now
        return UsageTable(self.keys, tuple(self.vals), self.index)
