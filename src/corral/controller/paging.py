"""Bounded result pages for the list endpoints (``/jobs``, ``/jobs/query``, ``/history``).

A request names at most ``MAX_ROWS`` rows (``limit``; ``DEFAULT_ROWS`` when it names none)
and, to go on, the last id of the previous page (``after``); rows come in id order. A reply
whose page is full carries ``next_after`` (the id to pass as ``after`` next), else null,
so a client pages until ``next_after`` is null. One request therefore holds at most one
page of records beyond the controller's own state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from corral.controller.errors import ApiError

DEFAULT_ROWS = 10_000
MAX_ROWS = 100_000

T = TypeVar("T")


def page_limit(flt: dict[str, Any]) -> int:
    """The page size of a filter body: its ``limit`` (1 to ``MAX_ROWS``) or the default;
    a bad ``after`` or ``limit`` is a 400 naming the field."""
    after = flt.get("after")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)
                              or after < 0 or after >= 2 ** 63):
        raise ApiError("invalid", "bad field after: a job id (a non-negative integer)")
    limit = flt.get("limit")
    if limit is None:
        return DEFAULT_ROWS
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
        raise ApiError("invalid", f"bad field limit: must be an integer from 1 to {MAX_ROWS}")
    return limit


def page(recs: Sequence[T], key: Callable[[T], int],
         flt: dict[str, Any]) -> tuple[list[T], int | None]:
    """The page of ``recs`` (sorted by id, ``key`` of a record) that ``flt`` asks for, and
    the ``next_after`` cursor (None when this is the last page)."""
    limit = page_limit(flt)
    after = flt.get("after")
    start = 0
    if after is not None:
        import bisect

        start = bisect.bisect_right(recs, after, key=key)
    out = list(recs[start:start + limit])
    more = start + limit < len(recs)
    return out, (key(out[-1]) if more else None)
