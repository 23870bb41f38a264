"""Fair Tree on a flat tree: a few users' factors by counting instead of ranking everyone.

A fast path of ``fs_cache.FairShareCache`` for the shape every trace replay has (one
account holding every user, or users straight under the root) when the caller needs the
factors of a few associations only (the pending jobs'). It gives exactly the floats that
``fair_tree.fair_tree_factors`` gives for those associations; anything outside its
conditions returns ``None`` and the caller takes the general path.

**Applies** (``flat_list``, checked once per kept tree structure) when the ranking visits a
single sibling list and that list is every user association of the tree: from the root
down, each list is one account, until a list of users only; and every one of those users
has the same share fraction ``f`` (equal, positive shares).

**Why counting is enough.** Fair Tree visits that list first, in descending level
fairshare ``LF``; the user at position ``p`` gets rank ``N - b`` where ``b`` is the first
position of ``p``'s run of equal ``LF`` (``N`` users), so its factor is
``(N - b) / N`` with ``b = #{v : LF_v > LF_u}``. Here ``LF_v = f / (usage_v / U)``
(``U``: the account's usage, the sum of the list's usage in tree order), ``inf`` without
usage. IEEE division is correctly rounded, hence monotone, so ``LF`` is non-increasing in
usage: every user with less usage than ``u`` has ``LF >= LF_u``, those with as much or
more have ``LF <= LF_u``. The users with a strictly larger ``LF`` are therefore those
below ``u`` in usage order (``bisect`` in the sorted usage) less the run just below ``u``
whose ``LF`` rounds to exactly ``LF_u`` (a short walk, computing those few ``LF`` with the
same expression as the general path).

**Refused** (``None``): the sum ``U`` not finite and positive (NaN, infinity, no usage at
all: the general path gives everyone ``inf``), or a positive usage so small that
``usage / U`` is ``0.0`` (the general path divides by zero there, and so must fail the
same way). Cost per call: one pass over the users' usage (C level), a sort of those floats,
and ``O(log N)`` per key asked. Pure: no clock, no I/O. Equivalence is pinned by
``tests/core/priority/test_fs_flat.py`` against ``fair_tree_factors``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter

from corral.core.priority.usage_table import UsageTable

Key = tuple[str, str]
_INF = math.inf


class FlatList:
    """The one list a flat tree's ranking visits: its users in tree order, their share;
    and how the last usage mapping's entries map onto those users (``usage_of``)."""

    __slots__ = ("keys", "share", "pos", "_seen", "_gather")

    def __init__(self, keys: tuple[Key, ...], share: float) -> None:
        self.keys = keys  # every user association, in the tree's child order
        self.share = share  # each one's share fraction, shares / sum of the list's shares
        self.pos = {k: i for i, k in enumerate(keys)}  # each user's place in ``keys``
        self._seen: Sequence[Key] = []  # the keys of the last usage mapping, in its order
        # per user, its place in ``_seen`` (``len(_seen)``: absent), as one C-level getter
        # (``None``: those places are the users' own, in order: no gathering)
        self._gather: Callable[[list[float]], Sequence[float]] | None = _nothing

    def usage_of(self, usage: Mapping[Key, float]) -> Sequence[float]:
        """Each user's usage (0.0 when absent), in tree order. A shell passes the same keys
        in the same order cycle after cycle; while they are (a ``UsageTable``: the same
        keys tuple; another mapping: its keys compare equal, at C level, identity first)
        the places found last time are read again instead of hashing every key. A
        ``UsageTable``'s values are floats already (``float`` of each otherwise)."""
        seen: Sequence[Key]
        values: list[float]
        if isinstance(usage, UsageTable):
            if usage.keys_ is self._seen and self._gather is None:
                return usage.values_  # a table of these users, in order (floats already)
            seen, values = usage.keys_, list(usage.values_)
        else:
            seen, values = list(usage), list(map(float, usage.values()))
        if seen is not self._seen and seen != self._seen:
            self._seen = seen
            if tuple(seen) == self.keys:  # the users themselves, in order: read as they are
                self._gather = None
            else:
                where = {k: i for i, k in enumerate(seen)}
                places = [where.get(k, len(seen)) for k in self.keys]
                # itemgetter of one place returns the item, not a 1-tuple
                self._gather = (itemgetter(*places) if len(places) > 1
                                else _single(places[0]))
        if self._gather is None:
            return values
        values.append(0.0)
        return self._gather(values)


def _nothing(values: list[float]) -> Sequence[float]:
    return ()


def _single(place: int) -> Callable[[list[float]], Sequence[float]]:
    return lambda values: (values[place],)


def flat_list(span: Sequence[tuple[int, int]], is_user: Sequence[bool],
              keys: Sequence[Key | None], user_count: int,
              shares_of: Mapping[int, Sequence[float | None]]) -> FlatList | None:
    """The ``FlatList`` of a numbered tree (``FairShareCache``'s numbering: node 0 the
    root, ``span[i]`` the range of ``i``'s children, ``shares_of[i]`` their share
    fractions, ``None`` for a child without shares), or ``None`` when it is not flat."""
    i = 0
    s, e = span[0]
    while e - s == 1 and not is_user[s]:
        i = s  # a lone account: the ranking goes straight into it
        s, e = span[i]
    if e - s != user_count or user_count == 0 or not all(is_user[s:e]):
        return None
    shares = shares_of.get(i)
    if shares is None or None in shares or len(set(shares)) != 1:
        return None
    users = tuple(k for k in keys[s:e] if k is not None)
    first = shares[0]
    assert first is not None and len(users) == user_count
    return FlatList(users, first)


def flat_factors(flat: FlatList, usage: Mapping[Key, float],
                 wanted: Iterable[Key]) -> dict[Key, float] | None:
    """Fair Tree factor of each association in ``wanted`` (all of them users of ``flat``),
    exactly as the whole ranking gives it; ``None`` where this path does not apply."""
    vals = flat.usage_of(usage)
    total = sum(vals)  # the account's usage: the same sum, in the same order, as the tree
    if not 0.0 < total < _INF:  # NaN fails both
        return None
    ordered = sorted(vals)
    n = len(ordered)
    k = bisect_right(ordered, 0.0)
    if k < n and ordered[k] / total == 0.0:
        return None  # the general path would divide by zero
    f = flat.share
    out: dict[Key, float] = {}
    pos = flat.pos
    for key in wanted:
        p = pos.get(key)
        u = vals[p] if p is not None else float(usage.get(key, 0.0))
        lf = f / (u / total) if u > 0.0 else _INF
        b = bisect_left(ordered, u)  # users with less usage: LF >= lf
        while b > 0:
            below = ordered[b - 1]
            if (f / (below / total) if below > 0.0 else _INF) != lf:
                break
            b -= 1  # rounds to the same LF: in u's tie run
        out[key] = (n - b) / n
    return out
