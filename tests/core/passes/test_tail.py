"""The compact waiting tail (``passes.tail``) gives the per-job pass's reasons.

Property: for random queues (held jobs, begin times, dependencies, array task limits,
admin priorities, own time limits, licenses, jobs too large to ever run, a down
partition), under EASY and conservative backfill, FCFS and multifactor order, small
``bf_max_job_test`` and with or without a start cap (``max_starts_per_cycle``), a cycle
with ``Pass.compact_tail`` on and one with it off (every job visited) make the same
decisions, and the ``PendingMap`` reads exactly as the per-job dict: same keys, same
``PendingInfo`` for every job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from builders import cluster, job
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.cycle import clear_caches
from corral.core.decisions import CycleResult, PendingMap
from corral.core.model.job import HoldKind, Job
from corral.core.model.partition import PartitionState
from corral.core.passes.schedule import Pass


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    Pass.compact_tail = True


KINDS = ("plain", "plain", "plain", "plain", "held", "begin", "dep", "array", "admin",
         "limit", "lic", "huge", "down", "wide")
JOBS = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 8), st.integers(0, 50),
                          st.integers(1, 3)), min_size=5, max_size=60)


def _queue(jobs: list[tuple[str, int, int, int]]) -> list[Job]:
    out = []
    shared = job().cpus(2).walltime_s(600).build().spec  # array tasks share one spec
    for k, (kind, cpus, submit, nodes) in enumerate(jobs, 1):
        b = job(k).cpus(cpus).submit(float(submit)).walltime_s(60 * cpus)
        if kind == "wide":
            b = b.nodes(nodes + 2)
        elif kind == "held":
            b = b.hold(HoldKind.USER)
        elif kind == "begin":
            b = b.begin(1e9)
        elif kind == "dep":
            b = b.depends("afterok", max(1, k - 1))
        elif kind == "lic":
            b = b.licenses(matlab=1)
        elif kind == "huge":
            b = b.cpus(999)
        elif kind == "down":
            b = b.partition("off")
        elif kind == "admin":
            b = b.priority(cpus * 10)
        got = b.build()
        if kind == "limit":
            got = replace(got, time_limit_s=30)
        if kind == "array":
            got = replace(got, spec=shared, array_job_id=1000, array_task_id=k,
                          array_max_running=2)
        out.append(got)
    return out


def _compare(a: CycleResult, b: CycleResult) -> None:
    assert a.starts == b.starts
    assert a.reservations == b.reservations
    assert a.rejects == b.rejects
    assert a.reserved == b.reserved
    assert a.stats == b.stats
    assert set(a.pending) == set(b.pending)
    assert len(a.pending) == len(b.pending)
    for jid in b.pending:
        assert a.pending[jid] == b.pending[jid], jid
    assert dict(a.pending.items()) == dict(b.pending.items())


@settings(max_examples=60, deadline=None)
@given(JOBS, st.sampled_from([BackfillMode.EASY, BackfillMode.CONSERVATIVE]),
       st.sampled_from([Ordering.FCFS, Ordering.MULTIFACTOR]), st.integers(0, 4),
       st.booleans(), st.sampled_from([None, None, 1, 2, 4]))
def test_tail_reads_as_per_job_reasons(jobs: list[tuple[str, int, int, int]],
                                       mode: BackfillMode, ordering: Ordering,
                                       max_test: int, again: bool, cap: int | None) -> None:
    c = cluster(nodes=3)
    c.partition("off", state=PartitionState.DOWN)
    c.licenses = (("matlab", 1),)
    pending = _queue(jobs)
    running = [job(10_000 + k).cpus(8).walltime_s(500 * (k + 1)).running_on(
        (f"n00{k + 1}", 8), start=0).build() for k in range(2)]
    snap = c.snapshot(pending=pending, running=running)
    cfg = SchedulerConfig(backfill=mode, ordering=ordering, bf_max_job_test=max_test,
                          max_starts_per_cycle=cap)  # the tail behind a start cap too
    clear_caches()
    Pass.compact_tail = False
    general = run_cycle(snap, cfg, 100.0)
    if again:  # a second cycle from the first one's reservations (conservative carries)
        snap = replace(snap, reservations=general.reservations, reserved=general.reserved)
        general = run_cycle(snap, cfg, 200.0)
    Pass.compact_tail = True
    if not again:
        clear_caches()
    for _ in range(2):  # the loop records the waiting jobs, then they come as the tail
        compact = run_cycle(snap, cfg, 200.0 if again else 100.0)
        _compare(compact, general)


def test_deep_queue_comes_as_one_tail() -> None:
    """Behind a blocked head and the test limit, plain jobs are one ``PendingTail``; the
    jobs with their own reasons keep them."""
    c = cluster(nodes=1)
    pending = [job(1).cpus(4).build()]  # waits for the running job: blocks the node
    pending += [job(k).cpus(1).walltime_s(10**6).submit(float(k)).build()
                for k in range(2, 40)]
    pending[10] = job(11).hold(HoldKind.USER).submit(11.0).build()
    running = [job(100).cpus(8).walltime_s(1000).running_on(("n001", 8), start=0).build()]
    cfg = SchedulerConfig(ordering=Ordering.FCFS, bf_max_job_test=3)
    run_cycle(c.snapshot(pending=pending, running=running), cfg, 10.0)  # plans every spec
    r = run_cycle(c.snapshot(pending=pending, running=running), cfg, 10.0)
    assert isinstance(r.pending, PendingMap)
    tail = r.pending.tail
    assert tail.reason == "Priority" and "bf_max_job_test=3" in tail.detail
    assert 11 not in tail.job_ids and r.pending[11].reason == "JobHeldUser"
    assert list(tail.ranks) == sorted(tail.ranks)
    assert r.pending[39].rank == 39 and r.pending[39].priority == -39.0
    assert len(r.pending) == 39 and r.pending[1].reason == "Resources"
