"""``corral.agent.jobscripts``: real programs that exit, fail, hang, leave children, print
too much, and run as another user."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from corral.agent.jobscripts import MAX_OUTPUT, apply_task_prolog, run_program


def _prog(tmp_path: Path, body: str, name: str = "p") -> str:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def test_status_output_and_environment(tmp_path: Path) -> None:
    prog = _prog(tmp_path, 'echo "out $FOO"\necho err >&2\nexit 3\n')
    res = run_program(prog, [], {"FOO": "bar"}, 10)
    assert not res.ok and res.status == 3 and res.describe() == "exit 3"
    assert res.output == b"out bar\nerr\n" and res.last_line() == "err"
    assert run_program(_prog(tmp_path, "exit 0\n", "ok"), [], {}).ok


def test_timeout_kills_the_whole_session(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    prog = _prog(tmp_path, f"/bin/sleep 60 &\necho $! > {pidfile}\nexec /bin/sleep 60\n")
    t0 = time.monotonic()
    res = run_program(prog, [], {}, 1)
    assert res.timed_out and not res.ok and "timed out after 1 s" == res.describe()
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.02)
    assert not _alive(child)


def test_a_child_holding_the_pipe_does_not_hold_the_caller(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    prog = _prog(tmp_path, f"/bin/sleep 60 &\necho $! > {pidfile}\necho done\n")
    t0 = time.monotonic()
    res = run_program(prog, [], {}, 0)
    assert res.ok and res.output == b"done\n" and time.monotonic() - t0 < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.02)
    assert not _alive(child)  # what it left in its session is gone


def test_output_is_bounded_and_missing_programs_fail(tmp_path: Path) -> None:
    prog = _prog(tmp_path, "head -c 3000000 /dev/zero\n")
    res = run_program(prog, [], {"PATH": "/usr/bin:/bin"}, 20)
    assert res.ok and len(res.output) == MAX_OUTPUT
    missing = run_program(str(tmp_path / "nope"), [], {})
    assert not missing.ok and "No such file" in missing.describe()
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")
    assert "not an executable" in run_program(str(plain), [], {}).describe()


def test_runs_as_the_given_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    nobody = pwd.getpwnam("nobody")
    where = Path(tempfile.mkdtemp(prefix="corral-js-"))  # pytest's tmp is root's only
    try:
        os.chmod(where, 0o755)
        prog = _prog(where, "id -u\n")
        res = run_program(prog, [], {"PATH": "/usr/bin:/bin"}, 10,
                          creds=(nobody.pw_uid, nobody.pw_gid, ()))
        assert res.ok and res.output.decode().strip() == str(nobody.pw_uid)
    finally:
        shutil.rmtree(where)


def test_task_prolog_lines() -> None:
    env = {"KEEP": "1", "DROP": "2"}
    prints = apply_task_prolog(b"export A=1\nexport B=x=y\nunset DROP\nprint  two spaces\n"
                               b"export bad-name=1\nexport NOEQ\nnoise\n", env)
    assert env == {"KEEP": "1", "A": "1", "B": "x=y"}
    assert prints == [" two spaces"]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
