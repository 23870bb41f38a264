"""Interactive allocations for ``srun`` (outside a job) and ``salloc``.

Slurm runs ``salloc``'s command, and ``srun``'s tasks when it had to allocate first, on
behalf of an allocation that the controller tracks like any job. Corral does the same
with a *holder*: a tiny process submitted as the allocation's job. When the agent starts
it, the holder writes the job environment it received (``SLURM_*``, ``CUDA_VISIBLE_DEVICES``
...) into a private directory and waits; the caller reads that environment, runs its
command or tasks here with it, and finally writes the exit status, which the holder
exits with, so the allocation ends COMPLETED or FAILED with the command's status. If
the caller dies, the holder notices (its pid is gone) and ends the allocation; if the
allocation is cancelled or times out, the caller sees the job leave RUNNING and stops.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from corral.shims.context import Client

HOLDER = r"""
import json, os, sys, time
d, caller = sys.argv[1], int(sys.argv[2])
tmp = os.path.join(d, "env.json.tmp")
with open(tmp, "w") as f:
    json.dump(dict(os.environ), f)
os.rename(tmp, os.path.join(d, "env.json"))
rc_path = os.path.join(d, "rc")
delay = 0.02
while True:
    try:
        with open(rc_path) as f:
            text = f.read().strip()
        if text:
            sys.exit(int(text) & 255)
    except FileNotFoundError:
        pass
    except ValueError:
        sys.exit(1)
    try:
        os.kill(caller, 0)
    except ProcessLookupError:
        sys.exit(1)
    except PermissionError:
        pass
    time.sleep(delay)
    delay = min(0.5, delay * 2)
"""

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
    """One interactive allocation: ``start()`` -> env, ``release(rc)``."""

    def __init__(self, client: Client, submission: Any, prog: str,
                 say: Callable[[str], None]) -> None:
        self.client = client
        self.prog = prog
        self.say = say
        self.dir = tempfile.mkdtemp(prefix="corral-alloc-")
        holder_argv = (sys.executable, "-I", "-S", "-c", HOLDER, self.dir, str(os.getpid()))
        extra = dict(submission.extra)
        extra["command"] = " ".join(submission.argv)
        extra["interactive"] = prog
        self.submission = dataclasses.replace(
            submission, script=None, argv=holder_argv, stdout="/dev/null",
            stderr="/dev/null", stdin=None, interactive=True, extra=extra)
        self.job_id: str | None = None
        self.released = False

    def start(self, *, verbose: bool, quiet: bool, poll_s: float = 0.02) -> dict[str, str]:
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
        env_path = os.path.join(self.dir, "env.json")
        next_check = time.monotonic() + 0.5
        said_pending = False
        while not os.path.exists(env_path):
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 1.0
                rec = self.client.job(self.job_id)
                state = str(rec.get("state"))
                if state not in ("PENDING", "RUNNING", "CONFIGURING"):
                    self.cleanup()
                    raise AllocationError(
                        f"{self.prog}: error: Job allocation {self.job_id} has been revoked.",
                        1)
                if state == "PENDING" and not said_pending and not quiet:
                    said_pending = True
                    if self.prog == "salloc":
                        self.say(f"salloc: Pending job allocation {self.job_id}")
                    self.say(f"{self.prog}: job {self.job_id} queued and waiting for "
                             "resources")
            time.sleep(poll_s)
            poll_s = min(0.1, poll_s * 1.5)
        with open(env_path) as f:
            job_env: dict[str, str] = json.load(f)
        if (said_pending or verbose) and not quiet:
            self.say(f"{self.prog}: job {self.job_id} has been allocated resources")
        return job_env

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
        try:
            tmp = os.path.join(self.dir, "rc.tmp")
            with open(tmp, "w") as f:
                f.write(str(rc))
            os.rename(tmp, os.path.join(self.dir, "rc"))
        except OSError:
            pass
        if self.job_id is not None:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                try:
                    state = str(self.client.job(self.job_id).get("state"))
                except Exception:  # noqa: BLE001
                    break
                if state not in ("RUNNING", "PENDING", "COMPLETING"):
                    break
                time.sleep(0.05)
            else:
                try:
                    self.client.cancel([self.job_id])
                except Exception:  # noqa: BLE001
                    pass
        self.cleanup()

    def cancel(self) -> None:
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
