"""One pending job decided without the pass (``passes.alone``) gets the pass's decision.

Each case runs the same snapshot through ``run_cycle`` twice (the first call fills the
pass's memos, so the second may take the short path) and compares both with the pass
alone (``start_alone`` switched off): starts with their exact allocations, reservations,
rejects, pending reasons, stats.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import Cluster, cluster, config, job
from hypothesis import given, settings
from hypothesis import strategies as st

import corral.core.cycle as cycle_mod
from corral.core import run_cycle
from corral.core.config import BackfillMode
from corral.core.decisions import CycleResult, Start
from corral.core.model.job import HoldKind, Job
from corral.core.model.partition import PartitionState
from corral.core.snapshot import ClusterSnapshot


def _unit_cluster(nodes: int) -> Cluster:
    return cluster(nodes=nodes, sockets=1, cores_per_socket=1, mem_mb=1000)


def _both(snap: ClusterSnapshot, cfg: Any, monkeypatch: pytest.MonkeyPatch,
          now: float = 10.0) -> tuple[CycleResult, CycleResult, int]:
    """(result with the short path, result of the pass alone, short-path starts)."""
    hits = {"n": 0}
    real = cycle_mod.start_alone

    def counted(*args: Any) -> Start | None:
        got = real(*args)
        hits["n"] += got is not None
        return got

    monkeypatch.setattr(cycle_mod, "start_alone", counted)
    first = run_cycle(snap, cfg, now)
    fast = run_cycle(snap, cfg, now)
    assert fast == first
    monkeypatch.setattr(cycle_mod, "start_alone", lambda *args: None)
    slow = run_cycle(snap, cfg, now)
    monkeypatch.setattr(cycle_mod, "start_alone", real)
    return fast, slow, hits["n"]


def test_a_plain_job_takes_the_short_path_with_the_pass_decision(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = _unit_cluster(6)
    busy = job(1).walltime_s(100).running_on(("n002", 1), ("n004", 1), start=0.0).build()
    pending = job(2).tasks(3).nodes(1, 3).walltime_s(600).submit(1).build()
    snap = c.snapshot(pending=[pending], running=[busy])
    fast, slow, hits = _both(snap, config(annotate_pending=False), monkeypatch)
    assert hits == 1
    assert fast == slow
    assert [s.job_id for s in fast.starts] == [2]
    assert [n.node for n in fast.starts[0].allocation.nodes] == ["n001", "n003", "n005"]


def test_a_job_that_does_not_fit_is_left_to_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _unit_cluster(3)
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()
    wide = job(2).tasks(3).nodes(3, 3).walltime_s(600).submit(1).build()
    snap = c.snapshot(pending=[wide], running=[busy])
    fast, slow, hits = _both(snap, config(annotate_pending=True), monkeypatch)
    assert hits == 0
    assert fast == slow
    assert not fast.starts and fast.reservations[0].job_id == 2
    assert fast.pending[2].reason == "Resources"


SPECIAL = ["plain", "held", "array_full", "array_room", "begins_later", "began", "time_min",
           "licenses", "too_many_licenses", "second_up", "second_down", "exclusive",
           "mem_within", "mem_over", "max_jobs_0"]


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(1, 6),
    busy=st.lists(st.integers(0, 5), max_size=5, unique=True),
    tasks=st.integers(1, 7),
    exact=st.booleans(),
    special=st.sampled_from(SPECIAL),
    mode=st.sampled_from(list(BackfillMode)),
    annotate=st.booleans(),
)
def test_the_short_path_decides_as_the_pass(nodes: int, busy: list[int], tasks: int,
                                            exact: bool, special: str, mode: BackfillMode,
                                            annotate: bool) -> None:
    """A plain job, or one with one thing the short path must leave to the pass."""
    c = _unit_cluster(nodes)
    c.licenses = (("lic", 2),)
    running: list[Job] = []
    for k, node in enumerate(sorted(b for b in busy if b < nodes)):
        running.append(job(100 + k).walltime_s(60 * (k + 1))
                       .running_on((f"n{node + 1:03d}", 1), start=0.0).build())
    b = job(1).tasks(tasks).nodes(tasks if exact else 1, tasks).walltime_s(600).submit(1)
    max_jobs: int | None = None
    if special == "held":
        b.hold(HoldKind.USER)
    elif special.startswith("array"):
        b.array(7, 1, 0 if special == "array_full" else 2)
    elif special in ("begins_later", "began"):
        b.begin(50.0 if special == "begins_later" else 5.0)
    elif special == "time_min":
        b.spec(time_min_s=30)
    elif special.endswith("licenses"):
        b.licenses(lic=1 if special == "licenses" else 5)
    elif special.startswith("second"):
        c.partition("other", state=PartitionState.UP if special == "second_up"
                    else PartitionState.DOWN)
        b.partition("other", "batch")
    elif special == "exclusive":
        b.exclusive()
    elif special.startswith("mem"):
        b.spec(mem_per_node_mb=500 if special == "mem_within" else 2000)
    elif special == "max_jobs_0":
        max_jobs = 0
    snap = c.snapshot(pending=[b.build()], running=running)
    cfg = config(backfill=mode, annotate_pending=annotate, max_jobs_per_cycle=max_jobs,
                 bf_resolution_s=1)
    with pytest.MonkeyPatch.context() as mp:
        fast, slow, _ = _both(snap, cfg, mp)
    assert fast == slow
