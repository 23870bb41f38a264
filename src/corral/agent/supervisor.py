"""The per-job supervisor (Corral's slurmstepd): starts one batch job and sees it to its end.

The agent's fork server (``zygote.py``, a small process with only this module imported)
forks it; it starts a new session at once, so it survives both the agent and the fork
server being killed (init adopts it); it is a child subreaper, so every process of the job
stays below it. It never returns into the fork server's code (``os._exit``) and the fork
server froze its heap for the garbage collector (``gc.freeze``), so it copies few pages.

Algorithm:

0. Read ``request.json`` and claim the job: ``status.json`` (own pid and kernel start
   time) is created with ``link``, which fails when it exists, so a launch delivered twice
   (a fork server that died with launches queued, an agent restarted meanwhile) starts
   the job once; a supervisor that loses the claim, or finds another run's request, leaves
   without a trace.
1. Create the job's isolation (cgroup v2 / v1, or rlimits + a memory watchdog, see
   ``isolation.py``), expand the output file names, build the environment, put the script
   into a memfd.
2. Fork the job: own session, default signal dispositions, into the cgroup, rlimits,
   CPU affinity, supplementary groups/gid/uid, ``chdir`` to the workdir, open
   stdin/stdout/stderr as the user, ``execve`` the script's interpreter. Any failure up to
   the exec travels back over a close-on-exec pipe and ends the job FAILED with the reason.
   The child does only system calls prepared by the parent (few pages touched).
3. Loop on ``sigtimedwait`` (SIGCHLD, SIGUSR1 = "a command is queued", and the usual
   termination signals, which it ignores) with a timeout to the next deadline: warning
   signal (``--signal``), time limit (SIGCONT+SIGTERM to every job process and the Slurm
   message in the stderr file, appended as the job's user: ``append_message``), SIGKILL
   after the grace, memory watchdog ticks.
4. When the batch process exits, SIGKILL whatever remains of the job (as slurmstepd does),
   reap it, read accounting (cgroup counters, else rusage), decide the state, write
   ``exit.json`` atomically and notify the agent with a datagram.

State precedence: CANCELLED > TIMEOUT > FAILED (output limit) > OUT_OF_MEMORY > COMPLETED
(exit 0) / FAILED. With ``[cgroup] max_output_mb``, the output and error files are measured
every second; one past the limit ends the job as a time limit does (SIGTERM, then SIGKILL).
Suspension (``suspend``/``resume`` commands: cgroup freezer, else SIGSTOP/SIGCONT) stops
the time-limit clock, as in Slurm. A cancel that arrives before the job started means it
never starts.

``supervisor.log`` in the job directory is created only when there is something to say
(commands received, failures, tracebacks). Debugging aids (read from the agent's
environment): ``CORRAL_SUPERVISOR_TIMES=1`` logs the supervisor's own and the job's CPU
time to ``supervisor.log``; ``CORRAL_SUPERVISOR_PROFILE=1`` writes a cProfile of the
supervisor to ``<job dir>/prof`` (``=<absolute directory>``: to ``<directory>/prof-<job id>``,
which outlives the job directory); ``CORRAL_JOB_START=fork`` starts every job with ``fork``
instead of the gated ``posix_spawn`` (the tests run both); ``CORRAL_CGROUP_REUSE=0`` gives
every job a cgroup of its own (``job_<id>``) instead of its supervisor's (``cgslot.py``).
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import stat
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from corral.agent import jobscripts, spawn, spool
from corral.agent.cgroups import CgroupError
from corral.agent.isolation import Isolation, make_isolation, release_slot
from corral.agent.launch import JobExit, LaunchRequest
from corral.agent.prepare import (
    WarningSignal,
    input_path,
    job_environment,
    output_paths,
    parse_warning_signal,
    script_command,
)
from corral.agent.proctree import (
    descendants,
    kill_pids,
    rss_bytes,
    set_child_subreaper,
    set_process_name,
    start_ticks,
)
from corral.agent.vm import job as vmjob

if TYPE_CHECKING:
    from corral.agent.apptainer import AptPlan
    from corral.agent.ctrjob import Prepared
    from corral.agent.stepbin import StepServer

WAKE_SIGNALS = frozenset({signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT,
                          signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2, signal.SIGPIPE})
_REAP_DEADLINE_S = 10.0
_OUTPUT_POLL_S = 1.0  # how often the output files are measured ([cgroup] max_output_mb)
_IGNORED_BY_DEFAULT = frozenset({signal.SIGPIPE, signal.SIGXFSZ})
_CATCHABLE = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


def _signals_to_default() -> tuple[int, ...]:
    """Signals the job must get back at their default disposition: those Python ignores
    and any the agent inherited as ignored (exec keeps SIG_IGN)."""
    out = set(_IGNORED_BY_DEFAULT) | set(WAKE_SIGNALS)
    for sig in _CATCHABLE:
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                out.add(sig)
        except (ValueError, OSError):
            continue
    return tuple(sorted(out))


_TO_DEFAULT = _signals_to_default()  # computed once, in the fork server


@dataclass(frozen=True)
class SupervisorConfig:
    node_name: str
    cgroup_root: str
    isolation: str  # "auto" | "cgroup" | "none"
    notify_addr: bytes | None  # the runner's datagram socket (abstract name)
    mem_poll_s: float = 1.0
    groups: tuple[int, ...] = ()  # supplementary groups of the job user (resolved by the runner)
    switch_user: bool = False  # setgroups/setgid/setuid in the job (the runner runs as root)
    script_log: str = ""  # the node's log of prolog/epilog runs (<agent state dir>/scripts.log)
    containers: str = ""  # ContainerSettings as JSON (corral.agent.runtimes)


def stamp(when: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))


@dataclass
class _Run:
    job_pid: int = 0
    job_ticks: int | None = None
    start_wall: float = 0.0
    start_mono: float = 0.0
    main_status: int | None = None
    cpu_s: float = 0.0
    maxrss_kb: int = 0
    # "" | CANCELLED | TIMEOUT | OUT_OF_MEMORY | OUTPUT_LIMIT (why we are killing the job)
    ending: str = ""
    kill_at: float | None = None
    warn_sent: bool = False
    mem_peak: int = 0
    suspended_at: float | None = None  # monotonic time of the current suspension
    suspended_s: float = 0.0  # suspended time so far (does not count against the limit)
    frozen_by: str = ""  # "cgroup" or "signal"
    next_mem_check: float = 0.0
    next_output_check: float = 0.0
    notes: list[str] = field(default_factory=list)


class Supervisor:
    def __init__(self, jdir: str, req: LaunchRequest, cfg: SupervisorConfig) -> None:
        self.jdir = jdir
        self.req = req
        self.cfg = cfg
        self.run = _Run()
        self.time_limit_s = req.time_limit_s
        self.warning: WarningSignal | None = None
        self.iso: Isolation | None = None
        self.stdout_path = ""
        self.stderr_path = ""
        self.stdin_path = "/dev/null"
        # called once the job is over, before its end is recorded (the pool's "idle")
        self.before_exit: Callable[[], None] | None = None
        self.drained = False  # ``drain`` saw every process of the job gone
        self.early_steps: list[dict[str, Any]] = []  # step commands read before the start
        self.step_server: StepServer | None = None  # the job's compiled step server
        self.vm_dir = ""  # a VM job's control directory (corral.agent.vm.job)
        self.script_failure = ""  # "prolog" | "epilog": that program failed here
        self.script_message = ""
        self.prolog_ran = False
        self.truncated_output = False  # the TaskProlog's print lines opened the output
        self.container: Prepared | None = None  # a container job's plan (ctrjob.py)
        self.apt: AptPlan | None = None  # an Apptainer job's plan (apptainer.py)
        global _own_ticks
        if _own_ticks is None:
            _own_ticks = start_ticks(os.getpid())
        self.ticks = _own_ticks

    # ---- plumbing -------------------------------------------------------------------------
    def notify(self, prefix: bytes = b"") -> None:
        """Tell the runner about this job: its end, or (``prefix`` ``b"p"``) progress."""
        global _notify_sock
        if self.cfg.notify_addr is None:
            return
        try:
            if _notify_sock is None:
                _notify_sock = socket.socket(socket.AF_UNIX,
                                             socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                _notify_sock.setblocking(False)
            _notify_sock.sendto(prefix + str(self.req.job_id).encode(), self.cfg.notify_addr)
        except OSError:
            pass

    def log(self, text: str) -> None:
        open_log(self.jdir)
        try:
            os.write(2, f"{stamp()} job {self.req.job_id}: {text}\n".encode())
        except OSError:
            pass

    def slurm_message(self, text: str) -> None:
        """Append a ``slurmstepd-<node>: error: ...`` line to the job's stderr file."""
        if not self.stderr_path:
            return
        line = f"slurmstepd-{self.cfg.node_name}: error: {text}\n".encode()
        creds = (self.req.uid, self.req.gid, self.cfg.groups) if self.cfg.switch_user else None
        failure = append_message(self.stderr_path, line, creds)
        if failure:
            self.log(f"cannot append to {self.stderr_path}: {failure}")

    def claim_status(self) -> bool:
        """Create ``status.json`` (state STARTING) unless it exists: the run's claim."""
        return spool.create_json(os.path.join(self.jdir, spool.STATUS), self.status("STARTING"))

    def write_status(self, state: str) -> None:
        spool.write_json(os.path.join(self.jdir, spool.STATUS), self.status(state))

    def status(self, state: str) -> dict[str, object]:
        return {
            "job_id": self.req.job_id,
            "restarts": self.req.restarts,
            "state": state,
            "supervisor_pid": os.getpid(),
            "supervisor_ticks": self.ticks,
            "job_pid": self.run.job_pid,
            "job_ticks": self.run.job_ticks,
            "start_time": self.run.start_wall,
            "stdout": self.stdout_path,
            "stderr": self.stderr_path,
            "time_limit_s": self.time_limit_s,
            "suspended_s": round(self.run.suspended_s, 3),
            "isolation": self.iso.describe() if self.iso else {"kind": "none"},
            "notes": self.run.notes,
        }

    # ---- job processes --------------------------------------------------------------------
    def job_pids(self) -> set[int]:
        pids = set(descendants(os.getpid())) if _has_children() else set()
        if self.iso is not None:
            pids |= self.iso.procs()
        pids.discard(os.getpid())
        return pids

    def signal_job(self, sig: int, *, batch_only: bool = False,
                   all_but_batch: bool = False) -> None:
        if vmjob.is_vm(self.req) and vmjob.to_launcher_only(sig):
            batch_only, all_but_batch = True, False  # the launcher passes it to the guest
        if batch_only:
            if self.run.main_status is None and self.run.job_pid:
                kill_pids([self.run.job_pid], sig)
            return
        pids = self.job_pids()
        if all_but_batch:
            pids.discard(self.run.job_pid)
        if sig == signal.SIGKILL and self.iso is not None:
            self.iso.kill_all()
        kill_pids(pids, sig)

    def suspend(self) -> None:
        """Stop the job (cgroup freezer, else SIGSTOP to every process); the time it stays
        suspended does not count against its time limit."""
        run = self.run
        if run.suspended_at is not None or run.ending or not run.job_pid:
            return
        if self.iso is not None and self.iso.freeze():
            run.frozen_by = "cgroup"
        else:
            self.signal_job(signal.SIGSTOP)
            run.frozen_by = "signal"
        run.suspended_at = time.monotonic()
        self.write_status("SUSPENDED")

    def resume(self) -> None:
        run = self.run
        if run.suspended_at is None:
            return
        if run.frozen_by == "cgroup" and self.iso is not None:
            self.iso.thaw()
        self.signal_job(signal.SIGCONT)
        run.suspended_s += time.monotonic() - run.suspended_at
        run.suspended_at = None
        self.write_status("RUNNING")

    def terminate(self, why: str, grace_s: float) -> None:
        """SIGCONT+SIGTERM to every job process now, SIGKILL after ``grace_s``."""
        self.resume()  # a frozen process cannot act on SIGTERM
        now = time.monotonic()
        if not self.run.ending:
            self.run.ending = why
        if grace_s <= 0:
            self.signal_job(signal.SIGKILL)
            self.run.kill_at = now
            return
        if self.run.kill_at is None:
            self.signal_job(signal.SIGCONT)
            self.signal_job(signal.SIGTERM)
            self.run.kill_at = now + grace_s
        else:
            self.run.kill_at = min(self.run.kill_at, now + grace_s)

    # ---- the job child --------------------------------------------------------------------
    def exec_job(self, argv: list[str], env: dict[str, str], err_w: int, keep_fd: int) -> NoReturn:
        stage = "setup"
        try:
            os.setsid()
            # handlers are reset by exec; ignored signals (Python ignores SIGPIPE, SIGXFSZ)
            # and the blocked mask are inherited, so undo those
            for sig in _TO_DEFAULT:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            stage = "cgroup"
            if self.iso is not None:
                self.iso.attach(os.getpid())
                self.iso.child_limits()
            if self.req.cpus:
                stage = "cpu affinity"
                os.sched_setaffinity(0, self.req.cpus)
            if self.container is not None:
                stage = "container"
                self.exec_container(env, keep_fd)  # does not return
            if self.apt is not None:
                stage = "apptainer"
                self.exec_apptainer(keep_fd)  # does not return
            if self.cfg.switch_user:
                stage = f"switching to uid {self.req.uid} gid {self.req.gid}"
                os.setgroups(list(self.cfg.groups))
                os.setgid(self.req.gid)
                os.setuid(self.req.uid)
            stage = f"cannot change to working directory {self.req.workdir}"
            os.chdir(self.req.workdir)
            stage = f"cannot open input file {self.stdin_path}"
            in_fd = os.open(self.stdin_path, os.O_RDONLY)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            if self.req.open_mode != "append" and not self.truncated_output:
                flags |= os.O_TRUNC
            stage = f"cannot open output file {self.stdout_path}"
            out_fd = os.open(self.stdout_path, flags, 0o644)
            err_fd = out_fd
            if self.stderr_path != self.stdout_path:
                stage = f"cannot open error file {self.stderr_path}"
                err_fd = os.open(self.stderr_path, flags, 0o644)
            os.dup2(in_fd, 0)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            for fd in {in_fd, out_fd, err_fd}:
                if fd > 2:
                    os.close(fd)
            if keep_fd >= 0:
                os.set_inheritable(keep_fd, True)
            env["SLURM_TASK_PID"] = str(os.getpid())
            stage = f"cannot execute {argv[0]}"
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:  # noqa: B036 - report anything, then leave
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            try:
                os.write(err_w, f"{stage}: {detail}".encode()[:4000])
            finally:
                os._exit(127)
        os._exit(127)  # not reached: execvpe does not return

    # ---- prolog, epilog, task prolog/epilog (``jobscripts.py``) ----------------------------
    @property
    def creds(self) -> tuple[int, int, tuple[int, ...]] | None:
        return (self.req.uid, self.req.gid, self.cfg.groups) if self.cfg.switch_user else None

    def run_prolog(self) -> str | None:
        """The node's Prolog, as this (root) process, before anything of the job exists
        here; a failure reason (the job does not start; the controller requeues it and
        drains the node) or None."""
        req = self.req
        env = jobscripts.script_env(req, self.cfg.node_name, "prolog_slurmd")
        res = jobscripts.run_program(req.prolog, [], env, req.script_timeout_s)
        jobscripts.log_run(self.cfg.script_log, "prolog", req.job_id, req.prolog, res)
        self.prolog_ran = True
        if res.ok:
            return None
        self.script_failure = "prolog"
        last = res.last_line()
        self.script_message = res.describe() + (f": {last}" if last else "")
        return f"prolog failed on {self.cfg.node_name}: {self.script_message}"

    def run_epilog(self) -> None:
        req = self.req
        env = jobscripts.script_env(req, self.cfg.node_name, "epilog_slurmd")
        res = jobscripts.run_program(req.epilog, [], env, req.script_timeout_s)
        jobscripts.log_run(self.cfg.script_log, "epilog", req.job_id, req.epilog, res)
        if not res.ok and not self.script_failure:
            self.script_failure = "epilog"
            last = res.last_line()
            self.script_message = res.describe() + (f": {last}" if last else "")

    def run_task_prolog(self, env: dict[str, str]) -> str | None:
        """TaskProlog as the job's user with the job's environment, in its working
        directory: its ``export``/``unset`` lines change ``env``, its ``print`` lines
        open the job's output. A failure reason (the job FAILED) or None."""
        req = self.req
        res = jobscripts.run_program(req.task_prolog, [], dict(env), req.script_timeout_s,
                                     creds=self.creds, cwd=req.workdir)
        jobscripts.log_run(self.cfg.script_log, "task_prolog", req.job_id, req.task_prolog,
                           res)
        if not res.ok:
            return f"TaskProlog failed status={res.describe()}"
        prints = jobscripts.apply_task_prolog(res.output, env)
        if prints and self.stdout_path:
            data = "".join(line + "\n" for line in prints).encode()
            why = append_message(self.stdout_path, data, self.creds,
                                 create=req.open_mode != "append")
            if why:
                return f"cannot open output file {self.stdout_path}: {why}"
            self.truncated_output = True
        return None

    def run_task_epilog(self) -> None:
        req = self.req
        env = job_environment(req, self.cfg.node_name)
        res = jobscripts.run_program(req.task_epilog, [], env, req.script_timeout_s,
                                     creds=self.creds, cwd=req.workdir)
        jobscripts.log_run(self.cfg.script_log, "task_epilog", req.job_id, req.task_epilog,
                           res)

    def exec_container(self, env: dict[str, str], keep_fd: int) -> NoReturn:
        """The job child of a container job (root, in the job's cgroups): the container's
        mounts (``container.enter``), the output files opened as the user, then the OCI
        runtime, which starts the job's command in the image as the user."""
        from corral.agent.container import SCRIPT_FD, as_user, back_to_root, enter

        assert self.container is not None
        p = self.container.plan
        enter(p)
        saved = as_user(p)
        try:
            in_fd = os.open(self.stdin_path, os.O_RDONLY)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            if self.req.open_mode != "append" and not self.truncated_output:
                flags |= os.O_TRUNC
            out_fd = os.open(self.stdout_path, flags, 0o644)
            err_fd = out_fd
            if self.stderr_path != self.stdout_path:
                err_fd = os.open(self.stderr_path, flags, 0o644)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open {exc.filename}: {exc.strerror}") from None
        finally:
            back_to_root(saved)
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if keep_fd >= 0:
            os.dup2(keep_fd, SCRIPT_FD)  # inheritable: runc --preserve-fds 1 passes it on
        for fd in {in_fd, out_fd, err_fd, keep_fd}:
            if fd > SCRIPT_FD or (fd > 2 and keep_fd < 0):
                os.close(fd)
        for text in p.warnings:
            os.write(2, text.encode())
        os.chdir("/")
        os.execve(p.runtime, p.argv(), {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                                "/usr/bin:/sbin:/bin"})

    def exec_apptainer(self, keep_fd: int) -> NoReturn:
        """The job child of an Apptainer job (in the job's cgroups, CPU affinity set):
        it becomes the user for good, opens its files as the user, then execs
        ``apptainer exec`` (unprivileged: a user namespace of that user)."""
        from corral.agent.container import SCRIPT_FD

        assert self.apt is not None
        p = self.apt
        if self.cfg.switch_user:  # a root agent; else the job is the agent's own user's
            os.setgroups(list(p.groups))
            os.setgid(p.gid)
            os.setuid(p.uid)
        try:
            in_fd = os.open(self.stdin_path, os.O_RDONLY)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            if self.req.open_mode != "append" and not self.truncated_output:
                flags |= os.O_TRUNC
            out_fd = os.open(self.stdout_path, flags, 0o644)
            err_fd = out_fd
            if self.stderr_path != self.stdout_path:
                err_fd = os.open(self.stderr_path, flags, 0o644)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open {exc.filename}: {exc.strerror}") from None
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if keep_fd >= 0:
            os.dup2(keep_fd, SCRIPT_FD)  # the script, /dev/fd/3 inside
        for fd in {in_fd, out_fd, err_fd, keep_fd}:
            if fd > SCRIPT_FD or (fd > 2 and keep_fd < 0):
                os.close(fd)
        for text in p.warnings:
            os.write(2, text.encode())
        os.chdir(p.cwd)
        os.execve(p.argv[0], p.argv, p.env)

    def prepare_container(self, text: str, argv: list[str], env: dict[str, str],
                          script: bool) -> str | None:
        """Find the image (pulling it when the node has none: status PULLING) and plan the
        container; a failure reason, or None."""
        from corral.agent.ctrjob import PrepareError, cgroup_rel, prepare
        from corral.agent.runtimes import ContainerSettings
        from corral.containers.spec import ContainerError, ContainerSpec

        try:
            spec = ContainerSpec.from_text(text)
        except ContainerError as exc:
            return f"bad container: {exc}"
        settings = ContainerSettings.from_text(self.cfg.containers)
        from corral.agent import apptainer

        def progress(note: str) -> None:  # the latest pull note replaces the one before
            if self.run.notes and self.run.notes[-1].startswith(("pulling ", "unpacking ")):
                self.run.notes[-1] = note
            else:
                self.run.notes.append(note)
            self.write_status("PULLING")
            self.notify(b"p")

        def cancelled() -> bool:
            self.handle_commands()
            return bool(self.run.ending)

        rel = None
        if self.iso is not None and self.iso.cgroup is not None:
            cg = self.iso.cgroup
            lay = cg.layout
            mounts = dict(lay.v1)
            if lay.v2_root:
                mounts["v2"] = lay.v2_root
            if lay.tracking:
                mounts["tracking"] = lay.tracking
            rel = cgroup_rel(cg.dirs, mounts)
        # a named container (--container-name) is kept by the OCI path, which steps use
        # too: a SIF's tree runs there with Apptainer's environment (ctrjob, aptenv)
        if apptainer.wanted(spec, settings) and not (spec.name and settings.runtime):
            try:
                self.apt = apptainer.prepare(spec, self.req, settings, command=argv, env=env,
                                             groups=self.cfg.groups, progress=progress,
                                             cancelled=cancelled)
            except apptainer.AptError as exc:
                return None if self.run.ending else str(exc)
            how = ("unpacked" if spec.image.kind == "sif" else "pulled") if self.apt.pulled \
                else "cached"
            self.run.notes.append(f"container {spec.image.canonical} (apptainer" + (
                f", {self.apt.digest[:19]}, {how})" if self.apt.digest else ")"))
            return None
        try:
            self.container = prepare(
                spec, self.req, settings, jdir=self.jdir, node=self.cfg.node_name,
                step="batch", command=argv, env=env, groups=self.cfg.groups,
                cgroup_rel=rel, script=script, progress=progress, cancelled=cancelled)
        except PrepareError as exc:
            return None if self.run.ending else str(exc)
        note = f"container {spec.image.canonical}" + (
            f" ({self.container.digest[:19]}, {'pulled' if self.container.pulled else 'cached'})"
            if self.container.digest else "")
        self.run.notes.append(note)
        return None

    def container_done(self) -> None:
        """After the job: the runtime's leftovers and the image pin."""
        if self.apt is not None and self.apt.pin_fd >= 0:
            os.close(self.apt.pin_fd)
            self.apt.pin_fd = -1
        c, self.container = self.container, None
        if c is None:
            return
        from corral.agent.container import cleanup, leftover_cgroups

        rel = c.plan.config.get("linux", {}).get("cgroupsPath")
        own = set(self.iso.cgroup.dirs.values()) if self.iso and self.iso.cgroup else set()
        try:
            cleanup(c.plan.runtime, c.plan.state_root, c.plan.ctr_id,
                    leftover_cgroups(str(rel or ""), own))
        except Exception as exc:  # noqa: BLE001 - best effort, logged
            self.log(f"container cleanup: {exc}")
        if c.pin_fd >= 0:
            os.close(c.pin_fd)

    # ---- main flow ------------------------------------------------------------------------
    def start(self) -> str | None:
        """Start the job; returns a failure reason, or None when it runs."""
        req = self.req
        if req.signal:
            try:
                self.warning = parse_warning_signal(req.signal)
            except ValueError as exc:
                return str(exc)
        self.stdout_path, self.stderr_path = output_paths(req, self.cfg.node_name)
        self.stdin_path = input_path(req, self.cfg.node_name)
        self.handle_commands()  # cancelled before it started: do not start it at all
        if self.run.ending:
            return None
        if req.prolog:
            failure = self.run_prolog()
            if failure is not None:
                return failure
            self.handle_commands()  # cancelled while the prolog ran
            if self.run.ending:
                return None
        ctext = req.extra.get("container")
        try:
            self.iso, note = make_isolation(self.cfg.isolation, self.cfg.cgroup_root, req,
                                            self.cfg.mem_poll_s,
                                            reuse=_pooled and not ctext)
        except CgroupError as exc:
            return str(exc)
        if note:
            self.run.notes.append(note)
            self.log(note)
        if self.is_share:  # the job's share of this node: steps only, no batch process
            self.run.start_wall = time.time()
            self.run.start_mono = time.monotonic()
            self.write_status("RUNNING")
            self._run_early_steps()
            return None
        env = job_environment(req, self.cfg.node_name)
        if req.task_prolog:
            failure = self.run_task_prolog(env)
            if failure is not None:
                return failure
        keep_fd = -1
        if req.script is not None:
            keep_fd = os.memfd_create(f"corral-job{req.job_id}-script", 0)
            os.write(keep_fd, req.script.encode())
            os.lseek(keep_fd, 0, os.SEEK_SET)
            # arguments after the script (sbatch job.sh a b) go to the script
            argv = script_command(req.script, f"/dev/fd/{keep_fd}") + list(req.argv)
        elif req.argv:
            argv = list(req.argv)
        else:
            return "nothing to run: the request has neither a script nor a command"
        if ctext:
            from corral.agent.container import SCRIPT_FD

            inner = list(req.argv) if req.script is None else \
                script_command(req.script, f"/dev/fd/{SCRIPT_FD}") + list(req.argv)
            failure = self.prepare_container(ctext, inner, env, req.script is not None)
            if failure is not None or self.run.ending:
                if keep_fd >= 0:
                    os.close(keep_fd)
                return failure
            self.write_status("STARTING")
            self.notify(b"p")  # the controller learns the image and whether it was cached
            return self.fork_job(argv, env, keep_fd)
        if vmjob.is_vm(req):  # the VM launcher runs the job in a guest (corral.agent.vm)
            try:
                self.vm_dir = vmjob.make_control_dir(
                    req, (req.uid, req.gid) if self.cfg.switch_user else None)
            except OSError as exc:
                return f"cannot create the VM's control directory: {exc.strerror or exc}"
            argv = vmjob.launcher_argv(req, keep_fd, self.vm_dir)
        if self.can_spawn():
            return self.spawn_job(argv, env, keep_fd)
        return self.fork_job(argv, env, keep_fd)

    def can_spawn(self) -> bool:
        """The job can start with the gated ``posix_spawn`` (``spawn.py``): same user
        as the supervisor; else (and where it is unavailable) it is forked."""
        global _spawn_ok
        if _spawn_ok is None:
            _spawn_ok = os.environ.get("CORRAL_JOB_START", "spawn") != "fork" \
                and spawn.available()
        return _spawn_ok and not self.cfg.switch_user

    def spawn_job(self, argv: list[str], env: dict[str, str], keep_fd: int) -> str | None:
        """Start the job with ``spawn.Spawner``: what the child does before its exec in
        ``exec_job`` happens here (working directory, files, CPU affinity: inherited) or
        in ``prepare`` while the child waits at the gate (cgroups, rlimits, its pid)."""
        global _spawner
        req = self.req
        fds: list[int] = []
        old_affinity: set[int] | None = None
        stage = f"cannot change to working directory {req.workdir}"
        try:
            os.chdir(req.workdir)
            stage = f"cannot open input file {self.stdin_path}"
            fds.append(os.open(self.stdin_path, os.O_RDONLY))
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            if req.open_mode != "append" and not self.truncated_output:
                flags |= os.O_TRUNC
            stage = f"cannot open output file {self.stdout_path}"
            fds.append(os.open(self.stdout_path, flags, 0o644))
            if self.stderr_path != self.stdout_path:
                stage = f"cannot open error file {self.stderr_path}"
                fds.append(os.open(self.stderr_path, flags, 0o644))
            else:
                fds.append(fds[1])
            stage = f"cannot execute {argv[0]}"
            path = spawn.which(argv[0], env)
            if req.cpus:
                stage = "cpu affinity"
                old_affinity = os.sched_getaffinity(0)
                os.sched_setaffinity(0, req.cpus)
            if keep_fd >= 0:
                os.set_inheritable(keep_fd, True)
            if _spawner is None:
                _spawner = spawn.Spawner(os.path.dirname(self.jdir))
            iso = self.iso

            def prepare(pid: int) -> None:  # runs while the child waits at the gate
                if iso is None:
                    return
                try:
                    iso.attach(pid)
                except OSError as exc:
                    raise OSError(exc.errno, f"cgroup: {exc.strerror or exc}") from None
                try:
                    iso.child_limits(pid)
                except OSError as exc:
                    raise OSError(exc.errno, f"memory limit: {exc.strerror or exc}") from None

            stage = f"cannot execute {argv[0]}"
            self.run.start_wall = time.time()
            self.run.start_mono = time.monotonic()
            pid = _spawner.spawn(path, argv, env, stdio=(fds[0], fds[1], fds[2]),
                                 prepare=prepare)
        except spawn.SpawnError as exc:
            msg = str(exc.strerror or exc)
            return msg if msg.startswith(("cgroup:", "memory limit:")) else \
                f"cannot start the job: {msg}"
        except OSError as exc:
            return f"{stage}: {exc.strerror or exc}"
        finally:
            for fd in set(fds):
                os.close(fd)
            if keep_fd >= 0:
                os.close(keep_fd)
            if old_affinity is not None:
                os.sched_setaffinity(0, old_affinity)
            os.chdir("/")
        self.run.job_pid = pid
        self.run.job_ticks = start_ticks(pid)
        self.write_status("RUNNING")
        return None

    def fork_job(self, argv: list[str], env: dict[str, str], keep_fd: int) -> str | None:
        """Start the job with ``fork`` + ``exec_job`` (user switch, or no gated spawn)."""
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        self.run.start_wall = time.time()
        self.run.start_mono = time.monotonic()
        gc_on = gc.isenabled()
        gc.disable()  # no collection in the child: it would touch (copy) the whole heap
        try:
            pid = os.fork()
        except OSError:
            if gc_on:
                gc.enable()
            raise
        if pid == 0:
            os.close(err_r)
            self.exec_job(argv, env, err_w, keep_fd)
        if gc_on:
            gc.enable()
        self.run.job_pid = pid
        self.run.job_ticks = start_ticks(pid)
        os.close(err_w)
        if keep_fd >= 0:
            os.close(keep_fd)
        chunks = []
        while True:
            try:
                chunk = os.read(err_r, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
        os.close(err_r)
        if chunks:
            return b"".join(chunks).decode(errors="replace")
        self.write_status("RUNNING")
        return None

    def reap(self) -> None:
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            self.run.cpu_s += ru.ru_utime + ru.ru_stime
            self.run.maxrss_kb = max(self.run.maxrss_kb, ru.ru_maxrss)
            if self.step_server is not None:
                self.step_server.gone(pid)
            if pid == self.run.job_pid:
                self.run.main_status = status

    def handle_commands(self) -> None:
        for cmd in spool.take_commands(self.jdir):
            kind = cmd.get("cmd")
            if kind == "step":  # the launch (srun's whole environment) is not for the log
                self.log(f"command step {(cmd.get('launch') or {}).get('step_id')}")
            else:
                self.log(f"command {cmd}")
            if kind == "cancel":
                if not self.run.ending:
                    self.slurm_message(f"*** JOB {self.req.job_id} ON {self.cfg.node_name} "
                                       f"CANCELLED AT {stamp()} ***")
                grace = cmd.get("grace_s")
                grace_s = float(self.req.kill_grace_s if grace is None else grace)
                self.terminate("CANCELLED", grace_s)
            elif kind == "signal":
                sig = int(cmd.get("sig", signal.SIGTERM))
                self.signal_job(sig, batch_only=bool(cmd.get("batch_only", False)),
                                all_but_batch=bool(cmd.get("all_but_batch", False)))
            elif kind == "suspend":
                self.suspend()
            elif kind == "resume":
                self.resume()
            elif kind == "time_limit":
                limit = cmd.get("time_limit_s")
                self.time_limit_s = None if limit is None else int(limit)
                self.write_status("RUNNING")
            elif kind == "step":
                if self.iso is None and not self.run.start_wall:
                    self.early_steps.append(cmd.get("launch") or {})  # before isolation
                else:
                    self.start_step(cmd.get("launch") or {})

    def _run_early_steps(self) -> None:
        steps, self.early_steps = self.early_steps, []
        for launch in steps:
            self.start_step(launch)

    @property
    def is_share(self) -> bool:
        """A run that holds the job's share of a node other than its first (no batch
        script here: only the job's steps run in it, ``corral.agent.stepd``)."""
        return self.req.extra.get("share") == "1"

    def start_step(self, launch: dict[str, Any]) -> None:
        """Fork the step process of this node's tasks of one ``srun`` step."""
        if vmjob.is_vm(self.req):  # the job's processes are in the guest, not here
            self.log("step refused: a VM job's steps would run on the host")
            return
        if self.run.ending or (not self.run.job_pid and not self.is_share):
            self.log(f"step refused: the job is {'ending' if self.run.ending else 'not running'}")
            return
        from corral.agent import stepbin, stepd

        node_env = job_environment(self.req, self.cfg.node_name)
        core_cpus = stepd.core_siblings()
        path = stepbin.binary(self.log)
        if path is not None and self._spawn_compiled(path, launch, node_env, core_cpus):
            return
        gc_on = gc.isenabled()
        gc.disable()
        try:
            pid = os.fork()
        except OSError as exc:
            if gc_on:
                gc.enable()
            self.log(f"cannot fork step {launch.get('step_id')}: {exc}")
            return
        if pid == 0:
            stepd.main(launch, self.req, self.cfg.node_name, node_env, self.iso,
                       self.cfg.switch_user, self.cfg.groups, core_cpus, self.log,
                       jdir=self.jdir, containers=self.cfg.containers)
        if gc_on:
            gc.enable()

    def close_step_server(self) -> None:
        if self.step_server is not None:
            self.step_server.close()
            self.step_server = None

    def _spawn_compiled(self, path: str, launch: dict[str, Any], node_env: dict[str, str],
                        core_cpus: list[tuple[int, ...]] | None) -> bool:
        """The step through the compiled step process (``corral.agent.stepbin``); False
        when the Python one must run it."""
        from corral.agent import stepbin

        try:
            plan = stepbin.plan_for(launch, self.req, self.cfg.node_name, node_env,
                                    self.cfg.switch_user, self.cfg.groups, core_cpus)
        except (ValueError, KeyError, TypeError):
            return False  # the Python step process reports the bad launch
        if plan is None:
            return False
        if self.step_server is None:
            from corral.agent.stepfeed import FIFO  # the agent writes later steps there

            self.step_server = stepbin.StepServer(
                path, self.iso.attach if self.iso is not None else None,
                os.path.join(self.jdir, FIFO))
        try:
            self.step_server.send(plan)
        except OSError as exc:
            self.log(f"compiled step process for step {launch.get('step_id')} failed to "
                     f"start ({exc}); starting the Python one")
            return False
        return True

    def deadlines(self, now: float) -> float:
        """Act on due deadlines; return the next one (monotonic seconds)."""
        nxt = now + 30.0
        run = self.run
        if self.time_limit_s is not None and not run.ending and run.suspended_at is None:
            limit_at = run.start_mono + run.suspended_s + self.time_limit_s
            if self.warning is not None and not run.warn_sent:
                warn_at = limit_at - self.warning.before_s
                if now >= warn_at:
                    run.warn_sent = True
                    self.log(f"warning signal {self.warning.signum}")
                    self.signal_job(self.warning.signum, batch_only=self.warning.batch_only,
                                    all_but_batch=not self.warning.batch_only)
                else:
                    nxt = min(nxt, warn_at)
            if now >= limit_at:
                self.slurm_message(f"*** JOB {self.req.job_id} ON {self.cfg.node_name} "
                                   f"CANCELLED AT {stamp()} DUE TO TIME LIMIT ***")
                self.terminate("TIMEOUT", float(self.req.kill_grace_s))
            else:
                nxt = min(nxt, limit_at)
        if run.kill_at is not None:
            if now >= run.kill_at:
                self.signal_job(signal.SIGKILL)
                run.kill_at = now + 1.0  # repeat for stragglers until the batch process is gone
            nxt = min(nxt, run.kill_at)
        if self.iso is not None and self.iso.needs_watchdog and self.req.mem_mb > 0:
            if now >= run.next_mem_check:
                self.memory_watchdog()
                run.next_mem_check = now + self.cfg.mem_poll_s
            nxt = min(nxt, run.next_mem_check)
        if self.req.max_output_mb > 0 and run.job_pid and not run.ending:
            if now >= run.next_output_check:
                self.output_watchdog()
                run.next_output_check = now + _OUTPUT_POLL_S
            nxt = min(nxt, run.next_output_check)
        return nxt

    def output_watchdog(self) -> None:
        """``[cgroup] max_output_mb``: kill the job whose output or error file outgrew it
        (the files the supervisor opened for it; a path the job replaced by a link is
        not followed)."""
        limit = self.req.max_output_mb * 1024 * 1024
        for path in dict.fromkeys((self.stdout_path, self.stderr_path)):
            if not path or path == "/dev/null":
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                self.slurm_message(f"error: *** JOB {self.req.job_id} ON {self.cfg.node_name} "
                                   f"CANCELLED AT {stamp()} DUE TO OUTPUT LIMIT: {path} is "
                                   f"over {self.req.max_output_mb} MB ***")
                self.terminate("OUTPUT_LIMIT", float(self.req.kill_grace_s))
                return

    def memory_watchdog(self) -> None:
        """Without a memory cgroup: kill the job when its total RSS passes the limit."""
        rss = rss_bytes(sorted(self.job_pids()))
        self.run.mem_peak = max(self.run.mem_peak, rss)
        limit = (self.iso.mem_limit_mb if self.iso else self.req.mem_mb) * 1024 * 1024
        if rss > limit and self.run.ending != "OUT_OF_MEMORY" and not self.run.ending:
            self.slurm_message(f"Job {self.req.job_id} exceeded memory limit "
                               f"({rss // 1024} > {limit // 1024}), being killed")
            self.run.ending = "OUT_OF_MEMORY"
            self.signal_job(signal.SIGKILL)
            self.run.kill_at = time.monotonic() + 1.0

    def loop(self) -> None:
        """Until the batch process exits. ``ctl/`` is read when SIGUSR1 came (or a wait
        timed out): the runner signals every command it queues once the run is claimed,
        and ``start`` read what was queued before the claim; the signal stays pending
        (blocked) until ``sigtimedwait`` takes it."""
        mask = set(WAKE_SIGNALS)
        commands = False
        while True:
            self.reap()
            if commands:
                self.handle_commands()
            now = time.monotonic()
            nxt = self.deadlines(now)
            if self.run.main_status is not None:
                return
            if self.run.ending:
                self.close_step_server()  # no more steps; it must not hold the job open
            if self.is_share and self.run.ending and not self.job_pids():
                return
            timeout = max(0.0, min(nxt - time.monotonic(), 30.0))
            commands = True
            if timeout > 0:
                got = signal.sigtimedwait(mask, timeout)
                commands = got is None or got.si_signo == signal.SIGUSR1

    def drain(self) -> None:
        """After the batch process exited: SIGKILL the rest of the job and reap it."""
        deadline = time.monotonic() + _REAP_DEADLINE_S
        self.close_step_server()
        while True:
            self.reap()
            pids = self.job_pids()
            if not pids:
                self.drained = True
                return
            self.signal_job(signal.SIGKILL)
            if time.monotonic() > deadline:
                self.log(f"processes {sorted(pids)} survived SIGKILL for {_REAP_DEADLINE_S}s")
                return
            signal.sigtimedwait({signal.SIGCHLD}, 0.02)

    def finish(self, failure: str | None) -> JobExit:
        req, run = self.req, self.run
        exit_code, sig = (1, 0) if failure is not None else (0, 0)
        if failure is None and run.main_status is not None:
            code = os.waitstatus_to_exitcode(run.main_status)
            exit_code, sig = (code, 0) if code >= 0 else (0, -code)
            if (self.container is not None or self.apt is not None) \
                    and 128 < exit_code < 128 + 65:
                exit_code, sig = 0, exit_code - 128  # the runtime reports 128 + signal
        usage = self.iso.usage() if self.iso is not None else None
        cpu_s = run.cpu_s
        peak_mb = max(run.maxrss_kb / 1024.0, run.mem_peak / 1048576.0)
        oom = run.ending == "OUT_OF_MEMORY"
        if usage is not None:
            if usage.cpu_s is not None:
                cpu_s = usage.cpu_s
            if usage.peak_bytes is not None:
                peak_mb = usage.peak_bytes / 1048576.0
            if usage.oom_kills > 0 and failure is None:
                oom = True
                self.slurm_message(
                    f"Detected {usage.oom_kills} oom_kill event{'s' if usage.oom_kills > 1 else ''}"
                    f" in StepId={req.job_id}.batch. Some of the step tasks have been OOM Killed.")
        if (self.container is not None and sig == signal.SIGKILL and not run.ending
                and usage is not None and usage.peak_bytes and self.iso is not None
                and self.iso.mem_limit_mb
                and usage.peak_bytes >= self.iso.mem_limit_mb * 1048576 * 0.98):
            # v1 counts an OOM kill in the container's own memory cgroup, which the runtime
            # removed: a SIGKILL nobody here sent, with the job's memory at its limit
            oom = True
            self.slurm_message(f"Detected 1 oom_kill event in StepId={req.job_id}.batch. "
                               "Some of the step tasks have been OOM Killed.")
        reason = ""
        if failure is not None:
            state, reason = "FAILED", failure
        elif run.ending in ("CANCELLED", "TIMEOUT"):
            state = run.ending
        elif run.ending == "OUTPUT_LIMIT":
            state = "FAILED"
            reason = f"output limit of {req.max_output_mb} MB exceeded ([cgroup] max_output_mb)"
        elif oom:
            limit_mb = self.iso.mem_limit_mb if self.iso else req.mem_mb
            state, reason = "OUT_OF_MEMORY", f"memory limit of {limit_mb} MB exceeded"
        elif exit_code == 0 and sig == 0:
            state = "COMPLETED"
        else:
            state = "FAILED"
            reason = f"killed by signal {sig}" if sig else f"exit code {exit_code}"
        if failure is not None:
            self.log(f"failed to start: {failure}")
        return JobExit(
            job_id=req.job_id, state=state, exit_code=exit_code, signal=sig,
            start_time=run.start_wall or time.time(), end_time=time.time(), cpu_time_s=cpu_s,
            max_rss_mb=round(peak_mb, 3), reason=reason,
            stdout_path=self.stdout_path if run.job_pid else "",
            stderr_path=self.stderr_path if run.job_pid else "", restarts=req.restarts,
            script_failure=self.script_failure, script_message=self.script_message)

    def main(self) -> None:
        failure: str | None
        try:
            failure = self.start()
        except OSError as exc:
            failure = f"launch failed: {exc}"
            self.log(traceback.format_exc())
        if failure is not None and self.run.job_pid:
            self.reap()
            while self.run.main_status is None:
                try:
                    _, self.run.main_status = os.waitpid(self.run.job_pid, 0)
                except ChildProcessError:
                    break
        elif failure is None and (self.run.job_pid or self.is_share):
            self._run_early_steps()
            self.loop()
            if self.req.task_epilog and self.run.job_pid:
                self.run_task_epilog()
        try:
            self.drain()
        except OSError:
            self.log(traceback.format_exc())
        exit_rec = self.finish(failure)
        vmjob.remove_control_dir(self.vm_dir)
        self.container_done()
        if self.iso is not None:
            try:
                self.iso.remove()
            except OSError as exc:
                self.log(f"cannot remove isolation: {exc}")
        if self.req.epilog and (self.prolog_ran or not self.req.prolog):
            self.run_epilog()
            if self.script_failure == "epilog":
                import dataclasses

                exit_rec = dataclasses.replace(exit_rec, script_failure="epilog",
                                               script_message=self.script_message)
        if self.before_exit is not None:
            self.before_exit()
        spool.write_json(os.path.join(self.jdir, spool.EXIT), exit_rec.to_json())
        self.notify()


_log_open = False
_pooled = False  # this process may run several jobs: it keeps its cgroup (cgslot.py)
_spawn_ok: bool | None = None
_spawner: spawn.Spawner | None = None
_notify_sock: socket.socket | None = None
_own_ticks: int | None = None


_APPEND = (os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
           | os.O_CLOEXEC)


def _append_file(path: str, data: bytes, create: bool = False) -> str:
    """Append ``data`` to the existing regular file ``path`` with this process's
    credentials, never following a symbolic link as the last component; "" or why not.
    ``create``: create the file, or empty it, first (a job's output in truncate mode)."""
    try:
        fd = os.open(path, _APPEND | os.O_CREAT | os.O_TRUNC, 0o644) if create \
            else os.open(path, _APPEND)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        os.write(fd, data)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
    return ""


def append_message(path: str, data: bytes,
                   creds: tuple[int, int, tuple[int, ...]] | None,
                   timeout_s: float = 10.0, create: bool = False) -> str:
    """Append ``data`` to the job's file ``path``; "" or why it was not written.

    ``creds`` (uid, gid, supplementary groups): the job runs as another user than this
    (root) process, so a short-lived child takes on the user's identity first and opens
    the file as the user: a symbolic link (in the last or any earlier component) that the
    user planted can only lead where the user could write anyway. Without ``creds`` the
    file is opened here. Either way ``O_NOFOLLOW`` (a link as the last component is
    refused), ``O_NONBLOCK`` (a FIFO without a reader does not block the supervisor) and
    only a regular file is written. A child that has not finished within ``timeout_s``
    (a hung file system) is killed."""
    if creds is None:
        return _append_file(path, data, create)
    uid, gid, groups = creds
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    gc_on = gc.isenabled()
    gc.disable()  # no collection in the child: it would touch (copy) the whole heap
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(err_r)
        os.close(err_w)
        return f"fork: {exc.strerror or exc}"
    finally:
        if gc_on:
            gc.enable()
    if pid == 0:  # the child: as the user, then gone
        why = "cannot switch user"
        try:
            os.close(err_r)
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            why = _append_file(path, data, create)
        except BaseException as exc:  # noqa: B036 - report anything, then leave
            why = f"{why}: {exc}"
        finally:
            try:
                if why:
                    os.write(err_w, why.encode()[:1000])
            finally:
                os._exit(0)
    os.close(err_w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    killed = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([err_r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)  # reaped now or later by ``reap``
                chunks.append(b"timed out")
                killed = True
                break
            chunk = os.read(err_r, 1024)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(err_r)
    try:
        os.waitpid(pid, os.WNOHANG if killed else 0)
    except ChildProcessError:
        pass
    return b"".join(chunks).decode(errors="replace")


def _has_children() -> bool:
    """This process has a child (live or a zombie). A child subreaper without one has no
    descendants at all: every orphan below it would have become its child. One system
    call, where ``descendants`` lists the threads and reads their ``children``."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except OSError:
        return True
    return True


def open_log(jdir: str) -> None:
    """Point fd 2 at ``supervisor.log`` of the current job (created on first use)."""
    global _log_open
    if _log_open:
        return
    _log_open = True
    try:
        fd = os.open(os.path.join(jdir, spool.LOG),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    os.dup2(fd, 2)
    os.close(fd)


def close_log() -> None:
    global _log_open
    if _log_open:
        _log_open = False
        fd = os.open("/dev/null", os.O_WRONLY)
        os.dup2(fd, 2)
        os.close(fd)


def prepare_process(keep_fd: int = -1) -> int:
    """Detach from everything inherited from the fork server: fds (all but ``keep_fd``,
    which comes back renumbered), signal handlers. Returns the kept fd (or -1)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WAKE_SIGNALS)
    for sig in WAKE_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    kept = -1
    if keep_fd >= 0:
        kept = 3
        if keep_fd != kept:
            os.dup2(keep_fd, kept, inheritable=False)
    os.closerange(3 if kept < 0 else 4, 1 << 20)
    set_child_subreaper()
    set_process_name("corral-sup")
    return kept


def claim(jdir: str, job_id: int, restarts: int, cfg: SupervisorConfig) -> Supervisor | None:
    """The supervisor of this run, or None when the request is gone, belongs to another
    run, or another supervisor claimed it first."""
    data = spool.read_json(os.path.join(jdir, spool.REQUEST))
    if data is None or int(data.get("restarts", 0)) != restarts \
            or int(data.get("job_id", -1)) != job_id:
        return None
    sup = Supervisor(jdir, LaunchRequest.from_json(data), cfg)
    return sup if sup.claim_status() else None


def supervise(jdir: str, job_id: int, restarts: int, cfg: SupervisorConfig,
              offer: Callable[[], bool] | None = None) -> bool:
    """Supervise one run to its end in this process. ``offer`` is called when the job is
    over and its processes are all gone, just before its end is recorded (so the next
    launch finds this process ready); it says whether it offered this process for another
    job. Returns whether it did: then the caller must take the next job."""
    offered = False
    sup_: Supervisor | None = None

    def before_exit() -> None:
        nonlocal offered
        if offer is not None and sup_ is not None and (sup_.drained or not sup_.job_pids()):
            offered = offer()

    try:
        sup_ = claim(jdir, job_id, restarts, cfg)
        if sup_ is None:
            return offer() if offer is not None else False
        sup_.before_exit = before_exit
        prof_to = os.environ.get("CORRAL_SUPERVISOR_PROFILE")
        if prof_to:
            import cProfile

            prof = cProfile.Profile(time.process_time)
            prof.runcall(sup_.main)
            prof.dump_stats(os.path.join(prof_to, f"prof-{job_id}") if os.path.isabs(prof_to)
                            else os.path.join(jdir, "prof"))
        else:
            sup_.main()
        if os.environ.get("CORRAL_SUPERVISOR_TIMES"):
            import resource
            a = resource.getrusage(resource.RUSAGE_SELF)
            b = resource.getrusage(resource.RUSAGE_CHILDREN)
            open_log(jdir)
            os.write(2, f"TIMES {a.ru_utime} {a.ru_stime} {b.ru_utime} {b.ru_stime} "
                        f"{a.ru_minflt} {b.ru_minflt}\n".encode())
    except BaseException:  # noqa: B036 - the last resort: record why, never return to the caller
        try:
            open_log(jdir)
            os.write(2, traceback.format_exc().encode())
            if not os.path.exists(os.path.join(jdir, spool.EXIT)):
                rec = JobExit(job_id=job_id, state="NODE_FAIL", exit_code=1,
                              end_time=time.time(), restarts=restarts,
                              reason="supervisor error (see supervisor.log)")
                spool.write_json(os.path.join(jdir, spool.EXIT), rec.to_json())
        except BaseException:  # noqa: B036
            pass
    finally:
        close_log()
    return offered


def run_supervisor(jdir: str, job_id: int, restarts: int, cfg: SupervisorConfig,
                   pool_fd: int = -1, max_jobs: int = 1) -> NoReturn:
    """Entry point in a freshly forked supervisor process. Never returns.

    Supervises the given run, then, with a fork server connection (``pool_fd``), offers
    itself for another run (``b"idle"``, sent as soon as the job's processes are gone,
    before its end is recorded) and supervises what it is sent, up to ``max_jobs`` runs:
    one job at a time, so a supervisor that dies takes only its current job with it,
    while the fork, copy-on-write and exit costs of a process are paid once per many
    jobs. It leaves when the fork server closes the connection."""
    global _pooled
    code = 0
    _pooled = pool_fd >= 0 and max_jobs > 1 and \
        os.environ.get("CORRAL_CGROUP_REUSE", "1") != "0"
    try:
        os.setsid()
        conn = prepare_process(pool_fd)
        gc.enable()  # the fork server froze its heap: collections skip those objects
        done = 0

        def offer() -> bool:
            if conn < 0 or done + 1 >= max_jobs:
                return False
            try:
                os.write(conn, b"idle")
            except OSError:
                return False
            return True

        while True:
            offered = supervise(jdir, job_id, restarts, cfg, offer)
            done += 1
            if not offered:
                break
            try:  # offered: the fork server may already have sent the next job
                data = os.read(conn, 1 << 16)
            except OSError:
                break
            if not data:
                break
            jdir, job_id, restarts, cfg = decode_job(data, cfg)
    except BaseException:  # noqa: B036
        code = 1
    if _spawner is not None:
        _spawner.close()
    release_slot()
    os._exit(code)


def encode_job(jdir: str, job_id: int, restarts: int, groups: tuple[int, ...],
               switch_user: bool) -> bytes:
    """The fork server's message for one launch."""
    import json

    return json.dumps({"j": job_id, "r": restarts, "d": jdir, "g": list(groups),
                       "s": switch_user}, separators=(",", ":")).encode()


def decode_job(data: bytes | dict[str, object],
               base: SupervisorConfig) -> tuple[str, int, int, SupervisorConfig]:
    """(job dir, job id, restarts, config) from a launch message (its bytes, or the
    decoded object). Raises ValueError."""
    import dataclasses
    import json

    try:
        msg: Any = json.loads(data) if isinstance(data, bytes) else data
        key = (id(base), tuple(int(g) for g in msg["g"]), bool(msg["s"]))
        cfg = _job_cfgs.get(key)
        if cfg is None or _job_cfgs_base.get(id(base)) is not base:
            cfg = dataclasses.replace(base, groups=key[1], switch_user=key[2])
            if len(_job_cfgs) > 256:
                _job_cfgs.clear()
            _job_cfgs[key] = cfg
            _job_cfgs_base[id(base)] = base
        return str(msg["d"]), int(msg["j"]), int(msg["r"]), cfg
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad launch message: {exc}") from None


# job configurations by (base, groups, switch): the same few for every job of a node
_job_cfgs: dict[tuple[int, tuple[int, ...], bool], SupervisorConfig] = {}
_job_cfgs_base: dict[int, SupervisorConfig] = {}


__all__ = ["Supervisor", "SupervisorConfig", "decode_job", "encode_job", "run_supervisor",
           "stamp", "supervise"]
