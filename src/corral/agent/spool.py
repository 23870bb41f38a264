"""The agent's on-disk job spool: one directory per job, JSON files written atomically.

Layout under ``<state_dir>/jobs/<job_id>/``:

- ``request.json``    the ``LaunchRequest`` (written by the runner before it starts a supervisor)
- ``status.json``     what the supervisor is doing: its own pid and kernel start time (written
  first thing), then the job's pids, cgroup paths, output files, start time
- ``exit.json``       the final ``JobExit`` (written once, by the supervisor, or by the
  runner when the supervisor vanished); its presence means "finished"
- ``ctl/``            commands for the supervisor (cancel, signal, time limit), one file each
- ``supervisor.log``  the supervisor's own stderr (tracebacks, diagnostics)

Invariant: every JSON file is replaced with write-to-temp + ``rename``, so a reader sees the
old or the new content, never a torn one, even when the writer is killed mid-write. The
files are not fsynced: they only need to survive the death of a process, not of the node
(a node crash kills its jobs anyway and the controller marks them NODE_FAIL).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

REQUEST = "request.json"
STATUS = "status.json"
EXIT = "exit.json"
CTL = "ctl"
LOG = "supervisor.log"


def jobs_dir(state_dir: Path) -> Path:
    return state_dir / "jobs"


def job_dir(state_dir: Path, job_id: int) -> Path:
    return state_dir / "jobs" / str(job_id)


def write_json(path: Path | str, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically with ``data`` as JSON."""
    path = str(path)
    tmp = f"{path}.{os.getpid()}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(data, separators=(",", ":")).encode())
    finally:
        os.close(fd)
    os.rename(tmp, path)


def read_json(path: Path | str) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it does not exist (or is unreadable)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_ctl_seq = 0


def post_command(jdir: Path, command: dict[str, Any]) -> None:
    """Queue a command for the job's supervisor (processed in name order)."""
    global _ctl_seq
    _ctl_seq += 1
    ctl = jdir / CTL
    ctl.mkdir(exist_ok=True)
    write_json(ctl / f"{time.time_ns():020d}-{os.getpid()}-{_ctl_seq:06d}.json", command)


def take_commands(jdir: str) -> list[dict[str, Any]]:
    """Read and delete the queued commands of a job, oldest first."""
    ctl = os.path.join(jdir, CTL)
    try:
        names = sorted(n for n in os.listdir(ctl) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for name in names:
        path = os.path.join(ctl, name)
        data = read_json(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if data is not None:
            out.append(data)
    return out
