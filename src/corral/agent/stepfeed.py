"""The agent's direct path to a job's step server on this node.

A job's supervisor starts the job's compiled step server (``stepd.c serve FIFO``,
``corral.agent.stepbin.StepServer``) with its first step, and the server then also reads
plans from ``<job dir>/steps.fifo``. For the job's later steps the agent computes the plan
itself (the same ``stepbin.plan_for`` from the same request, groups and user switch the
supervisor got) and writes it to that FIFO: no command file, no signal, no supervisor
woken, and one process hop less between the controller's message and the step's tasks.

Invariants:

- the FIFO has one writer, this agent (the supervisor writes its plans to the server's
  own pipe), so frames never interleave; a frame is written whole or not at all (the
  pipe's free room is checked first, frames above ``FRAME_MAX`` never take this path);
- anything unusual goes the old way (``False``: the runner queues a ``step`` command for
  the supervisor, which checks the job's state and words refusals): no FIFO yet (the
  first step, a server not reading yet), a server gone (the job is ending: its
  supervisor closed it), a step the compiled process leaves to Python (pty, containers,
  task prologs), a full pipe (a frozen job), a bad launch;
- the FIFO lives in the job's spool directory (0700, the agent's), and each run of a job
  has its own (the runner makes the directory afresh), so a requeued job's steps never
  reach an old run.
"""

from __future__ import annotations

import fcntl
import os
import termios
from dataclasses import dataclass
from typing import Any

from corral.agent import stepbin, stepd
from corral.agent.launch import LaunchRequest
from corral.agent.prepare import job_environment

FIFO = "steps.fifo"
FRAME_MAX = 256 * 1024  # bigger plans go through the supervisor (a blocking pipe write)
_F_GETPIPE_SZ = 1032


@dataclass(frozen=True)
class _Run:
    restarts: int
    req: LaunchRequest
    groups: tuple[int, ...]
    switch_user: bool


class StepFeeds:
    """Per running job on this node: what the plan needs, and the open FIFO."""

    def __init__(self, node_name: str, jobs_dir: str) -> None:
        self.node_name = node_name
        self.jobs_dir = jobs_dir
        self._runs: dict[int, _Run] = {}
        self._fds: dict[int, int] = {}
        self.sent = 0  # steps that went this way (tests, metrics)

    def started(self, jid: int, req: LaunchRequest, groups: tuple[int, ...],
                switch_user: bool) -> None:
        """A run of job ``jid`` was handed to a supervisor."""
        self._close(jid)
        self._runs[jid] = _Run(req.restarts, req, tuple(groups), switch_user)

    def forget(self, jid: int) -> None:
        self._close(jid)
        self._runs.pop(jid, None)

    def send(self, jid: int, restarts: int, launch: dict[str, Any]) -> bool:
        """Start this node's share of a step through the job's step server; False when
        the supervisor must be asked instead (see the module docstring)."""
        run = self._runs.get(jid)
        if run is None or run.restarts != restarts:
            return False
        path = stepbin.binary()
        if path is None:
            return False
        fd = self._fds.get(jid)
        if fd is None:
            try:
                fd = os.open(os.path.join(self.jobs_dir, str(jid), FIFO),
                             os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:  # none yet (ENOENT), or no server reading it (ENXIO)
                return False
            self._fds[jid] = fd
        try:
            plan = stepbin.plan_for(launch, run.req, self.node_name,
                                    job_environment(run.req, self.node_name),
                                    run.switch_user, run.groups, stepd.core_siblings())
        except (ValueError, KeyError, TypeError):
            return False  # the supervisor's step process reports the bad launch
        if plan is None:
            return False
        frame = stepbin.frame_of(plan)
        if len(frame) > FRAME_MAX or not self._room_for(fd, len(frame)):
            return False
        try:
            written = os.write(fd, frame)
        except OSError:  # EPIPE: the server is gone (the job is ending); EAGAIN
            self._close(jid)
            return False
        if written != len(frame):  # not with the room checked; never leave half a frame
            os.set_blocking(fd, True)
            view = memoryview(frame)[written:]
            while view:
                view = view[os.write(fd, view):]
            os.set_blocking(fd, False)
        self.sent += 1
        return True

    @staticmethod
    def _room_for(fd: int, size: int) -> bool:
        try:
            capacity = fcntl.fcntl(fd, _F_GETPIPE_SZ)
            unread = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"),
                                    "little", signed=True)
        except OSError:
            return False
        return capacity - unread >= size

    def _close(self, jid: int) -> None:
        fd = self._fds.pop(jid, None)
        if fd is not None:
            os.close(fd)
