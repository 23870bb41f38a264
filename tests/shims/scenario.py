"""Job records that reproduce the captured Slurm 22.05 queue (``JOBS.txt``) at time NOW."""

from __future__ import annotations

import time
from typing import Any

from corral.shims.context import Context
from corral.shims.local import dispatch
from tests.shims.fakes import FakeClient, job

NOW = time.mktime((2026, 11, 29, 22, 11, 57, 0, 0, -1))
T0 = NOW - 89  # when the first jobs started


def queue_records() -> list[dict[str, Any]]:
    run = {"state": "RUNNING", "nodes": ["vm"], "start_time": T0}
    recs = [
        job(25, name="needs_all64", reason="Resources", priority=16, num_cpus=64),
        job(14, name="begin_later", reason="BeginTime", priority=15),
        job(24, name="dep_afterany", reason="Dependency", priority=14,
            dependency="afterany:1(unfulfilled),afterany:2(unfulfilled)"),
        job(23, name="dep_never", reason="DependencyNeverSatisfied", priority=13),
        job(15, name="dep_afterok", reason="Dependency", priority=11),
        job(13, name="held_admin", reason="JobHeldAdmin", priority=0.5, hold="ADMIN"),
        job(12, name="held_user", reason="JobHeldUser", priority=0, hold="USER"),
        job(26, name="behind_big", priority=9, time_limit_s=300,
            **{**run, "start_time": NOW - 62}),
        job(1, name="long", priority=8, **run),
        job(2, name="parsable", priority=7, **run),
    ]
    for task, jid in ((1, 4), (2, 19)):
        recs.append(job(jid, name="arr_limited", array=4, task=task, priority=6 - task,
                        array_max_running=2, **run))
    for task, jid in ((3, 20), (4, 21), (5, 22), (6, 30)):
        recs.append(job(jid, name="arr_limited", array=4, task=task, priority=12,
                        reason="JobArrayTaskLimit", array_max_running=2))
    return recs


def finished_records() -> list[dict[str, Any]]:
    done = {"state": "COMPLETED", "nodes": ["vm"], "start_time": T0, "end_time": T0,
            "exit_code": 0}
    recs = [
        job(10, name="cancel_running", priority=99, **{**done, "state": "CANCELLED"}),
        job(11, name="cancel_pending", priority=98, state="CANCELLED", reason="JobHeldUser"),
        job(3, name="env_default.sh", priority=97, **done),
        job(5, name="arr_quick", array=5, task=1, priority=96, **done),
        job(6, name="p2", priority=95, **done),
        job(8, name="done", priority=94, **done),
        job(16, name="envjob", priority=93, **done),
        job(17, name="envarray", array=17, task=7, priority=92, **done),
    ]
    for task, jid in ((2, 31), (3, 32), (4, 33)):
        recs.append(job(jid, name="arr_quick", array=5, task=task, priority=91 - task, **done))
    recs.append(job(9, name="fail", priority=80, **{**done, "state": "FAILED", "exit_code": 3,
                                                    "derived_exit": "3:0"}))
    recs.append(job(7, name="timeout", priority=1, time_limit_s=60,
                    **{**done, "state": "TIMEOUT", "end_time": T0 + 87}))
    return recs


def run(cmd: str, argv: list[str], client: FakeClient, *, now: float = NOW,
        env: dict[str, str] | None = None, uid: int = 0,
        files: dict[str, tuple[bool, str]] | None = None, stdin: str | None = None,
        local: bool = True) -> tuple[str, str, int]:
    ctx = Context(prog=cmd, argv=argv, cwd="/var/tmp/slurm-anchor/work/capture",
                  env=env or {}, uid=uid, now=now, local=local, files=files or {},
                  stdin_text=stdin)
    rc = dispatch(cmd, ctx, client)  # type: ignore[arg-type]
    return ctx.stdout_text, ctx.stderr_text, rc
