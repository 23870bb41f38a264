"""Pending reasons: every waiting job says why, in Slurm's words."""

from __future__ import annotations

import pytest
from builders import cluster, finished, job

from corral.core import run_cycle
from corral.core.config import Ordering, SchedulerConfig
from corral.core.model.job import HoldKind, JobState
from corral.core.model.partition import PartitionState, QosLimits
from corral.core.model.resources import Resources

CFG = SchedulerConfig(ordering=Ordering.FCFS)


def reason_of(snap, jid: int, now: float = 0.0, cfg: SchedulerConfig = CFG) -> str:  # type: ignore[no-untyped-def]
    r = run_cycle(snap, cfg, now)
    assert jid not in {s.job_id for s in r.starts}, "expected it to wait"
    return r.pending[jid].reason


def test_holds_and_begin_time() -> None:
    c = cluster()
    assert reason_of(c.snapshot(pending=[job(1).hold(HoldKind.USER).build()]), 1) == "JobHeldUser"
    assert reason_of(c.snapshot(pending=[job(1).hold(HoldKind.ADMIN).build()]), 1) == "JobHeldAdmin"
    assert reason_of(c.snapshot(pending=[job(1).begin(100).build()]), 1, now=50) == "BeginTime"
    r = run_cycle(c.snapshot(pending=[job(1).begin(100).build()]), CFG, 100)
    assert [s.job_id for s in r.starts] == [1]


@pytest.mark.parametrize(
    ("kind", "target_state", "exit_code", "expect"),
    [
        ("afterok", JobState.COMPLETED, 0, None),
        ("afterok", JobState.FAILED, 1, "DependencyNeverSatisfied"),
        ("afternotok", JobState.FAILED, 1, None),
        ("afternotok", JobState.COMPLETED, 0, "DependencyNeverSatisfied"),
        ("afterany", JobState.CANCELLED, 0, None),
        ("after", JobState.COMPLETED, 0, None),
    ],
)
def test_dependency_on_finished_job(kind, target_state, exit_code, expect) -> None:  # type: ignore[no-untyped-def]
    c = cluster()
    snap = c.snapshot(pending=[job(2).depends(kind, 1).build()],
                      finished=[finished(1, target_state, exit_code, end_time=5)])
    r = run_cycle(snap, CFG, 10)
    if expect is None:
        assert [s.job_id for s in r.starts] == [2]
    else:
        assert r.pending[2].reason == expect


def test_dependency_waits_on_pending_and_running() -> None:
    c = cluster(nodes=1)
    target = job(1).walltime_s(100).running_on(("n001", 1), start=0).build()
    snap = c.snapshot(pending=[job(2).depends("afterok", 1).build(),
                               job(3).depends("after", 1, delay_s=60).build(),
                               job(4).depends("after", 1).build()],
                      running=[target])
    r = run_cycle(snap, CFG, 10)
    assert r.pending[2].reason == "Dependency"
    assert r.pending[3].reason == "Dependency"
    assert 4 in {s.job_id for s in r.starts}
    # purged targets count as satisfied; any_of needs one
    snap = c.snapshot(pending=[job(5).depends("afterok", 999).build(),
                               job(6).depends("afterok", 1).depends("afterany", 999,
                                                                    any_of=True).build()],
                      running=[target])
    assert {s.job_id for s in run_cycle(snap, CFG, 10).starts} == {5, 6}


def test_singleton_allows_one_at_a_time() -> None:
    c = cluster()
    snap = c.snapshot(pending=[job(1).name("x").depends("singleton").build(),
                               job(2).name("x").depends("singleton").build(),
                               job(3).name("y").depends("singleton").build()])
    r = run_cycle(snap, CFG, 0)
    assert {s.job_id for s in r.starts} == {1, 3}
    assert r.pending[2].reason == "Dependency"


def test_aftercorr_matches_array_task_ids() -> None:
    c = cluster()
    done = [finished(11, JobState.COMPLETED, 0, array_job_id=10, array_task_id=1),
            finished(12, JobState.FAILED, 1, array_job_id=10, array_task_id=2)]
    snap = c.snapshot(pending=[job(21).array(20, 1).depends("aftercorr", 10).build(),
                               job(22).array(20, 2).depends("aftercorr", 10).build()],
                      finished=done)
    r = run_cycle(snap, CFG, 0)
    assert [s.job_id for s in r.starts] == [21]
    assert r.pending[22].reason == "DependencyNeverSatisfied"


