"""Start a job process with ``posix_spawn`` (vfork-style) and still tell it its own pid.

Why: ``fork`` of the Python supervisor copies its page tables, write-protects its heap
and tears the copy down again at ``exec``; on this machine that cost about 4 ms of CPU per
job (fork, copy-on-write faults in both processes, unmapping), against well under 1 ms
for ``posix_spawn`` (glibc: ``clone(CLONE_VM|CLONE_VFORK)``, no copy at all). But a Slurm
batch step's environment holds ``SLURM_TASK_PID``, the pid of the batch process, and with
``posix_spawn`` the environment is fixed before that pid exists.

How (the *gate*): the spawn's first file actions open two FIFOs of this process, ``A``
for writing and then ``B`` for reading; a FIFO open blocks until its other end is opened.
A helper thread of the supervisor opens ``A`` (so it knows the child exists and is
stopped in its file actions), finds the child's pid (``/proc/self/task/<tid>/children``
of the spawning thread), writes the digits into the ``SLURM_TASK_PID=`` buffer of the
environment array (the child shares our memory until it execs), runs the caller's
``prepare(pid)`` (attach to the job's cgroups: so nothing the job ever runs starts outside
them), and only then opens ``B``: the child continues with the remaining file actions
(``dup2`` of stdin/stdout/stderr onto the FIFO descriptors 0 and 1) and ``execve``. The
calling thread is suspended inside ``posix_spawn`` all along (vfork), which returns the
pid, or the ``exec`` error (``ENOENT``, ``EACCES``, ``ENOEXEC``) like ``execve`` would.

If ``prepare`` fails, the helper kills the stopped child before it can exec and the error
is raised to the caller. The helper thread blocks every signal, so the supervisor's
``sigtimedwait`` still sees them all.

``available()`` says whether this works here (Linux, glibc or musl ``posix_spawn`` with
``POSIX_SPAWN_SETSID``, ``/proc/<pid>/task/<tid>/children``); the supervisor falls back
to ``fork`` otherwise, and for what a spawn cannot do (see ``supervisor.py``).

Reference: posix_spawn(3), fifo(7) ("opening the FIFO blocks until the other end is
opened"), proc(5) ``/proc/pid/task/tid/children``.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable

from corral.agent.proctree import is_alive

# glibc <spawn.h> flag values (musl uses the same numbers)
_SETSIGDEF = 0x04
_SETSIGMASK = 0x08
_SETSID = 0x80
_PID_DIGITS = 20
_RELEASE_S = 10.0  # a live child reaches the second FIFO within microseconds

_libc: ctypes.CDLL | None = None
_ok: bool | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def available() -> bool:
    """The gated spawn works on this system (checked once per process)."""
    global _ok
    if _ok is None:
        try:
            lib = _lib()
            for name in ("posix_spawn", "posix_spawn_file_actions_init",
                         "posix_spawn_file_actions_addopen", "posix_spawn_file_actions_adddup2",
                         "posix_spawnattr_init", "posix_spawnattr_setflags",
                         "posix_spawnattr_setsigmask", "posix_spawnattr_setsigdefault",
                         "sigemptyset", "sigaddset"):
                getattr(lib, name)
            tid = threading.get_native_id()
            _ok = os.path.exists(f"/proc/self/task/{tid}/children")
        except (OSError, AttributeError):
            _ok = False
    return _ok


class SpawnError(OSError):
    """``prepare`` failed: the child was killed before it could exec."""


def _packed(items: list[bytes]) -> tuple[ctypes.Array[ctypes.c_void_p], object, int]:
    """A NULL-terminated ``char *[]`` over ``items`` (one buffer for all the strings: a
    ctypes object per string costs 10x more). Returns the array, the buffer (keep it
    alive) and the buffer's address."""
    blob = b"\0".join(items) + b"\0"
    buf = ctypes.create_string_buffer(blob, len(blob))
    base = ctypes.addressof(buf)
    addrs = [base + off for off in itertools.accumulate((len(i) + 1 for i in items[:-1]),
                                                         initial=0)] if items else []
    arr = (ctypes.c_void_p * (len(items) + 1))(*addrs)  # the last entry stays NULL
    return arr, buf, base


def _packed_texts(texts: list[str]) -> tuple[ctypes.Array[ctypes.c_void_p], object, int, int]:
    """``_packed`` over the encoded ``texts``, encoding them as one string (a call per
    string costs more than the rest of the spawn's environment). Also returns the
    buffer's size (the final NUL included)."""
    joined = "\0".join(texts) + "\0"
    blob = _encode(joined)
    if len(blob) != len(joined):  # not ASCII: the byte offsets differ, one by one
        items = [_encode(t) for t in texts]
        arr, buf, base = _packed(items)
        return arr, buf, base, sum(map(len, items)) + len(items) + 1
    buf = ctypes.create_string_buffer(blob, len(blob))
    base = ctypes.addressof(buf)
    addrs = [base + off for off in itertools.accumulate((len(t) + 1 for t in texts[:-1]),
                                                         initial=0)] if texts else []
    arr = (ctypes.c_void_p * (len(texts) + 1))(*addrs)  # the last entry stays NULL
    return arr, buf, base, len(blob) + 1


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")  # os.fsencode on Linux, cheaper


