"""Powered-down nodes in the plan (``corral.core.boot``): available after their boot time,
so estimated starts include it, nothing starts on them now, and only the nodes that the
planned starts need are to be resumed."""

from __future__ import annotations

import pytest

from corral.core import reasons as R
from corral.core.boot import nodes_to_resume
from corral.core.config import BackfillMode
from corral.core.cycle import run_cycle
from corral.core.decisions import Reserve
from tests.builders import alloc_on, cluster, config, job

NOW = 10_000.0
BOOT_S = 300.0
MODES = [BackfillMode.EASY, BackfillMode.CONSERVATIVE]


def _busy_first(end_s: int) -> object:
    """A job that holds all 8 cores of n001 until NOW + end_s."""
    return job(99).cpus(8).walltime_s(end_s).running_on(alloc_on("n001", range(8)),
                                                         start=NOW).build()


def _down(*names: str) -> dict[str, float]:
    return dict.fromkeys(names, NOW + BOOT_S)


@pytest.mark.parametrize("mode", MODES)
def test_estimated_start_includes_the_boot_and_just_enough_nodes_resume(
        mode: BackfillMode) -> None:
    c = cluster(nodes=4)  # n001 up and busy; n002-n004 powered down
    down = _down("n002", "n003", "n004")
    jobs = [job(i).cpus(8).walltime_s(600).build() for i in (1, 2)]
    snap = c.snapshot(pending=jobs, running=[_busy_first(5000)], boot_ready=down)
    res = run_cycle(snap, config(backfill=mode), NOW)
    assert not res.starts and not res.rejects  # nothing runs on a node that is booting
    for jid in (1, 2):
        info = res.pending[jid]
        assert info.reason in (R.RESOURCES, R.PRIORITY)
        assert info.est_start is not None and NOW + BOOT_S <= info.est_start < NOW + 400
    first = res.pending[1]
    assert "(0 cores free now" in first.detail and "3 powered-down or booting node(s) are " \
        "available after their boot" in first.detail, first.detail
    planned = {r.job_id: r.nodes for r in res.reservations}
    assert len(planned[1]) == 1 and len(planned[2]) == 1 and planned[1] != planned[2]
    # two jobs, three powered-down nodes: two are resumed, not all
    assert nodes_to_resume(res.reservations, down, NOW,
                           config().bf_resolution_s) == sorted(planned[1] + planned[2])


def test_without_boot_times_a_powered_down_node_is_used_at_once() -> None:
    c = cluster(nodes=2)  # the shell's old view: powered-down nodes are plain idle ones
    res = run_cycle(c.snapshot(pending=[job(1).cpus(8).walltime_s(600).build()],
                               running=[_busy_first(5000)]), config(), NOW)
    assert [s.allocation.node_names for s in res.starts] == [("n002",)]


def test_an_up_node_is_used_before_a_booting_one() -> None:
    c = cluster(nodes=3)
    res = run_cycle(c.snapshot(pending=[job(1).cpus(8).walltime_s(600).build()],
                               boot_ready=_down("n002", "n003")), config(), NOW)
    assert [s.allocation.node_names for s in res.starts] == [("n001",)]
    assert not res.reservations


def test_a_node_freed_before_the_boot_wins_and_nothing_resumes() -> None:
    c = cluster(nodes=2)  # n001 frees in 100 s, n002 would take 300 s to boot
    down = _down("n002")
    snap = c.snapshot(pending=[job(1).cpus(8).walltime_s(600).build()],
                      running=[_busy_first(100)], boot_ready=down)
    res = run_cycle(snap, config(), NOW)
    assert not res.starts
    assert [r.nodes for r in res.reservations] == [("n001",)]
    assert res.pending[1].est_start is not None and res.pending[1].est_start < NOW + BOOT_S
    assert nodes_to_resume(res.reservations, down, NOW) == []


def test_a_node_powering_up_counts_from_its_expected_ready_time() -> None:
    c = cluster(nodes=2)
    snap = c.snapshot(pending=[job(1).cpus(8).walltime_s(600).build()],
                      running=[_busy_first(5000)], boot_ready={"n002": NOW + 40})
    res = run_cycle(snap, config(), NOW)
    est = res.pending[1].est_start
    assert not res.starts and est is not None and NOW + 40 <= est < NOW + 100


def test_nodes_to_resume_leaves_far_plans_and_other_nodes() -> None:
    down = {"c1": NOW + BOOT_S, "c2": NOW + BOOT_S}
    soon = Reserve(1, NOW + BOOT_S, ("c1", "up1"), NOW + 900)
    later = Reserve(2, NOW + 4000, ("c2",), NOW + 5000)  # waits for jobs to end first
    assert nodes_to_resume([soon, later], down, NOW) == ["c1"]
    assert nodes_to_resume([], down, NOW) == []
