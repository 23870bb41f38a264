"""Job events: every job state change, in commit order, with a resumable cursor.

Algorithm. ``Controller.persist`` asks ``EventLog.capture`` for the events of the records
it writes: a new job (or a whole array: one event) and every record whose state differs
from the one its last event announced (``JobRecord.event_state``). Each event gets the
next id of one counter and its row joins the same transaction as the state change, so a
state change is durable exactly when its event is (nothing lost across ``kill -9``; after a
restart the counter continues after the highest stored id). Once the transaction has
committed (``Store.after_commit``) the events enter an in-memory ring of the newest ones
and every waiting reader wakes: delivery costs one commit, no polling.

Reading: ``read(after, flt, limit)`` answers the events after id ``after`` that match the
filter, from the ring when ``after`` is inside it, else from the database (the primary
key, or the user's or the jobs' index), at most ``limit`` of them and at most ``SCAN_ROWS``
rows looked at, with the cursor to continue from (the last id looked at, so a reader
whose filter matches little still moves on). Ids only grow; gaps are possible (a
transaction that failed), reordering is not: the store commits in queue order and the
ring is filled in commit order.

Invariants: an event is readable only after its transaction committed; ``floor`` is the
highest id not in the ring (everything at or below it is read from the database); ids
are never reused (the counter starts after the stored maximum, which pruning keeps).

Reference: Kubernetes' watch with ``resourceVersion`` (a list then a resumable stream),
Server-Sent Events' ``Last-Event-ID`` (WHATWG HTML, section 9.2).
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.controller.records import JobRecord
    from corral.controller.store import Store

RING_SIZE = 65_536  # newest events kept in memory
MAX_PAGE = 1_000  # events in one answer at most
SCAN_ROWS = 10_000  # rows one read looks at at most (filters that match little)
MAX_WAIT_S = 60.0  # the longest one long poll waits

_ENC = json.JSONEncoder(separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    job_id: int
    array_job_id: int | None
    user: str
    name: str
    comment: str
    wckey: str
    state: str
    data: bytes  # the event's JSON, as served


@dataclass(frozen=True, slots=True)
class Captured:
    """One captured event: its database row and the ``Event`` it is once committed
    (built from the same values, so publishing decodes nothing)."""

    row: dict[str, Any]
    event: Event


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What a reader wants: all of the given conditions (empty: no condition)."""

    user: str | None = None
    job_ids: frozenset[int] = frozenset()  # a job's id or its array's id
    names: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()  # the job's comment or wckey
    states: frozenset[str] = frozenset()  # the new state

    def match(self, ev: Event) -> bool:
        if self.user is not None and ev.user != self.user:
            return False
        if self.job_ids and ev.job_id not in self.job_ids and (
                ev.array_job_id is None or ev.array_job_id not in self.job_ids):
            return False
        if self.names and ev.name not in self.names:
            return False
        if self.tags and ev.comment not in self.tags and ev.wckey not in self.tags:
            return False
        return not self.states or ev.state in self.states


def _event_of(eid: int, data: str | bytes) -> Event:
    raw = data.encode() if isinstance(data, str) else data
    d = json.loads(raw)
    return Event(id=eid, job_id=int(d["job_id"]), array_job_id=d.get("array_job_id"),
                 user=str(d.get("user", "")), name=str(d.get("name", "")),
                 comment=str(d.get("comment") or ""), wckey=str(d.get("wckey") or ""),
                 state=str(d.get("state", "")), data=raw)


