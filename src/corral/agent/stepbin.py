"""The compiled step process (``stepd.c``): its build, the plan it is given, and the job's
step server that runs it.

A step's share of a node is started either by forking the Python step process
(``corral.agent.stepd``) or, for the common case, by writing a *plan* to the job's step
server on the node (``StepServer``, ``stepd.c serve``), which forks a step process for
it: everything the Python step process would compute before its first
fork — each task's environment (``stepd.task_environment`` plus the CPU and memory
bindings' variables), CPUs (``cpubind.bind_task``), memory nodes (``membind.bind_task``:
``b:<nodes>`` for MPOL_BIND, ``p:<node>`` for MPOL_PREFERRED, empty for none), stdin
mode and file names (``stepd.expand``) — so that the binary only connects, forks, execs
and relays. Same frames, same messages, same exit status; no Python in the step process,
no copy-on-write faults of a Python heap in every task before its exec.

``plan_for`` returns None (the Python step process then runs the step) for what the binary
does not do: pty steps, container steps, ``--mem-bind=verbose`` steps (the report
line), steps with srun's ``--task-prolog`` or ``--task-epilog`` (or in a job with the
cluster's task prolog/epilog), an I/O address that is not numeric IPv4.

The binary is compiled once per source text with the system C compiler into a root-owned
cache directory (``/var/cache/corral`` for root, else ``$XDG_CACHE_HOME/corral``), named by
the source's hash, written under a temporary name and renamed; no compiler, or a build
that fails, means the Python step process for every step (logged once).

Plan format: netstrings (``<len>:<bytes>,``) in the order ``stepd.c``'s ``run_plan`` reads
them; on the server's inputs each plan is preceded by its length (``frame_of``).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corral.agent import cpubind, membind
from corral.agent.launch import LaunchRequest
from corral.protocol import step as sp

SOURCE = Path(__file__).with_name("stepd.c")
CFLAGS = ("-O2", "-std=gnu99", "-Wall", "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong")
_built: dict[str, str | None] = {}
_last: tuple[tuple[int, int, int], str | None] | None = None  # (source stat, binary())


def cache_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/cache/corral")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "corral"


def binary(log: Any = None) -> str | None:
    """The compiled step process's path (built on first use), or None."""
    global _last
    if os.environ.get("CORRAL_PY_STEPD"):
        return None  # forced: the Python step process (tests compare the two)
    try:  # asked once per step: the source is read again only when it changed
        st = SOURCE.stat()
    except OSError:
        return None
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    if _last is not None and _last[0] == key:
        return _last[1]
    try:
        text = SOURCE.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(text + " ".join(CFLAGS).encode()).hexdigest()[:16]
    if digest in _built:
        _last = (key, _built[digest])
        return _built[digest]
    out = cache_dir() / f"corral-stepd-{digest}"
    path: str | None = str(out)
    if not _trusted(out):
        try:
            _build(text, out)
        except (OSError, subprocess.SubprocessError, BuildFailed) as exc:
            if log is not None:
                log(f"compiled step process not available ({exc}); using the Python one")
            path = None
    _built[digest] = path
    _last = (key, path)
    return path


class BuildFailed(Exception):
    pass


def _trusted(path: Path) -> bool:
    """An executable file owned by us (or root) that nobody else can write."""
    try:
        st = path.lstat()
    except OSError:
        return False
    import stat

    return (stat.S_ISREG(st.st_mode) and st.st_uid in (0, os.geteuid())
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and bool(st.st_mode & 0o100))


