"""A real one-machine cluster for tests: ``corral up --detach`` in a temp state dir.

Everything is real: the controller and agent processes, the Unix socket, SQLite, the
jobs. Helpers poll with deadlines (never fixed sleeps) and the cluster is torn down with
``corral down`` plus a kill of anything left.
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
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission

ENTRY = "from corral.cli.main import main; main()"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

TEST_CONFIG = """
[controller]
schedule_delay_ms = 2
tick_s = 1
node_down_after_s = 3
node_fail_grace_s = 60
kill_grace_s = 1
min_job_age_s = 600

[agent]
heartbeat_s = 0.5
reconnect_max_s = 0.3

[[nodes]]
name = "testnode"
discover = true
cpus = 16
mem_mb = 8000

[scheduler]
default_mem_per_cpu_mb = 100
"""


def corral(*args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def wait_for(pred: Any, timeout: float = 30.0, interval: float = 0.02, what: str = "") -> Any:
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or pred}: {last!r}")


class Cluster:
    def __init__(self, root: Path, config: str = TEST_CONFIG) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        os.chmod(self.work, 0o1777)
        self.config = root / "corral.toml"
        self.config.write_text(config)
        self.sock = self.state_dir / "corral.sock"
        self._client: Client | None = None
        self.extra_procs: list[subprocess.Popen[bytes]] = []

    # ---- lifecycle ------------------------------------------------------------------

    def up(self) -> None:
        r = corral("up", "--detach", "--state-dir", str(self.state_dir), "--config",
                   str(self.config), "--node-name", "testnode", timeout=90)
        assert r.returncode == 0, f"corral up failed: {r.stdout}\n{r.stderr}\n{self.logs()}"

    def down(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for p in self.extra_procs:  # our own children first: we reap them
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        corral("down", "--state-dir", str(self.state_dir), timeout=60)
        for pid in (self.controller_pid(), self.agent_pid()):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.kill_leftover_jobs()

    def kill_leftover_jobs(self) -> None:
        """SIGKILL the supervisors still running from this state dir (tests cancel theirs;
        this is the safety net after a failed test)."""
        jobs = self.state_dir / "agent" / "jobs"
        if not jobs.exists():
            return
        for jdir in jobs.iterdir():
            sup = jdir / "supervisor.json"
            try:
                pid = int(json.loads(sup.read_text())["pid"])
            except (OSError, ValueError, KeyError):
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"python" in cmd or b"corral" in cmd:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def logs(self) -> str:
        out = []
        for name in ("controller.log", "agent.log"):
            p = self.state_dir / "log" / name
            if p.exists():
                out.append(f"--- {name}\n" + p.read_text()[-4000:])
        return "\n".join(out)

    def controller_pid(self) -> int | None:
        try:
            return int(json.loads((self.state_dir / "controller.json").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    def agent_pid(self) -> int | None:
        try:
            return int((self.state_dir / "agent.pid").read_text())
        except (OSError, ValueError):
            return None

    def kill9(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), 10, what=f"pid {pid} to die")

    def start_controller(self) -> None:
        log = open(self.state_dir / "log" / "controller.log", "ab")
        p = subprocess.Popen([sys.executable, "-c", ENTRY, "controller", "--state-dir",
                              str(self.state_dir), "--config", str(self.config)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.extra_procs.append(p)
        wait_for(lambda: self.controller_pid() == p.pid and self.ping_ok(), 30,
                 what="the restarted controller")

    def start_agent(self) -> None:
        log = open(self.state_dir / "log" / "agent.log", "ab")
        p = subprocess.Popen([sys.executable, "-c", ENTRY, "agent", "--controller",
                              f"unix:{self.sock}", "--key-file",
                              str(self.state_dir / "cluster.key"), "--state-dir",
                              str(self.state_dir / "agent"), "--config", str(self.config),
                              "--name", "testnode"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.extra_procs.append(p)
        (self.state_dir / "agent.pid").write_text(str(p.pid))

    def ping_ok(self) -> bool:
        try:
            with Client(socket_path=str(self.sock), timeout_s=5) as c:
                c.ping()
            return True
        except Exception:
            return False

    # ---- jobs -------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(socket_path=str(self.sock))
        return self._client

    def submission(self, cmd: str | None = None, *, script: str | None = None,
                   **kw: Any) -> JobSubmission:
        spec_kw = {k: kw.pop(k) for k in list(kw) if k in JobSpec.__dataclass_fields__}
        spec_kw.setdefault("name", "test")
        spec_kw.setdefault("time_limit_s", 120)
        argv = ("/bin/sh", "-c", cmd) if cmd is not None else ()
        return JobSubmission(spec=JobSpec(**spec_kw), script=script, argv=argv,
                             workdir=str(kw.pop("workdir", self.work)),
                             env=kw.pop("env", {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
                             **kw)

    def submit(self, cmd: str | None = None, **kw: Any) -> int:
        return self.client.submit(self.submission(cmd, **kw))[0]

    def job(self, jid: int | str) -> dict[str, Any]:
        return self.client.job(jid)

    def wait_state(self, jid: int | str, states: set[str] | str,
                   timeout: float = 30) -> dict[str, Any]:
        want = {states} if isinstance(states, str) else states
        return wait_for(lambda: (lambda j: j if j["state"] in want else None)(self.job(jid)),
                        timeout, what=f"job {jid} in {want}")

    def wait_done(self, jid: int | str, timeout: float = 30) -> dict[str, Any]:
        return self.wait_state(jid, FINISHED, timeout)


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
