"""Job steps: numbering and recording the ``srun`` steps of a job.

The controller numbers and records a step (``Client.start_step``: ``POST
/api/v1/jobs/<id>/steps`` with name, argv, task count, nodes, CPUs, start time, pid) and
its end (``Client.end_step``: state, exit code, signal, end time); ``sacct`` then shows
``<id>.<step>`` rows, and the steps survive a controller restart. Where the controller
cannot be reached or has no such route (an older one), step ids still count up per job
(and per restart) through a small locked counter file in ``$TMPDIR``, so
``SLURM_STEP_ID`` and ``%s``/``%J`` are right either way (the step is then not recorded).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from typing import Any


class StepRecorder:
    def __init__(self, client: Any, job_id: str, restarts: str = "0",
                 env: dict[str, str] | None = None) -> None:
        self.env = env if env is not None else dict(os.environ)
        self.client = client
        self.job_id = job_id
        self.restarts = restarts
        self.remote = hasattr(client, "start_step") or hasattr(client, "request")
        self.step_id: int | None = None

    def _counter_path(self) -> str:
        """A file unique to this run of the job: the allocation's own (``srun``/``salloc``
        set ``CORRAL_STEP_COUNTER``), else keyed by the job's session (the agent starts
        each job in a new session) and that session leader's start time."""
        explicit = self.env.get("CORRAL_STEP_COUNTER")
        if explicit:
            return explicit
        base = os.path.join(tempfile.gettempdir(), f"corral-steps-{os.getuid()}")
        os.makedirs(base, mode=0o700, exist_ok=True)
        sid = os.getsid(0)
        try:
            with open(f"/proc/{sid}/stat", "rb") as f:
                stat = f.read()
            started = stat[stat.rfind(b")") + 2:].split()[19].decode()
        except (OSError, IndexError):
            started = "0"
        return os.path.join(base, f"{self.job_id}.{self.restarts}.{sid}.{started}")

    def _local_next(self) -> int:
        fd = os.open(self._counter_path(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 32).strip()
            n = int(raw) if raw.isdigit() else 0
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(n + 1).encode())
            return n
        finally:
            os.close(fd)

    @staticmethod
    def local_usage(node: str, before: Any, after: Any) -> dict[str, Any]:
        """A step srun ran itself (its tasks are its children): the CPU its children
        used between ``before`` and ``after`` (``resource.getrusage(RUSAGE_CHILDREN)``)
        and the largest child's peak RSS."""
        cpu = max(0.0, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
        rss = after.ru_maxrss / 1024.0
        entry = {"node": node, "cpu_time_s": round(cpu, 3), "max_rss_mb": round(rss, 3),
                 "pids": []}
        return {"nodes": {node: entry}, "cpu_time_s": entry["cpu_time_s"],
                "max_rss_mb": entry["max_rss_mb"]}

    def start(self, name: str, argv: list[str], ntasks: int, nodes: list[str],
              cpus: int) -> int:
        if self.remote:
            try:
                if hasattr(self.client, "start_step"):
                    self.step_id = int(self.client.start_step(
                        self.job_id, argv, name=name, ntasks=ntasks, nodes=nodes,
                        num_cpus=cpus, start_time=time.time(), pid=os.getpid()))
                else:
                    res = self.client.request("POST", f"/jobs/{self.job_id}/steps", {
                        "name": name, "argv": argv, "ntasks": ntasks, "nodes": nodes,
                        "num_cpus": cpus, "start_time": time.time(), "pid": os.getpid(),
                    })
                    self.step_id = int(res["step_id"])
                return self.step_id
            except Exception:  # noqa: BLE001 - no steps route: count locally
                self.remote = False
        self.step_id = self._local_next()
        return self.step_id

    def end(self, exit_code: int, signal: int = 0, state: str | None = None,
            usage: dict[str, Any] | None = None) -> None:
        if not self.remote or self.step_id is None:
            return
        if state is None:
            state = "COMPLETED" if exit_code == 0 and not signal else (
                "CANCELLED" if signal else "FAILED")
        try:
            if hasattr(self.client, "end_step"):
                self.client.end_step(self.job_id, self.step_id, exit_code=exit_code,
                                     signal=signal, state=state, end_time=time.time(),
                                     usage=usage)
            else:
                body: dict[str, Any] = {"state": state, "exit_code": exit_code,
                                        "signal": signal, "end_time": time.time()}
                if usage is not None:
                    body["usage"] = usage
                self.client.request("POST",
                                    f"/jobs/{self.job_id}/steps/{self.step_id}/end", body)
        except Exception:  # noqa: BLE001 - the step's end is informational
            pass
