"""A real high-availability cluster for tests: N controllers on one PostgreSQL database
(``tests/pg.py``), each its own process with its own state directory and TCP port, and
one agent given all of them. Helpers poll with deadlines; ``kill9`` is a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from corral.client import Client
from tests.e2e.cluster import ENTRY, _alive, wait_for
from tests.pg import free_port

HA_CONFIG = """
cluster_name = "ha"

[controller]
database_url = "{url}"
lease_s = {lease_s}
standby_refresh_s = {refresh_s}
schedule_delay_ms = 2
tick_s = 1
node_down_after_s = 5
node_fail_grace_s = 60
kill_grace_s = 1
min_job_age_s = 600

[agent]
heartbeat_s = 0.5
reconnect_max_s = 0.2

[[nodes]]
name = "testnode"
discover = true
cpus = 16
mem_mb = 8000

[scheduler]
default_mem_per_cpu_mb = 10
"""


class Ctl:
    def __init__(self, root: Path, index: int, config: Path) -> None:
        self.index = index
        self.state_dir = root / f"ctl{index}"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "log").mkdir(exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.state_dir / "log" / "controller.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "controller", "--state-dir", str(self.state_dir),
             "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_for(lambda: self.ping() is not None, 30, what=f"controller {self.index} to answer")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ping(self) -> dict[str, Any] | None:
        try:
            with Client(url=self.url, token="-", timeout_s=2) as c:
                c.urls = []  # this controller only, never its leader
                return c.ping()
        except Exception:  # noqa: BLE001 - not up (yet)
            return None

    def role(self) -> str:
        p = self.ping()
        return str(p.get("role", "")) if p else ""

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        p = self.state_dir / "log" / "controller.log"
        return p.read_text()[-3000:] if p.exists() else ""


class HaCluster:
    def __init__(self, root: Path, db_url: str, n: int = 2, lease_s: float = 1.0,
                 db_urls: dict[int, str] | None = None, refresh_s: float = 2.0) -> None:
        """``db_urls``: another database URL for some controllers (through a proxy)."""
        self.root = root
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        os.chmod(self.work, 0o1777)
        self.config = root / "corral.toml"
        self.config.write_text(HA_CONFIG.format(url=db_url, lease_s=lease_s,
                                                refresh_s=refresh_s))
        self.ctls = []
        for i in range(n):
            cfg = self.config
            if db_urls and i in db_urls:
                cfg = root / f"corral{i}.toml"
                cfg.write_text(HA_CONFIG.format(url=db_urls[i], lease_s=lease_s,
                                                refresh_s=refresh_s))
            self.ctls.append(Ctl(root, i, cfg))
        self.agent: subprocess.Popen[bytes] | None = None
        self._token: str | None = None

    @property
    def urls(self) -> str:
        return ",".join(c.url for c in self.ctls)

    def start(self) -> None:
        for c in self.ctls:
            c.start()
        self.leader()

    def leader(self, timeout: float = 30) -> Ctl:
        def one() -> Ctl | None:
            leading = [c for c in self.ctls if c.alive() and c.role() == "leader"]
            return leading[0] if len(leading) == 1 else None
        found: Ctl = wait_for(one, timeout, interval=0.02, what="exactly one leader")
        return found

    def token(self) -> str:
        if self._token is None:
            from corral.controller.auth import Authenticator, Identity

            jwt_key = (self.ctls[0].state_dir / "jwt.key").read_text().strip()
            self._token = Authenticator(jwt_key, "", frozenset()).mint(
                Identity("root", 0, 0), 3600)
        return self._token

    def client(self, urls: str | None = None) -> Client:
        return Client(url=urls or self.urls, token=self.token(), timeout_s=10)

    def start_agent(self, controllers: list[str] | None = None) -> None:
        log = open(self.root / "agent.log", "ab")
        args = [sys.executable, "-c", ENTRY, "agent", "--key-file",
                str(self.ctls[0].state_dir / "cluster.key"), "--state-dir",
                str(self.root / "agent"), "--config", str(self.config), "--name", "testnode"]
        for url in controllers or [c.url for c in self.ctls]:
            args += ["--controller", url]
        self.agent = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        log.close()

    def wait_node_up(self, timeout: float = 30) -> None:
        def up() -> bool:
            try:
                with self.client() as c:
                    return any(n["connected"] for n in c.nodes())
            except Exception:  # noqa: BLE001
                return False
        wait_for(up, timeout, what="the agent to register with the leader")

    def logs(self) -> str:
        out = [f"--- controller {c.index} ({c.url})\n{c.log()}" for c in self.ctls]
        agent = self.root / "agent.log"
        if agent.exists():
            out.append("--- agent\n" + agent.read_text()[-3000:])
        return "\n".join(out)

    def down(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        for c in self.ctls:
            c.stop()
        jobs = self.root / "agent" / "jobs"
        if jobs.exists():  # supervisors of jobs still running after a failed test
            for jdir in jobs.iterdir():
                try:
                    pid = int(json.loads((jdir / "supervisor.json").read_text())["pid"])
                    if _alive(pid):
                        os.killpg(pid, signal.SIGKILL)
                except (OSError, ValueError, KeyError):
                    continue


def sh(cmd: str, work: Path, **spec: Any) -> dict[str, Any]:
    """The wire form of a job running ``/bin/sh -c cmd``."""
    from corral.core.model.job import JobSpec
    from corral.submission import JobSubmission

    spec.setdefault("name", "ha")
    spec.setdefault("time_limit_s", 120)
    sub = JobSubmission(spec=JobSpec(**spec), argv=("/bin/sh", "-c", cmd), workdir=str(work),
                        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    return sub.to_json()


def now() -> float:
    return time.monotonic()


class TcpProxy:
    """A TCP relay to ``target`` on 127.0.0.1; ``cut()`` breaks every connection through it
    and refuses new ones (a controller cut off from its database)."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.cut_off = False
        self.socks: list[Any] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.cut_off:  # cut while this one was being connected
                    client.close()
                    upstream.close()
                    continue
                self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: Any, dst: Any) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        _shut(src, dst)

    def cut(self) -> None:
        self.cut_off = True
        with self.lock:
            _shut(*self.socks)
            self.socks.clear()

    def close(self) -> None:
        self.cut()
        self.listener.close()


def _shut(*socks: Any) -> None:
    """Shut every socket down, then close it: a plain close while another thread is
    blocked in ``recv`` on it sends nothing (the kernel keeps the connection for that
    call), so the far end would never see it end."""
    import socket

    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def fill_held(url: str, n: int, base: int) -> None:
    """``n`` copies of job 1's row as held pending jobs ``base+1 .. base+n``, written
    straight to the database (a large table in a second, not n submits)."""
    import sqlalchemy as sa

    eng = sa.create_engine(url)
    with eng.begin() as conn:
        conn.execute(sa.text(
            'INSERT INTO jobs (id, array_job_id, array_task_id, name, "user", uid, account, '
            "partition, state, submit_time, start_time, end_time, exit_code, restarts, "
            'nodes, submission, data) SELECT :base + g, NULL, NULL, name, "user", uid, '
            "account, partition, 'PENDING', submit_time, NULL, NULL, NULL, 0, '', "
            "submission, data FROM jobs, generate_series(1, :n) AS g WHERE id = 1"),
            {"base": base, "n": n})
    eng.dispose()
