"""The SQL store: group commit from concurrent writers, durable reads, history filters.

Every test runs on SQLite and on a real PostgreSQL server (``tests/pg.py``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from corral.controller.records import JobRecord
from corral.controller.rows import insert_row, record_from_row, update_row
from corral.controller.store import Store
from corral.core.model.job import JobSpec, JobState
from corral.submission import JobSubmission


def _rec(i: int, state: JobState = JobState.PENDING, user: str = "u") -> JobRecord:
    sub = JobSubmission(spec=JobSpec(name=f"j{i}", user=user, uid=1000), argv=("true",),
                        workdir="/tmp", env={"A": "1"})
    return JobRecord(id=i, sub=sub, submit_time=1000.0 + i, state=state)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_group_commit_and_reopen(db_url: str) -> None:
    url = db_url
    st = Store(url)
    st.open()
    futs = []
    lock = threading.Lock()

    def writer(base: int) -> None:
        for k in range(50):
            f = st.submit(st.op_insert_jobs([insert_row(_rec(base + k))]))
            with lock:
                futs.append(f)

    threads = [threading.Thread(target=writer, args=(b,)) for b in (1, 1001, 2001, 3001)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in futs:
        f.result(timeout=30)
    assert st.ops == 200
    assert st.commits <= st.ops  # concurrent writers share commits when they overlap
    done = _rec(5, JobState.COMPLETED)
    done.end_time = 2000.0
    st.submit(st.op_update_jobs([update_row(done)])).result(timeout=10)
    st.close()

    st2 = Store(url)  # a new process would see exactly this
    st2.open()
    active = st2.load_active()
    assert len(active) == 199 and 5 not in {r.id for r in active}
    assert st2.max_job_id() == 3050
    back = record_from_row(st2.get_jobs([5])[0])
    assert back.state is JobState.COMPLETED and back.end_time == 2000.0
    assert back.sub.env == {"A": "1"} and back.sub.spec.name == "j5"
    hist = st2.history(states=["COMPLETED"])
    assert [r.id for r in hist] == [5]
    assert [r.id for r in st2.history(since=1500.0, until=1006.0, user="u")][:1] == [1]
    st2.close()


def test_one_bad_op_does_not_lose_the_others(db_url: str) -> None:
    st = Store(db_url)
    st.open()
    ok1 = st.submit(st.op_insert_jobs([insert_row(_rec(1))]))
    bad = st.submit(st.op_insert_jobs([insert_row(_rec(1))]))  # duplicate primary key
    ok2 = st.submit(st.op_insert_jobs([insert_row(_rec(2))]))
    ok1.result(10)
    ok2.result(10)
    assert bad.exception(10) is not None
    assert {r.id for r in st.load_active()} == {1, 2}
    st.close()


def test_writes_are_fast_enough(db_url: str) -> None:
    """A batch of 2,000 inserts commits well within a second (no per-row overhead)."""
    st = Store(db_url)
    st.open()
    rows = [insert_row(_rec(i)) for i in range(1, 2001)]
    t0 = time.perf_counter()
    st.submit(st.op_insert_jobs(rows)).result(30)
    assert time.perf_counter() - t0 < 5.0
    assert len(st.load_active()) == 2000
    st.close()


def test_job_ids_from_the_database_never_repeat(db_url: str) -> None:
    """Two stores on one database (two controllers) reserving ids at once get disjoint
    blocks from the counter row; a reset continues after the highest stored id."""
    a, b = Store(db_url), Store(db_url)
    a.open()
    b.open()
    got: list[tuple[int, int]] = []
    lock = threading.Lock()

    def reserve(st: Store) -> None:
        for _ in range(20):
            first = st.submit(st.op_reserve_ids(7)).result(30)
            with lock:
                got.append((first, first + 7))

    threads = [threading.Thread(target=reserve, args=(st,)) for st in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for lo, hi in got for i in range(lo, hi)]
    assert len(ids) == 80 * 7 and len(set(ids)) == len(ids)
    assert min(ids) == 1
    a.submit(a.op_insert_jobs([insert_row(_rec(41))])).result(10)
    assert a.submit(a.op_reset_ids(1)).result(10) == 42  # after the highest stored id
    assert b.submit(b.op_reserve_ids(3)).result(10) == 42
    assert a.submit(a.op_reset_ids(1000)).result(10) == 1000  # FirstJobId raised
    a.close()
    b.close()


def test_submission_keys_round_trip(db_url: str) -> None:
    st = Store(db_url)
    st.open()
    rows = [{"key": f"0:k{i}", "time": 100.0 + i, "answer": '{"job_ids":[%d]}' % i}
            for i in range(5)]
    st.submit(st.op_insert_keys(rows)).result(10)
    assert [r.key for r in st.load_keys(102.0)] == ["0:k2", "0:k3", "0:k4"]
    st.submit(st.op_prune_keys(103.0)).result(10)
    assert [r.key for r in st.load_keys(0.0)] == ["0:k3", "0:k4"]
    st.close()


def test_nodes_meta_steps_and_history_filters(db_url: str) -> None:
    st = Store(db_url)
    st.open()
    recs = [_rec(i, user="ann" if i % 2 else "bob") for i in range(1, 7)]
    st.submit(st.op_insert_jobs([insert_row(r) for r in recs])).result(10)
    st.submit(st.op_upsert_node("n1", {"cpus": 4}, "DRAIN", "fan", {"x": 1})).result(10)
    st.submit(st.op_upsert_node("n1", {"cpus": 8}, "", "", {})).result(10)
    st.submit(st.op_set_meta("k", "v1")).result(10)
    st.submit(st.op_set_meta("k", "v2")).result(10)
    st.submit(st.op_insert_step({"job_id": 2, "restarts": 0, "step_id": 0, "name": "s",
                                 "state": "RUNNING", "start_time": 5.0, "end_time": None,
                                 "data": "{}"})).result(10)
    st.submit(st.op_update_steps([{"job_id": 2, "restarts": 0, "step_id": 0,
                                   "state": "COMPLETED", "end_time": 6.0,
                                   "data": "{}"}])).result(10)
    nodes = st.load_nodes()
    assert len(nodes) == 1 and nodes[0].spec == '{"cpus": 8}' and nodes[0].admin_state == ""
    assert st.get_meta("k") == "v2" and st.get_meta("nope") is None
    steps = st.load_steps([2, 3])
    assert [(s.job_id, s.state, s.end_time) for s in steps] == [(2, "COMPLETED", 6.0)]
    assert [r.id for r in st.history(user="ann")] == [1, 3, 5]
    assert [r.id for r in st.history(after=2, limit=2)] == [3, 4]
    assert [r.id for r in st.history(ids=[4], array_ids=[])] == [4]
    # sacct --name: by the name index, alone, with a user, with the lifetime window
    assert [r.id for r in st.history(names=["j2", "j5", "nope"])] == [2, 5]
    assert [r.id for r in st.history(names=["j2", "j5"], user="ann")] == [5]
    assert [r.id for r in st.history(names=["j3"], since=0.0)] == [3]
    assert st.history(names=[]) == []
    st.close()


def test_history_by_name_uses_the_name_index(tmp_path: Path) -> None:
    """sacct --name never scans the jobs table: SQLite's plan of the statement the store
    itself runs for ``history(names=...)`` (with and without the lifetime window)."""
    import sqlalchemy as sa

    st = Store(f"sqlite:///{tmp_path / 'c.db'}")
    st.open()
    seen: list[tuple[str, Any]] = []

    @sa.event.listens_for(st.engine, "before_cursor_execute")
    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
             many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, params))

    for kw in ({}, {"since": 0.0}):
        seen.clear()
        st.history(names=["a", "b"], **kw)
        assert len(seen) == 1
        statement, params = seen[0]
        raw = st.engine.raw_connection()
        try:
            plan = " ".join(str(r[-1]) for r in raw.cursor().execute(
                "EXPLAIN QUERY PLAN " + statement, params).fetchall())
        finally:
            raw.close()
        assert "USING INDEX ix_jobs_name" in plan, (kw, plan)
        assert "SCAN jobs" not in plan, (kw, plan)
    st.close()


def test_array_ended_aggregates_the_finished_tasks(db_url: str) -> None:
    st = Store(db_url)
    st.open()
    rows = []
    for i, (state, code) in enumerate([(JobState.COMPLETED, 0), (JobState.FAILED, 5),
                                       (JobState.FAILED, 2), (JobState.CANCELLED, None),
                                       (JobState.RUNNING, 9)]):
        r = _rec(10 + i, state)
        r.array_job_id, r.array_task_id, r.exit_code = 10, i, code
        rows.append(insert_row(r))
    other = _rec(20, JobState.FAILED)
    other.array_job_id, other.array_task_id, other.exit_code = 20, 0, 7
    rows.append(insert_row(other))
    st.submit(st.op_insert_jobs(rows)).result(timeout=10)
    assert sorted(st.array_ended(10)) == [("CANCELLED", 0, 0), ("COMPLETED", 0, 0),
                                          ("FAILED", 2, 5)]  # not the running one's 9
    assert st.array_ended(99) == []
    st.close()