def _build(text: bytes, out: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc")
    if not cc:
        raise BuildFailed("no C compiler (cc) on PATH")
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    st = out.parent.stat()
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise BuildFailed(f"{out.parent} is writable by others")
    with tempfile.TemporaryDirectory(prefix="corral-stepd-") as tmp:
        src = Path(tmp, "stepd.c")
        src.write_bytes(text)
        exe = Path(tmp, "stepd")
        r = subprocess.run([cc, *CFLAGS, "-o", str(exe), str(src)], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0 or not exe.exists():
            raise BuildFailed(f"{cc} failed: {(r.stderr or r.stdout).strip()[-400:]}")
        staged = out.with_name(f".{out.name}.{os.getpid()}")
        shutil.copyfile(exe, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, out)


def _net(value: str | bytes) -> bytes:
    data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
    return str(len(data)).encode() + b":" + data + b","


def _ints(values: Iterable[int]) -> str:
    return ",".join(str(int(v)) for v in values)


def plan_for(launch_json: dict[str, Any], req: LaunchRequest, node_name: str,
             node_env: dict[str, str], switch_user: bool, groups: tuple[int, ...],
             core_cpus: list[tuple[int, ...]] | None) -> bytes | None:
    """The plan of this node's tasks of one step, or None when the Python step process
    must run it (see the module docstring). Raises ValueError for a bad launch."""
    from corral.agent import stepd

    launch = sp.StepLaunch.from_json(launch_json)
    if launch.pty or launch.container:
        return None
    if launch.task_prolog or launch.task_epilog or req.task_prolog or req.task_epilog:
        return None  # srun's or the cluster's task prolog/epilog: the Python step process
        # (jobscripts.run_program + apply_task_prolog), which keeps one implementation
    host, _, port = launch.io_addr.rpartition(":")
    try:
        if ipaddress.ip_address(host).version != 4 or not port.isdigit():
            return None
    except ValueError:
        return None
    index = launch.nodes.index(node_name)
    gids = launch.tasks[index]
    cores = cpubind.cores_of(tuple(req.cpus), core_cpus)
    hello = sp.encode_json({"key": launch.io_key, "node": node_name, "node_index": index,
                            "tasks": gids})
    out = [_net(launch.io_addr), _net(hello), _net(node_name), _net("1" if switch_user else "0"),
           _net(str(req.uid)), _net(str(req.gid)), _net(_ints(groups)), _net(launch.cwd),
           _net(str(len(launch.argv))), *(_net(a) for a in launch.argv),
           _net(str(len(gids)))]
    per_task = launch.output is not None and "%t" in launch.output
    mem_allowed = membind.allowed_nodes() if launch.mem_bind else ()
    for local, gid in enumerate(gids):
        env = stepd.task_environment(launch, node_env, index, gid, local, host)
        try:
            bind = cpubind.bind_task(launch.cpu_bind, cores, local, len(gids),
                                     launch.cpus_per_task)
        except cpubind.CpuBindError:
            bind = cpubind.Binding((), {})
        env.update(bind.env)
        cpus = bind.cpus or tuple(req.cpus)
        mems = ""
        if launch.mem_bind:
            try:
                mbind = membind.bind_task(launch.mem_bind, local, cpus, mem_allowed)
            except membind.MemBindError:
                mbind = None
            if mbind is not None:
                if mbind.verbose:
                    return None  # its report line: the Python step process
                env.update(mbind.env)
                mems = mbind.plan_text()
        mode = launch.input
        if mode in (None, "", "all"):
            in_mode = "pipe"
        elif mode == "none":
            in_mode = "null"
        elif mode.isdigit():
            in_mode = "pipe" if int(mode) == gid else "null"
        else:
            in_mode = "file"
        in_path = stepd.expand(launch.input, launch, gid, index, req.user) \
            if in_mode == "file" and launch.input else ""
        out_path = stepd.expand(launch.output, launch, gid, index, req.user) \
            if launch.output else ""
        if launch.error:
            err_mode, err_path = "file", stepd.expand(launch.error, launch, gid, index,
                                                       req.user)
        else:
            err_mode, err_path = ("pipe" if launch.output is None else "stdout"), ""
        if any(not k or "=" in k or "\0" in k + v for k, v in env.items()):
            return None  # the Python step process words execve's refusal
        items = [f"{k}={v}" for k, v in env.items()]
        out += [_net(str(gid)), _net(_ints(cpus)), _net(mems), _net(in_mode), _net(in_path),
                _net(out_path), _net(err_mode), _net(err_path),
                _net("1" if per_task and not launch.append else "0"), _net(str(len(items))),
                *(_net(i) for i in items)]
    return b"".join(out)


class StepServer:
    """The job's step server on this node (``stepd.c serve``): spawned on the job's first
    compiled step, put in the job's cgroup once (its step processes inherit it), then fed
    one length-prefixed plan per step, for each of which it forks a step process. Closing
    its pipe ends it; it ignores the job's signals, so a job's SIGKILL is what else does.

    With ``fifo`` (a path in the job's spool directory, which only root reaches) it also
    reads plans from that FIFO: the node's agent writes the later steps there itself
    (``corral.agent.stepfeed``), without waking the supervisor.

    Why: spawning the binary for every step cost, per node and step, an exec, the dynamic
    loader and glibc's CPU feature probing (``cpuid``, which traps on a virtual machine):
    about half the step process's CPU in a profile of ``srun -N4 true``."""

    def __init__(self, path: str, attach: Any, fifo: str = "") -> None:
        self.path = path
        self.attach = attach
        self.fifo = fifo
        self.pid = 0
        self._w = -1

    def send(self, plan: bytes) -> None:
        """Hand ``plan`` to the server (started or restarted as needed); OSError when no
        server could take it."""
        frame = frame_of(plan)
        for attempt in (1, 2):
            if self._w < 0:
                self._start()
            try:
                _write_all(self._w, frame)
                return
            except BrokenPipeError:
                self.close()  # it died (a SIGKILL to the job's processes): once more
                if attempt == 2:
                    raise

    def _start(self) -> None:
        argv = [self.path, "serve"]
        if self.fifo:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.fifo)
            os.mkfifo(self.fifo, 0o600)
            argv.append(self.fifo)
        r, w = os.pipe()
        try:
            pid = os.posix_spawn(self.path, argv, {}, file_actions=[
                (os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w)])
        except OSError:
            os.close(r)
            os.close(w)
            raise
        os.close(r)
        try:
            if self.attach is not None:
                self.attach(pid)
        except BaseException:
            os.close(w)
            raise
        self.pid, self._w = pid, w

    def close(self) -> None:
        """End the server (it exits when its pipe closes); running steps go on."""
        if self._w >= 0:
            os.close(self._w)
        self._w = -1
        self.pid = 0
        if self.fifo:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.fifo)

    def gone(self, pid: int) -> None:
        """``pid`` was reaped: if it was the server, the next step starts another."""
        if pid == self.pid:
            self.close()


def frame_of(plan: bytes) -> bytes:
    """A plan as the step server reads it: its length (4 bytes, big-endian), then it."""
    return len(plan).to_bytes(4, "big") + plan


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
