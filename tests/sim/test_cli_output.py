"""``corral sim`` output through a pipe and on a pseudo-terminal: whole tables on stdout,
progress only on stderr (and only on a terminal or with ``--progress``), drop counts of
the selection, scheduler settings as options and in the header."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np

from corral.sim.swf import read_swf
from corral.sim.workload import build_workload, select

CORRAL = [sys.executable, "-c", "from corral.cli.main import main; main()"]
SMALL = """; MaxNodes: 8
; MaxProcs: 8
1 0 0 100 2 -1 -1 2 200 -1 1 1 1 -1 1 -1 -1 -1
2 10 0 -1 2 -1 -1 2 200 -1 1 1 1 -1 1 -1 -1 -1
3 20 0 50 8 -1 -1 8 100 -1 1 2 1 -1 1 -1 -1 -1
4 30 0 -1 1 -1 -1 1 100 -1 1 2 1 -1 1 -1 -1 -1
5 40 0 30 4 -1 -1 4 60 -1 1 1 1 -1 1 -1 -1 -1
6 50 0 20 2 -1 -1 2 60 -1 1 3 1 -1 1 -1 -1 -1
7 60 0 -1 2 -1 -1 2 60 -1 1 3 1 -1 1 -1 -1 -1
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    return env


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "small.swf"
    p.write_text(SMALL)
    return p


def test_drop_counts_follow_the_selection(tmp_path: Path) -> None:
    wl = build_workload(read_swf(_trace(tmp_path)))
    assert wl.dropped == {"unknown_runtime": 3}
    assert list(wl.job_id) == [1, 3, 5, 6]
    assert select(wl, "all").dropped == {"unknown_runtime": 3}
    # a dropped job belongs with the kept job after it: 2 with 3, 4 with 5, 7 with the end
    assert select(wl, "1").dropped == {}
    assert select(wl, "2").dropped == {"unknown_runtime": 1}
    assert select(wl, "2:4").dropped == {"unknown_runtime": 2}
    assert select(wl, "1:3").dropped == {"unknown_runtime": 2}
    assert select(wl, "id:3-5").dropped == {"unknown_runtime": 1}
    assert select(wl, "id:1-7").dropped == {"unknown_runtime": 3}
    assert select(wl, "5:9").dropped == {}
    assert np.array_equal(select(wl, "1:3").job_id, [3, 5])


def test_piped_output_is_whole_and_has_no_progress(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "m.json"
    r = subprocess.run(
        [*CORRAL, "sim", "compare", str(trace), "--policies",
         "fcfs+easy,sjf+easy,multifactor+conservative+spread+nofs", "--bf-resolution", "7",
         "--bf-window", "2-0", "--bf-max-job-test", "9", "--no-bf-continue",
         "--reservation-policy", "highest", "--priority-weights", "age=5,fairshare=0",
         "--jobs", "3", "--json", str(out)],
        capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    assert "…" not in r.stdout
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) > 80  # the header is not wrapped at 80 columns
    row = next(x for x in lines if "multifactor+conservative+spread+nofs" in x)
    assert "0." in row.split()[5]  # util printed whole, e.g. 0.417, not "0.…"
    head = "\n".join(lines[:3])
    for word in ("bf_resolution=7s", "bf_window=2d", "bf_max_job_test=9", "bf_continue=no",
                 "reservation_policy=highest", "age=5,fairshare=0"):
        assert word in head
    assert "dropped while reading: 2 unknown runtime" in r.stdout
    data = json.loads(out.read_text())
    sched = data[0]["settings"]["scheduler"]
    assert sched["bf_resolution_s"] == 7 and sched["bf_window_s"] == 2 * 86400
    assert sched["bf_max_job_test"] == 9 and sched["bf_continue"] is False
    assert sched["weights"]["age"] == 5


def test_bad_setting_is_precise(tmp_path: Path) -> None:
    r = subprocess.run(
        [*CORRAL, "sim", "run", str(_trace(tmp_path)), "--priority-weights", "speed=3"],
        capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert r.returncode == 2 and "--priority-weights 'speed=3'" in r.stderr
    r = subprocess.run(
        [*CORRAL, "sim", "run", str(_trace(tmp_path)), "--bf-window", "soon"],
        capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert r.returncode == 2 and "--bf-window 'soon'" in r.stderr


def _pty(cols: int) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    return master, slave


def _drain(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def test_progress_goes_to_a_terminal_stderr_only(tmp_path: Path) -> None:
    master, slave = _pty(60)
    p = subprocess.Popen(
        [*CORRAL, "sim", "run", str(_trace(tmp_path)), "--policy", "fcfs+easy"],
        stdout=subprocess.PIPE, stderr=slave, env=_env())
    os.close(slave)
    err = _drain(master)
    out, _ = p.communicate(timeout=120)
    os.close(master)
    assert p.returncode == 0
    assert "fcfs+easy" in err and "4/4" in err  # the bar, on the terminal
    text = out.decode()
    assert "4/4" not in text and "\x1b" not in text  # stdout: only the report
    assert "fcfs+easy" in text


def test_narrow_terminal_does_not_cut_the_table(tmp_path: Path) -> None:
    master, slave = _pty(50)
    p = subprocess.Popen(
        [*CORRAL, "sim", "run", str(_trace(tmp_path)), "--policy", "fcfs+easy",
         "--no-progress"], stdout=slave, stderr=slave, env=_env())
    os.close(slave)
    text = _drain(master)
    p.wait(timeout=120)
    os.close(master)
    assert p.returncode == 0
    assert "…" not in text
    assert "jobs" in text and "killed" in text and "util" in text
    # --width is obeyed (a narrow table squeezes its cells)
    r = subprocess.run([*CORRAL, "sim", "run", str(_trace(tmp_path)), "--width", "40"],
                       capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert r.returncode == 0
    assert max(len(x) for x in r.stdout.splitlines() if "fcfs" in x) <= 40


def test_starvation_guard_as_policy_word_and_option(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "g.json"
    r = subprocess.run(
        [*CORRAL, "sim", "compare", str(trace), "--policies", "sjf+easy+guard90m,sjf+easy",
         "--starvation-guard", "2:00:00", "--json", str(out)],
        capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "starvation_guard=2h" in r.stdout  # the option is the base of every policy
    data = json.loads(out.read_text())
    assert [d["settings"]["scheduler"]["starvation_guard_s"] for d in data] == [5400, 7200]
    r = subprocess.run([*CORRAL, "sim", "run", str(trace), "--policy", "sjf+guard12x"],
                       capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert r.returncode == 2 and "unknown policy word 'guard12x'" in r.stderr
