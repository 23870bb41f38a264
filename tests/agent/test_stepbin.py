"""The compiled step process (``stepd.c`` via ``corral.agent.stepbin``) against the Python
one (``corral.agent.stepd``): the same launch run by each, with this test as srun (a real
listener, the real frames), gives the same frames — output, exits, failures — and both
honour stdin, signals, files, the user switch, CPU binding and SLURM_TASK_PID."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from corral.agent import stepbin, stepd
from corral.agent.launch import LaunchRequest
from corral.protocol import step as sp

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
KEY = "0123456789abcdef0123456789abcdef"


def _req(**kw: Any) -> LaunchRequest:
    base: dict[str, Any] = dict(name="t", job_id=7, uid=os.getuid(), gid=os.getgid(),
                                user=pwd.getpwuid(os.getuid()).pw_name, cpus=(0,),
                                script="", workdir="/tmp")
    base.update(kw)
    return LaunchRequest(**base)


def _launch(port: int, argv: list[str], **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"job_id": 7, "restarts": 0, "step_id": 3, "argv": argv,
                           "cwd": "/tmp", "env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                           "ntasks": 2, "nodes": ["n1"], "tasks": [[0, 1]],
                           "io_addr": f"127.0.0.1:{port}", "io_key": KEY}
    out.update(kw)
    return out


def run_step(kind: str, argv: list[str], *, send: list[tuple[int, int, bytes]] | None = None,
             after_output: list[tuple[int, int, bytes]] | None = None,
             req: LaunchRequest | None = None, switch_user: bool = False,
             groups: tuple[int, ...] = (), server: stepbin.StepServer | None = None,
             **kw: Any) -> list[tuple[int, int, bytes]]:
    """Run one node's share of a step with ``kind`` ("c": the compiled step process,
    through ``server`` or a new step server, or "py"); its frames in order. ``send``:
    frames to send once connected; ``after_output``: once the first output came."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(2)
    port = lsock.getsockname()[1]
    launch = _launch(port, argv, **kw)
    req = req or _req()
    if kind == "c":
        path = stepbin.binary()
        assert path, "the compiled step process did not build"
        own = server is None
        srv = server or stepbin.StepServer(path, None)
        plan = stepbin.plan_for(launch, req, "n1", {}, switch_user, groups, None)
        assert plan is not None
        srv.send(plan)
        pid = srv.pid
    else:
        pid = os.fork()
        if pid == 0:
            lsock.close()
            stepd.main(launch, req, "n1", {}, None, switch_user, groups, None,
                       lambda msg: os.write(2, f"{msg}\n".encode()))
    lsock.settimeout(20)
    conn, _ = lsock.accept()
    lsock.close()
    conn.settimeout(20)
    frames: list[tuple[int, int, bytes]] = []
    reader = sp.FrameReader()
    for f in send or []:
        conn.sendall(sp.pack(*f))
    pending = list(after_output or [])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        data = conn.recv(65536)
        if not data:
            break
        for f in reader.feed(data):
            frames.append(f)
            if f[0] in (sp.STDOUT, sp.STDERR) and pending:
                for g in pending:
                    conn.sendall(sp.pack(*g))
                pending = []
    conn.close()
    if kind == "c":  # the step process is the server's child; the server ends with its pipe
        if own:
            srv.close()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        return frames
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return frames


def _norm(frames: list[tuple[int, int, bytes]]) -> list[tuple[int, int, Any]]:
    """Frames comparable between the two: output joined per task and stream, exits as
    JSON, usage reduced to its node and task count."""
    out: dict[tuple[int, int], bytes] = {}
    rest: list[tuple[int, int, Any]] = []
    for kind, task, payload in frames:
        if kind in (sp.STDOUT, sp.STDERR):
            out[(kind, task)] = out.get((kind, task), b"") + payload
        elif kind == sp.DONE:
            d = json.loads(payload)
            rest.append((kind, task, (d["node"], len(d["pids"]))))
        elif kind == sp.HELLO:
            rest.append((kind, task, json.loads(payload)))
        elif kind == sp.EXIT:
            rest.append((kind, task, json.loads(payload)))
        else:
            rest.append((kind, task, payload))
    return sorted(rest, key=repr) + sorted(((k, t, v) for (k, t), v in out.items()), key=repr)


