"""Eligibility (the start of the age factor) with array-job dependency targets."""

from __future__ import annotations

import dataclasses

from priority_helpers import job, snapshot

from corral.core.model.job import Dependency, DependencyKind, DependencySpec, JobState
from corral.core.priority.eligibility import Eligibility
from corral.core.snapshot import FinishedJob

K = DependencyKind


def dep(kind: DependencyKind, target: int, task: int | None = None) -> DependencySpec:
    return DependencySpec((Dependency(kind, (target,), array_task_id=task),))


def array_snapshot(task1_running: bool) -> Eligibility:
    # array 200: task 0 is job 200 (finished ok at t=10), task 1 is job 201
    finished = {200: FinishedJob(200, JobState.COMPLETED, 0, end_time=10.0, array_job_id=200,
                                 array_task_id=0)}
    running = []
    if task1_running:
        running.append(job(201, 0.0, state=JobState.RUNNING, start_time=5.0,
                           array_job_id=200, array_task_id=1))
    else:
        finished[201] = FinishedJob(201, JobState.FAILED, 1, end_time=20.0, array_job_id=200,
                                    array_task_id=1)
    snap = dataclasses.replace(snapshot(running=running), finished=finished)
    return Eligibility(snap)


def test_whole_array_target_waits_for_every_task() -> None:
    j = job(1, 0.0, dependency=dep(K.AFTERANY, 200))
    assert array_snapshot(task1_running=True).since(j) is None
    assert array_snapshot(task1_running=False).since(j) == 20.0
    ok = job(2, 0.0, dependency=dep(K.AFTEROK, 200))
    assert array_snapshot(task1_running=False).since(ok) is None  # task 1 failed
    notok = job(3, 0.0, dependency=dep(K.AFTERNOTOK, 200))
    assert array_snapshot(task1_running=False).since(notok) == 20.0


def test_single_task_target() -> None:
    j = job(1, 0.0, dependency=dep(K.AFTEROK, 200, task=0))
    assert array_snapshot(task1_running=True).since(j) == 10.0
    after = job(2, 0.0, dependency=dep(K.AFTER, 200, task=1))
    assert array_snapshot(task1_running=True).since(after) == 5.0


def test_aftercorr_matches_the_same_task_index() -> None:
    t0 = job(5, 0.0, dependency=dep(K.AFTERCORR, 200), array_job_id=5, array_task_id=0)
    t1 = job(6, 0.0, dependency=dep(K.AFTERCORR, 200), array_job_id=5, array_task_id=1)
    e = array_snapshot(task1_running=True)
    assert e.since(t0) == 10.0
    assert e.since(t1) is None


def test_singleton_waits_for_the_running_namesake() -> None:
    running = [job(9, 0.0, name="nightly", user="ann", state=JobState.RUNNING, start_time=1.0)]
    e = Eligibility(snapshot(running=running))
    single = DependencySpec((Dependency(K.SINGLETON),))
    assert e.since(job(1, 3.0, name="nightly", user="ann", dependency=single)) is None
    assert e.since(job(2, 3.0, name="nightly", user="bob", dependency=single)) == 3.0