def test_array_task_limit() -> None:
    c = cluster(nodes=4)
    tasks = [job(10 + k).array(10, k, max_running=2).build() for k in range(4)]
    r = run_cycle(c.snapshot(pending=tasks), CFG, 0)
    assert len(r.starts) == 2
    assert {p.reason for p in r.pending.values()} == {"JobArrayTaskLimit"}


def test_licenses_are_counted_cluster_wide() -> None:
    c = cluster(nodes=4)
    c.licenses = (("matlab", 2),)
    running = [job(1).licenses(matlab=1).running_on(("n001", 1)).build()]
    snap = c.snapshot(pending=[job(2).licenses(matlab=1).build(),
                               job(3).licenses(matlab=1).build()], running=running)
    r = run_cycle(snap, CFG, 0)
    assert [s.job_id for s in r.starts] == [2]
    assert r.pending[3].reason == "Licenses"


def test_partition_down_and_inactive() -> None:
    c = cluster()
    c.partition("batch", state=PartitionState.DOWN, is_default=True)
    assert reason_of(c.snapshot(pending=[job(1).build()]), 1) == "PartitionDown"
    c.partition("batch", state=PartitionState.INACTIVE, is_default=True)
    assert reason_of(c.snapshot(pending=[job(1).build()]), 1) == "PartitionInactive"


def test_required_node_down() -> None:
    from corral.core.model.node import NodeState

    c = cluster().set_state("n002", NodeState.DOWN)
    r = run_cycle(c.snapshot(pending=[job(1).nodelist("n002").build()]), CFG, 0)
    assert r.pending[1].reason == "ReqNodeNotAvail" and "n002" in r.pending[1].detail


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (QosLimits(max_jobs_per_user=1), "QOSMaxJobsPerUserLimit"),
        (QosLimits(max_tres_per_user=Resources.of(cpus=2)), "QOSMaxCpuPerUserLimit"),
        (QosLimits(grp_jobs=1), "QOSGrpJobsLimit"),
        (QosLimits(grp_tres=Resources.of(cpus=2)), "QOSGrpCpuLimit"),
        (QosLimits(max_jobs_per_account=1), "QOSMaxJobsPerAccountLimit"),
    ],
)
def test_qos_limits_hold_jobs(limits, reason) -> None:  # type: ignore[no-untyped-def]
    c = cluster(nodes=4)
    c.add_qos("normal", limits=limits)
    running = [job(1).user("u").account("a").running_on(("n001", 1)).build()]
    snap = c.snapshot(pending=[job(2).user("u").account("a").cpus(2).build()], running=running)
    assert reason_of(snap, 2) == reason


def test_limits_count_jobs_started_in_the_same_cycle() -> None:
    c = cluster(nodes=4)
    c.add_qos("normal", limits=QosLimits(max_jobs_per_user=2))
    snap = c.snapshot(pending=[job(k).user("u").build() for k in range(1, 5)])
    r = run_cycle(snap, CFG, 0)
    assert len(r.starts) == 2
    assert {p.reason for p in r.pending.values()} == {"QOSMaxJobsPerUserLimit"}


def test_account_limits_apply_to_the_subtree() -> None:
    c = cluster(nodes=4)
    c.add_account("science", limits=QosLimits(grp_jobs=1))
    c.add_account("physics", parent="science")
    running = [job(1).account("physics").running_on(("n001", 1)).build()]
    snap = c.snapshot(pending=[job(2).account("physics").build()], running=running)
    assert reason_of(snap, 2) == "AssocGrpJobsLimit"


def test_every_pending_job_gets_a_rank_and_priority() -> None:
    c = cluster(nodes=1)
    snap = c.snapshot(pending=[job(k).exclusive().build() for k in range(1, 5)])
    r = run_cycle(snap, CFG, 0)
    assert sorted(p.rank for p in r.pending.values()) == [2, 3, 4]
    assert r.pending[2].reason == "Resources" and r.pending[3].reason == "Priority"
