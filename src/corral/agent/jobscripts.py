"""Prolog, epilog and task prolog/epilog programs on a node (Slurm's slurmd/slurmstepd side).

``run_program`` starts one program in a session of its own (so a timeout, or its end,
takes every process it started with it), stdin ``/dev/null``, stdout and stderr into one
pipe read with a bound (the first ``MAX_OUTPUT`` bytes are kept, the rest counted), a
deadline (Slurm's ``PrologEpilogTimeout``; 0: none), signals at their defaults and none
blocked, and, with ``creds``, the job user's groups, gid and uid (TaskProlog/TaskEpilog run
as the user; Prolog/Epilog as the agent's user, root on a real cluster). No search path is
added, as in Slurm: the environment is exactly what the caller passes.

``script_env`` is Slurm's prolog/epilog environment (``SLURM_JOB_ID``, ``SLURM_JOB_USER``,
``SLURM_JOB_UID``, ``SLURM_JOB_NODELIST``, ``SLURM_JOB_PARTITION``, ``SLURMD_NODENAME``,
``SLURM_SCRIPT_CONTEXT``, ...) from the fields the controller filled from its own record
(``LaunchRequest.script_env``), never from the user's submit environment.

``run_task_prologs``/``run_task_epilogs`` run them around one task of an srun step
(``corral.agent.stepd``). ``apply_task_prolog`` reads a TaskProlog's output as slurmstepd
does: ``export NAME=value``
sets a variable of the task, ``unset NAME`` removes one, ``print ...`` is a line for the
task's standard output; anything else is ignored.

Every run is logged to the node's ``scripts.log`` (``log_run``): kind, job, exit status,
duration and the output, so an admin finds why a node was drained.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import time
from dataclasses import dataclass

from corral.agent.launch import LaunchRequest

MAX_OUTPUT = 256 * 1024  # bytes of a program's output kept (the log and TaskProlog)


@dataclass(frozen=True)
class ProgramResult:
    status: int  # wait status (os.waitstatus_to_exitcode), -1000 when it could not start
    output: bytes  # stdout + stderr, the first MAX_OUTPUT bytes
    duration_s: float
    timed_out: bool = False
    error: str = ""  # why it could not start

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.error and self.status == 0

    def describe(self) -> str:
        """``exit 3``, ``killed by signal 9``, ``timed out after 5 s``, ``cannot ...``."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s"
        if self.status < 0:
            return f"killed by signal {-self.status}"
        return f"exit {self.status}"

    def last_line(self, limit: int = 200) -> str:
        for line in reversed(self.output.decode(errors="replace").splitlines()):
            if line.strip():
                return line.strip()[:limit]
        return ""