class Spawner:
    """One per process (the supervisor); not thread-safe: one spawn at a time."""

    def __init__(self, fifo_dir: str) -> None:
        self.dir = tempfile.mkdtemp(prefix=f".gate-{os.getpid()}-", dir=fifo_dir)
        os.chmod(self.dir, 0o711)
        self.a = os.path.join(self.dir, "a")
        self.b = os.path.join(self.dir, "b")
        os.mkfifo(self.a, 0o600)
        os.mkfifo(self.b, 0o600)
        self._tid = threading.get_native_id()  # the spawning thread
        # plain locks as binary semaphores (released by the other thread): a
        # threading.Semaphore costs a Condition and several Python calls per hand-off
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._attr = ctypes.create_string_buffer(1024)  # posix_spawnattr_t, set up once
        self._attr_ready = False
        # descriptors of the directories looked into on every spawn (no path walks)
        self._task_fd = os.open(f"/proc/self/task/{self._tid}", os.O_PATH | os.O_DIRECTORY
                                | os.O_CLOEXEC)
        self._gate_fd = os.open(self.dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._a_path = os.fsencode(self.a)
        self._b_path = os.fsencode(self.b)
        self._prepare: Callable[[int], None] = lambda pid: None
        self._pid_at = 0  # address of the digits of SLURM_TASK_PID in the environment
        self._abort = False
        self._error: BaseException | None = None
        self._pid = 0
        threading.Thread(target=self._helper, name="corral-spawn-gate", daemon=True).start()

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        for fd in (self._task_fd, self._gate_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._attr_ready:
            self._attr_ready = False
            _lib().posix_spawnattr_destroy(self._attr)

    # ---- the helper thread ----------------------------------------------------------------
    def _helper(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while True:
            self._go.acquire()
            err: BaseException | None = None
            pid = 0
            try:
                fa = os.open("a", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._gate_fd)
                # (returns once the child opened A)
            except OSError as exc:
                fa, err = -1, exc
            if not self._abort and err is None:
                try:
                    pid = self._child()
                    if self._pid_at:
                        digits = str(pid).encode()
                        ctypes.memmove(self._pid_at, digits, len(digits))
                    self._prepare(pid)
                except BaseException as exc:  # noqa: B036 - reported to the spawning thread
                    err = exc
                    if pid:
                        try:
                            os.kill(pid, signal.SIGKILL)  # it dies at the gate, never runs
                        except OSError:
                            pass
                if err is None:
                    try:
                        self._release(pid)
                    except OSError as exc:
                        err = exc
            if fa >= 0:
                os.close(fa)
            self._pid, self._error = pid, err
            self._done.release()

    def _release(self, pid: int) -> None:
        """Open B for writing: the child, blocked opening it for reading, goes on. Without
        blocking: a child that died meanwhile would leave us waiting forever."""
        deadline = time.monotonic() + _RELEASE_S
        while True:
            try:
                os.close(os.open("b", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC,
                                 dir_fd=self._gate_fd))
                return
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet (it is on its way)
                    raise
            if not is_alive(pid):
                raise SpawnError(errno.ESRCH, "the spawned process died at the gate")
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise SpawnError(errno.ETIMEDOUT, "the spawned process did not reach the gate")
            time.sleep(0.0001)

    def _child(self) -> int:
        fd = os.open("children", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._task_fd)
        try:
            chunks = [os.read(fd, 65536)]
            while chunks[-1]:
                chunks.append(os.read(fd, 65536))
        finally:
            os.close(fd)
        kids = b"".join(chunks).split()
        if not kids:
            raise SpawnError(errno.ESRCH, "the spawned process is not among our children")
        return int(kids[-1])  # the newest: children are listed in creation order

    # ---- the calling thread ---------------------------------------------------------------
    def spawn(self, path: str, argv: list[str], env: dict[str, str], *,
              stdio: tuple[int, int, int], prepare: Callable[[int], None] | None = None,
              pid_env: bool = True) -> int:
        """Start ``path`` (absolute) with ``argv`` and ``env`` in a new session, empty signal
        mask, every signal at its default disposition, ``stdio`` as fds 0-2 (other
        descriptors follow their close-on-exec flags). ``SLURM_TASK_PID`` is set to the child's pid
        when ``pid_env``. Raises ``OSError`` as ``execve`` would, ``SpawnError`` when
        ``prepare`` failed (the child never ran)."""
        if threading.get_native_id() != self._tid:
            raise RuntimeError("Spawner.spawn must be called from the thread that made it")
        lib = _lib()
        attr = self._spawn_attr()
        fa = ctypes.create_string_buffer(1024)  # posix_spawn_file_actions_t (opaque)
        if lib.posix_spawn_file_actions_init(fa):
            raise OSError(errno.ENOMEM, "posix_spawn initialisation failed")
        try:
            # the gate: fds 0 and 1 are replaced by stdin/stdout right after it
            for fd, fifo, mode in ((0, self._a_path, os.O_WRONLY),
                                   (1, self._b_path, os.O_RDONLY)):
                rc = lib.posix_spawn_file_actions_addopen(fa, fd, fifo, mode, 0)
                if rc:
                    raise OSError(rc, os.strerror(rc))
            for src, dst in zip(stdio, (0, 1, 2), strict=True):
                rc = lib.posix_spawn_file_actions_adddup2(fa, src, dst)
                if rc:
                    raise OSError(rc, os.strerror(rc))
            texts = [f"{k}={v}" for k, v in env.items()
                     if not (pid_env and k == "SLURM_TASK_PID")]
            if pid_env:  # last, with room for the digits (the buffer is zero-filled)
                texts.append("SLURM_TASK_PID=" + "\0" * _PID_DIGITS)
            envp, keep_env, base, size = _packed_texts(texts)
            self._pid_at = 0
            if pid_env:
                # the digits are the last _PID_DIGITS bytes before the final NUL
                self._pid_at = base + size - _PID_DIGITS - 2
            argvp, keep_argv, _ = _packed([_encode(a) for a in argv])
            self._prepare = prepare or (lambda pid: None)
            self._abort = False
            pid = ctypes.c_int(0)
            self._go.release()
            rc = lib.posix_spawn(ctypes.byref(pid), os.fsencode(path), fa, attr, argvp, envp)
            if rc:
                self._abort = True
                try:  # the child died before the gate: release the helper waiting at A
                    os.close(os.open(self.a, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
            self._done.acquire()
            del keep_env, keep_argv
            if rc:
                raise OSError(rc, os.strerror(rc))
            if self._error is not None:
                try:
                    os.waitpid(pid.value, 0)
                except ChildProcessError:
                    pass
                err = self._error
                raise SpawnError(getattr(err, "errno", None) or errno.EIO,
                                 getattr(err, "strerror", None) or str(err))
            return int(pid.value)
        finally:
            lib.posix_spawn_file_actions_destroy(fa)

    def _spawn_attr(self) -> ctypes.Array[ctypes.c_char]:
        """The spawn attributes, the same for every job: new session, empty signal mask,
        every signal at its default disposition."""
        if self._attr_ready:
            return self._attr
        lib = _lib()
        attr = self._attr
        mask = ctypes.create_string_buffer(1024)  # sigset_t
        dflt = ctypes.create_string_buffer(1024)
        if lib.posix_spawnattr_init(attr):
            raise OSError(errno.ENOMEM, "posix_spawn initialisation failed")
        lib.sigemptyset(mask)
        lib.sigemptyset(dflt)
        # every signal back to SIG_DFL, the C library's internal ones (32, 33) too:
        # glibc leaves those ignored in a spawned child otherwise, and exec keeps that.
        # Written as bits: sigaddset refuses the internal signals.
        ctypes.memmove(dflt, b"\xff" * 8, 8)
        lib.posix_spawnattr_setsigmask(attr, mask)
        lib.posix_spawnattr_setsigdefault(attr, dflt)
        rc = lib.posix_spawnattr_setflags(attr, ctypes.c_short(_SETSID | _SETSIGMASK
                                                               | _SETSIGDEF))
        if rc:
            lib.posix_spawnattr_destroy(attr)
            raise OSError(rc, os.strerror(rc))
        self._attr_ready = True
        return attr


def which(file: str, env: dict[str, str]) -> str:
    """The executable ``os.execvpe(file, ..., env)`` would run (PATH from ``env``).
    Raises ``OSError`` with the error ``execvpe`` would raise."""
    if os.path.dirname(file):
        return file
    saved: OSError | None = None
    last: OSError | None = None
    for d in os.get_exec_path(env):
        cand = os.path.join(d, file)
        try:
            st = os.stat(cand)
        except OSError as exc:
            last = exc
            continue
        if stat.S_ISREG(st.st_mode) and os.access(cand, os.X_OK):
            return cand
        if saved is None:
            saved = PermissionError(errno.EACCES, os.strerror(errno.EACCES), cand)
    if saved is not None:
        raise saved
    raise last or FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), file)


__all__ = ["SpawnError", "Spawner", "available", "which"]
