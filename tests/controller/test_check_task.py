"""The controller's periodic check task (corral.controller.check_task) with a stand-in
runner: when runs start, one at a time, their arguments, failures, and pruning."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from corral.checks.settings import ChecksConfig
from corral.controller.check_task import PeriodicChecks


def wait_for(pred: Any, timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError("timed out")


class FakeRunner:
    def __init__(self, checks_dir: Path) -> None:
        self.calls: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.checks_dir = checks_dir
        self.fail = False

    def __call__(self, client: Any, checks_dir: Path, **kw: Any) -> dict[str, Any]:
        assert checks_dir == self.checks_dir
        self.calls.append(kw)
        assert self.release.wait(10)
        if self.fail:
            raise OSError("no usable nodes")
        run_id = f"r{len(self.calls)}"
        d = checks_dir / "reports" / run_id
        d.mkdir(parents=True)
        (checks_dir / "runs" / run_id).mkdir(parents=True)
        rec = {"run_id": run_id, "started": float(len(self.calls)), "ok": False,
               "verdicts": [{"subject": "n2"}], "drained": ["n2"],
               "plan": {"trigger": kw["trigger"], "run_dir": str(checks_dir / "runs" / run_id)}}
        (d / "result.json").write_text(json.dumps(rec))
        return rec


def test_runs_each_interval_one_at_a_time_and_prunes(tmp_path: Path) -> None:
    cfg = [ChecksConfig(interval_s=5, drain_outliers=True, nice=777, keep_runs=2)]
    fake = FakeRunner(tmp_path / "checks")
    # a run of the command (not periodic) is never pruned
    manual = tmp_path / "checks" / "reports" / "manual"
    manual.mkdir(parents=True)
    (manual / "result.json").write_text(json.dumps({"run_id": "manual", "started": 0.0,
                                                    "plan": {"trigger": "command"}}))
    task = PeriodicChecks(lambda: cfg[0], tmp_path, lambda: tmp_path / "corral.sock", fake)
    task.tick(100.0)
    assert task.due == 105.0 and not fake.calls  # the first run one interval after start
    task.tick(105.0)
    wait_for(lambda: fake.calls)
    task.tick(1e12)  # still running: no second run
    assert len(fake.calls) == 1
    assert fake.calls[0] == {"quick": True, "wanted": ("network", "compute", "storage", "gpu"),
                             "drain": True, "nice": 777, "prog": "corral periodic check",
                             "trigger": "periodic"}
    fake.release.set()
    wait_for(lambda: task.last is not None)
    assert task.last == {"run_id": "r1", "ok": False, "outliers": ["n2"], "drained": ["n2"]}
    assert task.due is not None and task.due > time.time()  # next: an interval after the end
    for _ in range(2):
        task.running.join(10)  # type: ignore[union-attr]
        task.due = 0.0
        task.tick(1.0)
        wait_for(lambda: task.running is not None and not task.running.is_alive())
    reports = sorted(p.name for p in (tmp_path / "checks" / "reports").iterdir())
    assert reports == ["manual", "r2", "r3"]  # keep_runs = 2 periodic ones
    assert sorted(p.name for p in (tmp_path / "checks" / "runs").iterdir()) == ["r2", "r3"]


def test_off_failing_and_stopped(tmp_path: Path) -> None:
    cfg = [ChecksConfig()]  # interval_s = 0: off
    fake = FakeRunner(tmp_path / "checks")
    fake.release.set()
    task = PeriodicChecks(lambda: cfg[0], tmp_path, lambda: tmp_path / "corral.sock", fake)
    task.tick(1e12)
    assert task.due is None and task.running is None
    cfg[0] = ChecksConfig(interval_s=1)
    fake.fail = True
    task.tick(0.0)
    task.tick(2.0)
    wait_for(lambda: task.last is not None)
    assert task.last == {"error": "no usable nodes"}  # logged; the next one is planned
    assert task.due is not None and task.due != float("inf")
    task.stop()
    task.due = 0.0
    task.tick(5.0)
    assert len(fake.calls) == 1
