"""The controller's program runner: a program's own output and exit, a timeout that kills
its whole session, and what it leaves behind (killed by default; kept for programs such as
a power resume program whose job is to start something that stays)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from corral.controller.jobscripts import run_program


def _prog(tmp: Path, body: str) -> str:
    p = tmp / "prog"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def _started_child(tmp: Path, keep: bool) -> int:
    pidfile = tmp / "child.pid"
    prog = _prog(tmp, f"sleep 60 > /dev/null 2>&1 < /dev/null &\necho $! > {pidfile}\n"
                      "echo started\n")
    ok, what = asyncio.run(run_program(prog, {"PATH": "/usr/bin:/bin"}, 10,
                                       keep_children=keep))
    assert ok, what
    return int(pidfile.read_text())


def test_a_kept_child_outlives_the_program(tmp_path: Path) -> None:
    pid = _started_child(tmp_path, keep=True)
    try:
        assert _alive(pid)
    finally:
        os.kill(pid, 9)


def test_leftovers_are_killed_by_default(tmp_path: Path) -> None:
    pid = _started_child(tmp_path, keep=False)
    assert _wait_gone(pid)


def test_exit_status_and_last_line_are_reported(tmp_path: Path) -> None:
    for keep in (False, True):
        ok, what = asyncio.run(run_program(_prog(tmp_path, "echo one\necho two\nexit 3\n"),
                                           {}, 10, keep_children=keep))
        assert not ok and what == "exit 3: two", (keep, what)


def test_a_timeout_kills_the_program_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    prog = _prog(tmp_path, f"sleep 60 &\necho $! > {pidfile}\nwait\n")
    for keep in (False, True):
        ok, what = asyncio.run(run_program(prog, {"PATH": "/usr/bin:/bin"}, 1,
                                           keep_children=keep))
        assert not ok and what == "timed out after 1 s", (keep, what)
        assert _wait_gone(int(pidfile.read_text()))


def test_a_cancelled_run_kills_the_program(tmp_path: Path) -> None:
    pidfile = tmp_path / "prog.pid"
    prog = _prog(tmp_path, f"echo $$ > {pidfile}\nexec sleep 60\n")

    async def go() -> None:
        task = asyncio.ensure_future(run_program(prog, {"PATH": "/usr/bin:/bin"}, 30,
                                                 keep_children=True))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(asyncio.wait_for(go(), 20))
    assert _wait_gone(int(pidfile.read_text()))
