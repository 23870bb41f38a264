"""Process facts from /proc: start times (pid reuse), descendants, resident memory.

The supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process a job
starts stays below it even after its parent exits: the job's processes are exactly the
supervisor's descendants. ``descendants`` walks ``/proc/<pid>/task/<tid>/children``
(cost proportional to the job's own processes, not to the node's), and falls back to one
scan of ``/proc/*/stat`` where that file does not exist.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
_PAGE = os.sysconf("SC_PAGE_SIZE")
_libc: ctypes.CDLL | None = None


def set_child_subreaper() -> bool:
    """Make orphaned descendants reparent to this process. False where unsupported."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        return int(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def set_process_name(name: str) -> bool:
    """Set this process's command name (``ps -o comm``, at most 15 bytes)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        return int(_libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def read_bytes(path: str) -> bytes:
    """The whole content of ``path`` with plain ``open``/``read``/``close`` system calls
    (``open()`` of a file object costs twice as many: fstat, ioctl, lseeks). Made for the
    small files of /proc, /sys and the job spool read on every job. Raises ``OSError``."""
    return _read_and_close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))


def _read_and_close(fd: int) -> bytes:
    """Everything left in ``fd`` (one ``read`` for a small file), then close it."""
    try:
        data = os.read(fd, 65536)
        if not data:
            return data
        chunks = [data]
        while True:
            more = os.read(fd, 65536)
            if not more:
                break
            chunks.append(more)
        return data if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


# ---- files in directories opened once -------------------------------------------------------
# Each open of a long path (/sys/fs/cgroup/memory/corral/<node>/sup_<pid>/memory.limit_in_bytes,
# /dev/shm/corral-0/agent-<hash>/<job>/status.json) walks every component again: under this
# machine's virtualisation that path walk was a third of a supervisor's kernel time.
# Directories used on every job are opened once (O_PATH) and their files reached relative
# to them. The cache belongs to one process: a forked child starts without it (its copies
# of the descriptors may be closed or reused). A lookup that fails in a cached directory
# that was removed since (no links left) is retried once through the full path.

_dir_fds: dict[str, int] = {}
_DIR_FDS_MAX = 32


def _forget_dir_fds_in_child() -> None:
    _dir_fds.clear()  # the descriptors are the parent's copies: leave them to their owner


os.register_at_fork(after_in_child=_forget_dir_fds_in_child)


def _dir_fd(path: str) -> int:
    fd = _dir_fds.get(path)
    if fd is None:
        if len(_dir_fds) >= _DIR_FDS_MAX:
            forget_dirs()
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _dir_fds[path] = fd
    return fd


def forget_dirs(prefix: str = "") -> None:
    """Close the cached descriptors of ``prefix`` and the directories below it (all by
    default)."""
    for path in [p for p in _dir_fds
                 if not prefix or p == prefix or p.startswith(prefix + "/")]:
        try:
            os.close(_dir_fds.pop(path))
        except OSError:
            pass


def in_dir(path: str, op: Callable[[str, int | None], _T], *, recheck: bool = False) -> _T:
    """``op(name, dir_fd)`` for ``path`` through a cached descriptor of its directory, or
    ``op(path, None)`` where there is none; ``op`` passes ``dir_fd`` to the ``os`` call.
    ``recheck``: on a missing file, compare the cached directory with the path's (for
    file systems whose removed directories keep a link count, as cgroupfs)."""
    head, _, name = path.rpartition("/")
    if not head or not name:
        return op(path, None)
    try:
        fd = _dir_fd(head)
    except OSError:
        return op(path, None)
    try:
        return op(name, fd)
    except FileNotFoundError:
        try:
            st = os.fstat(fd)
            gone = st.st_nlink == 0
            if not gone and recheck:
                now = os.stat(head)
                gone = (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev)
        except OSError:
            gone = True
        if not gone:
            raise
        forget_dirs(head)
        return op(path, None)


def open_in_dir(path: str, flags: int, mode: int = 0o777, *, recheck: bool = False) -> int:
    """``os.open(path, flags, mode)`` through a cached descriptor of its directory."""
    return in_dir(path, lambda name, fd: os.open(name, flags, mode, dir_fd=fd),
                  recheck=recheck)


def read_in_dir(path: str, *, recheck: bool = False) -> bytes:
    """``read_bytes`` through a cached descriptor of the file's directory."""
    return _read_and_close(open_in_dir(path, os.O_RDONLY | os.O_CLOEXEC, recheck=recheck))


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is the state)."""
    try:
        raw = read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def start_ticks(pid: int) -> int | None:
    """The kernel start time of ``pid`` (clock ticks since boot), None if it does not exist."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """``pid`` exists, is not a zombie, and (when given) started at ``ticks``."""
    if pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return ticks is None or int(fields[19]) == ticks


def _children(pid: int) -> list[int] | None:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            out.extend(int(x) for x in read_bytes(f"/proc/{pid}/task/{tid}/children").split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                return []
            return None  # kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return out


def _descendants_by_scan(root: int) -> list[int]:
    parent: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is not None and len(fields) > 2:
            parent.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    stack = [root]
    while stack:
        for child in parent.get(stack.pop(), ()):
            out.append(child)
            stack.append(child)
    return out


def descendants(root: int) -> list[int]:
    """All live descendants of ``root`` (not ``root`` itself), parents before children."""
    out: list[int] = []
    seen = {root}
    stack = [root]
    while stack:
        kids = _children(stack.pop())
        if kids is None:
            return _descendants_by_scan(root)
        for k in kids:
            if k not in seen:
                seen.add(k)
                out.append(k)
                stack.append(k)
    return out


def rss_bytes(pids: list[int]) -> int:
    """Sum of the resident set sizes of ``pids`` (processes that vanished count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def kill_pids(pids: list[int] | set[int], sig: int) -> int:
    """Send ``sig`` to each pid; returns how many were signalled."""
    n = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            n += 1
        except (ProcessLookupError, PermissionError):
            continue
    return n


def signal_number(name: str | int) -> int:
    """``USR1``, ``SIGUSR1``, ``sigusr1`` or ``10`` -> 10. Raises ValueError on unknown names."""
    if isinstance(name, int):
        return name
    text = name.strip().upper()
    if text.isdigit():
        num = int(text)
        if not 0 < num < signal.NSIG:
            raise ValueError(f"invalid signal number {num}")
        return num
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(signal.Signals[text])
    except KeyError:
        raise ValueError(f"unknown signal name {name!r}") from None
