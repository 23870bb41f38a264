"""Metric definitions on a hand-computed schedule."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from corral.sim.metrics import summarize, write_jobs_csv, write_json, write_summary_csv
from corral.sim.plots import binned_step_mean
from corral.sim.result import COMPLETED, TIMEOUT, UNFINISHED, SimResult
from corral.sim.workload import Workload


def make_result() -> SimResult:
    n = 4
    wl = Workload(
        job_id=np.array([1, 2, 3, 4]), submit_s=np.array([0.0, 0.0, 10.0, 20.0]),
        run_s=np.array([100.0, 5.0, 50.0, 10.0]), limit_s=np.array([100.0, 5.0, 40.0, 10.0]),
        procs=np.array([2, 1, 4, 1]), user_id=np.array([1, 2, 1, -1]),
        group_id=np.array([7, 7, 8, -1]), queue_id=np.full(n, -1),
        partition_id=np.full(n, -1), row=np.arange(n), max_nodes=4, max_procs=4,
    )
    return SimResult(
        label="hand", workload=wl,
        start_s=np.array([0.0, 100.0, 100.0, np.nan]),
        end_s=np.array([100.0, 105.0, 140.0, np.nan]),
        state=np.array([COMPLETED, COMPLETED, TIMEOUT, UNFINISHED], dtype=np.int8),
        alloc_cpus=np.array([2, 1, 4, 0]), total_cpus=4, total_nodes=4,
        samples_t=np.array([0.0, 10.0, 100.0, 140.0]),
        samples_pending=np.array([1.0, 2.0, 0.0, 0.0]),
        samples_busy_cpus=np.array([2.0, 2.0, 4.0, 0.0]),
    )


def test_waits_slowdowns_and_counts() -> None:
    s = summarize(make_result())
    assert s["jobs"] == {"total": 4, "started": 3, "completed": 2, "timeout": 1,
                         "rejected": 0, "unfinished": 1, "preempted": 0}
    waits = [0.0, 100.0, 90.0]
    assert s["wait_s"]["mean"] == pytest.approx(np.mean(waits))
    assert s["wait_s"]["median"] == 90.0 and s["wait_s"]["max"] == 100.0
    # bsld: job1 100/100=1; job2 105/max(5,10)=10.5; job3 (killed at 40 s) 130/40=3.25
    assert s["bsld"]["mean"] == pytest.approx((1 + 10.5 + 3.25) / 3)
    assert s["slowdown"]["max"] == pytest.approx(105 / 5)
    assert s["response_s"]["mean"] == pytest.approx((100 + 105 + 130) / 3)
    assert s["makespan_s"] == 140.0


def test_utilization_definitions() -> None:
    s = summarize(make_result())
    used = 2 * 100 + 1 * 5 + 4 * 40  # CPU-seconds actually held
    assert s["utilization"]["makespan"] == pytest.approx(used / (4 * 140))
    # arrival window [0, 20]: only job 1 (2 CPUs) runs inside it
    assert s["utilization"]["arrival_window"] == pytest.approx(2 * 20 / (4 * 20))
    # RLScheduler: logged run x procs over (last start - first submit) x CPUs
    logged = 100 * 2 + 5 * 1 + 50 * 4
    assert s["utilization"]["rlscheduler"] == pytest.approx(logged / (100 * 4))


def test_queue_fairness_and_classes() -> None:
    s = summarize(make_result())
    # pending 1 on [0,10), 2 on [10,100), 0 after: (10 + 180) / 140
    assert s["queue_length"]["time_weighted_mean"] == pytest.approx(190 / 140)
    assert s["queue_length"]["max"] == 2
    users = {u["name"]: u for u in s["by_user"]}
    assert users["u1"]["jobs"] == 2 and users["u1"]["mean_wait_s"] == pytest.approx(45)
    accts = {a["name"]: a for a in s["by_account"]}
    assert accts["g7"]["usage_cpu_s"] == pytest.approx(205)
    assert accts["g7"]["usage_share"] == pytest.approx(205 / 365)
    assert accts["g8"]["share_target"] == pytest.approx(0.5)
    x = np.array([users["u1"]["mean_bsld"], users["u2"]["mean_bsld"]])
    assert s["fairness"]["jain_mean_bsld"] == pytest.approx(x.sum() ** 2 / (2 * (x**2).sum()))
    classes = {c["class"]: c for c in s["by_size"]}
    assert classes["1"]["jobs"] == 1 and classes["2-4"]["jobs"] == 2


def test_outputs(tmp_path: Path) -> None:
    res = make_result()
    s = summarize(res)
    write_json(tmp_path / "m.json", s)
    back = json.loads((tmp_path / "m.json").read_text())
    assert back["wait_s"]["max"] == 100.0
    write_jobs_csv(tmp_path / "jobs.csv", res)
    rows = list(csv.DictReader((tmp_path / "jobs.csv").open()))
    assert len(rows) == 4 and rows[2]["state"] == "TIMEOUT" and rows[3]["start_s"] == ""
    assert rows[1]["wait_s"] == "100" and rows[2]["run_s"] == "40"
    write_summary_csv(tmp_path / "s.csv", [s, s])
    assert len(list(csv.reader((tmp_path / "s.csv").open()))) == 3


def test_nan_becomes_null_in_json(tmp_path: Path) -> None:
    s = {"x": math.nan, "y": [1.0, math.inf]}
    write_json(tmp_path / "n.json", s)
    assert json.loads((tmp_path / "n.json").read_text()) == {"x": None, "y": [1.0, None]}


def test_binned_step_mean_is_exact() -> None:
    t = np.array([0.0, 10.0, 30.0])
    v = np.array([1.0, 3.0, 0.0])
    x, m = binned_step_mean(t, v, 40.0, 2)
    assert x.tolist() == [10.0, 30.0]
    assert m.tolist() == pytest.approx([(10 * 1 + 10 * 3) / 20, (10 * 3 + 10 * 0) / 20])
