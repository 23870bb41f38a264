"""A real one-machine cluster with the Slurm/PBS shims installed, for end-to-end tests.

``start_cluster`` runs ``corral up --detach`` on a private state directory with a config
that declares 8 CPUs on the node (like the reference Slurm's 64-CPU override on this
2-core machine: dask-jobqueue's runner test wants 4 idle CPUs, jobs mostly sleep), then
``corral shims install`` into a private ``bin``; ``ShimCluster.env`` is the environment a
client needs (``PATH`` with the shims first, ``CORRAL_STATE_DIR``).

Each cluster starts its job ids at a random ``first_job_id`` (Slurm's ``FirstJobId``):
tools name shared files after the job id (dask-jobqueue's runner test writes
``/shared_space/<job id>.json``), and two test runs on one machine must not meet there.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CORRAL = [sys.executable, "-c", "from corral.cli.main import main; main()"]
NODE = "shimnode"
CONFIG = f"""
cluster_name = "shimtest"

[controller]
first_job_id = {{first_job_id}}
min_job_age_s = 600
kill_grace_s = 3

[[nodes]]
name = "{NODE}"
cpus = 8
mem_mb = 16000

[[partitions]]
name = "debug"
nodes = "ALL"
default = true

[[partitions]]
name = "batch"
nodes = "ALL"

[[licenses]]
name = "matlab"
count = 1
"""


class ShimCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.state_dir = base / "state"
        self.bin = base / "bin"
        self.node = NODE
        self.first_job_id = 1
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CORRAL_", "SLURM_", "SBATCH_", "SQUEUE_", "PBS_"))}
        env["CORRAL_STATE_DIR"] = str(self.state_dir)
        env["PATH"] = f"{self.bin}:{os.path.dirname(sys.executable)}:{env.get('PATH', '')}"
        self.env = env

    def run(self, *argv: str, input: str | None = None, cwd: Path | None = None,
            timeout: float = 60, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), input=input, cwd=cwd or self.base, env=env or self.env,
                              capture_output=True, text=True, timeout=timeout)

    def client(self) -> Any:
        from corral.client import Client

        return Client(socket_path=str(self.state_dir / "corral.sock"))

    def wait_job(self, job_id: int | str, pred: Callable[[dict[str, Any]], bool],
                 timeout_s: float = 30.0) -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        with self.client() as c:
            while time.monotonic() < end:
                last = c.job(job_id)
                if pred(last):
                    return last
                time.sleep(0.05)
        raise AssertionError(f"job {job_id} never reached the expected state: {last}")

    def wait_file(self, path: Path, timeout_s: float = 30.0) -> str:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if path.exists():
                text = path.read_text()
                if text:
                    return text
            time.sleep(0.05)
        raise AssertionError(f"{path} never appeared")

    def cancel_all(self) -> None:
        try:
            with self.client() as c:
                ids = [j["job_id"] for j in c.jobs()]
                if ids:
                    c.cancel(ids)
        except Exception:  # noqa: BLE001 - best effort between tests
            pass


def start_cluster(base: Path, extra_config: str = "") -> ShimCluster:
    """``extra_config``: TOML appended to ``CONFIG`` (accounts, users, weights)."""
    c = ShimCluster(base)
    cfg = base / "corral.toml"
    c.first_job_id = random.SystemRandom().randrange(1_000_000, 60_000_000)
    cfg.write_text(CONFIG.replace("{first_job_id}", str(c.first_job_id)) + extra_config)
    up = c.run(*CORRAL, "up", "--detach", "--state-dir", str(c.state_dir), "--config",
               str(cfg), "--node-name", NODE, "--timeout", "60", timeout=90)
    if up.returncode != 0:
        raise RuntimeError(f"corral up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    inst = c.run(*CORRAL, "shims", "install", str(c.bin), "--force")
    if inst.returncode != 0:
        stop_cluster(c)
        raise RuntimeError(f"corral shims install failed:\n{inst.stdout}\n{inst.stderr}")
    return c


def stop_cluster(c: ShimCluster) -> None:
    c.cancel_all()
    c.run(*CORRAL, "down", "--state-dir", str(c.state_dir), timeout=60)