def run_program(path: str, args: list[str], env: dict[str, str], timeout_s: float = 0,
                *, creds: tuple[int, int, tuple[int, ...]] | None = None,
                cwd: str = "/") -> ProgramResult:
    """Run ``path`` to its end (or its deadline) and return its status and output."""
    t0 = time.monotonic()
    try:
        st = os.stat(path)
    except OSError as exc:
        return ProgramResult(-1000, b"", 0.0, error=f"cannot run {path}: {exc.strerror}")
    if not os.path.isfile(path) or not st.st_mode & 0o111:
        return ProgramResult(-1000, b"", 0.0, error=f"cannot run {path}: not an executable "
                             "file")
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    gc_on = gc.isenabled()
    gc.disable()  # no collection in the child: it would touch (copy) the whole heap
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(out_r)
        os.close(out_w)
        if gc_on:
            gc.enable()
        return ProgramResult(-1000, b"", 0.0, error=f"fork: {exc.strerror}")
    if pid == 0:  # the child
        try:
            os.setsid()
            for sig in signal.valid_signals():
                if sig not in (signal.SIGKILL, signal.SIGSTOP):
                    try:
                        signal.signal(sig, signal.SIG_DFL)
                    except (OSError, ValueError):
                        pass
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            if creds is not None:
                uid, gid, groups = creds
                os.setgroups(list(groups))
                os.setgid(gid)
                os.setuid(uid)
            try:
                os.chdir(cwd)
            except OSError:
                os.chdir("/")
            os.execve(path, [path, *args], env)
        except BaseException as exc:  # noqa: B036 - report anything, then leave
            try:
                os.write(2, f"cannot run {path}: {exc}\n".encode())
            finally:
                os._exit(127)
        os._exit(127)
    if gc_on:
        gc.enable()
    os.close(out_w)
    os.set_blocking(out_r, False)
    chunks: list[bytes] = []
    kept = [0]
    timed_out = False
    status: int | None = None
    deadline = t0 + timeout_s if timeout_s > 0 else None

    def read_some() -> bool:
        """Read what is there; False at end of file."""
        while True:
            try:
                chunk = os.read(out_r, 65536)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not chunk:
                return False
            if kept[0] < MAX_OUTPUT:
                chunks.append(chunk[:MAX_OUTPUT - kept[0]])
                kept[0] += len(chunks[-1])

    try:
        open_ = True
        while status is None:
            wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if wait <= 0:
                timed_out = True
                _kill_group(pid)
                wait = 0
            if open_ and wait > 0:
                if select.select([out_r], [], [], wait)[0]:
                    open_ = read_some()
            elif wait > 0 and deadline is not None:
                time.sleep(min(wait, 0.02))
            block = timed_out or (not open_ and deadline is None)
            try:
                done, wstatus = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                done, wstatus = pid, 0
            if done == pid:
                status = wstatus
        if open_:
            read_some()  # what it wrote before it ended (a child of it may hold the pipe)
    finally:
        os.close(out_r)
    _kill_group(pid)  # whatever it left running in its session
    return ProgramResult(os.waitstatus_to_exitcode(status or 0), b"".join(chunks),
                         time.monotonic() - t0, timed_out=timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def script_env(req: LaunchRequest, node_name: str, context: str) -> dict[str, str]:
    """The environment of a Prolog/Epilog on this node: the controller's fields plus what
    only the node knows. ``context``: ``prolog_slurmd`` or ``epilog_slurmd``."""
    env = {k: v for k, v in req.script_env.items() if k.isidentifier() and "\0" not in v}
    env.setdefault("SLURM_JOB_ID", str(req.job_id))
    env.setdefault("SLURM_JOBID", str(req.job_id))
    env.setdefault("SLURM_JOB_USER", req.user)
    env.setdefault("SLURM_JOB_UID", str(req.uid))
    env.setdefault("SLURM_JOB_GID", str(req.gid))
    if req.nodes:
        env.setdefault("SLURM_JOB_NODELIST", ",".join(req.nodes))
    env["SLURMD_NODENAME"] = node_name
    env["SLURM_SCRIPT_CONTEXT"] = context
    if req.gpus:
        env["SLURM_JOB_GPUS"] = ",".join(str(g) for g in req.gpus)
    return env


def apply_task_prolog(output: bytes, env: dict[str, str]) -> list[str]:
    """Apply a TaskProlog's ``export``/``unset`` lines to ``env``; the ``print`` lines."""
    prints: list[str] = []
    for raw in output.decode(errors="replace").splitlines():
        line = raw.strip()
        if line.startswith("export "):
            name, eq, value = line[7:].strip().partition("=")
            name = name.strip()
            if eq and name.isidentifier() and "\0" not in value:
                env[name] = value
        elif line.startswith("unset "):
            env.pop(line[6:].strip(), None)
        elif line.startswith("print "):
            prints.append(raw.split("print ", 1)[1])
    return prints


def run_task_prologs(paths: list[str], env: dict[str, str], timeout_s: float, *,
                     creds: tuple[int, int, tuple[int, ...]] | None,
                     cwd: str) -> tuple[str, int, list[str]]:
    """A step task's prologs in order (the cluster's ``task_prolog``, then srun's
    ``--task-prolog``), each applied to ``env`` as ``apply_task_prolog`` does; ``creds``
    None when the caller is already the user. (failure message, exit status, ``print``
    lines); the message is "" when all passed, else slurmstepd's ``TaskProlog failed``."""
    prints: list[str] = []
    for path in paths:
        res = run_program(path, [], dict(env), timeout_s, creds=creds, cwd=cwd)
        if not res.ok:
            return (f"slurmstepd: error: TaskProlog failed status={res.describe()}\n",
                    res.status if 0 < res.status < 256 else 1, prints)
        prints += apply_task_prolog(res.output, env)
    return "", 0, prints


def run_task_epilogs(paths: list[str], env: dict[str, str], timeout_s: float, *,
                     creds: tuple[int, int, tuple[int, ...]] | None, cwd: str) -> list[str]:
    """A step task's epilogs in order (srun's ``--task-epilog``, then the cluster's
    ``task_epilog``); what failed (``PATH: exit 3``), for the node's log."""
    return [f"{path}: {res.describe()}" for path in paths
            if not (res := run_program(path, [], dict(env), timeout_s, creds=creds,
                                       cwd=cwd)).ok]


def log_run(log_path: str, kind: str, job_id: int, path: str, result: ProgramResult) -> None:
    """Append one run to the node's ``scripts.log`` (0600, never following a link)."""
    if not log_path:
        return
    head = (f"{time.strftime('%Y-%m-%dT%H:%M:%S')} job {job_id} {kind} {path}: "
            f"{result.describe()} ({result.duration_s:.2f} s)\n")
    body = "".join(f"    {line}\n" for line in
                   result.output.decode(errors="replace").splitlines()[:200])
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.write(fd, (head + body).encode())
    except OSError:
        pass
    finally:
        os.close(fd)
