"""An agent's live sample of each running srun step: real processes grouped by the
SLURM_STEP_ID/SLURM_PROCID they were started with."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from corral.agent.stepusage import batch_sample, group_by_step, split_processes, step_samples

BURN = "import time\nx = bytearray(40 << 20)\nt = time.time()\nwhile time.time() - t < 20: pass"


def _start(code: str, **env: str) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.Popen([sys.executable, "-c", code], env={**base, **env})


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    ps = [_start(BURN, SLURM_STEP_ID="3", SLURM_PROCID="0"),
          _start("import time; time.sleep(20)", SLURM_STEP_ID="3", SLURM_PROCID="1"),
          _start("import time; time.sleep(20)", SLURM_STEP_ID="12", SLURM_PROCID="0"),
          _start("import time; time.sleep(20)")]  # the batch script's: no step
    try:
        yield ps
    finally:
        for p in ps:
            p.kill()
            p.wait()


def test_processes_are_grouped_by_step_and_task(procs: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in procs] + [1 << 30]  # one that does not exist
    assert group_by_step(pids) == {"3": {"0": [procs[0].pid], "1": [procs[1].pid]},
                                   "12": {"0": [procs[2].pid]}}


def test_step_samples_cpu_and_biggest_task(procs: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in procs]
    deadline = time.monotonic() + 10
    got = step_samples(pids)
    while got[0]["cpu_time_s"] < 0.3 or got[0]["rss_mb"] < 40:
        assert time.monotonic() < deadline, got
        time.sleep(0.05)
        got = step_samples(pids)
    assert [s["step_id"] for s in got] == ["3", "12"]  # numeric order
    assert got[0]["ntasks"] == 2 and got[0]["pids"] == sorted(pids[:2])
    assert 40 <= got[0]["rss_mb"] < 80  # its biggest task's, not the sum of both
    assert got[1]["ntasks"] == 1 and got[1]["rss_mb"] < 40


def test_batch_processes_are_split_from_the_steps() -> None:
    """The batch script's share: its process tree and the job's adopted processes (its
    SLURM_JOB_ID), never a step's (SLURM_STEP_ID) even below it, nor a process of the
    supervisor without the job's environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    # a "batch script" whose child is a step task (local launch) and another plain child
    script = subprocess.Popen(
        [sys.executable, "-c",
         "import os,subprocess,sys,time\n"
         "e=dict(os.environ, SLURM_STEP_ID='0', SLURM_PROCID='0')\n"
         "a=subprocess.Popen([sys.executable,'-c','import time; time.sleep(20)'],env=e)\n"
         "b=subprocess.Popen([sys.executable,'-c','import time; time.sleep(20)'])\n"
         "print(a.pid, b.pid, flush=True); time.sleep(20)"],
        env={**base, "SLURM_JOB_ID": "41"}, stdout=subprocess.PIPE)
    adopted = _start("import time; time.sleep(20)", SLURM_JOB_ID="41")
    other_job = _start("import time; time.sleep(20)", SLURM_JOB_ID="42")
    stepd = _start("import time; time.sleep(20)")  # the supervisor's: no job environment
    try:
        assert script.stdout is not None
        task, child = (int(x) for x in script.stdout.readline().split())
        pids = [script.pid, task, child, adopted.pid, other_job.pid, stepd.pid]
        steps, batch = split_processes(pids, job_id=41, batch_pid=script.pid)
        assert steps == {"0": {"0": [task]}}
        assert sorted(batch) == sorted([script.pid, child, adopted.pid])
        sample = batch_sample(batch)
        assert sample["pids"] == sorted(batch) and sample["rss_mb"] > 0
        # past the bound of environments read: only what is below the batch process
        _, bounded = split_processes(pids, 0, job_id=41, batch_pid=script.pid)
        assert sorted(bounded) == sorted([script.pid, task, child])
    finally:
        for p in (script, adopted, other_job, stepd):
            p.kill()
            p.wait()
