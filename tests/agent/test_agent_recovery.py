"""Jobs survive ``kill -9`` of the agent process and are re-adopted by a new runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from corral.agent import spool
from corral.agent.proctree import is_alive
from corral.agent.runner import JobRunner

from .conftest import CGROUP_ROOT, kill_leftovers, wait_exits, wait_for

AGENT = textwrap.dedent("""
    import os, sys, time
    from corral.agent.launch import LaunchRequest
    from corral.agent.runner import JobRunner
    state, work, cgroot = sys.argv[1], sys.argv[2], sys.argv[3]
    r = JobRunner(state, cgroup_root=cgroot, node_name="testnode")
    for jid in (31, 32, 33):
        gate = os.path.join(work, f"go{jid}")
        script = f"#!/bin/sh\\nwhile [ ! -e {gate} ]; do sleep 0.05; done\\necho done {jid}\\n"
        r.launch(LaunchRequest(job_id=jid, name="gated", user="root", uid=os.geteuid(),
                               gid=os.getegid(), workdir=work, script=script, kill_grace_s=1))
    print("launched", flush=True)
    time.sleep(600)
""")


def test_kill_9_agent_jobs_continue_and_are_readopted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(state), str(tmp_path), CGROUP_ROOT],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == "launched"
        os.kill(agent.pid, signal.SIGKILL)
        assert agent.wait(timeout=10) == -signal.SIGKILL
        for j in (31, 32, 33):
            wait_for(lambda j=j: (spool.read_json(spool.job_dir(state, j) / spool.STATUS) or {})
                     .get("state") == "RUNNING", what=f"job {j} running")
            rec = spool.read_json(spool.job_dir(state, j) / spool.STATUS) or {}
            assert is_alive(int(rec["supervisor_pid"]), rec["supervisor_ticks"])
            assert is_alive(int(rec["job_pid"]), rec["job_ticks"])
        # job 32 finishes while no agent runs
        (tmp_path / "go32").touch()
        wait_for(lambda: (spool.job_dir(state, 32) / spool.EXIT).exists(), what="job 32 exit")
        runner = JobRunner(state, cgroup_root=CGROUP_ROOT, node_name="testnode")
        try:
            assert runner.adopted == [31, 33]
            assert runner.running() == [31, 33]
            first = runner.poll()
            assert [(e.job_id, e.state) for e in first] == [(32, "COMPLETED")]
            assert (tmp_path / "slurm-32.out").read_text() == "done 32\n"
            (tmp_path / "go31").touch()
            assert runner.cancel(33, grace_s=1)
            exits = wait_exits(runner, 2)
            assert exits[31].state == "COMPLETED"
            assert exits[33].state == "CANCELLED"
            assert (tmp_path / "slurm-31.out").read_text() == "done 31\n"
            assert runner.running() == []
        finally:
            runner.close()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        kill_leftovers(state)