@dataclass
class EventLog:
    store: Store
    ring_size: int = RING_SIZE
    next_id: int = 1  # the id the next captured event gets
    last_id: int = 0  # the newest committed (readable) id
    floor: int = 0  # ids at or below this are read from the database
    ring: deque[Event] = field(default_factory=deque)
    published: int = 0
    streams: dict[str, int] = field(default_factory=dict)  # user -> open streams
    _ids: list[int] = field(default_factory=list)  # the ring's ids (bisect)
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def load(self) -> None:
        """At start (before any capture): continue after the highest stored id."""
        top = self.store.max_event_id()
        self.next_id = top + 1
        self.last_id = self.floor = top

    # ---- writing --------------------------------------------------------------------

    def capture(self, inserts: Sequence[JobRecord], updates: Iterable[JobRecord],
                now: float) -> list[Captured]:
        """The events of a persist call (and ``event_state`` advanced); the caller
        writes them with ``op(rows)`` in the same transaction."""
        rows: list[Captured] = []
        arrays: set[int] = set()
        for rec in inserts:
            state = rec.state.value
            rec.event_state = state
            if rec.array_job_id is not None:
                if rec.array_job_id in arrays:
                    continue  # one event for the whole array at its submit
                arrays.add(rec.array_job_id)
            rows.append(self._row(rec, None, now, array_submit=rec.array_job_id is not None))
        for rec in updates:
            state = rec.state.value
            if state != rec.event_state:
                old = rec.event_state or None
                rec.event_state = state
                rows.append(self._row(rec, old, now))
        return rows

    def _row(self, rec: JobRecord, old: str | None, now: float, *,
             array_submit: bool = False) -> Captured:
        eid = self.next_id
        self.next_id += 1
        spec = rec.sub.spec
        finished = rec.state.is_finished
        if array_submit:
            display = f"{rec.array_job_id}_[{rec.sub.array}]"
            job_id = rec.id if rec.array_job_id is None else rec.array_job_id
        elif rec.tail_text:  # a large array's remainder (cancelled as one)
            display = f"{rec.array_job_id}_[{rec.tail_text}]"
            job_id = rec.id if rec.array_job_id is None else rec.array_job_id
        else:
            display = rec.display_id
            job_id = rec.id
        reason = (rec.end_reason or "None") if finished else rec.reason
        data: dict[str, Any] = {
            "id": eid, "time": now, "job_id": job_id, "display_id": display,
            "array_job_id": rec.array_job_id,
            "array_task_id": None if array_submit or rec.tail_text else rec.array_task_id,
            "user": spec.user, "name": spec.name, "old_state": old,
            "state": rec.state.value, "reason": reason,
            "exit_code": rec.exit_code if finished else None,
            "signal": rec.signal if finished else 0,
            "start_time": rec.start_time, "end_time": rec.end_time,
            "comment": spec.comment or "", "wckey": str(rec.sub.extra.get("wckey") or ""),
        }
        if array_submit:
            data["array_task_count"] = rec.array_task_count
        text = _ENC.encode(data)
        ev = Event(id=eid, job_id=job_id, array_job_id=rec.array_job_id, user=spec.user,
                   name=spec.name, comment=data["comment"], wckey=data["wckey"],
                   state=data["state"], data=text.encode())
        return Captured({"id": eid, "time": now, "job_id": job_id,
                         "array_job_id": rec.array_job_id, "user": spec.user,
                         "data": text}, ev)

    def op(self, rows: list[Captured]) -> Any:
        """The store op writing ``rows``; once committed they are published."""
        insert = self.store.op_insert_events([c.row for c in rows])
        store = self.store
        events = [c.event for c in rows]

        def run(conn: Any) -> None:
            insert(conn)
            store.after_commit(lambda: self.publish(events))
        return run

    def publish(self, events: list[Event]) -> None:
        """Committed events: into the ring (in id order), waiting readers woken."""
        for ev in events:
            eid = ev.id
            if self._ids and eid < self._ids[-1]:  # not expected: commits come in order
                i = bisect.bisect_left(self._ids, eid)
                self._ids.insert(i, eid)
                self.ring.insert(i, ev)
            else:
                self._ids.append(eid)
                self.ring.append(ev)
            self.last_id = max(self.last_id, eid)
            self.published += 1
        excess = len(self.ring) - self.ring_size
        if excess > 0:
            self.floor = self._ids[excess - 1]
            for _ in range(excess):
                self.ring.popleft()
            del self._ids[:excess]
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # ---- reading --------------------------------------------------------------------

    def read_memory(self, after: int, flt: EventFilter,
                    limit: int) -> tuple[list[Event], int] | None:
        """From the ring, or ``None`` when events after ``after`` may be older than it."""
        if after < self.floor:
            return None
        out: list[Event] = []
        i = bisect.bisect_right(self._ids, after)
        cursor = after
        end = min(len(self._ids), i + SCAN_ROWS)
        while i < end and len(out) < limit:
            ev = self.ring[i]
            cursor = ev.id
            if flt.match(ev):
                out.append(ev)
            i += 1
        if i == len(self._ids):
            cursor = max(cursor, self.last_id)
        return out, cursor

    def read_store(self, after: int, flt: EventFilter, limit: int) -> tuple[list[Event], int]:
        """From the database (any thread): events after ``after`` up to ``floor``."""
        floor = self.floor
        rows = self.store.read_events(after, SCAN_ROWS, user=flt.user,
                                      job_ids=sorted(flt.job_ids) or None)
        out: list[Event] = []
        cursor = after
        for eid, data in rows:
            if eid > floor or len(out) >= limit:
                break
            cursor = eid
            ev = _event_of(eid, data)
            if flt.match(ev):
                out.append(ev)
        else:
            if len(rows) < SCAN_ROWS:  # everything up to the ring was looked at
                cursor = max(cursor, floor)
        return out, cursor

    async def read(self, after: int, flt: EventFilter,
                   limit: int) -> tuple[list[Event], int]:
        found = self.read_memory(after, flt, limit)
        if found is not None:
            return found
        return await asyncio.to_thread(self.read_store, after, flt, limit)

    async def wait(self, after: int, timeout_s: float) -> bool:
        """Until an event after ``after`` is readable (True) or ``timeout_s`` passed."""
        if self.last_id > after:
            return True
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return self.last_id > after
        return True

    def prune_op(self, before: float) -> Any:
        """The store op forgetting events older than ``before`` (the newest stays)."""
        return self.store.op_prune_events(before, self.last_id)
