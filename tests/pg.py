"""A throw-away PostgreSQL server for the tests (a pytest plugin, ``tests/conftest.py``).

``pg_server`` (session): ``initdb`` in a temporary directory, run by the unprivileged
``postgres`` system user when the tests run as root (PostgreSQL refuses to run as root),
listening on a free TCP port of 127.0.0.1 and a Unix socket directory of its own; it is
stopped (``pg_ctl stop -m immediate``) at the end of the session. The fixture skips the
test, with the reason, when the PostgreSQL binaries are not installed
(``scripts/system-deps`` installs Debian's ``postgresql``).

``pg_url`` (function): a new, empty database on that server for one test.

Durability settings are off (``fsync``, ``synchronous_commit``): the tests kill
controllers, never the server's machine.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_BIN_GLOBS = ("/usr/lib/postgresql/*/bin",)
_counter = itertools.count(1)


def pg_bindir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``/``postgres`` (newest version), or None."""
    env = os.environ.get("CORRAL_PG_BINDIR")
    if env:
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = sorted(glob.glob(_BIN_GLOBS[0]), key=lambda p: int(p.split("/")[-2])
                   if p.split("/")[-2].isdigit() else 0)
    for d in reversed(found):
        if all((Path(d) / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(d)
    which = shutil.which("initdb")
    return Path(which).parent if which else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL server in ``root`` (data directory and socket directory)."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.sockdir = root / "sock"
        self.port = free_port()
        self.user: str | None = None  # the OS user that runs it (when we are root)
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
                self.user = "postgres"
            except KeyError:
                self.user = "nobody"
        self.role = self.user or pwd.getpwuid(os.geteuid()).pw_name

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(argv)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120,
                              cwd="/")

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.sockdir.mkdir(exist_ok=True)
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            for p in (self.root, self.sockdir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o755)
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust",
                  "-U", self.role, "-E", "UTF8", "--no-sync")
        opts = (f"-c port={self.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={self.sockdir} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                "-c shared_buffers=32MB")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-w",
                  "-t", "60", "-l", str(self.root / "server.log"), "start")

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                  "-w", "stop", check=False)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.role}@127.0.0.1:{self.port}/{db}"

    def create_db(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={self.role} "
                             "dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join((self.root / "server.log").read_text().splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (initdb/pg_ctl/postgres not found; "
                    "scripts/system-deps installs Debian's postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg (PostgreSQL driver) is not installed: pip install -e '.[test]'")
    root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
    server = PgServer(bindir, root)
    try:
        server.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"cannot start the test PostgreSQL server: {exc.stderr or exc.stdout}")
    try:
        yield server
    finally:
        server.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database for one test."""
    return pg_server.create_db(f"t{os.getpid()}_{next(_counter)}_{int(time.time() * 1000)}")
