"""``srun``'s side of a step that runs through the agents (every node of the step).

``RemoteStep.run``: listen for the nodes' step processes, post the step with its launch
(``corral.protocol.step``) to the controller, accept one authenticated connection per
step node, then relay until every node reported ``DONE``:

- task stdout/stderr to srun's own (``-l/--label`` prefixes each line with the task id,
  lines of one task never interleave with another's mid-line); with ``-o/-e`` the tasks
  write their files themselves on their nodes;
- srun's stdin to the tasks that read it (all by default, ``-i N`` one task), EOF when
  srun's stdin ends; a ``--pty`` step puts srun's terminal in raw mode and forwards the
  window size;
- signals: SIGINT once prints the step's state (``srun: interrupt (one more within 1 sec
  to abort)``), twice within a second kills the step; SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
  SIGUSR2 are forwarded to every task; ``--kill-on-bad-exit`` kills the step at the first
  task that fails.
Exit status, as Slurm's: the highest task exit code; 128+N for a task killed by signal
N. A node that never connects (``CORRAL_STEP_CONNECT_S``, default 30 s) or whose
connection breaks fails the step with a message naming the node.

The I/O address advertised to the nodes: ``CORRAL_SRUN_ADDR`` if set, else the node's
address as its agent knows it (``CORRAL_NODE_ADDR``), else the local address of the
route to the controller, else 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import socket
import termios
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from corral.protocol import step as sp

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGCONT)


def advertised_address(env: dict[str, str]) -> str:
    explicit = env.get("CORRAL_SRUN_ADDR") or env.get("CORRAL_NODE_ADDR")
    if explicit:
        return explicit
    url = env.get("CORRAL_URL", "")
    host = urlparse(url).hostname if url.startswith(("http://", "https://")) else None
    if host:
        try:
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                probe.connect((host, 9))  # no packet is sent for a UDP connect
                return str(probe.getsockname()[0])
            finally:
                probe.close()
        except OSError:
            pass
    return "127.0.0.1"


@dataclass
class _Node:
    name: str
    index: int
    sock: socket.socket
    reader: sp.FrameReader = field(default_factory=sp.FrameReader)
    done: bool = False
    early: list[tuple[int, int, bytes]] = field(default_factory=list)  # read with HELLO


@dataclass
class RemoteStep:
    client: Any
    job_id: str
    name: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    nodes: list[str]
    tasks: list[list[int]]
    err: Callable[[str], None]
    cpus_per_task: int = 1
    cpu_bind: str = ""
    distribution: str = "block"
    output: str | None = None
    error: str | None = None
    input: str | None = None
    append: bool = True
    kill_on_bad_exit: bool = False
    pty: bool = False
    label: bool = False
    job_name: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    gpus_per_task: int = 0
    gpu_bind: str = ""
    mem_bind: str = ""  # srun --mem-bind
    container: str = ""  # ContainerSpec text (srun --container-image): tasks in that image
    task_prolog: str = ""  # srun --task-prolog / --task-epilog (absolute paths on the nodes)
    task_epilog: str = ""
    stdout_fd: int = 1
    stderr_fd: int = 2
    stdin_fd: int = 0
    # called with the advertised host once listening: per-task variables (PMI server)
    on_listen: Callable[[str], dict[str, dict[str, str]]] | None = None
    task_env: dict[str, dict[str, str]] = field(default_factory=dict)
    step_id: int | None = None
    codes: dict[int, tuple[int, int]] = field(default_factory=dict)  # task -> (code, sig)
    kill_sig: int = 0  # the signal that ends the step, once one was sent
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> DONE payload

    @property
    def ntasks(self) -> int:
        return sum(len(t) for t in self.tasks)

    def _node_of(self, task: int) -> str:
        for name, ids in zip(self.nodes, self.tasks, strict=True):
            if task in ids:
                return name
        return "?"

    # ---- start -------------------------------------------------------------------------
    def request_body(self, io_addr: str, key: str) -> dict[str, Any]:
        """The ``POST /jobs/<id>/steps`` body: the step and its launch for the agents."""
        launch = {"argv": self.argv, "cwd": self.cwd, "env": self.env,
                  "ntasks": self.ntasks, "nodes": self.nodes, "tasks": self.tasks,
                  "io_addr": io_addr, "io_key": key, "cpus_per_task": self.cpus_per_task,
                  "cpu_bind": self.cpu_bind, "distribution": self.distribution,
                  "output": self.output, "error": self.error, "input": self.input,
                  "append": self.append, "kill_on_bad_exit": self.kill_on_bad_exit,
                  "pty": self.pty, "job_name": self.job_name, "extra_env": self.extra_env,
                  "gpus_per_task": self.gpus_per_task, "gpu_bind": self.gpu_bind,
                  "task_env": self.task_env}
        if self.mem_bind:
            launch["mem_bind"] = self.mem_bind
        if self.container:
            launch["container"] = self.container
        if self.task_prolog:
            launch["task_prolog"] = self.task_prolog
        if self.task_epilog:
            launch["task_epilog"] = self.task_epilog
        return {"name": self.name, "argv": self.argv, "ntasks": self.ntasks,
                "nodes": self.nodes, "num_cpus": self.ntasks * max(1, self.cpus_per_task),
                "start_time": time.time(), "pid": os.getpid(), "launch": launch}

    def _post(self, io_addr: str, key: str) -> int:
        res = self.client.request("POST", f"/jobs/{self.job_id}/steps",
                                  self.request_body(io_addr, key))
        return int(res["step_id"])

    def stdin_target(self) -> int | None:
        """Which tasks srun's stdin goes to: ``ALL_TASKS``, one task id, or None (none:
        ``-i none`` or a file pattern the nodes open themselves)."""
        if self.pty:
            return 0
        if self.input in (None, "", "all"):
            return sp.ALL_TASKS
        if str(self.input).isdigit():
            return int(str(self.input))
        return None

    def run(self) -> int:
        host = advertised_address(self.env)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        lsock = socket.socket(family, socket.SOCK_STREAM)
        lsock.bind(("", 0))
        lsock.listen(max(16, len(self.nodes) + 4))
        port = lsock.getsockname()[1]
        io_addr = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        key = secrets.token_hex(16)
        if self.on_listen is not None:
            self.task_env.update(self.on_listen(host))
        try:
            self.step_id = self._post(io_addr, key)
        except Exception as exc:  # noqa: BLE001 - the controller's message says why
            lsock.close()
            msg = getattr(exc, "message", None) or str(exc)
            self.err(f"srun: error: Unable to create step for job {self.job_id}: {msg}")
            return 1
        try:
            return self._serve(lsock, key)
        finally:
            lsock.close()

    # ---- relay -------------------------------------------------------------------------
    def _serve(self, lsock: socket.socket, key: str) -> int:
        sel = selectors.DefaultSelector()
        lsock.setblocking(False)
        sel.register(lsock, selectors.EVENT_READ, "listen")
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wake_w)
        sel.register(wake_r, selectors.EVENT_READ, "signal")
        got: list[int] = []
        old_handlers = {}
        for sig in (signal.SIGINT, *FORWARDED):
            try:
                old_handlers[sig] = signal.signal(sig, lambda s, _f: got.append(s))
            except (OSError, ValueError):
                pass
        term_saved = None
        if self.pty and os.isatty(self.stdin_fd):
            term_saved = termios.tcgetattr(self.stdin_fd)
            tty.setraw(self.stdin_fd)
        target = self.stdin_target()
        stdin_open = target is not None
        stdin_task = sp.ALL_TASKS if target is None else target
        pending: list[socket.socket] = []
        nodes: dict[str, _Node] = {}
        stdin_buf: list[bytes] = []
        lines: dict[tuple[int, int], bytes] = {}
        width = len(str(max(0, self.ntasks - 1)))
        connect_s = float(self.env.get("CORRAL_STEP_CONNECT_S") or 30)
        deadline = time.monotonic() + connect_s
        last_int = 0.0
        failed = ""
        killed = False
        try:
            if stdin_open:
                try:
                    sel.register(self.stdin_fd, selectors.EVENT_READ, "stdin")
                except (ValueError, OSError, PermissionError):
                    stdin_open = False
            if self.pty:
                self._send_winch(nodes)
            while not nodes or not all(n.done for n in nodes.values()) or \
                    len(nodes) < len(self.nodes):
                if len(nodes) < len(self.nodes) and time.monotonic() > deadline:
                    missing = [n for n in self.nodes if n not in nodes]
                    failed = (f"srun: error: timeout waiting for node(s) {','.join(missing)} "
                              f"to start step {self.job_id}.{self.step_id}")
                    break
                for skey, _ in sel.select(0.5):
                    what = skey.data
                    if what == "listen":
                        try:
                            conn, _addr = lsock.accept()
                        except BlockingIOError:
                            continue
                        conn.setblocking(True)
                        conn.settimeout(5.0)
                        pending.append(conn)
                        sel.register(conn, selectors.EVENT_READ, ("hello", conn))
                    elif what == "signal":
                        try:
                            os.read(wake_r, 512)
                        except OSError:
                            pass
                        for signum in got:
                            num = int(signum)
                            if num == signal.SIGINT:
                                now = time.monotonic()
                                if self.pty:
                                    continue
                                if now - last_int < 1.0:
                                    self.err("srun: sending Ctrl-C to StepId="
                                             f"{self.job_id}.{self.step_id}")
                                    self.err("srun: forcing job termination")
                                    self._signal_all(nodes, signal.SIGKILL)
                                    killed = True
                                else:
                                    last_int = now
                                    self._status(nodes)
                            else:
                                self._signal_all(nodes, num)
                                if num in (signal.SIGTERM, signal.SIGHUP):
                                    killed = True
                        got.clear()
                    elif what == "stdin":
                        try:
                            data = os.read(self.stdin_fd, 65536)
                        except OSError:
                            data = b""
                        if data:
                            stdin_buf.append(data)
                        else:
                            sel.unregister(self.stdin_fd)
                            stdin_open = False
                            stdin_buf.append(b"")
                        self._flush_stdin(nodes, stdin_buf, stdin_task)
                    elif isinstance(what, tuple) and what[0] == "hello":
                        conn = what[1]
                        node = self._hello(conn, key)
                        sel.unregister(conn)
                        pending.remove(conn)
                        if node is None or node.name in nodes:
                            conn.close()
                            continue
                        conn.settimeout(None)
                        nodes[node.name] = node
                        sel.register(conn, selectors.EVENT_READ, ("node", node))
                        if self.kill_sig:  # the step was ended before this node came
                            self._signal_all({node.name: node}, self.kill_sig)
                        early, node.early = node.early, []
                        killed = self._frames(node, early, nodes, lines, width, killed)
                        self._flush_stdin(nodes, stdin_buf, stdin_task)
                        if self.pty:
                            self._send_winch(nodes)
                    elif isinstance(what, tuple) and what[0] == "node":
                        node = what[1]
                        try:
                            data = node.sock.recv(1 << 16)
                        except OSError:
                            data = b""
                        if not data:
                            sel.unregister(node.sock)
                            if not node.done:
                                node.done = True
                                self._lost(node)
                            continue
                        try:
                            frames = node.reader.feed(data)
                        except ValueError:
                            frames = []
                        killed = self._frames(node, frames, nodes, lines, width, killed)
            for (task, kind), rest in lines.items():
                if rest:
                    self._write(kind, self._prefix(task, width) + rest + b"\n")
        finally:
            if term_saved is not None:
                termios.tcsetattr(self.stdin_fd, termios.TCSADRAIN, term_saved)
            for sig, old in old_handlers.items():
                try:
                    signal.signal(sig, old)
                except (OSError, ValueError):
                    pass
            signal.set_wakeup_fd(old_wakeup)
            os.close(wake_r)
            os.close(wake_w)
            for conn in pending:
                conn.close()
            for node in nodes.values():
                node.sock.close()
            sel.close()
        if failed:
            self.err(failed)
            self._signal_all(nodes, signal.SIGKILL)
            return 1
        return self._report()

    def _hello(self, conn: socket.socket, key: str) -> _Node | None:
        reader = sp.FrameReader()
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    return None
                frames = reader.feed(data)
                if frames:
                    break
        except (OSError, ValueError):
            return None
        kind, _task, payload = frames[0]
        if kind != sp.HELLO:
            return None
        try:
            hello = json.loads(payload)
        except ValueError:
            return None
        if not secrets.compare_digest(str(hello.get("key", "")), key):
            return None
        name = str(hello.get("node", ""))
        if name not in self.nodes:
            return None
        # frames that arrived in the same read as the HELLO (a fast node's whole output)
        return _Node(name, self.nodes.index(name), conn, reader, early=frames[1:])

    def _prefix(self, task: int, width: int) -> bytes:
        return f"{task:>{width}}: ".encode() if self.label else b""

    def _write(self, kind: int, data: bytes) -> None:
        fd = self.stdout_fd if kind == sp.STDOUT else self.stderr_fd
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except InterruptedError:
                continue
            except OSError:
                return
            view = view[n:]

    def _frames(self, node: _Node, frames: list[tuple[int, int, bytes]],
                nodes: dict[str, _Node], lines: dict[tuple[int, int], bytes], width: int,
                killed: bool) -> bool:
        """Handle a node's frames; with ``-K`` the first failed task kills the step.
        Returns whether the step is being killed."""
        for kind, task, payload in frames:
            bad = self._frame(node, kind, task, payload, lines, width)
            if bad and self.kill_on_bad_exit and not killed:
                self.err(f"srun: error: task {task} on {node.name} failed: "
                         f"terminating StepId={self.job_id}.{self.step_id} "
                         "(--kill-on-bad-exit)")
                self._signal_all(nodes, signal.SIGKILL)
                killed = True
        return killed

    def _frame(self, node: _Node, kind: int, task: int, payload: bytes,
               lines: dict[tuple[int, int], bytes], width: int) -> bool:
        """Handle one frame; True when it reports a failed task."""
        if kind in (sp.STDOUT, sp.STDERR):
            if not self.label:
                self._write(kind, payload)
                return False
            data = lines.get((task, kind), b"") + payload
            parts = data.split(b"\n")
            lines[(task, kind)] = parts.pop()
            if parts:
                prefix = self._prefix(task, width)
                self._write(kind, b"".join(prefix + p + b"\n" for p in parts))
        elif kind == sp.EXIT:
            info = json.loads(payload)
            code, sig = int(info.get("exit_code", 0)), int(info.get("signal", 0))
            self.codes[task] = (code, sig)
            return code != 0 or sig != 0
        elif kind == sp.FAILED:
            self.err(f"srun: error: {payload.decode(errors='replace')}")
            self.codes[task] = (2, 0)
            return True
        elif kind == sp.DONE:
            node.done = True
            try:
                self.usage[node.name] = json.loads(payload)
            except ValueError:
                self.usage[node.name] = {}
        return False

    def _lost(self, node: _Node) -> None:
        ids = self.tasks[node.index]
        missing = [t for t in ids if t not in self.codes]
        if missing:
            self.err(f"srun: error: {node.name}: lost the connection to the step's tasks "
                     f"{','.join(map(str, missing))} (node failure or job ended)")
            for t in missing:
                self.codes[t] = (0, signal.SIGKILL)

    def _signal_all(self, nodes: dict[str, _Node], sig: int) -> None:
        """``sig`` to every connected node; a step being ended (SIGKILL, or a forwarded
        SIGTERM/SIGHUP) is ended on a node that connects later too (``kill_sig``)."""
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP) \
                and self.kill_sig != signal.SIGKILL:
            self.kill_sig = int(sig)
        frame = sp.pack(sp.SIGNAL, sp.ALL_TASKS, str(int(sig)).encode())
        for node in nodes.values():
            if not node.done:
                try:
                    node.sock.sendall(frame)
                except OSError:
                    pass

    def _flush_stdin(self, nodes: dict[str, _Node], buf: list[bytes], task: int) -> None:
        """Stdin read so far goes to every connected node (the node's step process
        passes it to the tasks that read it); kept until all nodes connected."""
        if len(nodes) < len(self.nodes) or not buf:
            return
        for data in buf:
            frame = sp.pack(sp.STDIN_EOF, task) if not data else sp.pack(sp.STDIN, task, data)
            for node in nodes.values():
                if task != sp.ALL_TASKS and task not in self.tasks[node.index]:
                    continue
                try:
                    node.sock.sendall(frame)
                except OSError:
                    pass
        buf.clear()

    def _send_winch(self, nodes: dict[str, _Node]) -> None:
        try:
            size = os.get_terminal_size(self.stdin_fd)
        except OSError:
            return
        frame = sp.pack(sp.WINCH, 0, f"{size.lines} {size.columns}".encode())
        for node in nodes.values():
            try:
                node.sock.sendall(frame)
            except OSError:
                pass

    def _status(self, nodes: dict[str, _Node]) -> None:
        running = [t for t in range(self.ntasks) if t not in self.codes]
        done = [t for t in range(self.ntasks) if t in self.codes]
        from corral.core.parse.arrayspec import format_array

        self.err("srun: interrupt (one more within 1 sec to abort)")
        if running:
            self.err(f"srun: StepId={self.job_id}.{self.step_id} tasks "
                     f"{format_array(running)}: running")
        if done:
            self.err(f"srun: StepId={self.job_id}.{self.step_id} tasks "
                     f"{format_array(done)}: exited")

    def _report(self) -> int:
        from corral.core.parse.arrayspec import format_array

        groups: dict[tuple[str, str], list[int]] = {}
        worst = 0
        for t in sorted(self.codes):
            code, sig = self.codes[t]
            if code == 0 and sig == 0:
                continue
            if sig:
                try:
                    what = signal.strsignal(sig) or f"Signal {sig}"
                except ValueError:
                    what = f"Signal {sig}"
                worst = max(worst, 128 + sig)
            else:
                what = f"Exited with exit code {code}"
                worst = max(worst, code)
            groups.setdefault((self._node_of(t), what), []).append(t)
        for (node, what), tasks in groups.items():
            label = f"task {tasks[0]}" if len(tasks) == 1 else f"tasks {format_array(tasks)}"
            self.err(f"srun: error: {node}: {label}: {what}")
        return worst

    def end_body(self, rc: int) -> dict[str, Any]:
        """The step's end for the controller, with each node's usage."""
        sig = rc - 128 if rc > 128 else 0
        code = 0 if sig else rc
        state = "COMPLETED" if rc == 0 else ("CANCELLED" if sig else "FAILED")
        body: dict[str, Any] = {
            "state": state, "exit_code": min(code, 255), "signal": sig,
            "end_time": time.time(),
            "usage": {"nodes": self.usage,
                      "cpu_time_s": round(sum(float(u.get("cpu_time_s", 0))
                                              for u in self.usage.values()), 3),
                      "max_rss_mb": max((float(u.get("max_rss_mb", 0))
                                         for u in self.usage.values()), default=0.0)}}
        errors = [str(u["error"]) for u in self.usage.values()
                  if isinstance(u, dict) and u.get("error")]
        if errors:  # why its tasks could not start (a container that could not be made)
            body["error"] = errors[0]
        return body

