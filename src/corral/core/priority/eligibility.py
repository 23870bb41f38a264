"""When a pending job became eligible to run, for the age factor (Slurm ``EligibleTime``).

Slurm's age factor counts from the time a job became eligible, not from submission: a
held job, a job before its ``--begin`` time and a job whose dependencies are unmet do not
age. This module answers "eligible since when, if at all" from the snapshot alone:

- held (user or admin): not eligible;
- ``Job.eligible_time`` set by the shell: that time (the shell knows best);
- otherwise ``max(submit_time, begin_time)``, and with dependencies also the time they were
  met: ``after`` once each target started, ``afterany`` once it ended, ``afterok`` when it
  completed with exit code 0, ``afternotok`` when it ended otherwise, ``aftercorr`` per
  matching array task, plus ``+minutes`` delays; ``,`` needs all, ``?`` the earliest.
  A target found nowhere in the snapshot counts as met (Slurm drops dependencies on
  unknown jobs); a target that can no longer satisfy the condition leaves the job
  ineligible; ``singleton`` is unmet while a job of the same name and user is running.

It is an estimate for priority only: the queue passes decide dependency reasons.
"""

from __future__ import annotations

from corral.core.model.job import Dependency, DependencyKind, HoldKind, Job, JobState
from corral.core.snapshot import ClusterSnapshot, FinishedJob

_K = DependencyKind


class Eligibility:
    """Index of the snapshot's jobs by id and array id, built lazily on first dependency."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snap = snapshot
        self._built = False
        self._pending: dict[int, list[Job]] = {}
        self._running: dict[int, list[Job]] = {}
        self._finished: dict[int, list[FinishedJob]] = {}
        self._running_names: set[tuple[str, str]] = set()

    def _build(self) -> None:
        self._built = True
        for j in (*self._snap.pending, *self._snap.held):
            self._pending.setdefault(j.id, []).append(j)
            if j.array_job_id is not None and j.array_job_id != j.id:
                self._pending.setdefault(j.array_job_id, []).append(j)
        for j in self._snap.running:
            self._running.setdefault(j.id, []).append(j)
            if j.array_job_id is not None and j.array_job_id != j.id:
                self._running.setdefault(j.array_job_id, []).append(j)
            self._running_names.add((j.spec.name, j.spec.user))
        for f in self._snap.finished.values():
            self._finished.setdefault(f.id, []).append(f)
            if f.array_job_id is not None and f.array_job_id != f.id:
                self._finished.setdefault(f.array_job_id, []).append(f)

    def since(self, job: Job) -> float | None:
        """Eligible since (seconds), or ``None`` while not eligible."""
        if job.hold is not HoldKind.NONE:
            return None
        if job.eligible_time is not None:
            return job.eligible_time
        t = job.submit_time
        begin = job.spec.begin_time
        if begin is not None and begin > t:
            t = begin
        dep = job.spec.dependency
        if dep is None or not dep.items:
            return t
        if not self._built:
            self._build()
        times = [self._item_time(d, job) for d in dep.items]
        if dep.any_of:
            met = [x for x in times if x is not None]
            if not met:
                return None
            return max(t, min(met))
        if any(x is None for x in times):
            return None
        return max([t] + [x for x in times if x is not None])

    def _item_time(self, dep: Dependency, job: Job) -> float | None:
        if dep.kind is _K.SINGLETON:
            return None if (job.spec.name, job.spec.user) in self._running_names else 0.0
        worst = 0.0
        for target in dep.job_ids:
            task = dep.array_task_id
            if dep.kind is _K.AFTERCORR:
                task = job.array_task_id
            t = self._target_time(dep.kind, target, task)
            if t is None:
                return None
            worst = max(worst, t)
        return worst + dep.delay_s

    def _target_time(self, kind: DependencyKind, target: int, task: int | None) -> float | None:
        def want(x: Job | FinishedJob) -> bool:
            return task is None or x.array_task_id == task or (
                x.array_task_id is None and x.id == target
            )

        pending = [j for j in self._pending.get(target, ()) if want(j)]
        running = [j for j in self._running.get(target, ()) if want(j)]
        finished = [f for f in self._finished.get(target, ()) if want(f)]
        if pending:
            return None
        if kind is _K.AFTER:
            starts = [j.start_time or 0.0 for j in running]
            starts += [f.start_time or f.end_time or 0.0 for f in finished]
            return max(starts, default=0.0)
        if running:
            return None
        if not finished:
            return 0.0  # unknown target: Slurm drops the dependency
        ok = [f.state is JobState.COMPLETED and f.exit_code == 0 for f in finished]
        if kind is _K.AFTEROK or kind is _K.AFTERCORR:
            if not all(ok):
                return None
        elif kind is _K.AFTERNOTOK and all(ok):
            return None
        return max(f.end_time or 0.0 for f in finished)
