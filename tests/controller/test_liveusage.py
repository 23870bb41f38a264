"""Agents' live usage samples (sstat): what the controller keeps of a heartbeat's
``usage`` list, and what it drops."""

from __future__ import annotations

from typing import Any

import pytest

from corral.controller.liveusage import MAX_JOBS, MAX_PIDS, live_samples


def test_good_samples_are_kept_and_stamped() -> None:
    got = live_samples([{"job_id": 7, "cpu_time_s": 1.5, "rss_mb": 20, "pids": [10, 11]}],
                       100.0)
    assert got == {7: {"cpu_time_s": 1.5, "max_rss_mb": 20.0, "pids": [10, 11],
                       "time": 100.0}}


@pytest.mark.parametrize("item", [
    {"job_id": "7", "cpu_time_s": 1, "rss_mb": 1},
    {"job_id": True, "cpu_time_s": 1, "rss_mb": 1},
    {"job_id": -1, "cpu_time_s": 1, "rss_mb": 1},
    {"job_id": 7, "cpu_time_s": float("nan"), "rss_mb": 1},
    {"job_id": 7, "cpu_time_s": -2, "rss_mb": 1},
    {"job_id": 7, "cpu_time_s": 1, "rss_mb": "big"},
    {"job_id": 7, "cpu_time_s": 1},
    "not an object",
])
def test_bad_samples_are_dropped(item: Any) -> None:
    assert live_samples([item], 1.0) == {}


def test_shapes_and_bounds() -> None:
    assert live_samples({"job_id": 1}, 1.0) == {} and live_samples(None, 1.0) == {}
    many = [{"job_id": i, "cpu_time_s": 0, "rss_mb": 0} for i in range(MAX_JOBS + 5)]
    assert len(live_samples(many, 1.0)) == MAX_JOBS
    pids: list[Any] = list(range(1, MAX_PIDS + 10)) + [True, -3, "x"]
    got = live_samples([{"job_id": 1, "cpu_time_s": 0, "rss_mb": 0, "pids": pids}], 1.0)
    assert got[1]["pids"] == list(range(1, MAX_PIDS + 1))


def test_step_samples_are_kept_and_bad_ones_dropped() -> None:
    good = {"step_id": "0", "cpu_time_s": 2.5, "rss_mb": 8, "ntasks": 2, "pids": [5, True]}
    bad: list[Any] = [{"step_id": 1, "cpu_time_s": 1, "rss_mb": 1, "ntasks": 1},
                      {"step_id": "x", "cpu_time_s": 1, "rss_mb": 1, "ntasks": 1},
                      {"step_id": "2", "cpu_time_s": -1, "rss_mb": 1, "ntasks": 1},
                      {"step_id": "3", "cpu_time_s": 1, "rss_mb": 1, "ntasks": 0},
                      {"step_id": "4", "cpu_time_s": 1, "rss_mb": 1}, "junk"]
    got = live_samples([{"job_id": 7, "cpu_time_s": 3, "rss_mb": 9, "steps": [good, *bad]}],
                       5.0)
    assert got[7]["steps"] == {"0": {"cpu_time_s": 2.5, "max_rss_mb": 8.0, "ntasks": 2,
                                     "pids": [5]}}
    plain = live_samples([{"job_id": 7, "cpu_time_s": 3, "rss_mb": 9, "steps": "x"}], 5.0)
    assert "steps" not in plain[7]


def test_batch_share_is_kept_and_a_bad_one_dropped() -> None:
    item = {"job_id": 7, "cpu_time_s": 30, "rss_mb": 900,
            "batch": {"cpu_time_s": 0.4, "rss_mb": 5, "pids": [10, "x"]}}
    got = live_samples([item], 5.0)
    assert got[7]["batch"] == {"cpu_time_s": 0.4, "max_rss_mb": 5.0, "pids": [10]}
    for bad in ({"cpu_time_s": -1, "rss_mb": 5}, {"rss_mb": 5}, "junk"):
        assert "batch" not in live_samples([dict(item, batch=bad)], 5.0)[7]
