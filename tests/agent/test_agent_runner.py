"""JobRunner with real processes and signals: outcomes, time limits, cancel, outputs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from corral.agent import spool
from corral.agent.runner import JobRunner, LaunchError

from .conftest import make_request, wait_exits, wait_for

CANCEL_RE = re.compile(r"^slurmstepd-testnode: error: \*\*\* JOB (\d+) ON testnode CANCELLED AT "
                       r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d( DUE TO TIME LIMIT)? \*\*\*$", re.M)


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] in "ZX"
    except FileNotFoundError:
        return True


def test_job_completes_with_output_and_environment(runner: JobRunner, tmp_path: Path) -> None:
    script = "#!/bin/bash\necho hello\necho \"pid=$$ task=$SLURM_TASK_PID\"\nenv | sort\n"
    runner.launch(make_request(1, tmp_path, script, name="hello", gpus=(0, 2), cpus=(0,),
                               env={"SUBMIT_VAR": "kept", "SLURM_JOB_PARTITION": "debug"}))
    ex = wait_exits(runner)[1]
    assert (ex.state, ex.exit_code, ex.signal) == ("COMPLETED", 0, 0)
    assert ex.exit_code_text == "0:0"
    assert ex.start_time <= ex.end_time
    out_path = tmp_path / "slurm-1.out"
    assert ex.stdout_path == str(out_path)
    text = out_path.read_text()
    assert text.startswith("hello\n")
    pid, task = re.search(r"pid=(\d+) task=(\d+)", text).groups()  # type: ignore[union-attr]
    assert pid == task
    env = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and ln[0].isupper())
    assert env["SUBMIT_VAR"] == "kept"
    assert env["SLURM_JOB_PARTITION"] == "debug"
    assert env["SLURM_JOB_ID"] == "1" and env["SLURM_JOB_NAME"] == "hello"
    assert env["SLURMD_NODENAME"] == "testnode"
    assert env["SLURM_CPUS_ON_NODE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,2" and env["GPU_DEVICE_ORDINAL"] == "0,2"
    assert env["ENVIRONMENT"] == "BATCH"


def test_job_fails_with_exit_code(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(2, tmp_path, "#!/bin/sh\necho oops >&2\nexit 3\n"))
    ex = wait_exits(runner)[2]
    assert (ex.state, ex.exit_code, ex.signal, ex.exit_code_text) == ("FAILED", 3, 0, "3:0")
    assert (tmp_path / "slurm-2.out").read_text() == "oops\n"


def test_script_without_shebang_runs_under_sh_and_argv_jobs_run(runner: JobRunner,
                                                                tmp_path: Path) -> None:
    runner.launch(make_request(3, tmp_path, "echo plain $0\n"))
    runner.launch(make_request(4, tmp_path, None, argv=("printf", "%s-%s", "a", "b")))
    exits = wait_exits(runner, 2)
    assert exits[3].state == exits[4].state == "COMPLETED"
    assert (tmp_path / "slurm-3.out").read_text().startswith("plain /dev/fd/")
    assert (tmp_path / "slurm-4.out").read_text() == "a-b"


def test_python_shebang_script(runner: JobRunner, tmp_path: Path) -> None:
    script = f"#!{sys.executable}\nimport os\nprint('py', os.environ['SLURM_JOB_ID'])\n"
    runner.launch(make_request(5, tmp_path, script))
    assert wait_exits(runner)[5].state == "COMPLETED"
    assert (tmp_path / "slurm-5.out").read_text() == "py 5\n"


def test_time_limit_kills_whole_tree(runner: JobRunner, tmp_path: Path) -> None:
    script = "#!/bin/bash\nsleep 300 &\necho $! > grandchild.pid\nsleep 300\n"
    t0 = time.monotonic()
    runner.launch(make_request(6, tmp_path, script, time_limit_s=1, kill_grace_s=1))
    ex = wait_exits(runner)[6]
    assert ex.state == "TIMEOUT"
    assert 0.9 <= time.monotonic() - t0 < 5
    text = (tmp_path / "slurm-6.out").read_text()
    m = CANCEL_RE.search(text)
    assert m and m.group(1) == "6" and m.group(2) == " DUE TO TIME LIMIT", text
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert pid_gone(grandchild)


def test_time_limit_sigkill_after_grace_when_term_is_ignored(runner: JobRunner,
                                                              tmp_path: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo got TERM' TERM\nwhile true; do sleep 0.05; done\n"
    t0 = time.monotonic()
    runner.launch(make_request(7, tmp_path, script, time_limit_s=1, kill_grace_s=1))
    ex = wait_exits(runner)[7]
    assert ex.state == "TIMEOUT"
    assert time.monotonic() - t0 >= 1.9  # limit + grace before SIGKILL
    assert ex.signal == signal.SIGKILL
    assert "got TERM" in (tmp_path / "slurm-7.out").read_text()


def test_cancel_with_grace(runner: JobRunner, tmp_path: Path) -> None:
    script = ("#!/bin/bash\ntrap 'echo got TERM; sleep 0.3; echo cleaned; exit 0' TERM\n"
              "echo started\nwhile true; do sleep 0.05; done\n")
    runner.launch(make_request(8, tmp_path, script))
    wait_for(lambda: (tmp_path / "slurm-8.out").exists()
             and "started" in (tmp_path / "slurm-8.out").read_text(), what="job start")
    assert runner.running() == [8]
    assert runner.cancel(8, grace_s=5)
    ex = wait_exits(runner)[8]
    assert ex.state == "CANCELLED"
    text = (tmp_path / "slurm-8.out").read_text()
    assert "got TERM\ncleaned\n" in text  # the grace let the trap finish
    m = CANCEL_RE.search(text)
    assert m and m.group(2) is None
    assert runner.cancel(8) is False  # already finished


def test_cancel_without_grace_kills_at_once(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(9, tmp_path, "#!/bin/sh\ntrap '' TERM\nsleep 300\n",
                               kill_grace_s=60))
    wait_for(lambda: (runner.status(9) or {}).get("state") == "RUNNING", what="running")
    t0 = time.monotonic()
    runner.cancel(9, grace_s=0)
    ex = wait_exits(runner)[9]
    assert ex.state == "CANCELLED" and time.monotonic() - t0 < 3


def test_warning_signal_to_batch_shell(runner: JobRunner, tmp_path: Path) -> None:
    script = ("#!/bin/bash\ntrap 'echo warned at $SECONDS; exit 0' USR1\n"
              "while true; do sleep 0.05; done\n")
    t0 = time.monotonic()
    runner.launch(make_request(10, tmp_path, script, time_limit_s=3, signal="B:USR1@2"))
    ex = wait_exits(runner)[10]
    elapsed = time.monotonic() - t0
    assert ex.state == "COMPLETED"
    assert 0.8 <= elapsed < 2.5  # 1 s after start, well before the 3 s limit
    assert "warned" in (tmp_path / "slurm-10.out").read_text()


def test_warning_signal_without_b_spares_the_batch_shell(runner: JobRunner,
                                                         tmp_path: Path) -> None:
    child = ("import signal, sys, time\n"
             "def warned(*a):\n    print('child warned', flush=True)\n    sys.exit(0)\n"
             "signal.signal(signal.SIGUSR1, warned)\n"
             "time.sleep(30)\n")
    (tmp_path / "child.py").write_text(child)
    script = f"#!/bin/bash\n{sys.executable} child.py\necho shell survived\n"
    runner.launch(make_request(11, tmp_path, script, time_limit_s=2, signal="USR1@1"))
    ex = wait_exits(runner)[11]
    assert ex.state == "COMPLETED"
    assert (tmp_path / "slurm-11.out").read_text() == "child warned\nshell survived\n"


def test_signal_and_time_limit_update(runner: JobRunner, tmp_path: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo got HUP' HUP\necho ready\nwhile true; do sleep 0.05; done\n"
    runner.launch(make_request(12, tmp_path, script, time_limit_s=600))
    out = tmp_path / "slurm-12.out"
    wait_for(lambda: out.exists() and "ready" in out.read_text(), what="ready")
    assert runner.signal(12, signal.SIGHUP)
    wait_for(lambda: "got HUP" in out.read_text(), what="HUP delivered")
    t0 = time.monotonic()
    assert runner.update_time_limit(12, 1)  # already past: time out now
    ex = wait_exits(runner)[12]
    assert ex.state == "TIMEOUT" and time.monotonic() - t0 < 3
    assert runner.signal(12, signal.SIGHUP) is False


def test_output_patterns_and_modes(runner: JobRunner, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    runner.launch(make_request(13, tmp_path, "#!/bin/sh\necho out\necho err >&2\n", name="pat",
                               stdout="logs/o-%x-%j-%u-%N-%n-%t-%%.txt", stderr="logs/e-%6j.txt"))
    (tmp_path / "slurm-77_3.out").write_text("old\n")
    runner.launch(make_request(14, tmp_path, "#!/bin/sh\necho task $SLURM_ARRAY_TASK_ID\n",
                               array_job_id=77, array_task_id=3))
    (tmp_path / "keep.out").write_text("before\n")
    runner.launch(make_request(15, tmp_path, "#!/bin/sh\necho after\n", stdout="keep.out",
                               open_mode="append"))
    exits = wait_exits(runner, 3)
    assert all(e.state == "COMPLETED" for e in exits.values())
    assert (tmp_path / "logs/o-pat-13-root-testnode-0-0-%.txt").read_text() == "out\n"
    assert (tmp_path / "logs/e-000013.txt").read_text() == "err\n"
    assert exits[13].stderr_path == str(tmp_path / "logs/e-000013.txt")
    assert (tmp_path / "slurm-77_3.out").read_text() == "task 3\n"  # truncated
    assert (tmp_path / "keep.out").read_text() == "before\nafter\n"


def test_missing_workdir_fails_with_reason(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(16, tmp_path / "nope", "#!/bin/sh\necho hi\n"))
    runner.launch(make_request(17, tmp_path, "#!/bin/sh\necho hi\n", stdout="no/such/dir/x.out"))
    runner.launch(make_request(18, tmp_path, "#!/no/such/interpreter\necho hi\n"))
    exits = wait_exits(runner, 3)
    assert exits[16].state == "FAILED"
    assert exits[16].reason == f"cannot change to working directory {tmp_path / 'nope'}: " \
                               "No such file or directory"
    assert exits[17].state == "FAILED" and "cannot open output file" in exits[17].reason
    assert exits[18].state == "FAILED" and "cannot execute /no/such/interpreter" in exits[18].reason


def test_bad_requests_fail_cleanly(runner: JobRunner, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    runner.launch(make_request(19, "relative/dir", "#!/bin/sh\n"))
    runner.launch(make_request(20, tmp_path, "#!/bin/sh\n", signal="NOSUCHSIG@10"))
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    runner.launch(make_request(21, tmp_path, "#!/bin/sh\n", uid=0))
    exits = wait_exits(runner, 3)
    assert "absolute path" in exits[19].reason
    assert "unknown signal name 'NOSUCHSIG'" in exits[20].reason
    assert "runs as uid 4242" in exits[21].reason
    assert "cannot start jobs as uid 0" in exits[21].reason
    assert {e.state for e in exits.values()} == {"FAILED"}


def test_launch_is_idempotent_and_exits_are_durable(runner: JobRunner, tmp_path: Path) -> None:
    req = make_request(22, tmp_path, "#!/bin/sh\necho ran >> runs.txt\n")
    runner.launch(req)
    runner.launch(req)
    assert wait_exits(runner)[22].state == "COMPLETED"
    runner.launch(req)  # the same run again after it finished: still not re-run
    assert runner.poll() == []
    assert (tmp_path / "runs.txt").read_text() == "ran\n"
    # a fresh runner on the same state dir reports the unacknowledged exit again
    runner.close()
    again = JobRunner(runner.state_dir, cgroup_root="x", node_name="testnode", isolation="none")
    try:
        assert [e.job_id for e in again.poll()] == [22]
        assert again.poll() == []
        assert again.ack(22)
        assert not spool.job_dir(again.state_dir, 22).exists()
        # a requeued run (restarts=1) starts again
        again.launch(make_request(22, tmp_path, "#!/bin/sh\necho ran >> runs.txt\n", restarts=1))
        ex = wait_exits(again)[22]
        assert ex.restarts == 1
        assert (tmp_path / "runs.txt").read_text() == "ran\nran\n"
    finally:
        again.close()


def test_relaunch_of_running_job_with_other_run_is_refused(runner: JobRunner,
                                                           tmp_path: Path) -> None:
    runner.launch(make_request(23, tmp_path, "#!/bin/sh\nsleep 30\n"))
    with pytest.raises(LaunchError, match="still running"):
        runner.launch(make_request(23, tmp_path, "#!/bin/sh\n", restarts=1))
    with pytest.raises(LaunchError, match="still running"):
        runner.ack(23)


def test_affinity_is_pinned(runner: JobRunner, bare_runner: JobRunner, tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    script = "#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status\n"
    runner.launch(make_request(24, tmp_path, script, cpus=(cpu,)))
    bare_runner.launch(make_request(25, tmp_path, script, cpus=(cpu,)))
    wait_exits(runner)
    wait_exits(bare_runner)
    for jid in (24, 25):
        words = (tmp_path / f"slurm-{jid}.out").read_text().split()
        assert words == ["Cpus_allowed_list:", str(cpu)]


def test_supervisor_death_is_node_fail(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(26, tmp_path, "#!/bin/sh\nsleep 300\n"))
    wait_for(lambda: (runner.status(26) or {}).get("state") == "RUNNING", what="running")
    st = runner.status(26) or {}
    os.kill(int(st["supervisor_pid"]), signal.SIGKILL)
    ex = wait_exits(runner)[26]
    assert ex.state == "NODE_FAIL" and "supervisor" in ex.reason
    wait_for(lambda: pid_gone(int(st["job_pid"])), timeout_s=5, what="job killed")


def test_job_runs_as_submitting_user(runner: JobRunner,
                                     test_user: tuple[str, int, int, int]) -> None:
    name, uid, gid, extra_gid = test_user
    work = Path(tempfile.mkdtemp(prefix="corral-agent-user-", dir="/tmp"))
    try:
        os.chown(work, uid, gid)
        script = ("#!/bin/sh\necho uid=$(id -u) gid=$(id -g) groups=$(id -G)\n"
                  "touch /root/corral-should-not-exist 2>/dev/null && echo WROTE || echo denied\n")
        runner.launch(make_request(27, work, script, user=name, uid=uid, gid=gid))
        ex = wait_exits(runner)[27]
        assert ex.state == "COMPLETED", ex
        out = work / "slurm-27.out"
        first, second = out.read_text().splitlines()
        ids = dict(kv.split("=") for kv in first.split()[:2])
        assert ids == {"uid": str(uid), "gid": str(gid)}
        assert str(extra_gid) in first.split("groups=")[1].split()
        assert second == "denied"
        assert out.stat().st_uid == uid  # the output file was created by the user
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_cancel_right_after_launch(runner: JobRunner, tmp_path: Path) -> None:
    runner.launch(make_request(28, tmp_path, "#!/bin/sh\necho started > started.txt\nsleep 30\n"))
    assert runner.cancel(28, grace_s=1)
    t0 = time.monotonic()
    ex = wait_exits(runner)[28]
    assert ex.state == "CANCELLED" and time.monotonic() - t0 < 3


def test_stdin_file(runner: JobRunner, tmp_path: Path) -> None:
    (tmp_path / "in-29.txt").write_text("from stdin\n")
    runner.launch(make_request(29, tmp_path, "#!/bin/sh\ncat\n", stdin="in-%j.txt"))
    assert wait_exits(runner)[29].state == "COMPLETED"
    assert (tmp_path / "slurm-29.out").read_text() == "from stdin\n"


@pytest.mark.parametrize("isolated", [True, False], ids=["cgroup", "sigstop"])
def test_suspend_resume_pauses_the_time_limit(runner: JobRunner, bare_runner: JobRunner,
                                              tmp_path: Path, isolated: bool) -> None:
    r = runner if isolated else bare_runner
    script = "#!/bin/sh\ni=0\nwhile true; do i=$((i+1)); echo $i > count.txt; sleep 0.02; done\n"
    t0 = time.monotonic()
    r.launch(make_request(30, tmp_path, script, time_limit_s=4, kill_grace_s=1))
    count = tmp_path / "count.txt"

    def value() -> int:
        try:
            return int(count.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    wait_for(lambda: value() > 3, what="counting")
    assert r.suspend(30)
    wait_for(lambda: (r.status(30) or {}).get("state") == "SUSPENDED", what="suspended")
    frozen = value()
    # stays frozen, past the 4 s limit counted from the launch, and no timeout: however
    # long the start took on a loaded machine, the job ran less than its limit before
    # the suspension only when it started within 2.5 s (asserted below)
    ran_s = time.monotonic() - t0
    assert ran_s < 2.5, f"the job took {ran_s:.1f} s to start counting"
    deadline = max(time.monotonic() + 1.5, t0 + 4.5)
    while time.monotonic() < deadline:
        assert value() <= frozen + 1
        assert r.poll() == []
        time.sleep(0.1)
    assert r.resume(30)
    wait_for(lambda: value() > frozen + 3, what="counting again")
    ex = wait_exits(r)[30]
    assert ex.state == "TIMEOUT"
    assert time.monotonic() - t0 >= 4 + (deadline - t0 - ran_s) - 0.2  # limit + suspension
    if isolated and r.layout.mode != "none":
        assert (r.status(30) or {}).get("isolation", {}).get("kind", "").startswith("cgroup")


@pytest.mark.parametrize("isolated", [True, False], ids=["cgroup", "subreaper-only"])
def test_leftover_background_processes_are_killed_at_exit(runner: JobRunner,
                                                          bare_runner: JobRunner,
                                                          tmp_path: Path, isolated: bool) -> None:
    r = runner if isolated else bare_runner
    script = "#!/bin/sh\n(setsid sleep 300 &) \nsleep 300 &\necho $! > bg.pid\necho done\n"
    r.launch(make_request(31, tmp_path, script))
    ex = wait_exits(r)[31]
    assert ex.state == "COMPLETED"
    assert pid_gone(int((tmp_path / "bg.pid").read_text()))
    # the setsid'd double-forked sleep escaped the session but not the supervisor
    out = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True).stdout
    mine = [int(p) for p in out.split() if _ppid(int(p)) == 1 and _in_tmp(int(p), tmp_path)]
    assert mine == []


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _in_tmp(pid: int, tmp_path: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
    except OSError:
        return False


def test_batched_launches_run_once_each(runner: JobRunner, tmp_path: Path) -> None:
    """Launches of one batch travel to the fork server in one message; each runs once,
    and a repeat inside the batch is still idempotent."""
    with runner.batch():
        for jid in (71, 72, 73):
            runner.launch(make_request(jid, tmp_path, f"#!/bin/sh\necho {jid} >> runs.txt\n"))
        runner.launch(make_request(72, tmp_path, "#!/bin/sh\necho again >> runs.txt\n"))
    exits = wait_exits(runner, 3)
    assert {j: e.state for j, e in exits.items()} == {71: "COMPLETED", 72: "COMPLETED",
                                                       73: "COMPLETED"}
    assert sorted((tmp_path / "runs.txt").read_text().split()) == ["71", "72", "73"]
