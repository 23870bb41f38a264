"""An agent's live sample of each running srun step: real processes grouped by the
SLURM_STEP_ID/SLURM_PROCID they were started with."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from corral.agent.stepusage import group_by_step, step_samples

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
