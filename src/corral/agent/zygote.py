"""The agent's fork server ("zygote"): a small process that forks one supervisor per job.

Why: a supervisor forked from the agent itself (a ~100 MB Python process: asyncio,
websockets, the protocol, ...) cost about 3 ms of CPU per job in ``fork`` (page tables)
plus copy-on-write faults in both processes for as long as the supervisor lived: about
13 ms of CPU per job in all, measured on this machine. The fork server is a fresh
``python -I -S`` that imports only the supervisor's modules (about 12 MB), freezes its
heap for the garbage collector and then does nothing but fork, so each supervisor starts
from a small, quiet image.

Protocol: a ``SOCK_SEQPACKET`` socket pair. The runner sends, per launch, ``{"j": job id,
"r": restarts, "d": job directory, "g": [supplementary gids], "s": switch user?}`` after
writing the job's ``request.json`` (a JSON list of them for the launches of one
controller frame); the fork server hands each to an idle supervisor, or forks one, which
runs ``supervisor.run_supervisor`` (new session first). Nothing comes back: the
supervisor's claim in the job directory (``status.json``, created exclusively) is the
record, so a launch delivered twice still starts the job once.

Lifetime and failure: the fork server ends when the runner's end of the socket closes
(agent exited or killed), after forking every launch already queued. It is not a single
point of failure for running jobs: supervisors run in their own sessions and hold nothing
of it; when it dies, init adopts them. It sets SIGCHLD to SIG_IGN, so the kernel reaps the
supervisors it forked (their exit status is not needed: ``exit.json`` is the record). The
runner restarts it when it dies and sends again every launch not yet claimed.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401 - getaddrinfo of a host name in a step process
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Any, NoReturn

from corral.agent import stepd as _stepd  # noqa: F401 - loaded once here, not per supervisor
from corral.agent.supervisor import SupervisorConfig, decode_job, run_supervisor

_MAX_MSG = 1 << 16


def _boot_code() -> str:
    """``python -c`` code that imports this module from where it was imported here."""
    import corral

    src = os.path.dirname(os.path.dirname(os.path.abspath(corral.__file__)))
    return (f"import sys; sys.path.insert(0, {src!r}); "
            "from corral.agent.zygote import serve; serve(int(sys.argv[1]), sys.argv[2])")


def serve(fd: int, config: str) -> NoReturn:
    """Main loop of the fork server process."""
    from corral.agent.proctree import set_process_name

    set_process_name("corral-forksrv")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps our children
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: finish the queue first
    c = json.loads(config)
    from corral.agent import stepbin

    # built (or found in the cache) once here, so no job's first step waits for cc
    stepbin.binary(lambda msg: print(f"corral-forksrv: {msg}", file=sys.stderr, flush=True))
    cfg = SupervisorConfig(node_name=c["node_name"], cgroup_root=c["cgroup_root"],
                           isolation=c["isolation"],
                           notify_addr=bytes.fromhex(c["notify"]) if c.get("notify") else None,
                           mem_poll_s=float(c["mem_poll_s"]),
                           script_log=str(c.get("script_log") or ""),
                           containers=str(c.get("containers") or ""))
    max_idle = int(c.get("max_idle", MAX_IDLE))
    max_jobs = int(c.get("max_jobs", MAX_JOBS))
    if cfg.isolation != "none":
        from corral.agent.isolation import node_layout

        node_layout(cfg.cgroup_root)  # detected and prepared once, inherited by every fork
    agent = socket.socket(fileno=fd)
    gc.collect()
    gc.freeze()
    gc.disable()
    pool = _Pool(cfg, max_idle, max_jobs)
    poller = select.poll()
    poller.register(agent.fileno(), select.POLLIN)
    pool.poller = poller
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        # supervisors' "idle" first: a launch that arrived in the same instant then goes
        # to one of them instead of a new fork
        for efd, _ev in sorted(events, key=lambda e: e[0] == agent.fileno()):
            if efd != agent.fileno():
                pool.from_supervisor(efd)
                continue
            try:
                data = agent.recv(_MAX_MSG)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:  # the agent is gone: idle supervisors see EOF and leave
                os._exit(0)
            try:
                msg = json.loads(data)
            except ValueError as exc:
                os.write(2, f"corral fork server: {exc}: {data[:200]!r}\n".encode())
                continue
            for item in msg if isinstance(msg, list) else [msg]:
                try:
                    job = decode_job(item, cfg)
                except ValueError as exc:
                    os.write(2, f"corral fork server: {exc}: {item!r:.200}\n".encode())
                    continue
                one = data if item is msg else json.dumps(item).encode()
                pool.dispatch(one, job, agent.fileno())


MAX_IDLE = 64  # idle supervisors kept for the next launches
MAX_JOBS = 500  # runs one supervisor process sees before it leaves (a fresh one follows)


class _Pool:
    """Supervisor processes of the fork server: each runs one job at a time and offers
    itself again when done (``b"idle"`` on its connection)."""

    def __init__(self, cfg: SupervisorConfig, max_idle: int, max_jobs: int) -> None:
        self.cfg = cfg
        self.max_idle = max_idle
        self.max_jobs = max_jobs
        self.conns: dict[int, socket.socket] = {}  # every supervisor connection, by fd
        self.idle: list[int] = []
        self.poller: select.poll | None = None

    def dispatch(self, data: bytes, job: tuple[str, int, int, SupervisorConfig],
                 agent_fd: int) -> None:
        while self.idle:
            fd = self.idle.pop()
            try:
                self.conns[fd].send(data)
                return
            except OSError:
                self._drop(fd)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError as exc:  # the runner notices the missing claim and resends later
            os.write(2, f"corral fork server: fork failed for job {job[1]}: {exc}\n".encode())
            mine.close()
            theirs.close()
            return
        if pid == 0:
            run_supervisor(*job, pool_fd=theirs.fileno(), max_jobs=self.max_jobs)
        theirs.close()
        self.conns[mine.fileno()] = mine
        assert self.poller is not None
        self.poller.register(mine.fileno(), select.POLLIN)

    def from_supervisor(self, fd: int) -> None:
        conn = self.conns.get(fd)
        if conn is None:
            return
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if data == b"idle" and len(self.idle) < self.max_idle:
            self.idle.append(fd)
        else:  # it left, or there are enough idle ones: closing tells it to leave
            self._drop(fd)

    def _drop(self, fd: int) -> None:
        conn = self.conns.pop(fd, None)
        if fd in self.idle:
            self.idle.remove(fd)
        if self.poller is not None:
            try:
                self.poller.unregister(fd)
            except (KeyError, ValueError):
                pass
        if conn is not None:
            conn.close()


class ForkServer:
    """The runner's handle on its fork server process (started on first use)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = json.dumps(config)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _start(self) -> socket.socket:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _boot_code(), str(theirs.fileno()),
                 self.config],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = mine
        self.starts += 1
        return mine

    def send(self, msg: bytes) -> bool:
        """Queue one launch (``supervisor.encode_job``); False when the fork server is
        gone (restart it and resend)."""
        sock = self._sock or self._start()
        try:
            sock.send(msg)
        except OSError:
            return False
        return True

    def alive(self) -> bool:
        """False when it was started and has exited since (it is reaped here)."""
        return self._proc is None or self._proc.poll() is None

    def restart(self) -> None:
        self.close(wait_s=0.0)
        self._start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self, wait_s: float = 2.0) -> None:
        """Close our end: the fork server forks what is queued, then exits."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


__all__ = ["ForkServer", "serve"]
