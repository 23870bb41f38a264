"""A cancel or requeue that arrives while a job's start is being committed.

The scheduler marks a job RUNNING, then awaits the commit of the start before it sends the
launch. A ``scancel`` that lands in that await finds a RUNNING job, asks its agent to kill
it (the agent does not know the job yet and ignores that) and flags it. The launch must
then not be sent, and the job must end as asked there and then: nothing else would ever
report its end (it used to stay RUNNING until the agent reconnected).

A real controller on a real SQLite store, in this process; the agent's side of the
connection is a recorder of the frames the controller sends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from corral.config.load import parse_config
from corral.controller.agents import AgentConn
from corral.controller.auth import Identity
from corral.controller.records import JobRecord
from corral.controller.service import Controller
from corral.controller.store import Store
from corral.core.model.job import JobSpec, JobState
from corral.core.model.node import NodeSpec
from corral.protocol.messages import decode_frame
from corral.submission import JobSubmission


class _AgentSide:
    """The agent's end of the WebSocket: keeps every frame the controller sends."""

    def __init__(self) -> None:
        self.msgs: list[dict[str, Any]] = []

    async def send_text(self, text: str) -> None:
        self.msgs.extend(decode_frame(text))

    def types(self, job_id: int) -> list[str]:
        return [str(m.get("t")) for m in self.msgs
                if m.get("job_id") == job_id or (m.get("req") or {}).get("job_id") == job_id]


async def _controller(tmp_path: Path) -> tuple[Controller, _AgentSide]:
    cfg = parse_config({
        "controller": {"schedule_delay_ms": 1},
        "nodes": [{"name": "n1", "cpus": 4, "mem_mb": 4000}],
        "scheduler": {"default_mem_per_cpu_mb": 100},
    })
    ctl = Controller(cfg, tmp_path, Store(f"sqlite:///{tmp_path / 'corral.db'}"))
    await ctl.start()
    ctl.nodes.register(NodeSpec("n1", 1, 4, 1, 4000), "test", None)
    side = _AgentSide()
    ctl.hub.conns["n1"] = AgentConn(side, "n1")
    return ctl, side


def _during_start_commit(ctl: Controller,
                         then: Callable[[JobRecord], Awaitable[None]]) -> asyncio.Event:
    """Run ``then`` inside the commit of the first start (before the launch goes out)."""
    real = ctl.persist
    done = asyncio.Event()

    async def persist(inserts: Iterable[JobRecord] = (),
                      updates: Iterable[JobRecord] = (), **kw: Any) -> Any:
        updates = list(updates)
        started = [r for r in updates if r.state is JobState.RUNNING and not r.dispatched]
        if started and not done.is_set():
            done.set()
            await then(started[0])
        return await real(inserts=inserts, updates=updates, **kw)

    ctl.persist = persist  # type: ignore[method-assign,assignment]
    return done


async def _wait(pred: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("action", ["cancel", "requeue"])
def test_cancel_or_requeue_during_the_start_commit(tmp_path: Path, action: str) -> None:
    async def main() -> None:
        ctl, side = await _controller(tmp_path)
        who = Identity("root", 0, 0) if os.geteuid() == 0 else \
            Identity(os.environ.get("USER", "me"), os.geteuid(), os.getegid())
        try:
            async def act(rec: JobRecord) -> None:
                await ctl.act(action, [str(rec.id)], who, {})

            hit = _during_start_commit(ctl, act)
            sub = JobSubmission(spec=JobSpec(name="race", time_limit_s=60), argv=("true",),
                                workdir=str(tmp_path))
            out = await ctl.submit(sub.to_json(), who)
            jid = int(out["job_ids"][0])
            await _wait(hit.is_set, "the start's commit")
            rec = ctl.jobs[jid]
            if action == "cancel":
                await _wait(lambda: rec.state is JobState.CANCELLED, "the job to end")
                assert rec.end_reason.startswith("cancelled by"), rec.end_reason
                assert ctl.nodes.nodes["n1"].alloc_cpus == 0  # its cores are free again
            else:  # back to the queue, and (unheld) started again as a new run
                await _wait(lambda: rec.restarts >= 1, "the requeue")
            launches = [m for m in side.msgs if m.get("t") == "launch"
                        and m["req"]["job_id"] == jid and m["req"]["restarts"] == 0]
            assert launches == [], side.types(jid)  # the first run never went out
            if action == "cancel":  # the kill the agent ignored (it did not know the job)
                await _wait(lambda: "cancel" in side.types(jid), "the cancel frame")
            else:  # the recorder does see launches: the new run's
                await _wait(lambda: any(m.get("t") == "launch" and m["req"]["job_id"] == jid
                                        and m["req"]["restarts"] == 1 for m in side.msgs),
                            "the second run's launch")
            loop = asyncio.get_running_loop()
            for _ in range(400):  # the end (or the requeue) is committed too
                rows = await loop.run_in_executor(None, ctl.store.get_jobs, [jid])
                if rows and rows[0].state == rec.state.value:
                    break
                await asyncio.sleep(0.005)
            assert rows and rows[0].state == rec.state.value, (rows, rec.state)
        finally:
            await ctl.stop()

    asyncio.run(main())
