"""Reports over job records: utilization, usage by user/account, top users, series."""

from __future__ import annotations

import pytest

from corral.ops.accounting import series, top_users, usage_by, utilization
from corral.ops.jobs import AcctJob, acct_jobs
from tests.ops.records import record

HOUR = 3600.0


def jobs() -> list[AcctJob]:
    return acct_jobs([
        # alice: 2 CPUs for the first hour, all inside the window
        record(1, user="alice", account="physics", submit=0, start=0, end=HOUR, cpus=2,
               cpu_time_s=3600.0),
        # bob: 4 CPUs from 30 min to 2.5 h: 1.5 h of it inside [0, 2h]
        record(2, user="bob", account="chem", submit=0, start=0.5 * HOUR,
               end=2.5 * HOUR, cpus=4, gpus=1, cpu_time_s=4 * 2 * HOUR),
        # carol: still running since 1.5 h (now = 2 h)
        record(3, user="carol", account="physics", state="RUNNING", submit=HOUR,
               start=1.5 * HOUR, end=None, cpus=1),
        # dave: cancelled while pending, never ran
        record(4, user="dave", account="chem", state="CANCELLED", submit=0.2 * HOUR,
               start=None, end=0.4 * HOUR, cpus=8),
        # before the window
        record(5, user="alice", account="physics", submit=-3 * HOUR, start=-3 * HOUR,
               end=-2 * HOUR, cpus=16),
    ])


def test_utilization_charges_only_time_inside_the_window() -> None:
    u = utilization(jobs(), total_cpus=8, total_gpus=2, since=0.0, until=2 * HOUR, now=2 * HOUR)
    # 2 CPU-h (alice) + 4 * 1.5 CPU-h (bob) + 1 * 0.5 CPU-h (carol)
    assert u.allocated_cpu_s == pytest.approx((2 + 6 + 0.5) * HOUR)
    assert u.allocated_gpu_s == pytest.approx(1.5 * HOUR)
    assert u.cpu_utilization == pytest.approx(8.5 / 16)
    assert u.gpu_utilization == pytest.approx(1.5 / 4)
    # bob used 8 CPU-h over 2 h of run, 1.5 h inside the window -> 6 CPU-h; alice 1 CPU-h
    assert u.used_cpu_s == pytest.approx((1 + 6) * HOUR)
    assert (u.jobs_submitted, u.jobs_started, u.jobs_ended) == (4, 3, 2)
    assert u.wait_median_s == pytest.approx(0.5 * HOUR)
    data = u.to_json()
    assert data["allocated_cpu_hours"] == pytest.approx(8.5)


def test_usage_rows_sum_to_the_utilization_and_sort_by_cpu_hours() -> None:
    js = jobs()
    by_user = usage_by(js, "user", 0.0, 2 * HOUR, 2 * HOUR)
    assert [r.key for r in by_user] == ["bob", "alice", "carol"]
    assert sum(r.cpu_s for r in by_user) == pytest.approx(8.5 * HOUR)
    assert sum(r.share for r in by_user) == pytest.approx(1.0)
    by_acct = usage_by(js, "account", 0.0, 2 * HOUR, 2 * HOUR)
    assert {r.key: round(r.cpu_s / HOUR, 3) for r in by_acct} == {"chem": 6.0, "physics": 2.5}
    top = top_users(js, 0.0, 2 * HOUR, 2 * HOUR, count=1)
    assert [r.key for r in top] == ["bob"]
    assert top[0].jobs == 1 and top[0].gpu_s == pytest.approx(1.5 * HOUR)


def test_bad_arguments_get_precise_errors() -> None:
    with pytest.raises(ValueError, match="user or account"):
        usage_by([], "qos", 0, 1, 1)
    with pytest.raises(ValueError, match="at least 1"):
        top_users([], 0, 1, 1, count=0)
    with pytest.raises(ValueError, match="before it starts"):
        utilization([], 1, 0, since=10, until=5, now=10)


def test_series_bins_mean_allocation_and_pending_counts() -> None:
    pts = series(jobs(), 0.0, 2 * HOUR, 2 * HOUR, bins=4)
    assert len(pts) == 4
    # bin 0 [0, 30 min]: alice 2 CPUs; bin 1 [30, 60]: alice 2 + bob 4
    assert [round(p.cpus, 6) for p in pts] == [2.0, 6.0, 4.0, 5.0]
    assert [round(p.gpus, 6) for p in pts] == [0.0, 1.0, 1.0, 1.0]
    # pending at bin ends (30, 60, 90, 120 min): dave was cancelled at 24 min; carol waits
    # from 60 to 90 min, pending at the 60-minute mark only
    assert [p.pending for p in pts] == [0, 1, 0, 0]
    assert series([], 5.0, 5.0, 5.0) == []


def test_records_with_missing_fields_are_read_as_unknown() -> None:
    j = AcctJob.from_record({"id": 7, "state": "COMPLETED", "num_cpus": 2,
                             "mem_per_cpu_mb": 100})
    assert j.req_mem_mb == 200 and j.account == "(none)" and j.start_time is None
    assert j.elapsed_s(100.0) == 0.0
