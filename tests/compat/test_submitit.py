"""submitit's Slurm executor, unchanged, against the shims on a real cluster.

Covers what issue 5 asks: a function's result; ``map_array`` (ids ``A_a``,
``SLURM_ARRAY_*``); a two-task job (``tasks_per_node=2``: srun starts both ranks);
``cancel``; a checkpointable job interrupted with submitit's own preemption signals
(``scancel --signal TERM`` then ``USR2``) that requeues itself with ``scontrol requeue``
and resumes. submitit talks to the cluster only through sbatch/sacct/scancel/srun/scontrol.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.shims.harness import ShimCluster

submitit = pytest.importorskip("submitit")


@pytest.fixture()
def executor(shim_cluster: ShimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for k in list(os.environ):
        if k.startswith(("SLURM_", "CORRAL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PATH", shim_cluster.env["PATH"])
    monkeypatch.setenv("CORRAL_STATE_DIR", shim_cluster.env["CORRAL_STATE_DIR"])
    # the job unpickles this module's functions: make it importable under the same name
    depth = len(__name__.split("."))
    root = Path(__file__).resolve().parents[depth - 1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    ex = submitit.AutoExecutor(folder=tmp_path / "logs")
    assert ex.cluster == "slurm"  # picked because `srun` is on PATH
    ex.update_parameters(timeout_min=5)
    return ex


def add(a: int, b: int) -> int:
    return a + b


def square_with_env(x: int) -> tuple[int, str | None, str | None, str | None]:
    return (x * x, os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID"),
            os.environ.get("SLURM_ARRAY_TASK_COUNT"))


def rank_info() -> tuple[int, int, int, str]:
    env = submitit.JobEnvironment()
    return env.global_rank, env.local_rank, env.num_tasks, env.job_id


def sleep_long() -> None:
    time.sleep(600)


class Resumable(submitit.helpers.Checkpointable):  # type: ignore[misc]
    """First run: waits to be preempted. After the requeue: returns what it saw."""

    def __call__(self, marker: str, resumed: int = 0) -> tuple[str, int, int]:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        Path(marker).write_text(f"run {restarts}")
        if resumed == 0:
            time.sleep(600)
        return ("resumed", restarts, resumed)

    def checkpoint(self, marker: str, resumed: int = 0) -> Any:
        return submitit.helpers.DelayedSubmission(self, marker, resumed + 1)


def test_submit_and_result(executor: Any, shim_cluster: ShimCluster) -> None:
    job = executor.submit(add, 2, 3)
    assert job.job_id.isdigit()
    assert job.result() == 5
    shim_cluster.wait_job(job.job_id, lambda r: r["state"] == "COMPLETED")
    watcher = job.watcher
    watcher.update()  # one sacct call, parsed by submitit itself
    assert watcher.get_state(job.job_id) == "COMPLETED"


def test_map_array(executor: Any) -> None:
    jobs = executor.map_array(square_with_env, [1, 2, 3])
    base = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{base}_0", f"{base}_1", f"{base}_2"]
    results = [j.result() for j in jobs]
    assert results == [(1, base, "0", "3"), (4, base, "1", "3"), (9, base, "2", "3")]


def test_two_tasks_per_node(executor: Any) -> None:
    executor.update_parameters(tasks_per_node=2)
    job = executor.submit(rank_info)
    results = job.results()
    assert sorted(results) == [(0, 0, 2, job.job_id), (1, 1, 2, job.job_id)]


def test_cancel(executor: Any) -> None:
    job = executor.submit(sleep_long)
    deadline = time.monotonic() + 30
    while job.state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.state == "RUNNING"
    job.cancel()
    deadline = time.monotonic() + 30
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.done() and job.state.startswith("CANCELLED")


def test_checkpoint_requeue_and_resume(executor: Any, tmp_path: Path,
                                       shim_cluster: ShimCluster) -> None:
    marker = tmp_path / "marker.txt"
    job = executor.submit(Resumable(), str(marker))
    assert shim_cluster.wait_file(marker) == "run 0"
    job._interrupt()  # scancel <id> --signal SIGTERM, then --signal USR2 (preemption)
    assert job.result() == ("resumed", 1, 1)
    rec = shim_cluster.wait_job(job.job_id, lambda r: r["state"] == "COMPLETED")
    assert rec["restarts"] == 1
