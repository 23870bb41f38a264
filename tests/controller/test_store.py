"""The SQL store: group commit from concurrent writers, durable reads, history filters."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from corral.controller.records import JobRecord
from corral.controller.rows import insert_row, record_from_row, update_row
from corral.controller.store import Store
from corral.core.model.job import JobSpec, JobState
from corral.submission import JobSubmission


def _rec(i: int, state: JobState = JobState.PENDING, user: str = "u") -> JobRecord:
    sub = JobSubmission(spec=JobSpec(name=f"j{i}", user=user, uid=1000), argv=("true",),
                        workdir="/tmp", env={"A": "1"})
    return JobRecord(id=i, sub=sub, submit_time=1000.0 + i, state=state)


def test_group_commit_and_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
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


def test_one_bad_op_does_not_lose_the_others(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'c.db'}")
    st.open()
    ok1 = st.submit(st.op_insert_jobs([insert_row(_rec(1))]))
    bad = st.submit(st.op_insert_jobs([insert_row(_rec(1))]))  # duplicate primary key
    ok2 = st.submit(st.op_insert_jobs([insert_row(_rec(2))]))
    ok1.result(10)
    ok2.result(10)
    assert bad.exception(10) is not None
    assert {r.id for r in st.load_active()} == {1, 2}
    st.close()


def test_writes_are_fast_enough(tmp_path: Path) -> None:
    """A batch of 2,000 inserts commits well within a second (no per-row overhead)."""
    st = Store(f"sqlite:///{tmp_path / 'c.db'}")
    st.open()
    rows = [insert_row(_rec(i)) for i in range(1, 2001)]
    t0 = time.perf_counter()
    st.submit(st.op_insert_jobs(rows)).result(30)
    assert time.perf_counter() - t0 < 5.0
    assert len(st.load_active()) == 2000
    st.close()
