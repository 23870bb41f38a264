"""What ``squeue`` works out for each job, kept from one call to the next while the job's
record is unchanged.

In the controller (``corral.shims.inproc``) every call receives each job's API record as the
very same dict object as the call before, until the job changes: ``JobRecord.touch`` and
``touch_api`` drop the cached record, and a started job's record is a new copy each call
(its time used changes). So what squeue derives from one record alone — whether the
filters keep it, which collapsed array remainder it belongs to, its sort key and its line
in the asked format — is worked out once per record and *view* (the filters, sort order
and format of the call), not once per call. At 100,000 queued jobs that per-record work was
most of ``squeue -u``'s time.

Algorithm: ``Memo.results(rows, view, compute)`` looks each row up by its identity; an entry
holds the row itself (so its ``id`` cannot be reused while the entry lives) and the results
of up to ``VIEWS_PER_ROW`` views. A miss calls ``compute(row)``. Each call replaces the table
with the rows it saw, so it never holds more than the last call's rows.

A whole answer is kept too, per view (the last ``ANSWERS`` views): when a call gets the very
same record objects, in the same order, as the call that made it, and none of its lines
depended on the time, that answer is the answer (a queue that did not change between two
polls; checked by identity, one C-level pass over the rows). Any change — a job submitted,
started, ended, re-prioritised — gives another object somewhere, and the per-record path
answers.

Invariants: a result is reused only for the identical dict object and the identical view;
``compute`` must depend on nothing but the row and the view (a line that depends on the time,
a started job's, is returned as ``None`` and rendered by the caller every call). Two calls at
once (shim threads) each build their own table; the last one stored wins, and neither can
see another row's results.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
VIEWS_PER_ROW = 4
ANSWERS = 8  # whole answers kept (the most recent views)


class Memo:
    def __init__(self) -> None:
        self._table: dict[int, tuple[dict[str, Any], dict[Hashable, Any]]] = {}
        self._answers: dict[Hashable, tuple[list[dict[str, Any]], str]] = {}
        self._lock = threading.Lock()

    def results(self, rows: list[dict[str, Any]], view: Hashable,
                compute: Callable[[dict[str, Any]], T]) -> list[T]:
        """``compute(row)`` for every row, from the last calls' results where they apply."""
        old = self._table
        new: dict[int, tuple[dict[str, Any], dict[Hashable, Any]]] = {}
        out: list[T] = []
        get = old.get
        for row in rows:
            key = id(row)
            entry = get(key)
            if entry is None or entry[0] is not row:
                got = compute(row)
                new[key] = (row, {view: got})
            else:
                views = entry[1]
                got = views.get(view, _MISS)
                if got is _MISS:
                    got = compute(row)
                    if len(views) >= VIEWS_PER_ROW:
                        views.clear()
                    views[view] = got
                new[key] = entry
            out.append(got)
        with self._lock:
            self._table = new
        return out

    def same_answer(self, rows: list[dict[str, Any]], view: Hashable) -> str | None:
        """The answer kept for ``view`` when ``rows`` are the very objects it was made
        from, in the same order; else None."""
        kept = self._answers.get(view)
        if kept is None or len(kept[0]) != len(rows):
            return None
        if not all(map(operator.is_, rows, kept[0])):
            return None
        return kept[1]

    def keep_answer(self, rows: list[dict[str, Any]], view: Hashable, text: str) -> None:
        """Keep ``text``, made from ``rows`` alone (no line depended on the time)."""
        with self._lock:
            self._answers.pop(view, None)
            while len(self._answers) >= ANSWERS:
                self._answers.pop(next(iter(self._answers)))
            self._answers[view] = (list(rows), text)

    def clear(self) -> None:
        with self._lock:
            self._table = {}
            self._answers.clear()


_MISS: Any = object()
MEMO = Memo()  # the process's: the controller's shim threads share it
