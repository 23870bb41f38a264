"""Job ids from the database: blocks reserved from an atomic counter row.

Algorithm: the ``counters`` row ``job_id`` holds the next id nobody has reserved. The
leader reserves a block of ``block`` ids at a time (``UPDATE ... SET value = value + n
RETURNING``, in the store's ordered write queue, so it commits under the leader's fencing
epoch like every other write) and hands them out from memory: a submit costs no database
round trip of its own. A request larger than what is left of the block (an array) reserves
a block of its own size; when the new block starts where the old one ended (always, with
one leader), the two are joined, so array tasks get consecutive ids.

Invariants: two controllers never hand out the same id (the counter row is locked by the
reserving transaction; a deposed leader's reservation fails its fence). Ids stay dense:
at takeover (``Store.op_reset_ids``, after the previous leader was fenced off) the counter
restarts right after the highest stored id, so the unused rest of the previous leader's
block (or of this controller's own block before a restart) is handed out again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.controller.store import Store


class IdAllocator:
    def __init__(self, store: Store, block: int = 1000) -> None:
        self.store = store
        self.block = block
        self.next = 0  # the next id to hand out
        self.end = 0  # one past the last reserved id
        self.reservations = 0
        self._lock: asyncio.Lock | None = None

    def peek(self) -> int:
        """The id the next submit would get (for logs and ``scontrol show config``)."""
        return self.next

    def reset(self, next_id: int) -> None:
        """Forget the current block (takeover: the counter was reset to ``next_id``)."""
        self.next = self.end = next_id

    async def take(self, n: int) -> int:
        """``n`` consecutive ids; returns the first one."""
        if self.end - self.next >= n:
            first = self.next
            self.next += n
            return first
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.end - self.next < n:
                size = max(self.block, n)
                first = int(await self.store.submit_async(self.store.op_reserve_ids(size)))
                self.reservations += 1
                if first == self.end:  # contiguous with what is left: join them
                    self.end = first + size
                else:  # the rest of the old block is skipped (reclaimed at a takeover)
                    self.next, self.end = first, first + size
            first = self.next
            self.next += n
            return first
