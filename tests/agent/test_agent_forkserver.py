"""The fork server and the pooled supervisors: no single point of failure, no double start."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from corral.agent import spool
from corral.agent.proctree import is_alive
from corral.agent.runner import JobRunner
from corral.agent.supervisor import encode_job

from .conftest import make_request, wait_exits, wait_for


def test_fork_server_death_spares_running_jobs(runner: JobRunner, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    runner.launch(make_request(81, tmp_path, f"#!/bin/sh\nwhile [ ! -e {gate} ]; do "
                                             "sleep 0.05; done\necho done\n"))
    wait_for(lambda: (runner.status(81) or {}).get("state") == "RUNNING", what="job 81 running")
    zpid = runner.fork_server_pid
    assert zpid is not None
    os.kill(zpid, signal.SIGKILL)
    wait_for(lambda: not is_alive(zpid), what="fork server gone")
    st = runner.status(81) or {}
    assert is_alive(int(st["supervisor_pid"]), st["supervisor_ticks"])  # the job lives on
    # the next launch finds the fork server dead and starts another
    runner.launch(make_request(82, tmp_path, "#!/bin/sh\necho second\n"))
    assert wait_exits(runner)[82].state == "COMPLETED"
    assert runner.fork_server_pid not in (None, zpid)
    gate.touch()
    ex = wait_exits(runner)[81]
    assert ex.state == "COMPLETED"
    assert (tmp_path / "slurm-81.out").read_text() == "done\n"


def test_a_launch_delivered_twice_runs_once(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(83, tmp_path, "#!/bin/sh\necho ran >> runs.txt\nsleep 0.2\n"))
    # the same message again, as after a fork server restart racing a forked supervisor
    jdir = str(spool.job_dir(runner.state_dir, 83).resolve())
    assert runner._zygote.send(encode_job(jdir, 83, 0, (), False))
    assert runner._zygote.send(encode_job(jdir, 83, 0, (), False))
    assert wait_exits(runner)[83].state == "COMPLETED"
    assert (tmp_path / "runs.txt").read_text() == "ran\n"
    # and a message for another run of the job is ignored by the supervisors
    assert runner._zygote.send(encode_job(jdir, 83, 5, (), False))
    runner.launch(make_request(84, tmp_path, "#!/bin/sh\necho fine\n"))
    assert wait_exits(runner)[84].state == "COMPLETED"
    assert (tmp_path / "runs.txt").read_text() == "ran\n"


def test_supervisors_are_reused_one_job_at_a_time(runner: JobRunner, tmp_path: Path) -> None:
    pids = []
    for jid in (85, 86, 87):
        runner.launch(make_request(jid, tmp_path, "#!/bin/sh\necho $PPID\n"))
        wait_exits(runner)
        pids.append(int((tmp_path / f"slurm-{jid}.out").read_text()))
        runner.ack(jid)
    # one job at a time here, so one supervisor process served them all
    assert len(set(pids)) == 1, pids
