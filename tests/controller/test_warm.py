"""A standby's warm copy (``corral.controller.warm``) on a real PostgreSQL server: the
copy equals the database's active jobs after every refresh, and a refresh parses only
the rows that changed since the previous one."""

from __future__ import annotations

import time

from corral.controller.records import JobRecord
from corral.controller.rows import insert_row, update_row
from corral.controller.store import Store
from corral.controller.warm import WarmState
from corral.core.model.job import JobSpec, JobState
from corral.submission import JobSubmission


def _rec(i: int, state: JobState = JobState.PENDING) -> JobRecord:
    sub = JobSubmission(spec=JobSpec(name=f"j{i}", user="u", uid=1000), argv=("true",),
                        workdir="/tmp", env={"A": "1"})
    return JobRecord(id=i, sub=sub, submit_time=1000.0 + i, state=state)


def test_refresh_follows_the_database_and_parses_only_changes(pg_url: str) -> None:
    st = Store(pg_url)
    st.open()
    try:
        st.submit(st.op_insert_jobs([insert_row(_rec(i)) for i in range(1, 501)])).result(30)
        warm = WarmState(st.engine, 1.0, 3600.0)
        warm.refresh()
        assert warm.ready and len(warm.records) == 500 and warm.parsed == 500
        warm.refresh()  # nothing changed: nothing parsed again
        assert warm.parsed == 500 and warm.last == dict(warm.last, rows=500, changed=0)
        # the leader starts one job, ends another, submits a third, keys a submit
        run = _rec(7, JobState.RUNNING)
        run.start_time = 2000.0
        done = _rec(9, JobState.COMPLETED)
        done.end_time = 2001.0
        st.submit(st.op_update_jobs([update_row(run), update_row(done)])).result(10)
        st.submit(st.op_insert_jobs([insert_row(_rec(501))])).result(10)
        now = time.time()
        st.submit(st.op_insert_keys([{"key": "1000:k", "time": now,
                                      "answer": '{"job_ids":[501]}'}])).result(10)
        recs, keys = warm.catch_up()
        assert warm.parsed == 502  # 7 (changed) and 501 (new); 9 dropped
        ids = [r.id for r in recs]
        assert ids == sorted(set(range(1, 502)) - {9})
        by_id = {r.id: r for r in recs}
        assert by_id[7].state is JobState.RUNNING and by_id[7].start_time == 2000.0
        assert by_id[501].sub.spec.name == "j501"
        assert [(k.key, k.answer) for k in keys] == [("1000:k", '{"job_ids":[501]}')]
        assert warm.records == {} and warm.keys == {}  # handed over
    finally:
        st.close()


def test_a_refresh_is_one_snapshot_of_active_rows_only(pg_url: str) -> None:
    """Finished history is never read; a key older than the TTL is left out."""
    st = Store(pg_url)
    st.open()
    try:
        old = []
        for i in range(1, 301):
            r = _rec(i, JobState.COMPLETED)
            r.end_time = 1500.0
            old.append(insert_row(r))
        st.submit(st.op_insert_jobs(old + [insert_row(_rec(301))])).result(30)
        st.submit(st.op_insert_keys([{"key": "1000:old", "time": time.time() - 7200,
                                      "answer": "{}"}])).result(10)
        warm = WarmState(st.engine, 1.0, 3600.0)
        warm.refresh()
        assert list(warm.records) == [301] and warm.parsed == 1
        assert warm.keys == {}
    finally:
        st.close()
