"""Held jobs stay out of the queue pass (``Scheduler.snapshot``: ``held``), and nothing a
user sees changes for it: a real controller on SQLite in this process."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from corral.controller.auth import Identity
from corral.core.model.job import JobSpec, JobState
from corral.core.parse.dependency import parse_dependency
from corral.submission import JobSubmission
from tests.controller.test_start_cancel_race import _controller, _wait


def test_held_jobs_are_kept_apart_and_dependencies_on_them_wait(tmp_path: Path) -> None:
    async def main() -> None:
        ctl, side = await _controller(tmp_path)
        who = Identity("root", 0, 0) if os.geteuid() == 0 else \
            Identity(os.environ.get("USER", "me"), os.geteuid(), os.getegid())
        try:
            def body(**kw: object) -> dict[str, object]:
                return JobSubmission(spec=JobSpec(name="h", time_limit_s=60, **kw),
                                     argv=("true",), workdir=str(tmp_path),
                                     hold=True).to_json()

            held = [int((await ctl.submit(body(), who))["job_ids"][0]) for _ in range(3)]
            sub = JobSubmission(spec=JobSpec(name="after", time_limit_s=60,
                                             dependency=parse_dependency(f"afterok:{held[0]}")),
                                argv=("true",), workdir=str(tmp_path)).to_json()
            waiter = int((await ctl.submit(sub, who))["job_ids"][0])
            await _wait(lambda: ctl.jobs[waiter].reason == "Dependency", "the waiter's reason")
            snap = ctl.sched.snapshot()
            assert sorted(j.id for j in snap.held) == held
            assert [j.id for j in snap.pending] == [waiter]
            for jid in held:
                rec = ctl.jobs[jid]
                assert (rec.state, rec.reason, rec.priority) == \
                    (JobState.PENDING, "JobHeldUser", 0.0)
            await ctl.act("release", [str(held[0])], who, {})
            await _wait(lambda: ctl.jobs[held[0]].state is JobState.RUNNING,
                        "the released job to start")
            assert ctl.jobs[waiter].state is JobState.PENDING  # until it ends well
            await ctl.act("hold", [str(held[1]), str(held[2])], who, {})  # held again: no-op
            assert {ctl.jobs[j].reason for j in held[1:]} == {"JobHeldUser"}
        finally:
            await ctl.stop()

    asyncio.run(main())
