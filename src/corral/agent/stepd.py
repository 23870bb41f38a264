"""The step process: one node's share of an ``srun`` step (what slurmstepd does per step).

The job's supervisor on the node forks it (``Supervisor.start_step``) when the agent
passes on a ``step`` message, so it is a descendant of the supervisor: cancel, signals,
time limits, suspension and the end of the job reach it and its tasks like any other job
process. It runs as root until each task's fork, and:

1. joins the job's cgroup on this node (its memory, CPUs, pids limit bound every step);
2. connects to ``srun``'s I/O address and sends ``HELLO`` with the step's key
   (``corral.protocol.step``);
3. starts this node's tasks: each in its own process group, with the ``SLURM_*`` task
   variables, bound to its CPUs (``cpubind``), as the job's user (uid, gid and groups of
   the job's request on this node, never anything srun sent), in srun's working
   directory (``/tmp`` with a message when it does not exist here, as slurmstepd does);
   files named by ``--output/--error/--input`` are opened by the task itself after the
   user switch, so a user can never make root write through a link;
4. relays task stdout/stderr to srun (or the task writes its file), srun's stdin to the
   tasks that read it, signals from srun to every task's process group; a pty step runs
   task 0 on a pseudo-terminal with the window size srun reports;
5. runs the cluster's ``task_prolog`` and srun's ``--task-prolog`` in each task's
   process before its exec, srun's ``--task-epilog`` and the cluster's ``task_epilog``
   after each task ended (``jobscripts.run_task_prologs``/``run_task_epilogs``);
6. reports each task's exit (``EXIT``) and, when all are gone, the node's usage
   (``DONE``: CPU time and peak RSS of its tasks), then exits.

If srun's connection breaks, the tasks are killed (a step lives as long as its srun).
The step process ignores the termination signals the job gets (they reach the tasks
directly) so it can still report the exits; SIGKILL ends it.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import selectors
import signal
import socket
import struct
import termios
import time
from typing import Any, NoReturn

from corral.agent import cpubind, jobscripts, membind
from corral.agent.launch import LaunchRequest
from corral.core.parse.hostlist import compress
from corral.protocol import step as sp

_NODE_VARS = ("SLURMD_NODENAME", "CORRAL_NODE_NAME", "SLURM_CPUS_ON_NODE",
              "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS",
              "SLURM_GPUS_ON_NODE", "SLURM_TOPOLOGY_ADDR")
_DRAIN_AFTER_EXIT_S = 0.5  # output of a task's leftover children, after its exit
_CONNECT_TIMEOUT_S = 15.0


class _Task:
    def __init__(self, gid: int, local: int) -> None:
        self.gid = gid
        self.local = local
        self.pid = 0
        self.out_fd = -1
        self.err_fd = -1
        self.in_fd = -1
        self.pty_fd = -1
        self.status: int | None = None
        self.cpu_s = 0.0
        self.rss_kb = 0
        self.env: dict[str, str] = {}  # its environment (srun --task-epilog runs with it)


def expand(pattern: str, launch: sp.StepLaunch, task: int, node_index: int,
           user: str) -> str:
    """srun's file pattern for one task (``%j %J %s %t %n %N %u %x %A %a %%``, ``%4t``)."""
    env = launch.env
    values = {
        "j": str(launch.job_id), "J": f"{launch.job_id}.{launch.step_id}",
        "s": str(launch.step_id), "t": str(task), "n": str(node_index),
        "N": launch.nodes[node_index], "u": user, "x": launch.job_name,
        "A": env.get("SLURM_ARRAY_JOB_ID", str(launch.job_id)),
        "a": env.get("SLURM_ARRAY_TASK_ID", "4294967294"),
    }
    return sp.expand_values(pattern, values)


