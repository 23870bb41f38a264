"""What a shim command gets to work with, wherever it runs.

A ``Context`` carries the command line, the caller's working directory, environment and
identity, and collects stdout/stderr. Commands never touch ``os``/``sys`` directly, so the
same code runs in the caller's process (``corral.shims.local``) and inside the controller
(``corral.shims.server``), where files belong to the caller and must be read by the
launcher: ``read_file`` then raises ``NeedInput`` and the launcher sends them along.

``Client`` is the part of ``corral.client.Client`` the commands use; in the controller an
in-process object with the same methods (bound to the caller) stands in for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ShimExit(Exception):
    """End the command with this exit status (output so far is kept)."""

    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


class NeedInput(Exception):
    """The command must read these files (``-`` = stdin); only the launcher can."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = paths


class Client(Protocol):
    def submit_result(self, sub: Mapping[str, Any]) -> dict[str, Any]: ...

    def jobs(
        self,
        user: str | None = None,
        states: Iterable[str] | None = None,
        partition: str | None = None,
        ids: Iterable[int | str] | None = None,
        *,
        account: str | None = None,
        name: str | None = None,
        include_finished: bool = False,
        fields: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]: ...

    def job(self, job_id: int | str) -> dict[str, Any]: ...

    def cancel(
        self, ids: Iterable[int | str], signal: str | int | None = None, *,
        batch_only: bool = False, scope: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def hold(self, ids: Iterable[int | str], *, admin: bool = False) -> list[dict[str, Any]]: ...

    def release(self, ids: Iterable[int | str]) -> list[dict[str, Any]]: ...

    def requeue(self, ids: Iterable[int | str], *, hold: bool = False) -> list[dict[str, Any]]: ...

    def update_job(self, job_id: int | str, **fields: Any) -> dict[str, Any]: ...

    def history(
        self,
        user: str | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        states: Iterable[str] | None = None,
        ids: Iterable[int | str] | None = None,
        account: str | None = None,
        partition: str | None = None,
        limit: int | None = None,
        all_users: bool = False,
        names: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def partitions(self) -> list[dict[str, Any]]: ...

    def cluster_config(self) -> dict[str, Any]: ...

    def drain(self, node: str, reason: str) -> dict[str, Any]: ...

    def resume(self, node: str) -> dict[str, Any]: ...

    def whoami(self) -> dict[str, Any]: ...

    def ping(self) -> dict[str, Any]: ...


@dataclass
class Context:
    prog: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    uid: int
    now: float
    local: bool = True  # True: running as the caller, files can be opened directly
    files: dict[str, tuple[bool, str]] = field(default_factory=dict)
    stdin_text: str | None = None
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def print(self, text: str = "") -> None:
        self.out.append(text + "\n")

    def write(self, text: str) -> None:
        self.out.append(text)

    def error(self, text: str) -> None:
        """A line on stderr (``text`` already carries the ``prog:`` prefix if wanted)."""
        self.err.append(text + "\n")

    def fail(self, text: str, rc: int = 1) -> ShimExit:
        """``raise ctx.fail(msg)``: print ``msg`` on stderr and end with ``rc``."""
        for line in text.splitlines() or [""]:
            self.error(line)
        return ShimExit(rc)

    def abspath(self, path: str) -> str:
        return path if path.startswith("/") else os.path.normpath(os.path.join(self.cwd, path))

    def read_file(self, path: str) -> str:
        """The text of ``path`` as the caller sees it. ``OSError`` if unreadable."""
        if self.local:
            with open(self.abspath(path), "rb") as f:
                return f.read().decode("utf-8", "surrogateescape")
        got = self.files.get(path)
        if got is None:
            raise NeedInput([path])
        ok, text = got
        if not ok:
            raise OSError(text)
        return text

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory the caller can see (asked as ``path/``: a
        directory answers "Is a directory", anything else another error; no content moves)."""
        probe = self.abspath(path).rstrip("/") + "/"
        try:
            self.read_file(probe)
        except IsADirectoryError:
            return True
        except OSError as exc:
            return "Is a directory" in str(exc)
        return False

    def read_stdin(self) -> str:
        if self.stdin_text is not None:
            return self.stdin_text
        if self.local:
            import sys

            self.stdin_text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
            return self.stdin_text
        raise NeedInput(["-"])

    @property
    def stdout_text(self) -> str:
        return "".join(self.out)

    @property
    def stderr_text(self) -> str:
        return "".join(self.err)

    @property
    def user(self) -> str:
        import pwd

        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)
