"""A multi-host test cluster on one kernel: every host is a Linux network namespace.

Layout (the recipe of ``shared/platform/netns_hosts.sh``; nothing is added to the root
namespace, the addresses exist only inside the namespaces made here)::

    <prefix>sw          switch namespace: bridge br0, one veth end per host (port0, port1, ...)
    <prefix>hd          head host, eth0 = 10.A.B.2/24: ``corral controller --listen 10.A.B.2:6817``
    <prefix>h1 .. hN    compute hosts, eth0 = 10.A.B.1N/24 (10.A.B.100+N from N = 10 on):
                        ``corral agent --controller http://10.A.B.2:6817 --name <prefix>hN``

The host name is the namespace name is the node name. Each agent runs in its host's
network namespace and in a UTS namespace of its own whose host name is the node name, so
``hostname`` in a job prints the name of the host it ran on. Processes enter a host with
``nsenter --net=/run/netns/NS`` rather than ``ip netns exec``: the latter remounts /sys in
a new mount namespace, which hides the cgroup v1 hierarchies under /sys/fs/cgroup from the
agent. Agents share this machine's filesystem (the controller's Unix socket works from
the root namespace, a file written by a job on any host is visible to the test) and its
CPUs; each has its own state directory, hence its own job spool (``/dev/shm/corral-0/
agent-<hash of state dir>``) and its own cgroups (``<hierarchy>/corral/<node name>``).

Everything is real: controller, agents, supervisors, HTTP over the veths. Helpers poll
with deadlines, never fixed sleeps. Needs root and iproute2 (``netns_skip_reason``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.client import Client

ENTRY = "from corral.cli.main import main; main()"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
CONTROLLER_PORT = 6817

# [section] -> key -> value; merged with ``settings=`` of NetnsCluster
BASE_SETTINGS: dict[str, dict[str, Any]] = {
    "": {"accept_unknown_nodes": False},
    "controller": {"schedule_delay_ms": 2, "tick_s": 1, "node_down_after_s": 3,
                   "node_fail_grace_s": 60, "kill_grace_s": 1, "min_job_age_s": 600,
                   # the Volcano tests name images no host can pull: commands on the hosts
                   "volcano_images": "host"},
    "agent": {"heartbeat_s": 0.5, "reconnect_max_s": 0.3},
    "scheduler": {"default_mem_per_cpu_mb": 100},
}

_seq = itertools.count()
_live: set[NetnsCluster] = set()  # stopped at interpreter exit if a test run was cut short


@atexit.register
def _stop_all() -> None:
    for c in list(_live):
        with contextlib.suppress(Exception):
            c.stop()


def wait_for(pred: Any, timeout: float = 30.0, interval: float = 0.02, what: str = "") -> Any:
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or pred}: {last!r}")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def netns_skip_reason() -> str | None:
    """Why network-namespace hosts cannot be built here (None: they can)."""
    if os.geteuid() != 0:
        return "multi-host test cluster needs root (network namespaces)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"multi-host test cluster needs {tool} (util-linux/iproute2)"
    probe = f"crlprobe{os.getpid()}"
    try:
        r = _ip("netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"`ip netns add` does not work here: {r.stderr.strip()}"
        r = _ip("-n", probe, "link", "set", "lo", "up", check=False)
        if r.returncode != 0:
            return f"`ip -n NS link` does not work here: {r.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _proc_state(pid: int) -> str:
    """The one-letter state of a process (R, S, T, Z, ...; "" when gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Host:
    """One simulated machine: ``name`` is its host name, node name and namespace name."""

    name: str
    ip: str
    port: str  # its veth end in the switch namespace (the "cable")
    state_dir: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def ns(self) -> str:
        return self.name

    @property
    def pid(self) -> int | None:
        """The daemon's pid (agent, or controller on the head host)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def log(self) -> Path:
        return self.state_dir / "daemon.log"


class NetnsCluster:
    """A controller on a head host plus ``n_hosts`` agent hosts, each in its own netns.

    ``settings``: extra config, ``{"controller": {"node_down_after_s": 2}, "": {top-level}}``.
    ``cpus``: CPUs per node (default: the CPUs this process may use, so CPU pinning of
    jobs to the allocated cores works on every emulated node; all hosts share them).
    ``gpus``: GPUs configured per node (none by default; no devices behind them).
    """

    def __init__(self, n_hosts: int = 3, *, prefix: str | None = None,
                 root: Path | None = None, cpus: int | None = None, mem_mb: int = 2000,
                 settings: dict[str, dict[str, Any]] | None = None,
                 partition: str = "mn", gpus: int = 0) -> None:
        if not 1 <= n_hosts <= 99:
            raise ValueError("n_hosts must be 1..99")
        seq = next(_seq)
        pid = os.getpid()
        self.prefix = prefix or f"mn{pid % 100000}{_letters(seq)}"
        v = pid * 16 + seq  # a /24 of 10.0.0.0/8 per cluster: parallel runs never share one
        self.subnet = f"10.{100 + (v >> 8) % 150}.{v % 256}"
        self.root = root or Path(tempfile.mkdtemp(prefix=f"corral-{self.prefix}-"))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.shared = self.root / "shared"  # a directory every host and user may write
        self.shared.mkdir(exist_ok=True)
        os.chmod(self.shared, 0o1777)
        self.bin = self.root / "bin"  # the Slurm/PBS shims
        self.switch = f"{self.prefix}sw"
        self.head = Host(f"{self.prefix}hd", f"{self.subnet}.2", "port0", self.root / "head")
        self.hosts = [Host(f"{self.prefix}h{i}", f"{self.subnet}.{10 + i if i < 10 else 100 + i}",
                           f"port{i}", self.root / "hosts" / f"{self.prefix}h{i}")
                      for i in range(1, n_hosts + 1)]
        self.by_name = {h.name: h for h in [self.head, *self.hosts]}
        self.state_dir = self.head.state_dir
        self.sock = self.state_dir / "corral.sock"
        self.key_file = self.state_dir / "cluster.key"
        self.url = f"http://{self.head.ip}:{CONTROLLER_PORT}"
        self.partition = partition
        self.cpus = cpus or len(os.sched_getaffinity(0))
        self.mem_mb = mem_mb
        self.gpus = gpus  # configured GPUs per node (no devices behind them)
        self.config = self.root / "corral.toml"
        self.config.write_text(self._config_text(settings or {}))
        self.startup_s: float | None = None
        self._client: Client | None = None
        self._tokens: dict[str, str] = {}
        self._namespaces: list[str] = []
        self._procs: list[subprocess.Popen[bytes]] = []  # popen_on's, killed at stop
        self._stopped = False
        self.last_nodes: list[tuple[str, str, bool]] = []  # (name, state, connected)

    # ---- names ------------------------------------------------------------------------

    def host(self, which: int | str | Host) -> Host:
        """A host by 1-based index, name or Host (``head`` / 0 is the head host)."""
        if isinstance(which, Host):
            return which
        if isinstance(which, int):
            return self.head if which == 0 else self.hosts[which - 1]
        if which == "head":
            return self.head
        return self.by_name[which]

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def _config_text(self, settings: dict[str, dict[str, Any]]) -> str:
        merged = {k: dict(v) for k, v in BASE_SETTINGS.items()}
        for sec, kv in settings.items():
            merged.setdefault(sec, {}).update(kv)
        out = [f"{k} = {_toml_value(v)}" for k, v in merged.pop("", {}).items()]
        for sec, kv in merged.items():
            out.append(f"\n[{sec}]")
            out += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
        for h in self.hosts:
            out += ["\n[[nodes]]", f'name = "{h.name}"', "discover = true",
                    f"cpus = {self.cpus}", f"mem_mb = {self.mem_mb}"]
            if self.gpus:
                out.append(f"gpus = {self.gpus}")
        out += ["\n[[partitions]]", f'name = "{self.partition}"', 'nodes = "ALL"',
                "default = true"]
        return "\n".join(out) + "\n"

    def reconfigure(self, settings: dict[str, dict[str, Any]]) -> None:
        """Write the configuration again with ``settings`` (before ``start``: settings
        that name the cluster's own addresses, such as a registry on the head host)."""
        self.config.write_text(self._config_text(settings))

    # ---- lifecycle --------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> NetnsCluster:
        """Build the network, start the controller and the agents, wait until every
        node registered and is up. On failure everything is torn down and the error
        carries the daemons' logs."""
        t0 = time.monotonic()
        _live.add(self)
        try:
            self._build_network()
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / "log").mkdir(exist_ok=True)
            # the key the controller would create: made here so that agents start at once
            fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(24).hex() + "\n")
            shims = subprocess.Popen([sys.executable, "-c", ENTRY, "shims", "install", "--force",
                                      str(self.bin)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
            self._start_controller()
            for h in self.hosts:
                self.start_agent(h)
            out, _ = shims.communicate(timeout=timeout)
            if shims.returncode != 0:
                raise RuntimeError(f"corral shims install failed: {out.decode()}")
            end = t0 + timeout
            wait_for(self._ping_ok, max(1.0, end - time.monotonic()), 0.05,
                     what="the controller's socket")
            self.wait_all_up(max(1.0, end - time.monotonic()))
            self._tokens["root"] = self.client.token(None, 86400)
        except BaseException as exc:
            logs = self.logs()
            self.stop()
            if isinstance(exc, AssertionError | RuntimeError):
                raise RuntimeError(f"multi-host cluster did not start: {exc}\n{logs}") from exc
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _build_network(self) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        self._namespaces.append(sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        for h in [self.head, *self.hosts]:
            _ip("netns", "add", h.ns)
            self._namespaces.append(h.ns)
            # the veth is made inside the host ns, its peer directly inside the switch ns
            _ip("-n", h.ns, "link", "add", "eth0", "type", "veth", "peer", "name", h.port,
                "netns", sw)
            _ip("-n", sw, "link", "set", h.port, "master", "br0")
            _ip("-n", sw, "link", "set", h.port, "up")
            _ip("-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            _ip("-n", h.ns, "link", "set", "lo", "up")
            _ip("-n", h.ns, "link", "set", "eth0", "up")

    def _daemon_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_"))}
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def _spawn(self, host: Host, argv: Sequence[str], *, uts: bool, log: Path,
               env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(self.wrap(host, argv, uts=uts), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)

    def _start_controller(self) -> None:
        h = self.head
        h.proc = self._spawn(h, [sys.executable, "-c", ENTRY, "controller", "--listen",
                                 f"{h.ip}:{CONTROLLER_PORT}", "--state-dir", str(h.state_dir),
                                 "--config", str(self.config)],
                             uts=True, log=self.state_dir / "log" / "controller.log",
                             env=self._daemon_env())
        (self.state_dir / "controller.pid").write_text(str(h.proc.pid))

    def start_agent(self, which: int | str | Host) -> Host:
        """Start (or restart, after ``kill_agent``) the agent of a host, same state dir."""
        h = self.host(which)
        if h.proc is not None and h.proc.poll() is None:
            raise RuntimeError(f"the agent of {h.name} is running (pid {h.proc.pid})")
        h.state_dir.mkdir(parents=True, exist_ok=True)
        h.proc = self._spawn(h, [sys.executable, "-c", ENTRY, "agent", "--controller", self.url,
                                 "--key-file", str(self.key_file), "--state-dir",
                                 str(h.state_dir), "--name", h.name, "--config",
                                 str(self.config)],
                             uts=True, log=h.log, env=self._daemon_env())
        return h

    def stop(self) -> None:
        """Stop everything this cluster started and remove its namespaces and files."""
        if self._stopped:
            return
        self._stopped = True
        _live.discard(self)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        daemons = [p for p in [*self._procs, *(h.proc for h in self.hosts), self.head.proc]
                   if p is not None]
        for p in daemons:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)  # a stopped agent cannot act on SIGTERM
                    p.terminate()
        end = time.monotonic() + 5
        for p in daemons:
            try:
                p.wait(timeout=max(0.05, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self._thaw_and_kill_cgroups()
        for ns in self._namespaces:  # supervisors and jobs (own sessions) live in the hosts
            self._kill_ns(ns)
        self._thaw_and_kill_cgroups(remove=True)
        for h in self.hosts:  # job spools on /dev/shm (the state dir links to them)
            link = h.state_dir / "jobs"
            if link.is_symlink():
                shutil.rmtree(os.readlink(link), ignore_errors=True)
        for ns in reversed(self._namespaces):
            _ip("netns", "del", ns, check=False)
        self._namespaces.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_ns(self, ns: str) -> None:
        def left() -> list[int]:
            r = _ip("netns", "pids", ns, check=False)
            return [int(x) for x in r.stdout.split() if x.isdigit() and _alive(int(x))]

        for pid in left():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not left(), 10, 0.02, what=f"processes in {ns} to end")

    def _node_cgroups(self) -> list[Path]:
        """``<hierarchy>/corral/<node>`` for every mounted hierarchy and node of ours."""
        mounts: list[str] = []
        with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2"):
                    mounts.append(parts[1])
        return [Path(m) / "corral" / h.name for m in mounts for h in self.hosts
                if (Path(m) / "corral" / h.name).is_dir()]

    def _thaw_and_kill_cgroups(self, remove: bool = False) -> None:
        for top in self._node_cgroups():
            for d, _subdirs, _files in os.walk(top, topdown=False):
                p = Path(d)
                for ctl, val in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                    if (p / ctl).exists():
                        with contextlib.suppress(OSError):
                            (p / ctl).write_text(val)
                with contextlib.suppress(OSError):
                    for pid in (p / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(int(pid), signal.SIGKILL)
                if remove:
                    procs = p / "cgroup.procs"
                    with contextlib.suppress(OSError, AssertionError):
                        wait_for(lambda f=procs: not f.read_text().strip(), 5,
                                 what=f"{p} to empty")
                    with contextlib.suppress(OSError):
                        p.rmdir()

    def __enter__(self) -> NetnsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- state ------------------------------------------------------------------------

    def _ping_ok(self) -> bool:
        if not self.sock.exists():
            return False
        try:
            with Client(socket_path=str(self.sock), timeout_s=5) as c:
                c.ping()
            return True
        except Exception:
            return False

    def _all_up(self) -> bool:
        for h in [self.head, *self.hosts]:
            if h.proc is not None and h.proc.poll() is not None:
                raise RuntimeError(f"the daemon of {h.name} exited with {h.proc.returncode}")
        nodes = {n["name"]: n for n in self.client.nodes()}
        ok = all(n in nodes and nodes[n]["connected"]
                 and nodes[n]["state"] in ("IDLE", "MIXED", "ALLOCATED") for n in self.names)
        self.last_nodes = [(n["name"], n["state"], n["connected"]) for n in nodes.values()]
        return ok

    def wait_all_up(self, timeout: float = 30) -> None:
        """Wait until every compute host's node is registered, connected and usable."""
        try:
            wait_for(self._all_up, timeout, 0.05, what="every node up and connected")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; nodes: {self.last_nodes}") from None

    def node(self, which: int | str | Host) -> dict[str, Any]:
        return self.client.node(self.host(which).name)

    def wait_node(self, which: int | str | Host, states: set[str] | str,
                  timeout: float = 30) -> dict[str, Any]:
        want = {states} if isinstance(states, str) else states
        rec: dict[str, Any] = wait_for(
            lambda: (lambda n: n if n["state"] in want else None)(self.node(which)),
            timeout, 0.05, what=f"node {self.host(which).name} in {want}")
        return rec

    @property
    def client(self) -> Client:
        """A client on the controller's Unix socket (as root: operator rights)."""
        if self._client is None:
            self._client = Client(socket_path=str(self.sock))
        return self._client

    def job(self, jid: int | str) -> dict[str, Any]:
        return self.client.job(jid)

    def wait_state(self, jid: int | str, states: set[str] | str,
                   timeout: float = 30) -> dict[str, Any]:
        want = {states} if isinstance(states, str) else states
        rec: dict[str, Any] = wait_for(
            lambda: (lambda j: j if j["state"] in want else None)(self.job(jid)),
            timeout, 0.05, what=f"job {jid} in {want}")
        return rec

    def wait_done(self, jid: int | str, timeout: float = 30) -> dict[str, Any]:
        return self.wait_state(jid, FINISHED, timeout)

    def token(self, user: str | None = None) -> str:
        """A token for ``user`` (default root), as ``corral token --user`` prints."""
        key = user or "root"
        if key not in self._tokens:
            self._tokens[key] = self.client.token(user if user != "root" else None, 86400)
        return self._tokens[key]

    def logs(self, tail: int = 4000) -> str:
        out = []
        for h in [self.head, *self.hosts]:
            log = self.state_dir / "log" / "controller.log" if h is self.head else h.log
            with contextlib.suppress(OSError):
                out.append(f"--- {h.name} ({log.name})\n" + log.read_text()[-tail:])
        return "\n".join(out)

    # ---- running things on a host -------------------------------------------------------

    def wrap(self, which: int | str | Host, argv: Sequence[str], *, uts: bool = True,
             user: str | None = None) -> list[str]:
        """``argv`` as run on a host: in its network namespace and (``uts``) a UTS
        namespace whose host name is the host's; ``user``: switched to that user."""
        h = self.host(which)
        cmd = ["nsenter", f"--net=/run/netns/{h.ns}"]
        if uts:
            cmd += ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', h.name]
        if user is not None and user != "root":
            cmd += ["setpriv", f"--reuid={user}", f"--regid={_gid_of(user)}", "--init-groups",
                    "--"]
        return cmd + list(argv)

    def host_env(self, user: str | None = None,
                 env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a login on a compute host: CORRAL_URL, CORRAL_TOKEN, the
        shims first in PATH, no CORRAL_STATE_DIR (the socket is the head's)."""
        e = self._daemon_env()
        e["PATH"] = f"{self.bin}:{e['PATH']}"
        e["CORRAL_URL"] = self.url
        e["CORRAL_TOKEN"] = self.token(user)
        if user is not None and user != "root":
            import pwd

            pw = pwd.getpwnam(user)
            e.update(USER=user, LOGNAME=user, HOME=pw.pw_dir)
        e.update(env or {})
        return e

    def _argv(self, cmd: str | Sequence[str]) -> list[str]:
        return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)

    def run_on(self, which: int | str | Host, cmd: str | Sequence[str], *,
               user: str | None = None, env: dict[str, str] | None = None,
               cwd: str | Path | None = None, timeout: float = 60, check: bool = False,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` (a shell string or an argv) on a host as ``user`` (default root)
        would there: its network and UTS namespaces, ``host_env`` (CORRAL_URL/TOKEN,
        the Slurm shims on PATH), in ``cwd`` (default the shared directory)."""
        r = subprocess.run(self.wrap(which, self._argv(cmd), user=user), capture_output=True,
                           text=True, timeout=timeout, env=self.host_env(user, env),
                           cwd=str(cwd or self.shared), input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"on {self.host(which).name}: {cmd!r} exited {r.returncode}"
                                 f"\nstdout: {r.stdout}\nstderr: {r.stderr}")
        return r

    def popen_on(self, which: int | str | Host, cmd: str | Sequence[str], *,
                 user: str | None = None, env: dict[str, str] | None = None,
                 cwd: str | Path | None = None, **kw: Any) -> subprocess.Popen[str]:
        """``run_on`` for long-running commands (text pipes for stdout/stderr unless
        given); killed at ``stop`` if still running."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        kw.setdefault("start_new_session", True)
        p: subprocess.Popen[str] = subprocess.Popen(
            self.wrap(which, self._argv(cmd), user=user), env=self.host_env(user, env),
            cwd=str(cwd or self.shared), **kw)
        self._procs.append(p)  # type: ignore[arg-type]
        return p

    def sbatch(self, which: int | str | Host, *args: str, user: str | None = None,
               **kw: Any) -> int:
        """``sbatch --parsable ARGS`` on a host; the job id."""
        r = self.run_on(which, ["sbatch", "--parsable", *args], user=user, check=True, **kw)
        return int(r.stdout.strip().split(";")[0])

    # ---- faults -----------------------------------------------------------------------

    def cut_link(self, which: int | str | Host) -> None:
        """Unplug a host's cable: its port on the switch goes down (packets are dropped,
        no resets: TCP connections stall until ``restore_link`` or their timeouts)."""
        _ip("-n", self.switch, "link", "set", self.host(which).port, "down")

    def restore_link(self, which: int | str | Host) -> None:
        _ip("-n", self.switch, "link", "set", self.host(which).port, "up")

    @contextlib.contextmanager
    def link_cut(self, which: int | str | Host) -> Iterator[Host]:
        self.cut_link(which)
        try:
            yield self.host(which)
        finally:
            self.restore_link(which)

    def can_reach(self, src: int | str | Host, dst: int | str | Host,
                  port: int = CONTROLLER_PORT, timeout: float = 0.5) -> bool:
        """Whether ``src`` gets an answer from ``dst``'s address on TCP ``port`` within
        ``timeout``: a connection or a refusal (RST) both mean reachable."""
        code = ("import socket,sys\ns=socket.socket();s.settimeout(float(sys.argv[3]))\n"
                "try: s.connect((sys.argv[1],int(sys.argv[2])))\n"
                "except ConnectionRefusedError: pass\n"
                "except OSError: sys.exit(1)\n")
        r = subprocess.run(self.wrap(src, [sys.executable, "-c", code, self.host(dst).ip,
                                           str(port), str(timeout)], uts=False),
                           capture_output=True, timeout=timeout + 30)
        return r.returncode == 0

    def stop_agent(self, which: int | str | Host) -> None:
        """SIGSTOP a host's agent process (its fork server and jobs keep running): it
        stops heartbeating, as a hung node would."""
        pid = self._agent_pid(which)
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: _proc_state(pid) in ("T", "t"), 10, what=f"agent {pid} stopped")

    def cont_agent(self, which: int | str | Host) -> None:
        pid = self._agent_pid(which)
        os.kill(pid, signal.SIGCONT)
        wait_for(lambda: _proc_state(pid) not in ("T", "t"), 10, what=f"agent {pid} running")

    @contextlib.contextmanager
    def agent_stopped(self, which: int | str | Host) -> Iterator[Host]:
        self.stop_agent(which)
        try:
            yield self.host(which)
        finally:
            self.cont_agent(which)

    def kill_agent(self, which: int | str | Host, sig: int = signal.SIGKILL) -> None:
        """Kill a host's agent (jobs keep running under their supervisors); restart it
        with ``start_agent``."""
        h = self.host(which)
        pid = self._agent_pid(h)
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, sig)
        assert h.proc is not None
        h.proc.wait(timeout=30)

    def _agent_pid(self, which: int | str | Host) -> int:
        h = self.host(which)
        if h is self.head or h.proc is None or h.proc.poll() is not None:
            raise RuntimeError(f"no running agent on {h.name}")
        return h.proc.pid


def _gid_of(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid


def _letters(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(97 + r) + s
    return s