def task_environment(launch: sp.StepLaunch, node_env: dict[str, str], node_index: int,
                     task: int, local: int, io_host: str) -> dict[str, str]:
    """srun's environment + this node's job variables + the task's step variables."""
    env = dict(launch.env)
    for key, value in node_env.items():
        if key in _NODE_VARS or key not in env:
            env[key] = value
    for key in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS",
                "SLURM_GPUS_ON_NODE"):
        if key not in node_env:
            env.pop(key, None)  # srun's node had GPUs, this one gives the job none
    gtids = launch.tasks[node_index]
    env.update({
        "SLURM_STEP_ID": str(launch.step_id), "SLURM_STEPID": str(launch.step_id),
        "SLURM_PROCID": str(task), "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node_index), "SLURM_NTASKS": str(launch.ntasks),
        "SLURM_NPROCS": str(launch.ntasks), "SLURM_STEP_NUM_TASKS": str(launch.ntasks),
        "SLURM_STEP_NUM_NODES": str(len(launch.nodes)),
        "SLURM_STEP_NODELIST": compress(launch.nodes, sort=False),
        "SLURM_STEP_TASKS_PER_NODE": _tasks_per_node(launch.tasks_per_node),
        "SLURM_TASKS_PER_NODE": env.get("SLURM_TASKS_PER_NODE")
        or _tasks_per_node(launch.tasks_per_node),
        "SLURM_GTIDS": ",".join(str(t) for t in gtids),
        "SLURM_DISTRIBUTION": launch.distribution or "block",
        "SLURM_LAUNCH_NODE_IPADDR": io_host, "SLURM_SRUN_COMM_HOST": io_host,
        "SLURM_STEP_LAUNCHER_PORT": launch.io_addr.rsplit(":", 1)[-1],
        "SLURM_UMASK": env.get("SLURM_UMASK", "0022"),
        "SLURM_CPUS_PER_TASK": str(launch.cpus_per_task),
        "CORRAL_STEP_ID": str(launch.step_id), "CORRAL_PROCID": str(task),
    })
    if launch.cpus_per_task <= 1 and "SLURM_CPUS_PER_TASK" not in launch.env:
        env.pop("SLURM_CPUS_PER_TASK", None)
    gpus = gpus_of_task(launch, node_env.get("CUDA_VISIBLE_DEVICES", ""), local)
    if gpus is not None:
        for key in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
            env[key] = gpus
    env.update(launch.extra_env)
    env.update(launch.task_env.get(str(task), {}))  # e.g. PMI_RANK/PMI_ID (--mpi=pmi2)
    return env


def gpus_of_task(launch: sp.StepLaunch, node_gpus: str, local: int) -> str | None:
    """The GPUs task ``local`` sees (``--gpus-per-task`` binds each task to its own,
    ``--gpu-bind=none`` leaves all, ``map_gpu:`` picks one by local task id, ``mask_gpu:``
    a hex mask of GPU ids by local task id), or None to keep
    the job's. Never a GPU outside the job's on this node."""
    ids = [g for g in node_gpus.split(",") if g]
    bind = launch.gpu_bind or ""
    if not ids or bind.startswith("none"):
        return None
    if bind.startswith("map_gpu:"):
        pick = [g.strip() for g in bind.split(":", 1)[1].split(",") if g.strip()]
        mine = pick[local % len(pick)] if pick else ""
        return mine if mine in ids else None
    if bind.startswith("mask_gpu:"):  # task i: the GPUs of hex mask i (the job's only)
        masks = [m.strip() for m in bind.split(":", 1)[1].split(",") if m.strip()]
        try:
            bits = int(masks[local % len(masks)], 16) if masks else 0
        except ValueError:
            return None
        got = [g for g in ids if g.isdigit() and bits >> int(g) & 1]
        return ",".join(got) if got else None
    per = launch.gpus_per_task
    if per <= 0 and bind.startswith("per_task:"):
        tail = bind.split(":", 1)[1]
        per = int(tail) if tail.isdigit() else 0
    if per <= 0:
        return None
    start = (local * per) % len(ids)
    return ",".join(ids[(start + k) % len(ids)] for k in range(min(per, len(ids))))


