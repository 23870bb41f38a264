"""``UsageTable``: usage per association as two aligned sequences, for a shell that keeps
the same associations from one cycle to the next.

``ClusterSnapshot.usage`` is any ``Mapping[(account, user), float]``; a plain dict is what
the controller passes. A shell that decays every association's usage every cycle (the
simulator) may pass a ``UsageTable`` instead: its ``keys`` (a tuple) and ``values`` (the
floats, ``values[k]`` the usage of ``keys[k]``) are read as they are. Its promise, which
the fair-share fast paths rely on: **while the set of associations and their order do not
change, ``keys`` is the same tuple object** (a new association gives a new tuple). So a
reader that found the places of some associations in ``keys`` last cycle may read
``values`` at those places again after one identity test, with no hashing and no list
comparison per association.

As a ``Mapping`` it behaves like the dict ``dict(zip(keys, values))`` (what the general
paths read): the same keys in the same order, the same values. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar, overload

Key = tuple[str, str]
_T = TypeVar("_T")


class UsageTable(Mapping[Key, float]):
    """Read-only usage per association: ``keys`` and ``values`` aligned, ``index`` the
    place of each key (``index[keys[k]] == k``, shared by the tables of one keys tuple)."""

    __slots__ = ("keys_", "values_", "index")

    def __init__(self, keys: tuple[Key, ...], values: Sequence[float],
                 index: Mapping[Key, int] | None = None) -> None:
        if len(values) != len(keys):
            raise ValueError(f"UsageTable: {len(keys)} keys but {len(values)} values")
        if index is None:
            index = {k: i for i, k in enumerate(keys)}
            if len(index) != len(keys):
                raise ValueError("UsageTable: an association appears twice in keys")
        self.keys_ = keys
        self.values_ = values
        self.index = index

    def __getitem__(self, key: Key) -> float:
        return self.values_[self.index[key]]

    @overload
    def get(self, key: Key, /) -> float | None: ...
    @overload
    def get(self, key: Key, /, default: float | _T) -> float | _T: ...

    def get(self, key: Key, /, default: object = None) -> object:
        i = self.index.get(key)
        return default if i is None else self.values_[i]

    def __contains__(self, key: object) -> bool:
        return key in self.index

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)

    def __repr__(self) -> str:
        return f"UsageTable({dict(zip(self.keys_, self.values_, strict=True))!r})"
