"""Start and supervise the tasks of one job step (what ``srun`` does on a node).

Each task is a child process with Slurm's per-task variables (``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_STEP_ID``, ``SLURM_NTASKS``...). I/O:

- stdout/stderr go to srun's own unless ``--output``/``--error`` name files; a pattern
  that varies per task (``%t``, ``%n``, ``%N``) gives each task its file, otherwise tasks
  share one file (``O_APPEND``: lines never overwrite each other); ``--label`` prefixes
  every line with ``<task>: ``;
- stdin (``--input``): ``all`` (default) copies srun's stdin to every task, ``none``,
  a task number (only that task reads it) or a file pattern.

Signals: srun forwards the signals it receives to its tasks, except those the tasks got
themselves: from the kernel (terminal keys reach the whole foreground process group) and
from the job's supervisor (an ancestor other than srun's parent: Corral's agent signals
every process of the job). Exit status: the highest task exit code; 128+N for a task
killed by signal N; ``--kill-on-bad-exit`` stops the others at the first failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from corral.protocol.step import expand_values

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP,
             signal.SIGQUIT, signal.SIGCONT, signal.SIGALRM, signal.SIGWINCH)
NO_VAL = "4294967294"


@dataclass
class StepSpec:
    argv: list[str]
    ntasks: int
    env: dict[str, str]  # the allocation's environment (srun's own, plus SLURM_*)
    job_id: str
    step_id: int
    nodes: list[str]  # the step's nodes, in order
    tasks_per_node: list[int]
    cwd: str
    user: str = ""
    job_name: str = ""
    label: bool = False
    output: str | None = None
    error: str | None = None
    input: str | None = None  # None/"all", "none", "<task>", or a file pattern
    append: bool = True
    kill_on_bad_exit: bool = False
    cpus_per_task: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    cpu_bind: str = ""  # --cpu-bind (corral.agent.cpubind); "" = Slurm's default
    mem_bind: str = ""  # --mem-bind (corral.agent.membind); "" = none


def expand_pattern(pattern: str, spec: StepSpec, task: int, node_index: int) -> str:
    """srun's filename pattern (``%j %J %s %t %n %N %A %a %u %x %%``, ``%4t`` pads)."""
    env = spec.env
    values = {
        "j": spec.job_id, "J": f"{spec.job_id}.{spec.step_id}", "s": str(spec.step_id),
        "t": str(task), "n": str(node_index),
        "N": spec.nodes[node_index] if spec.nodes else "",
        "A": env.get("SLURM_ARRAY_JOB_ID", spec.job_id),
        "a": env.get("SLURM_ARRAY_TASK_ID", NO_VAL), "u": spec.user, "x": spec.job_name,
    }
    return expand_values(pattern, values)


def varies_per_task(pattern: str) -> bool:
    return any(c in "tnN" for c in _pattern_keys(pattern))


def _pattern_keys(pattern: str) -> list[str]:
    keys = []
    i = 0
    while i < len(pattern) - 1:
        if pattern[i] == "%":
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():
                j += 1
            if j < len(pattern):
                keys.append(pattern[j])
            i = j + 1
        else:
            i += 1
    return keys


def node_of_task(tasks_per_node: list[int], task: int) -> tuple[int, int]:
    """(node index, local id) of a task under block distribution."""
    first = 0
    for idx, count in enumerate(tasks_per_node):
        if task < first + count:
            return idx, task - first
        first += count
    return len(tasks_per_node) - 1, task - first + tasks_per_node[-1]


