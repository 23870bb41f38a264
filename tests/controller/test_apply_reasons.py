"""The scheduler applies a compact waiting tail exactly as it applies per-job reasons.

A real core cycle over a deep queue of real ``JobRecord``s returns a ``PendingMap`` (one
``PendingTail`` for the jobs behind ``bf_max_job_test``); applying it to one copy of the
records and its per-job dict to another leaves both copies field for field the same.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from types import SimpleNamespace

from corral.controller.records import JobRecord
from corral.controller.scheduler import UNEVALUABLE, SchedulerLoop
from corral.core import run_cycle
from corral.core.config import BackfillMode, SchedulerConfig
from corral.core.decisions import PendingMap
from corral.core.model.job import HoldKind, JobSpec
from corral.core.model.node import Node, NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.core.snapshot import ClusterSnapshot
from corral.submission import JobSubmission

FIELDS = ("reason", "reason_detail", "priority", "rank", "est_start", "eligible_time")


def _records() -> dict[int, JobRecord]:
    recs: dict[int, JobRecord] = {}
    for k in range(1, 301):
        spec = JobSpec(user=f"u{k % 3}", cpus_per_task=1 + k % 4, time_limit_s=600 + k)
        rec = JobRecord(k, JobSubmission(spec), submit_time=float(k))
        if k % 50 == 0:
            rec.hold = HoldKind.USER
        if k == 77:  # a job the core could not evaluate keeps its error as reason
            rec.hold = HoldKind.ADMIN
            rec.reason_detail = UNEVALUABLE + "boom"
        recs[k] = rec
    return recs


def _loop(recs: dict[int, JobRecord]) -> SchedulerLoop:
    loop = SchedulerLoop.__new__(SchedulerLoop)
    loop.ctl = SimpleNamespace(pending=recs)  # type: ignore[assignment]
    return loop


def test_tail_applies_like_per_job_reasons() -> None:
    nodes = tuple(Node(NodeSpec(f"n{k}", 1, 4, 1, 8000), NodeState.IDLE) for k in range(2))
    parts = (Partition("batch", tuple(n.spec.name for n in nodes), is_default=True),)
    cfg = SchedulerConfig(backfill=BackfillMode.EASY, bf_max_job_test=5)
    a = _records()
    b = copy.deepcopy(a)
    base = ClusterSnapshot(nodes, parts)  # the same QOS/accounts objects: a warm memo
    for now in (1000.0, 1000.0, 5000.0):
        snap = replace(base, pending=tuple(r.to_core() for r in a.values()))
        result = run_cycle(snap, cfg, now)
        pending = result.pending
        if now == 5000.0:
            assert isinstance(pending, PendingMap) and len(pending.tail) > 200
        _loop(a).apply_reasons(pending, now)
        _loop(b).apply_reasons(dict(pending.items()), now)
        for jid, rec in a.items():
            assert tuple(getattr(rec, f) for f in FIELDS) == tuple(
                getattr(b[jid], f) for f in FIELDS), jid
    assert a[77].reason_detail.startswith(UNEVALUABLE)
    assert a[300].reason == "JobHeldUser" and a[299].reason == "Priority"
    assert a[299].rank is not None and a[299].eligible_time == 1000.0
