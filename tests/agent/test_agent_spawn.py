"""How a job process starts: the gated ``posix_spawn`` and the ``fork`` path give the same
process (pid in the environment, signals, session, cgroups, descriptors, errors)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent import spawn
from corral.agent.isolation import node_layout
from corral.agent.runner import JobRunner

from .conftest import CGROUP_ROOT, kill_leftovers, make_request, wait_exits

PROBE = """#!/bin/sh
echo "pid=$$ task=$SLURM_TASK_PID"
echo "cwd=$(pwd)"
grep -E '^(SigBlk|SigIgn):' /proc/self/status
ps -o pid=,pgid=,sid= -p $$ | awk '{print "ids=" $1 "," $2 "," $3}'
cat /proc/self/cgroup | sed 's/^/cg=/'
ls /proc/self/fd | tr '\\n' ' ' | sed 's/^/fds=/'
echo
echo "odd=$(tr '\\0' '\\n' < /proc/$$/environ | grep -c '^ODD-NAME=')"
echo "uni=$UNI"
echo "args=$*"
"""


@pytest.fixture(params=["spawn", "fork"])
def mode_runner(request: pytest.FixtureRequest, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[JobRunner]:
    if request.param == "spawn" and not spawn.available():
        pytest.skip("the gated spawn is not available here")
    monkeypatch.setenv("CORRAL_JOB_START", request.param)  # read by the supervisors
    r = JobRunner(tmp_path / "state", cgroup_root=CGROUP_ROOT, node_name="testnode")
    yield r
    for jid in r.running():
        r.cancel(jid, grace_s=0)
    kill_leftovers(tmp_path / "state")
    r.close()


def test_job_process_is_the_same_either_way(mode_runner: JobRunner, tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    mode_runner.launch(make_request(61, work, PROBE, argv=("a1", "a 2"), mem_mb=64,
                                    env={"ODD-NAME": "kept", "PATH": os.environ["PATH"],
                                         "UNI": "h\u00e9-\u2603"}))
    ex = wait_exits(mode_runner)[61]
    text = (work / "slurm-61.out").read_text()
    assert ex.state == "COMPLETED", (ex, text)
    lines = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    pid, task = lines["pid"].split(" task")
    assert task == "=" + pid  # SLURM_TASK_PID is the batch process itself
    assert lines["uni"] == "h\u00e9-\u2603"  # a non-ASCII environment keeps its offsets
    assert lines["cwd"] == str(work)
    blk = next(ln for ln in text.splitlines() if ln.startswith("SigBlk"))
    ign = next(ln for ln in text.splitlines() if ln.startswith("SigIgn"))
    assert int(blk.split()[1], 16) == 0, blk
    assert int(ign.split()[1], 16) == 0, ign
    spid, pgid, sid = lines["ids"].split(",")
    assert spid == pgid == sid == pid  # its own session and process group
    assert lines["odd"] == "1"  # environment names a shell would drop travel untouched
    assert lines["args"] == "a1 a 2"
    fds = lines["fds"].split()
    # stdio, the script's memfd and ls's own directory: nothing of the supervisor leaks
    assert {"0", "1", "2"} <= set(fds) and len(fds) == 5, fds
    if node_layout(f"{CGROUP_ROOT}/testnode").mode != "none":
        sup = (mode_runner.status(61) or {})["supervisor_pid"]
        cg_lines = [ln for ln in text.splitlines() if ln.startswith("cg=")]
        assert any(ln.endswith(f"{CGROUP_ROOT}/testnode/sup_{sup}") for ln in cg_lines), text


def test_exec_errors_read_the_same(mode_runner: JobRunner, tmp_path: Path) -> None:
    mode_runner.launch(make_request(62, tmp_path, None, argv=("no-such-command-xyz",)))
    mode_runner.launch(make_request(63, tmp_path, "#!/no/such/interpreter\necho x\n"))
    exits = wait_exits(mode_runner, 2)
    assert exits[62].state == "FAILED"
    assert exits[62].reason == "cannot execute no-such-command-xyz: No such file or directory"
    assert exits[63].state == "FAILED"
    assert exits[63].reason == "cannot execute /no/such/interpreter: No such file or directory"


def test_prepare_failure_means_the_job_never_runs(tmp_path: Path) -> None:
    if not spawn.available():
        pytest.skip("the gated spawn is not available here")
    sp = spawn.Spawner(str(tmp_path))
    marker = tmp_path / "ran"
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        def refuse(pid: int) -> None:
            raise OSError(13, "refused")

        with pytest.raises(spawn.SpawnError, match="refused"):
            sp.spawn("/bin/sh", ["sh", "-c", f"touch {marker}"], dict(os.environ),
                     stdio=(devnull, devnull, devnull), prepare=refuse)
        assert not marker.exists()
        # the gate still works afterwards, and the pid reaches the environment
        r, w = os.pipe()
        pid = sp.spawn(sys.executable, [sys.executable, "-c",
                                        "import os; print(os.environ['SLURM_TASK_PID'])"],
                       dict(os.environ), stdio=(devnull, w, devnull))
        os.close(w)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert os.read(r, 100).decode().strip() == str(pid)
        os.close(r)
        with pytest.raises(FileNotFoundError):
            sp.spawn("/no/such/file", ["x"], {}, stdio=(devnull, devnull, devnull))
    finally:
        os.close(devnull)
        sp.close()
    assert not os.path.exists(sp.dir)
