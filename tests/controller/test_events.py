"""The job event log on a real store (SQLite, and a PostgreSQL server the run starts):
ids in commit order, published only after the commit, read from memory or (older than
the ring) from the database, filters, and the counter continuing after a reopen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from corral.controller.events import EventFilter, EventLog
from corral.controller.records import JobRecord
from corral.controller.rows import insert_row, update_row
from corral.controller.store import Store
from corral.core.model.job import JobSpec, JobState
from corral.submission import JobSubmission


def _rec(i: int, user: str = "u", name: str = "j", comment: str = "",
         array: str | None = None) -> JobRecord:
    sub = JobSubmission(spec=JobSpec(name=name, user=user, uid=1000, comment=comment),
                        argv=("true",), workdir="/tmp", array=array)
    return JobRecord(id=i, sub=sub, submit_time=1000.0 + i)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    return str(request.getfixturevalue("pg_url"))


def _persist(store: Store, log: EventLog, inserts: list[JobRecord],
             updates: list[JobRecord]) -> None:
    rows = log.capture(inserts, updates, 5000.0)
    ins = store.op_insert_jobs([insert_row(r) for r in inserts])
    ups = store.op_update_jobs([update_row(r) for r in updates])
    ev = log.op(rows)

    def run(conn: object) -> None:
        ins(conn)  # type: ignore[arg-type]
        ups(conn)  # type: ignore[arg-type]
        if rows:
            ev(conn)
    store.submit(run).result(timeout=10)


def test_events_in_order_from_memory_and_store(db_url: str) -> None:
    url = db_url
    store = Store(url)
    store.open()
    log = EventLog(store, ring_size=4)
    log.load()
    a, b = _rec(1, user="alice", name="x", comment="wf1"), _rec(2, user="bob", name="y")
    _persist(store, log, [a, b], [])
    assert log.last_id == 2  # published once committed (no loop: the writer thread)
    a.state = JobState.RUNNING
    _persist(store, log, [], [a, b])  # b did not change: no event
    a.state, a.exit_code, a.end_reason = JobState.FAILED, 3, "NonZeroExitCode"
    _persist(store, log, [], [a])
    for i in range(3, 6):
        _persist(store, log, [_rec(i)], [])
    assert log.last_id == 7
    assert log.floor == 3  # the ring keeps the newest 4

    evs, cursor = log.read_store(0, EventFilter(), 100)
    assert [e.id for e in evs] == [1, 2, 3] and cursor == 3
    more = log.read_memory(cursor, EventFilter(), 100)
    assert more is not None and [e.id for e in more[0]] == [4, 5, 6, 7] and more[1] == 7
    assert log.read_memory(1, EventFilter(), 100) is None  # older than the ring
    first = [json.loads(e.data) for e in evs]
    assert [(d["job_id"], d["old_state"], d["state"]) for d in first] == [
        (1, None, "PENDING"), (2, None, "PENDING"), (1, "PENDING", "RUNNING")]
    last = json.loads(more[0][0].data)
    assert (last["state"], last["exit_code"], last["reason"]) == ("FAILED", 3,
                                                                  "NonZeroExitCode")

    # filters: user (the store's index), job ids, names, tags, states
    got, _ = log.read_store(0, EventFilter(user="alice"), 100)
    assert [e.id for e in got] == [1, 3]
    got, cur = log.read_store(0, EventFilter(tags=frozenset({"wf1"})), 100)
    assert [e.id for e in got] == [1, 3] and cur == 3
    found = log.read_memory(3, EventFilter(states=frozenset({"FAILED"})), 100)
    assert found is not None and [e.id for e in found[0]] == [4]
    found = log.read_memory(3, EventFilter(job_ids=frozenset({5})), 100)
    assert found is not None and [json.loads(e.data)["job_id"] for e in found[0]] == [5]
    # a page limit: the cursor stops at the last event answered
    found = log.read_memory(3, EventFilter(), 2)
    assert found is not None and [e.id for e in found[0]] == [4, 5] and found[1] == 5
    store.close()

    again = Store(url)  # a restart continues the counter after the stored maximum
    again.open()
    log2 = EventLog(again)
    log2.load()
    assert (log2.next_id, log2.floor) == (8, 7)
    assert log2.read_memory(7, EventFilter(), 10) == ([], 7)
    evs, cursor = log2.read_store(0, EventFilter(), 100)
    assert [e.id for e in evs] == [1, 2, 3, 4, 5, 6, 7] and cursor == 7
    # what the ring held (built at capture) is what the stored rows decode to
    assert evs[3:] == more[0]
    again.close()


def test_array_is_one_event_and_rollback_publishes_nothing(db_url: str) -> None:
    store = Store(db_url)
    store.open()
    log = EventLog(store)
    log.load()
    tasks = []
    for k in range(1000):
        r = _rec(10 + k, array="0-999%5")
        r.array_job_id, r.array_task_id, r.array_task_count = 10, k, 1000
        tasks.append(r)
    _persist(store, log, tasks, [])
    assert log.last_id == 1
    d = json.loads(log.ring[0].data)
    assert (d["job_id"], d["display_id"], d["array_task_count"]) == (10, "10_[0-999%5]",
                                                                     1000)
    assert all(t.event_state == "PENDING" for t in tasks)
    # a task's own change is its own event, matched by the array's id
    tasks[3].state = JobState.RUNNING
    _persist(store, log, [], [tasks[3]])
    found = log.read_memory(1, EventFilter(job_ids=frozenset({10})), 10)
    assert found is not None and json.loads(found[0][0].data)["display_id"] == "10_3"

    rows = log.capture([_rec(5000)], [], 1.0)

    def bad(conn: object) -> None:
        log.op(rows)(conn)
        raise RuntimeError("rolled back")
    try:
        store.submit(bad).result(timeout=10)
    except RuntimeError:
        pass
    assert log.last_id == 2 and store.max_event_id() == 2  # nothing of it is readable
    store.close()


def test_waiters_wake_on_commit(db_url: str) -> None:
    async def main() -> float:
        store = Store(db_url)
        store.open()
        log = EventLog(store)
        log.load()
        await store.bind_loop()
        store.hook_loop = asyncio.get_running_loop()
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(log.wait(0, 10.0))
        await asyncio.sleep(0)
        t0 = loop.time()
        rows = log.capture([_rec(1)], [], 1.0)
        await store.submit_async(log.op(rows))
        assert await waiter is True
        took = loop.time() - t0
        assert await log.wait(1, 0.05) is False  # nothing newer: times out
        store.flush()
        store.close()
        return took

    assert asyncio.run(main()) < 0.5
