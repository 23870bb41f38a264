"""A 100,000-task array on a real cluster: accepted as one request in well under the time
a record per task would take, its ``%`` limit kept while tasks are split off its compact
remainder, shown as Slurm shows a pending array, cancelled as one."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.shims.slurmfmt import collapse_pending_arrays, shown_id
from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for

CONFIG = TEST_CONFIG.replace("min_job_age_s = 600", "min_job_age_s = 600\narray_window = 40") \
    .replace("default_mem_per_cpu_mb = 100", "default_mem_per_cpu_mb = 100\n"
             "max_array_size = 100001")
N = 100_000


@pytest.fixture(scope="module")
def array_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-arr-"))
    c = Cluster(root, CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_100k_array_with_a_limit(array_cluster: Cluster) -> None:
    c = array_cluster
    cursor = int(c.client.events_page()["next"])
    t0 = time.monotonic()
    ids = c.client.submit(c.submission("true", name="big", array=f"0-{N - 1}%4"))
    accept_s = time.monotonic() - t0
    aid = ids[0]
    assert len(ids) == N and ids == list(range(aid, aid + N))
    assert accept_s < 3.0, accept_s  # measured ~0.6 s here; a record per task took ~15 s

    # follow the array's events until 120 tasks completed: never more than 4 ran at once
    running: set[int] = set()
    most, done, order = 0, 0, []
    deadline = time.monotonic() + 120
    for ev in c.client.events(cursor, jobs=[aid]):
        assert time.monotonic() < deadline, (done, most)
        if ev["state"] == "RUNNING":
            running.add(ev["job_id"])
            order.append(ev["array_task_id"])
            most = max(most, len(running))
        elif ev["state"] == "COMPLETED":
            running.discard(ev["job_id"])
            done += 1
            if done >= 120:
                break
    assert most <= 4, most
    assert order[:100] == list(range(100))  # split off and started in index order
    # the listing: the running tasks one by one, the rest as one pending remainder
    rows = collapse_pending_arrays([j for j in c.client.jobs(ids=[aid])
                                    if j["state"] in ("PENDING", "RUNNING")])
    pending = [r for r in rows if r["state"] == "PENDING"]
    assert len(pending) == 1 and shown_id(pending[0]).endswith(f"-{N - 1}%4]"), \
        [shown_id(r) for r in rows][:10]
    assert len(rows) <= 4 + 1
    acct = c.client.history(ids=[aid], all_users=True)
    assert any(r.get("array_tail_indices") for r in acct)
    # memory: the controller holds a window of records, not 100,000
    ping = c.client.ping()
    assert ping["pending"] <= 40 + 4, ping

    # a controller kill -9: the remainder comes back from its row, tasks go on after it
    last = int(c.client.events_page()["next"])
    pid = c.controller_pid()
    assert pid is not None
    c.kill9(pid)
    c.client.close()
    c.start_controller()
    c.client.close()
    more = 0
    for _ev in c.client.events(last, jobs=[aid], states=["COMPLETED"]):
        more += 1
        if more >= 30:
            break
    rows = [j for j in c.client.jobs(ids=[aid]) if j["state"] == "PENDING"]
    assert any(j.get("array_tail_indices") for j in rows)

    # cancel the whole array: the remainder ends at once, as one record and one event
    c.client.cancel([aid])
    wait_for(lambda: not [j for j in c.client.jobs(ids=[aid]) if j["state"] in
                          ("PENDING", "RUNNING")], 30, what="the array to end")
    acct = c.client.history(ids=[aid], all_users=True)
    rest = [r for r in acct if r.get("array_tail_indices")]
    assert len(rest) == 1 and rest[0]["state"] == "CANCELLED", rest
    evs = list(c.client.events(cursor, jobs=[aid], states=["CANCELLED"], follow=False))
    assert any(e["display_id"].endswith(f"-{N - 1}]") for e in evs), evs[-3:]
    assert len(acct) < 400  # the database holds the tasks that were split off, not 100k
