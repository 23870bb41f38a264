"""Many stand-in agents in one process: the real agent protocol, no processes started.

Each stand-in is a real ``AgentDaemon`` (one WebSocket to the controller over TCP, hello,
heartbeats, launched/exit/ack) with a ``TimedRunner`` instead of a ``JobRunner``: a launch
starts nothing and the job "ends" COMPLETED after its requested run time, the number in
``argv`` ``["sleep", "<seconds>"]`` (0 for anything else). Used by ``bench/scale.py``.

Usage: ``scale_agents.py URL KEYFILE STATE_DIR PREFIX COUNT [CPUS]`` (node names
``<PREFIX><i>``, i from 1, zero-padded to 4 digits as in the controller's hostlist).
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
import time
from pathlib import Path

from corral.agent.daemon import AgentDaemon
from corral.agent.launch import JobExit, LaunchRequest
from corral.core.model.node import NodeSpec


class TimedRunner:
    """A JobRunner stand-in: every launch ends COMPLETED after its ``sleep`` seconds."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._done: list[JobExit] = []
        self._live: dict[int, int] = {}  # job id -> restarts
        self._seen: set[tuple[int, int]] = set()

    def launch(self, req: LaunchRequest) -> None:
        if (req.job_id, req.restarts) in self._seen:
            return
        self._seen.add((req.job_id, req.restarts))
        self._live[req.job_id] = req.restarts
        runtime = 0.0
        if len(req.argv) == 2 and req.argv[0] == "sleep":
            try:
                runtime = float(req.argv[1])
            except ValueError:
                runtime = 0.0
        start = time.time()
        asyncio.get_running_loop().call_later(runtime, self._end, req.job_id, req.restarts,
                                              start)

    def _end(self, job_id: int, restarts: int, start: float) -> None:
        if self._live.get(job_id) != restarts:
            return
        del self._live[job_id]
        self._done.append(JobExit(job_id=job_id, state="COMPLETED", start_time=start,
                                  end_time=time.time(), restarts=restarts))
        os.eventfd_write(self._fd, 1)

    def poll(self) -> list[JobExit]:
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        out, self._done = self._done, []
        return out

    def ack(self, job_id: int) -> bool:
        self._seen.discard((job_id, 0))
        return True

    def running(self) -> list[int]:
        return list(self._live)

    def running_runs(self) -> list[tuple[int, int]]:
        return list(self._live.items())

    def active_run(self, job_id: int) -> int | None:
        return self._live.get(job_id)

    def cancel(self, job_id: int, grace_s: int | None = None) -> bool:
        restarts = self._live.pop(job_id, None)
        if restarts is None:
            return False
        now = time.time()
        self._done.append(JobExit(job_id=job_id, state="CANCELLED", start_time=now,
                                  end_time=now, restarts=restarts))
        os.eventfd_write(self._fd, 1)
        return True

    def signal(self, job_id: int, sig: int, *, batch_only: bool = False,
               all_but_batch: bool = False) -> bool:
        return job_id in self._live

    def update_time_limit(self, job_id: int, time_limit_s: int | None) -> bool:
        return job_id in self._live

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        os.close(self._fd)


def node_name(prefix: str, i: int) -> str:
    return f"{prefix}{i:04d}"


async def main(url: str, key: str, state: Path, prefix: str, count: int, cpus: int) -> None:
    daemons = []
    for i in range(1, count + 1):
        name = node_name(prefix, i)
        spec = NodeSpec(name=name, sockets=1, cores_per_socket=cpus, mem_mb=256_000)
        daemons.append(AgentDaemon(url, key, state / name, spec=spec, runner=TimedRunner(),
                                   reconnect_max_s=2.0, pin_cpus=False))
    gc.collect()
    gc.freeze()
    tasks = [asyncio.create_task(d.run()) for d in daemons]
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    url, keyfile, state_dir, prefix, n = sys.argv[1:6]
    cpus = int(sys.argv[6]) if len(sys.argv) > 6 else 64
    asyncio.run(main(url, Path(keyfile).read_text().strip(), Path(state_dir), prefix, int(n),
                     cpus))
