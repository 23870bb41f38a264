"""``resourceVersion`` of Volcano jobs: it grows whenever anything the object shows
changes, including the companion job that runs a late replica (a watch started from a
list's version must see a change made by the companion alone)."""

from __future__ import annotations

from corral.controller import kube_objects as ko
from corral.controller.records import JobRecord
from corral.core.model.job import JobSpec, JobState
from corral.submission import JobSubmission


def _rec(i: int, state: JobState) -> JobRecord:
    sub = JobSubmission(spec=JobSpec(name=f"j{i}", user="u", uid=1000), argv=("true",),
                        workdir="/tmp", env={})
    return JobRecord(id=i, sub=sub, submit_time=1000.0 + i, state=state)


def test_a_change_of_a_companion_alone_moves_the_version() -> None:
    main = _rec(9001, JobState.RUNNING)
    late = _rec(9002, JobState.RUNNING)
    listed = ko.version_of(main, [late])
    assert ko.version_of(main, [late]) == listed  # nothing changed: same version
    late.state = JobState.COMPLETED
    late.end_time = 1100.0
    after = ko.version_of(main, [late])
    assert after > listed
    assert ko.version_of(main) < after  # the main record alone did not change


def test_a_version_is_above_every_list_answered_before_it() -> None:
    rec = _rec(9003, JobState.PENDING)
    first = ko.version_of(rec)
    listed = ko.VERSIONS.current()
    rec.state = JobState.RUNNING
    assert ko.version_of(rec) > max(first, listed)


def test_a_job_whose_companion_waits_is_running_not_completed() -> None:
    """The root ended (its replicas succeeded) while the companion of its late replicas
    still waits in the queue: the Volcano job is Running until that part ends too (a
    pending companion was not counted: kubectl saw Completed for a moment, then Running)."""
    from corral.controller import kube_late

    root = _rec(9010, JobState.COMPLETED)
    late = _rec(9011, JobState.PENDING)
    counts = {"succeeded": 1, "failed": 0, "pending": 1, "running": 0}

    def phase(got: dict[str, int]) -> str:
        return kube_late.phase(root, [late], "Completed", got, ko.phase_of,
                               ko.plan(root).get("min_success"))
    assert kube_late.waiting([late])
    assert phase(counts) == "Running"
    late.state = JobState.RUNNING
    assert phase(counts) == "Running"
    late.state = JobState.COMPLETED
    assert not kube_late.waiting([late])
    assert phase(dict(counts, succeeded=2)) == "Completed"
