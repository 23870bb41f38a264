"""An agent whose runner starts nothing: every launch "exits" COMPLETED at once.

Measures the control path alone (controller API, store, scheduling cycles, protocol,
agent daemon) without the cost of forking supervisors and jobs. Used by
``daemon_bench.py --null-agent``. Usage: ``null_agent.py SOCKET KEYFILE NODE``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from corral.agent.daemon import AgentDaemon
from corral.agent.launch import JobExit, LaunchRequest
from corral.core.model.node import NodeSpec


class NullRunner:
    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._done: list[JobExit] = []
        self._seen: set[tuple[int, int]] = set()

    def launch(self, req: LaunchRequest) -> None:
        if (req.job_id, req.restarts) in self._seen:
            return
        self._seen.add((req.job_id, req.restarts))
        now = time.time()
        self._done.append(JobExit(job_id=req.job_id, state="COMPLETED", start_time=now,
                                  end_time=now, restarts=req.restarts))
        os.write(self._w, b"x")

    def poll(self) -> list[JobExit]:
        try:
            os.read(self._r, 65536)
        except BlockingIOError:
            pass
        out, self._done = self._done, []
        return out

    def ack(self, job_id: int) -> bool:
        return True

    def running(self) -> list[int]:
        return []

    def running_runs(self) -> list[tuple[int, int]]:
        return []

    def active_run(self, job_id: int) -> int | None:
        return None

    def cancel(self, job_id: int, grace_s: int | None = None) -> bool:
        return False

    def signal(self, job_id: int, sig: int, *, batch_only: bool = False) -> bool:
        return False

    def update_time_limit(self, job_id: int, time_limit_s: int | None) -> bool:
        return False

    def fileno(self) -> int:
        return self._r

    def close(self) -> None:
        pass


def main() -> None:
    sock, keyfile, node = sys.argv[1:4]
    spec = NodeSpec(name=node, sockets=1, cores_per_socket=64, mem_mb=16000)
    d = AgentDaemon(f"unix:{sock}", Path(keyfile).read_text().strip(),
                    Path(keyfile).parent / "null-agent", spec=spec, runner=NullRunner())
    asyncio.run(d.run())


if __name__ == "__main__":
    main()