def _tasks_per_node(counts: list[int]) -> str:
    """Slurm's run-length form: ``2(x3),1``."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out.append(str(counts[i]) + (f"(x{j - i})" if j - i > 1 else ""))
        i = j
    return ",".join(out)


def connect_to(io_addr: str, timeout_s: float) -> socket.socket:
    """A TCP connection to ``host:port`` (``[v6]:port``). A numeric address is connected
    directly: ``create_connection`` would resolve it through ``getaddrinfo``, whose "idna"
    encoding of the host costs a module import in every new step process."""
    host, _, port = io_addr.rpartition(":")
    host = host.strip("[]")
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect((host, int(port)))
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection((host, int(port)), timeout=timeout_s)


class StepProcess:
    def __init__(self, launch: sp.StepLaunch, req: LaunchRequest, node_name: str,
                 node_env: dict[str, str], iso: Any, switch_user: bool,
                 groups: tuple[int, ...], core_cpus: list[tuple[int, ...]] | None) -> None:
        self.launch = launch
        self.req = req
        self.node = node_name
        self.node_index = launch.nodes.index(node_name)
        self.node_env = node_env
        self.iso = iso
        self.switch_user = switch_user
        self.groups = groups
        self.cores = cpubind.cores_of(tuple(req.cpus), core_cpus)
        self.tasks = [_Task(g, i) for i, g in enumerate(launch.tasks[self.node_index])]
        self.sock: socket.socket | None = None
        self.sel = selectors.DefaultSelector()
        self.fd_task: dict[int, tuple[_Task, int]] = {}
        self.last_exit = 0.0
        self.lost = False
        self.container: Any = None  # a container step: its plan (corral.agent.container)
        self.root = ""  # ... and the root its tasks chroot into
        self.container_error = ""  # ... or why it could not be set up (tasks fail with it)
        self.log: Any = None  # the supervisor's log (a failed --task-epilog is told there)
        self._mem_allowed: tuple[int, ...] | None = None  # NUMA nodes the job may use

    # ---- connection to srun ---------------------------------------------------------------
    def connect(self) -> None:
        self.sock = connect_to(self.launch.io_addr, _CONNECT_TIMEOUT_S)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send(sp.HELLO, 0, sp.encode_json({
            "key": self.launch.io_key, "node": self.node, "node_index": self.node_index,
            "tasks": self.launch.tasks[self.node_index]}))

    def send(self, kind: int, task: int, payload: bytes = b"") -> None:
        if self.sock is None or self.lost:
            return
        try:
            self.sock.sendall(sp.pack(kind, task, payload))
        except OSError:
            self.lost = True

    # ---- tasks ----------------------------------------------------------------------------
    def mem_binding(self, local: int, cpus: tuple[int, ...],
                    env: dict[str, str]) -> membind.MemBinding | None:
        """Task ``local``'s memory binding on ``cpus`` (None: no ``--mem-bind``, or one the
        node cannot read: the task runs unbound, as with a bad ``--cpu-bind``)."""
        if not self.launch.mem_bind:
            return None
        if self._mem_allowed is None:
            self._mem_allowed = membind.allowed_nodes()
        try:
            binding = membind.bind_task(self.launch.mem_bind, local, cpus, self._mem_allowed)
        except membind.MemBindError:
            return None
        env.update(binding.env)
        return binding

    def _stdin_mode(self, task: _Task) -> str:
        """"pipe", "null" or "file" for this task."""
        mode = self.launch.input
        if self.launch.pty:
            return "pty" if task.gid == 0 else "null"
        if mode in (None, "", "all"):
            return "pipe"
        if mode == "none":
            return "null"
        if mode.isdigit():
            return "pipe" if int(mode) == task.gid else "null"
        return "file"

    def start_task(self, task: _Task) -> None:
        launch = self.launch
        io_host = launch.io_addr.rpartition(":")[0].strip("[]")
        env = task_environment(launch, self.node_env, self.node_index, task.gid, task.local,
                               io_host)
        try:
            bind = cpubind.bind_task(launch.cpu_bind, self.cores, task.local,
                                     len(self.tasks), launch.cpus_per_task)
        except cpubind.CpuBindError:
            bind = cpubind.Binding((), {})
        env.update(bind.env)
        mems = self.mem_binding(task.local, bind.cpus or tuple(self.req.cpus), env)
        task.env = env
        in_mode = self._stdin_mode(task)
        pipes: dict[str, tuple[int, int]] = {}
        if in_mode == "pty":
            master, slave = os.openpty()
            pipes["pty"] = (master, slave)
        else:
            if in_mode == "pipe":
                pipes["in"] = os.pipe()
            if not launch.output:
                pipes["out"] = os.pipe()
            if not launch.error and launch.output is None:
                pipes["err"] = os.pipe()
        out_path = expand(launch.output, launch, task.gid, self.node_index, self.req.user) \
            if launch.output else None
        err_path = expand(launch.error, launch, task.gid, self.node_index, self.req.user) \
            if launch.error else None
        in_path = expand(launch.input, launch, task.gid, self.node_index, self.req.user) \
            if in_mode == "file" and launch.input else None
        per_task = launch.output is not None and "%t" in launch.output
        pid = os.fork()
        if pid == 0:
            self._exec_task(task, env, bind.cpus, pipes, out_path, err_path, in_path,
                            per_task, mems)
        task.pid = pid
        for key, (r, w) in pipes.items():
            if key == "pty":
                os.close(w)
                task.pty_fd = r
                os.set_blocking(r, False)
                self.sel.register(r, selectors.EVENT_READ)
                self.fd_task[r] = (task, sp.STDOUT)
            elif key == "in":
                os.close(r)
                task.in_fd = w
            else:
                os.close(w)
                os.set_blocking(r, False)
                self.sel.register(r, selectors.EVENT_READ)
                self.fd_task[r] = (task, sp.STDOUT if key == "out" else sp.STDERR)
                if key == "out":
                    task.out_fd = r
                else:
                    task.err_fd = r

    def _exec_task(self, task: _Task, env: dict[str, str], cpus: tuple[int, ...],
                   pipes: dict[str, tuple[int, int]], out_path: str | None,
                   err_path: str | None, in_path: str | None, per_task: bool,
                   mems: membind.MemBinding | None = None) -> NoReturn:
        stage = "setup"
        try:
            for sig in range(1, signal.NSIG):
                if sig in (signal.SIGKILL, signal.SIGSTOP):
                    continue
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            if "pty" in pipes:
                os.setsid()
                master, slave = pipes["pty"]
                os.close(master)
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                if slave > 2:
                    os.close(slave)
            else:
                os.setpgid(0, 0)
            if cpus:
                stage = "cpu binding"
                os.sched_setaffinity(0, cpus)
            elif self.req.cpus:
                os.sched_setaffinity(0, self.req.cpus)
            if mems is not None and mems.nodes:
                stage = "memory binding"
                membind.apply(mems)
            prologs = [p for p in (self.req.task_prolog, self.launch.task_prolog) if p]
            early: tuple[str, int, list[str]] | None = None
            if prologs and self.container is not None:  # the host's programs: before the
                env["SLURM_TASK_PID"] = str(os.getpid())  # chroot, as the user, by fork
                creds = (self.req.uid, self.req.gid, self.groups) if self.switch_user \
                    else None
                early = jobscripts.run_task_prologs(prologs, env, self.req.script_timeout_s,
                                                    creds=creds, cwd=self.launch.cwd)
            cwd, argv = self.launch.cwd, self.launch.argv
            if self.container is not None and not self.container.sif:
                # the plan's process: --container-workdir / the image's WorkingDir, and
                # the image's ENTRYPOINT (and CMD) with --container-entrypoint
                proc = self.container.config["process"]
                cwd, argv = str(proc["cwd"]), [str(a) for a in proc["args"]]
            if self.container is not None:  # (imports before the chroot: no sources there)
                from corral.agent import aptenv
                from corral.agent.container import chroot_task, image_env

                stage = "container"
                chroot_task(self.root, cwd)
                env = image_env(env, self.container)
                if self.container.sif:  # Apptainer's exec environment (aptenv)
                    env = aptenv.step_env(env, self.container.sif, self.container.keep_env,
                                          "run" if self.container.sif_run else "exec")
            if self.switch_user:
                stage = f"switching to uid {self.req.uid}"
                os.setgroups(list(self.groups))
                os.setgid(self.req.gid)
                os.setuid(self.req.uid)
            note = b""
            try:
                os.chdir(cwd)
            except OSError as exc:
                note = (f"slurmstepd: error: couldn't chdir to `{cwd}': "
                        f"{exc.strerror}: going to /tmp instead\n").encode()
                os.chdir("/tmp")
            if "pty" not in pipes:
                if "in" in pipes:
                    os.dup2(pipes["in"][0], 0)
                elif in_path:
                    stage = f"cannot open input file {in_path}"
                    fd = os.open(in_path, os.O_RDONLY)
                    os.dup2(fd, 0)
                    os.close(fd)
                else:
                    fd = os.open("/dev/null", os.O_RDONLY)
                    os.dup2(fd, 0)
                    os.close(fd)
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
                flags |= os.O_TRUNC if (per_task and not self.launch.append) else os.O_APPEND
                if out_path:
                    stage = f"cannot open output file {out_path}"
                    fd = os.open(out_path, flags, 0o644)
                    os.dup2(fd, 1)
                    os.close(fd)
                else:
                    os.dup2(pipes["out"][1], 1)
                if err_path:
                    stage = f"cannot open error file {err_path}"
                    fd = os.open(err_path, flags & ~os.O_TRUNC | os.O_APPEND, 0o644)
                    os.dup2(fd, 2)
                    os.close(fd)
                elif "err" in pipes:
                    os.dup2(pipes["err"][1], 2)
                else:
                    os.dup2(1, 2)
                for r, w in pipes.values():
                    for fd in (r, w):
                        if fd > 2:
                            os.close(fd)
            if note:
                os.write(2, note)
            if mems is not None:
                membind.report(mems, self.node, task.gid, task.local)
            for text in self.container.warnings if self.container is not None else ():
                os.write(2, text.encode())
            if self.container_error:  # told on the task's stderr, which srun relays
                stage = "container"
                raise OSError(errno.EINVAL, self.container_error)
            env["SLURM_TASK_PID"] = str(os.getpid())
            if prologs:
                stage = "TaskProlog"
                self._prolog_outcome(early if early is not None else jobscripts.run_task_prologs(
                    prologs, env, self.req.script_timeout_s, creds=None, cwd=os.getcwd()))
            if self.container is not None and self.container.sif:
                argv, env = aptenv.in_tree(argv, env, runscript=self.container.sif_run)
            stage = f"execve(): {argv[0]}"
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:  # noqa: B036 - report, then leave as slurmstepd does
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            try:
                os.write(2, f"slurmstepd: error: {stage}: {detail}\n".encode())
            finally:
                os._exit(2 if isinstance(exc, OSError) and exc.errno == errno.ENOENT else 1)
        os._exit(1)

    @staticmethod
    def _prolog_outcome(outcome: tuple[str, int, list[str]]) -> None:
        """With the task's output open: the ``print`` lines on its standard output; a
        failure on its standard error, and the task ends with the prolog's status
        (slurmstepd's ``TaskProlog failed status=N``)."""
        failure, status, prints = outcome
        if prints:
            os.write(1, "".join(line + "\n" for line in prints).encode())
        if failure:
            os.write(2, failure.encode())
            os._exit(status)

    def _task_epilog(self, task: _Task) -> None:
        """srun's ``--task-epilog``, then the cluster's ``task_epilog``, after ``task``
        ended, as the user, with the task's environment, before its exit is reported (as
        slurmstepd does)."""
        creds = (self.req.uid, self.req.gid, self.groups) if self.switch_user else None
        paths = [p for p in (self.launch.task_epilog, self.req.task_epilog) if p]
        for failure in jobscripts.run_task_epilogs(
                paths, dict(task.env, SLURM_TASK_PID=str(task.pid)),
                self.req.script_timeout_s, creds=creds, cwd=self.launch.cwd):
            if self.log is not None:
                self.log(f"step {self.launch.step_id} task {task.gid}: TaskEpilog {failure}")

    # ---- relay ----------------------------------------------------------------------------
    def _close_fd(self, fd: int) -> None:
        self.fd_task.pop(fd, None)
        try:
            self.sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        os.close(fd)

    def _from_srun(self, data: bytes, reader: sp.FrameReader) -> None:
        for kind, task, payload in reader.feed(data):
            if kind == sp.STDIN:
                for t in self.tasks:
                    if task in (sp.ALL_TASKS, t.gid):
                        fd = t.in_fd if t.in_fd >= 0 else t.pty_fd
                        if fd >= 0:
                            try:
                                os.write(fd, payload)
                            except OSError:
                                pass
            elif kind == sp.STDIN_EOF:
                for t in self.tasks:
                    if task in (sp.ALL_TASKS, t.gid):
                        if t.in_fd >= 0:
                            os.close(t.in_fd)
                            t.in_fd = -1
                        elif t.pty_fd >= 0:
                            try:
                                os.write(t.pty_fd, b"\x04")
                            except OSError:
                                pass
            elif kind == sp.SIGNAL:
                self.signal_tasks(int(payload or b"15"))
            elif kind == sp.WINCH:
                rows, _, cols = payload.decode().partition(" ")
                for t in self.tasks:
                    if t.pty_fd >= 0 and rows.isdigit() and cols.isdigit():
                        fcntl.ioctl(t.pty_fd, termios.TIOCSWINSZ,
                                    struct.pack("HHHH", int(rows), int(cols), 0, 0))

    def signal_tasks(self, sig: int) -> None:
        for t in self.tasks:
            if t.pid and t.status is None:
                try:
                    os.killpg(t.pid, sig)
                except (ProcessLookupError, PermissionError):
                    try:
                        os.kill(t.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass

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
            for t in self.tasks:
                if t.pid == pid:
                    t.status = status
                    t.cpu_s = ru.ru_utime + ru.ru_stime
                    t.rss_kb = ru.ru_maxrss
                    if self.launch.task_epilog or self.req.task_epilog:
                        self._task_epilog(t)
                    self.last_exit = time.monotonic()
                    code = os.waitstatus_to_exitcode(status)
                    self.send(sp.EXIT, t.gid, sp.encode_json(
                        {"exit_code": code if code >= 0 else 0,
                         "signal": -code if code < 0 else 0}))
                    if t.in_fd >= 0:
                        os.close(t.in_fd)
                        t.in_fd = -1

    def run(self) -> None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                    signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        self.connect()
        assert self.sock is not None
        for t in self.tasks:
            try:
                self.start_task(t)
            except OSError as exc:
                self.send(sp.FAILED, t.gid, f"{self.node}: task {t.gid}: {exc}".encode())
                t.status = 1 << 8
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.sel.register(wake_r, selectors.EVENT_READ)
        reader = sp.FrameReader()
        while True:
            self.reap()
            alive = [t for t in self.tasks if t.status is None]
            if not alive:
                if not self.fd_task:
                    break
                if time.monotonic() - self.last_exit > _DRAIN_AFTER_EXIT_S:
                    break
            timeout = 0.1 if not alive else 1.0
            for key, _ in self.sel.select(timeout):
                fd = key.fd
                if fd == wake_r:
                    try:
                        os.read(wake_r, 512)
                    except OSError:
                        pass
                    continue
                if key.fileobj is self.sock:
                    try:
                        data = self.sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:  # srun is gone: so is the step
                        self.lost = True
                        self.sel.unregister(self.sock)
                        self.signal_tasks(signal.SIGKILL)
                        continue
                    try:
                        self._from_srun(data, reader)
                    except ValueError:
                        self.lost = True
                        self.signal_tasks(signal.SIGKILL)
                    continue
                task, kind = self.fd_task[fd]
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # a pty reads EIO once its last writer closed
                    chunk = b""
                if chunk:
                    self.send(kind, task.gid, chunk)
                else:
                    self._close_fd(fd)
                    if fd == task.pty_fd:
                        task.pty_fd = -1
        for fd in list(self.fd_task):
            self._close_fd(fd)
        done: dict[str, Any] = {
            "node": self.node,
            "cpu_time_s": round(sum(t.cpu_s for t in self.tasks), 3),
            "max_rss_mb": round(max((t.rss_kb for t in self.tasks), default=0) / 1024.0, 3),
            "pids": [t.pid for t in self.tasks]}
        if self.container_error:  # the tasks never started: srun records why (the step's
            done["error"] = self.container_error  # "error", a pod's CreateContainerError)
        self.send(sp.DONE, 0, sp.encode_json(done))
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def step_container(launch: sp.StepLaunch, req: LaunchRequest, node_name: str,
                   groups: tuple[int, ...], jdir: str, containers: str
                   ) -> tuple[Any, str, str]:
    """A container step (``srun --container-image``): (plan, root, "") with the image
    set up for this node's tasks (``container.enter_shared``), or (None, "", why not).
    The image stays pinned while this step process lives."""
    import dataclasses

    from corral.agent.container import enter_shared
    from corral.agent.ctrjob import PrepareError, prepare
    from corral.agent.runtimes import ContainerSettings
    from corral.containers.spec import ContainerError, ContainerSpec

    try:
        spec = ContainerSpec.from_text(launch.container)
        prepared = prepare(spec, dataclasses.replace(req, workdir=launch.cwd),
                           ContainerSettings.from_text(containers), jdir=jdir,
                           node=node_name, step=f"s{launch.step_id}", command=launch.argv,
                           env=launch.env, groups=groups, cgroup_rel=None, script=False)
        return prepared.plan, enter_shared(prepared.plan), ""
    except (PrepareError, ContainerError, OSError) as exc:
        return None, "", str(exc)


def main(launch_json: dict[str, Any], req: LaunchRequest, node_name: str,
         node_env: dict[str, str], iso: Any, switch_user: bool, groups: tuple[int, ...],
         core_cpus: list[tuple[int, ...]] | None, log: Any, *, jdir: str = "",
         containers: str = "") -> NoReturn:
    """Entry point in the forked step process; never returns."""
    code = 0
    try:
        from corral.agent.proctree import set_process_name

        set_process_name("corral-step")
        launch = sp.StepLaunch.from_json(launch_json)
        if iso is not None:
            iso.attach(os.getpid())
        proc = StepProcess(launch, req, node_name, node_env, iso, switch_user, groups,
                           core_cpus)
        proc.log = log
        if launch.container:
            proc.container, proc.root, proc.container_error = step_container(
                launch, req, node_name, groups, jdir, containers)
            if proc.container_error:
                log(f"step {launch.step_id}: {proc.container_error}")
        proc.run()
    except BaseException as exc:  # noqa: B036 - never back into the supervisor's code
        code = 1
        try:
            log(f"step {launch_json.get('step_id')}: {exc!r}")
        except BaseException:  # noqa: B036
            pass
    os._exit(code)


@functools.cache
def core_siblings() -> list[tuple[int, ...]] | None:
    """This machine's logical CPUs grouped by core (``thread_siblings_list``), or None.
    Read once per process (the topology does not change under a running agent)."""
    out: dict[tuple[int, ...], None] = {}
    base = "/sys/devices/system/cpu"
    try:
        names = [n for n in os.listdir(base) if n.startswith("cpu") and n[3:].isdigit()]
    except OSError:
        return None
    for name in sorted(names, key=lambda n: int(n[3:])):
        try:
            with open(f"{base}/{name}/topology/thread_siblings_list") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        ids: list[int] = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                ids.extend(range(int(lo), int(hi or lo) + 1))
        if ids:
            out[tuple(sorted(ids))] = None
    return list(out) or None

