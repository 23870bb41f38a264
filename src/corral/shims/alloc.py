"""Interactive allocations for ``srun`` (outside a job) and ``salloc``.

Slurm runs ``salloc``'s command, and ``srun``'s tasks when it had to allocate first, on
behalf of an allocation that the controller tracks like any job. Corral does the same
with an allocation job that runs nothing itself (``corral.controller.allocations``): the
caller, which may be on a login host sharing only the network with the nodes, waits for
it to run, takes its job variables from the API, runs its command here (``srun`` steps
go through the nodes' agents), keeps the allocation alive while it runs and finally
releases it with the command's exit status, so the allocation ends COMPLETED or FAILED
with that status. If the caller dies, the controller ends the allocation once its
keepalives stop; if the allocation is cancelled or times out, the caller sees the job
leave RUNNING and stops.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from corral.shims.context import Client

# variables of the allocation that the caller's own environment must take over
ALLOC_PREFIXES = ("SLURM_", "SLURMD_", "CORRAL_", "PBS_")
ALLOC_KEYS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
              "OMP_NUM_THREADS", "TMPDIR")


class AllocationError(Exception):
    def __init__(self, message: str, rc: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.rc = rc


class Allocation:
    """One interactive allocation: ``start()`` -> env, ``release(rc)``.

    The allocation is a job that runs nothing itself (``corral.controller.allocations``):
    its nodes hold the job's shares, the caller gets the job's variables from the API and
    runs its command here, ``srun`` steps go to the nodes' agents, and ``release`` ends
    the job with the command's exit status. A thread keeps the allocation alive while the
    caller runs; if the caller dies, the controller ends the allocation."""

    def __init__(self, client: Client, submission: Any, prog: str,
                 say: Callable[[str], None]) -> None:
        self.client = client
        self.prog = prog
        self.say = say
        self.dir = tempfile.mkdtemp(prefix="corral-alloc-")
        extra = dict(submission.extra)
        extra["command"] = " ".join(submission.argv)
        extra["interactive"] = prog
        extra["alloc_holder"] = "1"
        self.submission = dataclasses.replace(
            submission, script=None, argv=tuple(submission.argv) or ("true",),
            stdout="/dev/null", stderr="/dev/null", stdin=None, interactive=True,
            extra=extra)
        self.job_id: str | None = None
        self.released = False
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        request = getattr(self.client, "request")  # noqa: B009 - not in the Client protocol
        return request(method, path, body)

    def start(self, *, verbose: bool, quiet: bool, poll_s: float = 0.01) -> dict[str, str]:
        """Submit and wait until the allocation runs; returns the job's environment."""
        from corral.client import CorralError

        try:
            result = self.client.submit_result(self.submission.to_json())
        except CorralError as exc:
            from corral.shims.sbatch import rejection_lines

            prefix = {"srun": "Unable to allocate resources",
                      "salloc": "Job submit/allocate failed"}[self.prog]
            self.cleanup()
            raise AllocationError(rejection_lines(self.prog, exc, prefix), 1) from None
        ids = result.get("job_ids") or []
        self.job_id = str(ids[0] if ids else result.get("display_id"))
        said_pending = False
        started = time.monotonic()
        while True:
            rec = self.client.job(self.job_id)
            state = str(rec.get("state"))
            if state == "RUNNING":
                try:
                    got = self._request("GET", f"/jobs/{self.job_id}/environment")
                except CorralError:
                    got = None
                if got is not None:
                    break
            elif state not in ("PENDING", "CONFIGURING"):
                self.cleanup()
                raise AllocationError(
                    f"{self.prog}: error: Job allocation {self.job_id} has been revoked.", 1)
            elif not said_pending and not quiet and time.monotonic() - started > 0.5:
                said_pending = True
                if self.prog == "salloc":
                    self.say(f"salloc: Pending job allocation {self.job_id}")
                self.say(f"{self.prog}: job {self.job_id} queued and waiting for resources")
            time.sleep(poll_s)
            poll_s = min(0.25 if said_pending else 0.05, poll_s * 1.5)
        job_env: dict[str, str] = {str(k): str(v) for k, v in got["environment"].items()}
        self._keeper = threading.Thread(target=self._keepalive, daemon=True,
                                        name="corral-alloc-keepalive")
        self._keeper.start()
        if (said_pending or verbose) and not quiet:
            self.say(f"{self.prog}: job {self.job_id} has been allocated resources")
        return job_env

    def _keepalive(self) -> None:
        from corral.controller.allocations import KEEPALIVE_S

        while not self._stop.wait(KEEPALIVE_S):
            try:
                self._request("POST", f"/jobs/{self.job_id}/allocation/keepalive", {})
            except Exception:  # noqa: BLE001 - a missed keepalive is retried
                continue

    def alive(self) -> bool:
        if self.job_id is None:
            return False
        try:
            state = str(self.client.job(self.job_id).get("state"))
        except Exception:  # noqa: BLE001 - transient API trouble is not a revocation
            return True
        return state in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING")

    def release(self, rc: int) -> None:
        if self.released:
            return
        self.released = True
        self._stop.set()
        if self.job_id is not None:
            try:
                self._request("POST", f"/jobs/{self.job_id}/allocation/release",
                              {"exit_code": int(rc) & 255})
            except Exception:  # noqa: BLE001
                try:
                    self.client.cancel([self.job_id])
                except Exception:  # noqa: BLE001
                    pass
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                try:
                    state = str(self.client.job(self.job_id).get("state"))
                except Exception:  # noqa: BLE001
                    break
                if state not in ("RUNNING", "PENDING", "COMPLETING"):
                    break
                time.sleep(0.02)
        self.cleanup()

    def cancel(self) -> None:
        self._stop.set()
        if self.job_id is not None and not self.released:
            self.released = True
            try:
                self.client.cancel([self.job_id])
            except Exception:  # noqa: BLE001
                pass
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def merge_env(own: dict[str, str], job_env: dict[str, str],
              alloc_dir: str | None = None) -> dict[str, str]:
    """The caller's environment with the allocation's job variables on top."""
    env = {k: v for k, v in own.items() if not k.startswith(("SLURM_", "SLURMD_"))}
    for k, v in job_env.items():
        if k.startswith(ALLOC_PREFIXES) or k in ALLOC_KEYS:
            env[k] = v
    if alloc_dir is not None:
        env["CORRAL_STEP_COUNTER"] = os.path.join(alloc_dir, "steps")
    return env