CASES: dict[str, dict[str, Any]] = {
    "output-and-codes": dict(argv=["sh", "-c", "echo out $SLURM_PROCID; echo err >&2; "
                                   "exit $((SLURM_PROCID + 1))"]),
    "signal-exit": dict(argv=["sh", "-c", "kill -TERM $$"]),
    "missing-command": dict(argv=["no-such-command-here"]),
    "missing-cwd": dict(argv=["pwd"], cwd="/no/such/dir"),
    "stdin-all": dict(argv=["cat"], send=[(sp.STDIN, sp.ALL_TASKS, b"hello\n"),
                                          (sp.STDIN_EOF, sp.ALL_TASKS, b"")]),
    "stdin-one": dict(argv=["sh", "-c", "cat; echo done $SLURM_PROCID"], input="1",
                      send=[(sp.STDIN, 1, b"for one\n"), (sp.STDIN_EOF, 1, b"")]),
    "signal-from-srun": dict(argv=["sh", "-c", "echo up; exec sleep 30"], ntasks=1,
                             tasks=[[0]], after_output=[(sp.SIGNAL, sp.ALL_TASKS, b"9")]),
    "mem-bind": dict(argv=["sh", "-c", "grep -m1 -oE '(bind|prefer):[0-9,-]+' "
                           "/proc/self/numa_maps || echo unbound; echo $SLURM_MEM_BIND_TYPE"],
                     mem_bind="map_mem:0,7"),  # task 1: node 7, which this host lacks
    "mem-prefer": dict(argv=["sh", "-c", "grep -m1 -oE '(bind|prefer):[0-9,-]+' "
                             "/proc/self/numa_maps"], mem_bind="prefer,local"),
    "task-env": dict(argv=["sh", "-c", "echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID "
                           "$SLURM_STEP_ID $SLURM_STEP_NUM_TASKS $SLURM_JOB_ID"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_and_python_step_processes_send_the_same(name: str) -> None:
    case = dict(CASES[name])
    got_c = _norm(run_step("c", **case))
    got_py = _norm(run_step("py", **case))
    assert got_c == got_py


def test_one_step_server_runs_the_steps_of_a_job_and_outlives_its_signals() -> None:
    """The job's step server forks a step process per plan (several at once), ignores the
    job's signals (they are for the tasks), is started again after a SIGKILL, and exits
    when its pipe closes."""
    srv = stepbin.StepServer(str(stepbin.binary()), None)
    try:
        first = _norm(run_step("c", server=srv, **CASES["output-and-codes"]))
        pid = srv.pid
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                    signal.SIGTSTP, signal.SIGSEGV):
            os.kill(pid, sig)
        assert _norm(run_step("c", server=srv, **CASES["output-and-codes"])) == first
        assert srv.pid == pid  # the same server took the second step
        # two steps at once: a long one does not hold up the next
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(2)
        req = _req()
        slow = stepbin.plan_for(_launch(lsock.getsockname()[1], ["sh", "-c", "exec sleep 30"],
                                        ntasks=1, tasks=[[0]]), req, "n1", {}, False, (), None)
        assert slow is not None
        srv.send(slow)
        lsock.settimeout(20)
        conn, _ = lsock.accept()
        frames = _norm(run_step("c", server=srv, **CASES["task-env"]))
        assert frames == _norm(run_step("py", **CASES["task-env"]))
        conn.close()  # srun gone: the slow step's task is killed
        os.kill(pid, signal.SIGKILL)
        assert os.waitpid(pid, 0)[0] == pid
        srv.gone(pid)
        assert _norm(run_step("c", server=srv, **CASES["output-and-codes"])) == first
        assert srv.pid not in (0, pid)
        # a write to a server that died unseen starts another one
        dead = srv.pid
        os.kill(dead, signal.SIGKILL)
        os.waitpid(dead, 0)
        assert _norm(run_step("c", server=srv, **CASES["output-and-codes"])) == first
        assert srv.pid not in (0, dead)
    finally:
        last = srv.pid
        srv.close()
        if last:
            _, status = os.waitpid(last, 0)
            assert os.waitstatus_to_exitcode(status) == 0  # pipe closed: a clean exit


def test_memory_binding_of_each_task() -> None:
    def out(frames: list[tuple[int, int, bytes]]) -> dict[int, bytes]:
        got: dict[int, bytes] = {}
        for kind, task, payload in frames:
            if kind == sp.STDOUT:
                got[task] = got.get(task, b"") + payload
        return got

    assert out(run_step("c", **CASES["mem-bind"])) == {0: b"bind:0\nmap_mem:\n",
                                                       1: b"unbound\nmap_mem:\n"}
    assert out(run_step("c", **CASES["mem-prefer"])) == {0: b"prefer:0\n", 1: b"prefer:0\n"}


def test_what_the_frames_say() -> None:
    frames = run_step("c", **CASES["output-and-codes"])
    exits = {t: json.loads(p) for k, t, p in frames if k == sp.EXIT}
    assert exits == {0: {"exit_code": 1, "signal": 0}, 1: {"exit_code": 2, "signal": 0}}
    assert frames[0][0] == sp.HELLO and json.loads(frames[0][2])["key"] == KEY
    assert frames[-1][0] == sp.DONE
    frames = run_step("c", **CASES["missing-command"])
    err = b"".join(p for k, _t, p in frames if k == sp.STDERR)
    assert b"slurmstepd: error: execve(): no-such-command-here: No such file" in err
    assert {json.loads(p)["exit_code"] for k, _t, p in frames if k == sp.EXIT} == {2}
    frames = run_step("c", **CASES["missing-cwd"])
    assert b"couldn't chdir to `/no/such/dir'" in b"".join(p for k, _t, p in frames)
    assert b"/tmp\n" in b"".join(p for k, _t, p in frames if k == sp.STDOUT)
    frames = run_step("c", **CASES["signal-from-srun"])
    assert {json.loads(p)["signal"] for k, _t, p in frames if k == sp.EXIT} == {9}


def test_task_pid_files_and_binding(tmp_path: Path) -> None:
    out = str(tmp_path / "out-%t.txt")
    frames = run_step("c", ["sh", "-c", "echo $SLURM_TASK_PID $$; grep Cpus_allowed_list "
                            "/proc/self/status"], output=out, req=_req(cpus=(0,)))
    assert not [f for f in frames if f[0] == sp.STDOUT]  # into the files, not to srun
    for t in (0, 1):
        text = (tmp_path / f"out-{t}.txt").read_text().split("\n")
        pid, shell = text[0].split()
        assert pid == shell  # SLURM_TASK_PID is the task's own pid
        assert text[1].split()[-1] == "0"


@pytest.mark.skipif(os.geteuid() != 0, reason="the user switch needs root")
def test_tasks_run_as_the_jobs_user(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    req = _req(uid=nobody.pw_uid, gid=nobody.pw_gid, user="nobody")
    frames = run_step("c", ["sh", "-c", "id -u; id -g"], req=req, switch_user=True,
                      groups=(nobody.pw_gid,))
    lines = b"".join(p for k, _t, p in frames if k == sp.STDOUT).decode().split()
    assert lines == [str(nobody.pw_uid), str(nobody.pw_gid)] * 2


def test_what_the_compiled_one_leaves_to_python() -> None:
    req = _req()
    assert stepbin.plan_for(_launch(1, ["true"], pty=True), req, "n1", {}, False, (),
                            None) is None
    assert stepbin.plan_for(_launch(1, ["true"], io_addr="localhost:5"), req, "n1", {},
                            False, (), None) is None
    assert stepbin.plan_for(_launch(1, ["true"], io_addr="[::1]:5"), req, "n1", {}, False,
                            (), None) is None
    assert stepbin.plan_for(_launch(1, ["true"], task_prolog="/bin/true"), req, "n1", {},
                            False, (), None) is None
    assert stepbin.plan_for(_launch(1, ["true"], task_epilog="/bin/true"), req, "n1", {},
                            False, (), None) is None
    assert stepbin.plan_for(_launch(1, ["true"]), _req(task_prolog="/bin/true"), "n1", {},
                            False, (), None) is None  # the cluster's [scripts] task_prolog
    assert stepbin.plan_for(_launch(1, ["true"], mem_bind="verbose,local"), req, "n1", {},
                            False, (), None) is None  # its report line
    assert stepbin.plan_for(_launch(1, ["true"], mem_bind="local"), req, "n1", {},
                            False, (), None) is not None
    bad_env = _launch(1, ["true"], env={"A=B": "x"})
    assert stepbin.plan_for(bad_env, req, "n1", {}, False, (), None) is None
    with pytest.raises(ValueError):
        stepbin.plan_for({"job_id": 1}, req, "n1", {}, False, (), None)


def _prog(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_task_prolog_and_epilog_around_each_task(tmp_path: Path) -> None:
    """srun --task-prolog/--task-epilog in the (Python) step process: the prolog's
    export/unset/print lines change each task's environment and output; the epilog runs
    after each task with its variables, before its exit is reported."""
    prolog = _prog(tmp_path / "tp", "#!/bin/sh\necho \"export FROM_TP=p$SLURM_PROCID\"\n"
                   "echo 'unset DROP_ME'\necho \"print hi $SLURM_PROCID\"\necho other\n")
    epilog = _prog(tmp_path / "te", f"#!/bin/sh\necho \"$SLURM_PROCID $FROM_TP\" > "
                   f"{tmp_path}/te-$SLURM_PROCID\n")
    frames = run_step("py", ["sh", "-c", "echo task $SLURM_PROCID $FROM_TP ${DROP_ME:-none}; "
                             f"cat {tmp_path}/te-$SLURM_PROCID 2>/dev/null; exit 0"],
                      env={"PATH": "/usr/bin:/bin", "DROP_ME": "x"},
                      task_prolog=prolog, task_epilog=epilog)
    out = {t: b"".join(p for k, tt, p in frames if k == sp.STDOUT and tt == t).decode()
           for t in (0, 1)}
    assert out == {0: "hi 0\ntask 0 p0 none\n", 1: "hi 1\ntask 1 p1 none\n"}
    # the epilog ran after the task (which did not see its file) with the task's variables
    assert (tmp_path / "te-0").read_text() == "0 \n" and \
        (tmp_path / "te-1").read_text() == "1 \n"
    assert {json.loads(p)["exit_code"] for k, _t, p in frames if k == sp.EXIT} == {0}
    # a prolog that fails ends the task with its status; the command never runs
    bad = _prog(tmp_path / "bad", "#!/bin/sh\necho nope\nexit 3\n")
    frames = run_step("py", ["sh", "-c", "echo ran"], task_prolog=bad, ntasks=1, tasks=[[0]])
    assert not [f for f in frames if f[0] == sp.STDOUT]
    err = b"".join(p for k, _t, p in frames if k == sp.STDERR)
    assert b"slurmstepd: error: TaskProlog failed status=exit 3" in err
    assert [json.loads(p)["exit_code"] for k, _t, p in frames if k == sp.EXIT] == [3]


def test_the_agent_feeds_later_steps_straight_to_the_step_server(tmp_path: Path) -> None:
    """``StepFeeds`` (the agent) writes a step's plan to the job's step server FIFO: only
    once the supervisor's server reads it, only for the run it was told of, never for
    what the compiled process leaves to Python; once the server is gone it says so (the
    runner then asks the supervisor, which refuses an ending job)."""
    from corral.agent.stepfeed import FIFO, StepFeeds

    jdir = tmp_path / "7"
    jdir.mkdir()
    req = _req()
    feeds = StepFeeds("n1", str(tmp_path))
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    lsock.settimeout(20)
    launch = _launch(lsock.getsockname()[1], ["sh", "-c", "echo fed $SLURM_PROCID"])
    assert not feeds.send(7, 0, launch)  # not told of the run
    feeds.started(7, req, (), False)
    assert not feeds.send(7, 1, launch)  # another run of the job
    assert not feeds.send(7, 0, launch)  # no server (and FIFO) yet: the supervisor's turn
    srv = stepbin.StepServer(str(stepbin.binary()), None, str(jdir / FIFO))
    plan = stepbin.plan_for(launch, req, "n1", {}, False, (), None)
    assert plan is not None
    srv.send(plan)  # the first step, through the supervisor's pipe

    def frames_of_one() -> bytes:
        conn, _ = lsock.accept()
        conn.settimeout(20)
        reader, out = sp.FrameReader(), b""
        done = False
        while not done:
            data = conn.recv(65536)
            assert data
            for kind, _task, payload in reader.feed(data):
                out += payload if kind == sp.STDOUT else b""
                done = done or kind == sp.DONE
        conn.close()
        return out

    assert sorted(frames_of_one().split(b"\n")) == [b"", b"fed 0", b"fed 1"]
    deadline = time.monotonic() + 10
    while not feeds.send(7, 0, launch):  # the server opens its FIFO soon after its start
        assert time.monotonic() < deadline, "the step server never read its FIFO"
        time.sleep(0.01)
    assert sorted(frames_of_one().split(b"\n")) == [b"", b"fed 0", b"fed 1"]
    assert feeds.sent == 1
    assert not feeds.send(7, 0, _launch(1, ["true"], pty=True))  # Python's case
    # a long step still running when the server ends holds nothing of the FIFO: the
    # agent's next write fails (EPIPE) instead of vanishing into an unread pipe
    slow = _launch(lsock.getsockname()[1], ["sh", "-c", "exec sleep 30"], ntasks=1,
                   tasks=[[0]])
    assert feeds.send(7, 0, slow)
    conn, _ = lsock.accept()
    pid = srv.pid
    srv.close()  # the job is ending
    assert os.waitpid(pid, 0)[0] == pid
    assert not (jdir / FIFO).exists()
    assert not feeds.send(7, 0, launch)  # the server is gone: EPIPE, the supervisor's turn
    conn.close()  # srun gone: the slow step ends
    feeds.forget(7)
    assert not feeds.send(7, 0, launch)
    lsock.close()


def test_the_command_is_searched_on_the_tasks_own_path(tmp_path: Path) -> None:
    """The compiled step process's own PATH search (its tasks are vforked: glibc's
    execvpe would read the step process's environment): the task's PATH, past a
    directory whose file may not run, a script without ``#!`` through /bin/sh (as
    execvpe), a missing command's message and status."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "corral-probe").write_text("#!/bin/sh\necho not me\n")  # not executable
    _prog(second / "corral-probe", "#!/bin/sh\necho found $SLURM_PROCID\n")
    _prog(second / "corral-plain", "echo plain $SLURM_PROCID\n")  # no #! line
    env = {"PATH": f"{first}:{second}:/usr/bin:/bin", "HOME": "/tmp"}
    for kind in ("c", "py"):
        frames = run_step(kind, ["corral-probe"], env=env)
        out = b"".join(p for k, _t, p in frames if k == sp.STDOUT)
        assert sorted(out.split(b"\n")) == [b"", b"found 0", b"found 1"], (kind, frames)
    frames = run_step("c", ["corral-plain"], env=env)
    out = b"".join(p for k, _t, p in frames if k == sp.STDOUT)
    assert sorted(out.split(b"\n")) == [b"", b"plain 0", b"plain 1"], frames
    frames = run_step("c", ["corral-nowhere"], env=env)
    err = b"".join(p for k, _t, p in frames if k == sp.STDERR)
    assert b"execve(): corral-nowhere: No such file or directory" in err
    assert {json.loads(p)["exit_code"] for k, _t, p in frames if k == sp.EXIT} == {2}
    frames = run_step("c", [str(first / "corral-probe")], env=env)  # a path: as is
    err = b"".join(p for k, _t, p in frames if k == sp.STDERR)
    assert b"Permission denied" in err, frames
