"""``SubmitContext``: who submits, from where and when, for every front end.

The parsers never read the process (cwd, environment, clock, files) themselves: a shim
running inside the controller parses on behalf of a remote caller, and tests pass fixed
values. ``local_context`` builds one for the calling process.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from corral.frontends.errors import SubmitError

_FAILURE_PREFIX = {
    "sbatch": "Batch job submission failed",
    "srun": "Unable to allocate resources",
    "salloc": "Job submit/allocate failed",
}


@dataclass(frozen=True)
class SubmitContext:
    """Where and for whom a submission is parsed. Nothing here is read from the process."""

    prog: str = "sbatch"
    cwd: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    now: float = 0.0
    user: str = "root"
    uid: int = 0
    gid: int = 0
    host: str = ""
    max_array_size: int | None = None
    read_file: Callable[[str], str] | None = None  # path as written -> text; OSError if not
    read_stdin: Callable[[], str] | None = None
    is_dir: Callable[[str], bool] | None = None  # absolute path -> an existing directory?

    def error(self, message: str, exit_code: int = 255) -> SubmitError:
        return SubmitError(f"{self.prog}: error: {message}", exit_code)

    def rejected(self, message: str) -> SubmitError:
        """What the real command prints when the controller refuses the request."""
        prefix = _FAILURE_PREFIX.get(self.prog, "Batch job submission failed")
        return SubmitError(f"{self.prog}: error: {prefix}: {message}", 1)

    def abspath(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path))


def local_context(prog: str = "sbatch", **overrides: object) -> SubmitContext:
    """A context for the calling process: its cwd, environment, identity and clock."""
    import getpass
    import socket
    import sys
    import time

    def read_file(path: str) -> str:
        full = path if path.startswith("/") else os.path.join(os.getcwd(), path)
        with open(full, "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")

    def read_stdin() -> str:
        return sys.stdin.buffer.read().decode("utf-8", "surrogateescape")

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    values: dict[str, object] = {
        "prog": prog,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "now": time.time(),
        "user": user,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "host": socket.gethostname(),
        "read_file": read_file,
        "is_dir": os.path.isdir,
        "read_stdin": read_stdin,
    }
    values.update(overrides)
    return SubmitContext(**values)  # type: ignore[arg-type]
