"""A real one-machine cluster for the CLI tests: `corral up --detach` on a private state
directory, torn down (jobs cancelled, daemons stopped) at the end of the session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CORRAL = [sys.executable, "-c", "from corral.cli.main import main; main()"]
NODE = "clinode"
CONFIG = f"""
cluster_name = "clitest"

[controller]
min_job_age_s = 600

[[nodes]]
name = "{NODE}"
cpus = 4
mem_mb = 4000
features = ["fast", "ssd"]

[[partitions]]
name = "main"
nodes = "ALL"
default = true
max_time_s = "2:00:00"

[[partitions]]
name = "other"
nodes = "ALL"
"""


class Cluster:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.node = NODE
        self.env = {"CORRAL_STATE_DIR": str(state_dir), "CORRAL_SOCKET": "", "CORRAL_URL": ""}

    def client(self) -> Any:
        from corral.client import Client

        return Client(socket_path=str(self.state_dir / "corral.sock"))

    def wait_job(self, job_id: int | str, pred: Callable[[dict[str, Any]], bool],
                 timeout_s: float = 20.0) -> dict[str, Any]:
        """Poll a job until ``pred`` holds (with a deadline)."""
        end = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        with self.client() as c:
            while time.monotonic() < end:
                last = c.job(job_id)
                if pred(last):
                    return last
                time.sleep(0.05)
        raise AssertionError(f"job {job_id} never reached the expected state: {last}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("corral-cli")
    state = base / "state"
    cfg = base / "corral.toml"
    cfg.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CORRAL_STATE_DIR", "CORRAL_SOCKET", "CORRAL_URL", "CORRAL_CONFIG")}
    proc = subprocess.run(
        [*CORRAL, "up", "--detach", "--state-dir", str(state), "--config", str(cfg),
         "--node-name", NODE, "--timeout", "60"],
        env=env, cwd=base, capture_output=True, text=True, timeout=90,
    )
    if proc.returncode != 0:
        pytest.fail(f"corral up failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    c = Cluster(state)
    try:
        yield c
    finally:
        try:
            with c.client() as cl:
                ids = [j["job_id"] for j in cl.jobs(user=None)]
                if ids:
                    cl.cancel(ids)
        except Exception:  # noqa: BLE001 - teardown must still stop the daemons
            pass
        subprocess.run([*CORRAL, "down", "--state-dir", str(state)], env=env,
                       capture_output=True, timeout=60)