def task_env(spec: StepSpec, task: int) -> dict[str, str]:
    node_idx, local = node_of_task(spec.tasks_per_node, task)
    from corral.core.parse.hostlist import compress

    env = dict(spec.env)
    nodelist = compress(spec.nodes, sort=False) if spec.nodes else ""
    per_node = ",".join(str(c) for c in spec.tasks_per_node)
    env.update({
        "SLURM_STEP_ID": str(spec.step_id), "SLURM_STEPID": str(spec.step_id),
        "SLURM_PROCID": str(task), "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node_idx), "SLURM_NTASKS": str(spec.ntasks),
        "SLURM_NPROCS": str(spec.ntasks), "SLURM_STEP_NUM_TASKS": str(spec.ntasks),
        "SLURM_STEP_NUM_NODES": str(len(spec.nodes) or 1),
        "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_GTIDS": ",".join(str(t) for t in range(spec.ntasks)
                                if node_of_task(spec.tasks_per_node, t)[0] == node_idx),
        "SLURM_DISTRIBUTION": "block", "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
        "SLURM_SRUN_COMM_HOST": "127.0.0.1", "SLURM_UMASK": "0022",
        "CORRAL_STEP_ID": str(spec.step_id), "CORRAL_PROCID": str(task),
    })
    if spec.nodes:
        env["SLURMD_NODENAME"] = spec.nodes[node_idx]
        env["SLURM_TOPOLOGY_ADDR"] = spec.nodes[node_idx]
    if spec.cpus_per_task:
        env["SLURM_CPUS_PER_TASK"] = str(spec.cpus_per_task)
    env.update(spec.extra_env)
    return env


class _Labeler(threading.Thread):
    """Copy one task stream to a sink, line by line, with an optional ``N: `` prefix."""

    def __init__(self, src: IO[bytes], sink: Callable[[bytes], None], prefix: bytes) -> None:
        super().__init__(daemon=True)
        self.src = src
        self.sink = sink
        self.prefix = prefix

    def run(self) -> None:
        partial = b""
        fd = self.src.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            data = partial + chunk
            lines = data.split(b"\n")
            partial = lines.pop()
            if lines:
                self.sink(b"".join(self.prefix + ln + b"\n" for ln in lines))
        if partial:
            self.sink(self.prefix + partial + b"\n")
        self.src.close()


