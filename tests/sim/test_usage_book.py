"""``UsageBook``: every table is, float for float, each association brought to that time on
its own; keys stay the same tuple while no association is new; tables handed out never
change.

Reference: the plain per-association arithmetic (``Reference``), every association brought
from its own last update at each table, without the book's shared decay factor, inline
rate terms or places.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.priority.usage_table import UsageTable
from corral.sim.usage_book import LN2, UsageBook

Key = tuple[str, str]
ASSOCS = [("g", f"u{i}") for i in range(5)] + [("h", "u0")]


class Reference:
    """Usage per association, each with its own clock (dicts, no shared factor)."""

    def __init__(self, half_life: float, start: float) -> None:
        self.half_life = half_life
        self.usage: dict[Key, float] = {}
        self.when: dict[Key, float] = {}
        self.rate: dict[Key, float] = {}

    def bring(self, a: Key, now: float) -> None:
        u = self.usage.get(a, 0.0)
        dt = now - self.when.get(a, now)
        if dt > 0:
            rate = self.rate.get(a, 0.0)
            if self.half_life > 0:
                d = math.exp(-LN2 * dt / self.half_life)
                u = u * d + rate * self.half_life / LN2 * (1.0 - d)
            else:
                u += rate * dt
        self.usage[a] = u
        self.when[a] = now

    def change(self, a: Key, now: float, cpus: int) -> None:
        self.bring(a, now)
        self.rate[a] = self.rate.get(a, 0.0) + cpus

    def table(self, now: float) -> dict[Key, float]:
        for a in self.usage:
            self.bring(a, now)
        return dict(self.usage)


STEPS = st.lists(st.tuples(
    st.sampled_from(["start", "end", "table", "table"]),
    st.sampled_from(ASSOCS),
    st.sampled_from([0.0, 0.0, 1.0, 7.5, 3600.0, 86400.0, 1e6]),  # time advanced
    st.integers(1, 64)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([0.0, -1.0, 600.0, 604800.0]), STEPS)
def test_every_table_is_each_association_on_its_own(half_life: float,
                                                    steps: list[tuple[str, Key, float, int]],
                                                    ) -> None:
    now = 1000.0
    book, ref = UsageBook(half_life, now), Reference(half_life, now)
    running: dict[Key, list[int]] = {}
    handed: list[tuple[UsageTable, dict[Key, float]]] = []
    last_keys: tuple[Key, ...] | None = None
    for kind, assoc, dt, cpus in steps:
        now += dt
        if kind == "start":
            running.setdefault(assoc, []).append(cpus)
            book.change(assoc, now, cpus)
            ref.change(assoc, now, cpus)
        elif kind == "end" and running.get(assoc):
            c = running[assoc].pop()
            book.change(assoc, now, -c)
            ref.change(assoc, now, -c)
        elif kind == "table":
            got, want = book.table(now), ref.table(now)
            assert list(got) == list(want)  # the same keys, in first-seen order
            for a, v in want.items():
                assert math.copysign(1.0, got[a]) == math.copysign(1.0, v)
                assert got[a] == v or (math.isnan(got[a]) and math.isnan(v)), (a, got[a], v)
            if last_keys is not None and len(last_keys) == len(got.keys_):
                assert got.keys_ is last_keys  # no new association: the same tuple
            last_keys = got.keys_
            handed.append((got, dict(want)))
    for table, values in handed:  # later updates never reach a table handed out
        assert dict(table) == values


def test_a_new_association_gets_a_new_keys_tuple_and_index() -> None:
    book = UsageBook(100.0, 0.0)
    book.change(("g", "a"), 0.0, 2)
    first = book.table(10.0)
    book.change(("g", "b"), 20.0, 1)
    second = book.table(30.0)
    assert first.keys_ == (("g", "a"),) and ("g", "b") not in first
    assert second.keys_ == (("g", "a"), ("g", "b")) and second.keys_ is not first.keys_
    assert first.get(("g", "b"), -1.0) == -1.0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0.0, 600.0, 604800.0]), STEPS,
       st.lists(st.sampled_from(ASSOCS), unique=True))
def test_placed_first_the_same_floats_and_zero_for_the_idle(
        half_life: float, steps: list[tuple[str, Key, float, int]],
        placed: list[Key]) -> None:
    """``place_all`` (what the engine does with its tree) changes no float: each table holds
    the placed associations first, in that order, then the others in first-seen order; every
    value is the one of a book that places on first use, and a placed association never
    used reads 0.0. The keys tuple stays the same while no association is new."""
    now = 1000.0
    early, lazy = UsageBook(half_life, now), UsageBook(half_life, now)
    early.place_all(placed)
    early.place_all(placed)  # again: nothing new
    assert early.keys == tuple(placed)
    running: dict[Key, list[int]] = {}
    last_keys: tuple[Key, ...] | None = None
    for kind, assoc, dt, cpus in steps:
        now += dt
        if kind == "start":
            running.setdefault(assoc, []).append(cpus)
            early.change(assoc, now, cpus)
            lazy.change(assoc, now, cpus)
        elif kind == "end" and running.get(assoc):
            c = running[assoc].pop()
            early.change(assoc, now, -c)
            lazy.change(assoc, now, -c)
        elif kind == "table":
            got, want = early.table(now), lazy.table(now)
            assert got.keys_[:len(placed)] == tuple(placed)
            assert set(got) == set(placed) | set(want)
            for a in got:
                assert got[a] == want.get(a, 0.0)
                assert math.copysign(1.0, got[a]) == math.copysign(1.0, want.get(a, 0.0))
            if last_keys is not None and len(last_keys) == len(got.keys_):
                assert got.keys_ is last_keys
            last_keys = got.keys_
