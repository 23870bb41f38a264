"""A real cluster serving HTTP (controller) and agent metrics, and a real Prometheus.

Both are started by the tests themselves on free loopback ports; helpers poll with
deadlines and clean up every process they started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.cluster import TEST_CONFIG, Cluster

PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ops_config(http_port: int, agent_port: int) -> str:
    base = TEST_CONFIG.replace("[controller]\n",
                               f'[controller]\nlisten = "127.0.0.1:{http_port}"\n')
    base = base.replace("[agent]\n", f'[agent]\nmetrics_listen = "127.0.0.1:{agent_port}"\n')
    return base + """
[[accounts]]
name = "physics"
shares = 3

[[accounts]]
name = "chem"
shares = 1

[[users]]
name = "root"
accounts = ["physics", "chem"]
"""


class OpsCluster(Cluster):
    def __init__(self, root: Path) -> None:
        self.http_port = free_port()
        self.agent_port = free_port()
        super().__init__(root, ops_config(self.http_port, self.agent_port))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.agent_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("CORRAL_URL", None)
        env.pop("CORRAL_SOCKET", None)
        env["CORRAL_STATE_DIR"] = str(self.state_dir)
        return env


@contextmanager
def ops_cluster() -> Iterator[OpsCluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-ops-"))
    c = OpsCluster(root)
    try:
        c.up()
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        data: bytes = r.read()
        return data


class Prometheus:
    """A real Prometheus server scraping ``targets`` ({job: [host:port, ...]}) every second."""

    def __init__(self, root: Path, targets: dict[str, list[str]]) -> None:
        assert PROMETHEUS is not None
        self.root = root
        self.port = free_port()
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
               "scrape_configs": [{"job_name": job, "scrape_interval": "1s",
                                   "static_configs": [{"targets": tg}]}
                                  for job, tg in targets.items()]}
        (root / "prometheus.yml").write_text(json.dumps(cfg))  # JSON is valid YAML
        self.log = open(root / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        q = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            data = json.loads(http_get(f"{self.url}/api/v1/{path}{q}"))
        except urllib.error.HTTPError as exc:  # a bad query answers 400 with a JSON error
            data = json.loads(exc.read())
        return data

    def wait_ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.logs()}")
            try:
                http_get(f"{self.url}/-/ready", 1.0)
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout} s: {self.logs()}")

    def logs(self) -> str:
        self.log.flush()
        return (self.root / "prometheus.log").read_text()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