class _Sink:
    """A locked writer to an fd (srun's stdout/stderr or a shared output file)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def __call__(self, data: bytes) -> None:
        with self.lock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self.fd, view)
                except BlockingIOError:
                    time.sleep(0.001)
                    continue
                except OSError:
                    return
                view = view[n:]


def _ancestors(pid: int) -> list[int]:
    out: list[int] = []
    cur = pid
    for _ in range(64):
        try:
            with open(f"/proc/{cur}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            break
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        if ppid <= 0:
            break
        out.append(ppid)
        cur = ppid
    return out


class StepRunner:
    """Launch the tasks of ``spec`` and supervise them until all have exited."""

    def __init__(self, spec: StepSpec, *, stdout_fd: int = 1, stderr_fd: int = 2,
                 stdin_fd: int = 0, err: Callable[[str], None] | None = None,
                 alive: Callable[[], bool] | None = None, alive_every_s: float = 1.0) -> None:
        self.spec = spec
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.stdin_fd = stdin_fd
        self.err = err or (lambda s: os.write(2, (s + "\n").encode()) and None)
        self.alive = alive
        self.alive_every_s = alive_every_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.threads: list[threading.Thread] = []
        self.files: list[IO[Any]] = []
        self.revoked = False
        self._mem_allowed: tuple[int, ...] | None = None  # --mem-bind: nodes we may use

    # ---- I/O set-up --------------------------------------------------------------------
    def _open(self, path: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if self.spec.append else os.O_TRUNC)
        full = path if path.startswith("/") else os.path.join(self.spec.cwd, path)
        return os.open(full, flags, 0o644)

    def _stream_targets(self, pattern: str | None, default_fd: int) -> list[int]:
        spec = self.spec
        if pattern is None or pattern == "":
            return [default_fd] * spec.ntasks
        if pattern.lower() == "none":
            fd = os.open(os.devnull, os.O_WRONLY)
            return [fd] * spec.ntasks
        if varies_per_task(pattern):
            return [self._open(expand_pattern(pattern, spec, t,
                                              node_of_task(spec.tasks_per_node, t)[0]))
                    for t in range(spec.ntasks)]
        fd = self._open(expand_pattern(pattern, spec, 0, 0))
        return [fd] * spec.ntasks

    def _stdin_for(self, task: int) -> Any:
        mode = self.spec.input
        if mode is None or mode.lower() == "all":
            if self.spec.ntasks == 1:
                return self.stdin_fd
            return subprocess.PIPE
        if mode.lower() == "none":
            return subprocess.DEVNULL
        if mode.isdigit():
            return self.stdin_fd if int(mode) == task else subprocess.DEVNULL
        path = expand_pattern(mode, self.spec, task,
                              node_of_task(self.spec.tasks_per_node, task)[0])
        full = path if path.startswith("/") else os.path.join(self.spec.cwd, path)
        f = open(full, "rb")  # noqa: SIM115 - closed in run()
        self.files.append(f)
        return f

    # ---- running ------------------------------------------------------------------------
    def run(self) -> int:
        spec = self.spec
        out_fds = self._stream_targets(spec.output, self.stdout_fd)
        err_pattern = spec.error if spec.error is not None else spec.output
        err_fds = self._stream_targets(err_pattern, self.stderr_fd) if spec.error is not None \
            else ([self.stderr_fd] * spec.ntasks if spec.output is None else out_fds)
        width = len(str(max(0, spec.ntasks - 1)))
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, (*FORWARDED, signal.SIGCHLD))

        def unblock() -> None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

        sinks: dict[int, _Sink] = {}
        pending_copies: list[tuple[IO[bytes], int, bytes]] = []
        try:
            for t in range(spec.ntasks):
                stdin = self._stdin_for(t)
                stdout: Any = subprocess.PIPE if spec.label else out_fds[t]
                stderr: Any = subprocess.PIPE if spec.label else err_fds[t]
                env = task_env(spec, t)
                bound = self._binding(t, env)
                mems = self._mem_binding(t, bound, env)

                def setup(bound: tuple[int, ...] = bound, mems: Any = mems,
                          t: int = t) -> None:
                    unblock()
                    if bound:
                        os.sched_setaffinity(0, bound)
                    if mems is not None:
                        from corral.agent import membind

                        membind.report(mems, spec.nodes[0] if spec.nodes else "localhost",
                                       t, t)  # one node: the local id is the task id
                        with contextlib.suppress(OSError):  # within the job's mems: no
                            membind.apply(mems)  # failure is expected; unbound if one

                try:
                    p = subprocess.Popen(spec.argv, cwd=spec.cwd, env=env,
                                         stdin=stdin, stdout=stdout, stderr=stderr,
                                         preexec_fn=setup, close_fds=True)
                except OSError as exc:
                    self.err(f"srun: error: {spec.nodes[0] if spec.nodes else 'localhost'}: "
                             f"task {t}: {exc.strerror or exc}: {spec.argv[0]}")
                    self._kill_all(signal.SIGKILL)
                    return 2
                self.procs.append(p)
                if spec.label:
                    prefix = f"{t:>{width}}: ".encode()
                    assert p.stdout is not None and p.stderr is not None
                    pending_copies.append((p.stdout, out_fds[t], prefix))
                    pending_copies.append((p.stderr, err_fds[t], prefix))
            for src, fd, prefix in pending_copies:
                sink = sinks.setdefault(fd, _Sink(fd))
                labeler = _Labeler(src, sink, prefix)
                labeler.start()
                self.threads.append(labeler)
            if any(p.stdin is not None for p in self.procs):
                copier = threading.Thread(target=self._broadcast_stdin, daemon=True)
                copier.start()
            return self._supervise()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            for th in self.threads:
                th.join(timeout=2.0)
            for fd in set(out_fds + err_fds):
                if fd not in (self.stdout_fd, self.stderr_fd):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            for f in self.files:
                f.close()

    def _binding(self, task: int, env: dict[str, str]) -> tuple[int, ...]:
        """CPUs of task ``task`` (this node's share of the job: srun's own affinity)."""
        from corral.agent import cpubind
        from corral.agent.stepd import core_siblings

        try:
            mine = tuple(sorted(os.sched_getaffinity(0)))
        except OSError:
            return ()
        _node, local = node_of_task(self.spec.tasks_per_node, task)
        here = self.spec.tasks_per_node[_node] if self.spec.tasks_per_node else self.spec.ntasks
        try:
            bind = cpubind.bind_task(self.spec.cpu_bind, cpubind.cores_of(mine, core_siblings()),
                                     local, here, self.spec.cpus_per_task or 1)
        except cpubind.CpuBindError:
            return ()
        env.update(bind.env)
        return bind.cpus

    def _mem_binding(self, task: int, cpus: tuple[int, ...], env: dict[str, str]) -> Any:
        """The memory binding of task ``task`` on ``cpus`` (None: no --mem-bind)."""
        if not self.spec.mem_bind:
            return None
        from corral.agent import membind

        _node, local = node_of_task(self.spec.tasks_per_node, task)
        if not cpus:
            try:
                cpus = tuple(sorted(os.sched_getaffinity(0)))
            except OSError:
                cpus = ()
        if self._mem_allowed is None:  # read once a step (sysfs and /proc/self/status)
            self._mem_allowed = membind.allowed_nodes()
        try:
            binding = membind.bind_task(self.spec.mem_bind, local, cpus, self._mem_allowed)
        except membind.MemBindError:
            return None
        env.update(binding.env)
        return binding

    def _broadcast_stdin(self) -> None:
        pipes = [p.stdin for p in self.procs if p.stdin is not None]
        while pipes:
            try:
                chunk = os.read(self.stdin_fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            for pipe in list(pipes):
                try:
                    pipe.write(chunk)
                    pipe.flush()
                except OSError:
                    pipes.remove(pipe)
        for pipe in pipes:
            try:
                pipe.close()
            except OSError:
                pass

    def _kill_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    def _forward(self, info: Any) -> None:
        sender = int(getattr(info, "si_pid", 0) or 0)
        if sender == 0:
            return  # the kernel: a terminal key, the tasks got it themselves
        ancestors = _ancestors(os.getpid())
        if sender in ancestors[1:]:
            return  # the job's supervisor signals every process of the job
        self._kill_all(info.si_signo)

    def _supervise(self) -> int:
        codes: dict[int, int] = {}
        next_alive = time.monotonic() + self.alive_every_s
        kill_at: float | None = None
        sigs = {*FORWARDED, signal.SIGCHLD}
        while len(codes) < len(self.procs):
            info = signal.sigtimedwait(sigs, 0.2)
            if info is not None and info.si_signo != signal.SIGCHLD:
                self._forward(info)
            for t, p in enumerate(self.procs):
                if t not in codes and p.poll() is not None:
                    codes[t] = p.returncode
                    if p.returncode != 0 and self.spec.kill_on_bad_exit and kill_at is None:
                        self._kill_all(signal.SIGTERM)
                        kill_at = time.monotonic() + 2.0
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                self._kill_all(signal.SIGKILL)
                kill_at = now + 3600
            if self.alive is not None and now >= next_alive:
                next_alive = now + self.alive_every_s
                if not self.revoked and not self.alive():
                    self.revoked = True
                    self.err(f"srun: error: Job allocation {self.spec.job_id} has been revoked")
                    self._kill_all(signal.SIGTERM)
                    kill_at = now + 2.0
        return self._report(codes)

    def _report(self, codes: dict[int, int]) -> int:
        node = self.spec.nodes[0] if self.spec.nodes else "localhost"
        groups: dict[str, list[int]] = {}
        worst = 0
        for t in sorted(codes):
            rc = codes[t]
            if rc == 0:
                continue
            if rc < 0:
                try:
                    what = signal.strsignal(-rc) or f"Signal {-rc}"
                except ValueError:
                    what = f"Signal {-rc}"
                worst = max(worst, 128 - rc)
            else:
                what = f"Exited with exit code {rc}"
                worst = max(worst, rc)
            groups.setdefault(what, []).append(t)
        for what, tasks in groups.items():
            from corral.core.parse.arrayspec import format_array

            label = f"task {tasks[0]}" if len(tasks) == 1 else f"tasks {format_array(tasks)}"
            self.err(f"srun: error: {node}: {label}: {what}")
        return worst
