"""Real local users for the tests that act as someone else (root only).

Created when missing, under a host-wide lock so that test processes running at the same
time (pytest-xdist workers, two sessions) never race ``useradd``; never deleted, since
another process may be using the user at that moment."""

from __future__ import annotations

import fcntl
import grp
import pwd
import subprocess
from collections.abc import Sequence

LOCK = "/run/lock/corral-test-users.lock"


def ensure_group(name: str) -> grp.struct_group:
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return grp.getgrnam(name)
        except KeyError:
            subprocess.run(["groupadd", "-f", name], check=True)
        return grp.getgrnam(name)


def ensure_user(name: str, groups: Sequence[str] = ()) -> pwd.struct_passwd:
    """The user ``name`` (no home, /bin/sh), a member of ``groups`` (created too)."""
    for g in groups:
        ensure_group(g)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            extra = ["-G", ",".join(groups)] if groups else []
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", *extra,
                            name], check=True)
            pw = pwd.getpwnam(name)
        missing = [g for g in groups if name not in grp.getgrnam(g).gr_mem]
        if missing:
            subprocess.run(["usermod", "-a", "-G", ",".join(missing), name], check=True)
    return pw
