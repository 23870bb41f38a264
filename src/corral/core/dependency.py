"""Job dependencies (``--dependency``): after, afterany, afterok, afternotok, aftercorr, singleton.

Semantics (Slurm's ``sbatch(1)``):

* ``after:ID[+min]``: every target has started (or already ended), plus the delay.
* ``afterany:ID``: every target has ended, in any state (plus the delay after its end).
* ``afterok:ID``: every target completed with exit code 0; one that ended otherwise makes
  the dependency *never satisfiable*.
* ``afternotok:ID``: every target ended unsuccessfully; one that succeeded makes it never
  satisfiable.
* ``aftercorr:ID``: array task ``i`` waits for task ``i`` of the target array, as afterok.
* ``singleton``: no other job of the same name and user is running or suspended (one
  starts per cycle per name).

A target id also names every task of an array with that ``array_job_id``. A target found
nowhere (neither pending, running nor finished) has been purged and counts as satisfied,
as in Slurm. Items combine with AND, or with OR when ``DependencySpec.any_of``.

The result is ``OK``, ``WAIT`` (reason ``Dependency``) or ``NEVER`` (reason
``DependencyNeverSatisfied``; the job stays pending, the shell may cancel it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral.core.model.job import Dependency, DependencyKind, Job, JobState
from corral.core.snapshot import FinishedJob

OK = 0
WAIT = 1
NEVER = 2

_Record = tuple[str, Job | FinishedJob]  # ("pending" | "running" | "finished", record)


class DependencyIndex:
    """Looks up dependency targets in a snapshot (indexes built on first use)."""

    __slots__ = ("pending", "running", "finished", "_by_id", "_by_array", "singletons")

    def __init__(self, pending: Sequence[Job], running: Sequence[Job],
                 finished: Mapping[int, FinishedJob]) -> None:
        self.pending = pending
        self.running = running
        self.finished = finished
        self._by_id: dict[int, _Record] | None = None
        self._by_array: dict[int, list[_Record]] | None = None
        self.singletons: set[tuple[str, str]] | None = None

    def _index(self) -> None:
        by_id: dict[int, _Record] = {}
        by_array: dict[int, list[_Record]] = {}
        for j in self.pending:
            by_id[j.id] = ("pending", j)
        for j in self.running:
            by_id[j.id] = ("running", j)
        for j in (*self.pending, *self.running):
            if j.array_job_id is not None:
                by_array.setdefault(j.array_job_id, []).append(by_id[j.id])
        for f in self.finished.values():
            if f.array_job_id is not None:
                by_array.setdefault(f.array_job_id, []).append(("finished", f))
        self._by_id = by_id
        self._by_array = by_array

    def targets(self, target: int) -> list[_Record]:
        if self._by_id is None:
            self._index()
        assert self._by_id is not None and self._by_array is not None
        out: list[_Record] = []
        f = self.finished.get(target)
        if f is not None:
            out.append(("finished", f))
        else:
            rec = self._by_id.get(target)
            if rec is not None:
                out.append(rec)
        for rec in self._by_array.get(target, ()):
            if rec[1].id != target:
                out.append(rec)
        return out

    def running_singleton(self, user: str, name: str) -> bool:
        if self.singletons is None:
            self.singletons = {(j.spec.user, j.spec.name) for j in self.running
                               if j.state in (JobState.RUNNING, JobState.SUSPENDED)}
        return (user, name) in self.singletons

    def started(self, job: Job) -> None:
        """Record a job started this cycle (for singleton)."""
        if self.singletons is not None:
            self.singletons.add((job.spec.user, job.spec.name))

    # -- evaluation -------------------------------------------------------------------------

    def status(self, job: Job, now: float) -> tuple[int, str]:
        """(OK | WAIT | NEVER, plain-words detail) for ``job``'s dependency."""
        dep = job.spec.dependency
        if dep is None or not dep.items:
            return OK, ""
        results = [self._item(job, item, now) for item in dep.items]
        if dep.any_of:
            if any(r == OK for r, _ in results):
                return OK, ""
            if all(r == NEVER for r, _ in results):
                return NEVER, "; ".join(d for _, d in results)
            return WAIT, "; ".join(d for r, d in results if r == WAIT)
        never = [d for r, d in results if r == NEVER]
        if never:
            return NEVER, "; ".join(never)
        waiting = [d for r, d in results if r == WAIT]
        if waiting:
            return WAIT, "; ".join(waiting)
        return OK, ""

    def _item(self, job: Job, item: Dependency, now: float) -> tuple[int, str]:
        kind = item.kind
        if kind == DependencyKind.SINGLETON:
            if self.running_singleton(job.spec.user, job.spec.name):
                return WAIT, f"another job named {job.spec.name!r} of {job.spec.user} is running"
            return OK, ""
        worst = OK
        details: list[str] = []
        for target in item.job_ids:
            recs = self.targets(target)
            if kind == DependencyKind.AFTERCORR and job.array_task_id is not None:
                recs = [r for r in recs if getattr(r[1], "array_task_id", None)
                        == job.array_task_id] or recs[:0]
            for where, rec in recs:
                r, why = _one(kind, where, rec, item.delay_s, now)
                if r > OK:
                    details.append(f"{kind.value}:{rec.id} {why}")
                worst = max(worst, r)
        return worst, "; ".join(details)


def _ok(f: FinishedJob) -> bool:
    return f.state == JobState.COMPLETED and f.exit_code == 0


def _one(kind: DependencyKind, where: str, rec: Job | FinishedJob, delay_s: int,
         now: float) -> tuple[int, str]:
    if kind == DependencyKind.AFTER:
        if where == "pending":
            return WAIT, "has not started"
        start = rec.start_time if rec.start_time is not None else now
        if start + delay_s > now:
            return WAIT, f"started; waiting {delay_s}s after its start"
        return OK, ""
    if where != "finished":
        return WAIT, "has not finished"
    assert isinstance(rec, FinishedJob)
    end = rec.end_time if rec.end_time is not None else now
    if kind == DependencyKind.AFTERANY:
        ok = True
    elif kind in (DependencyKind.AFTEROK, DependencyKind.AFTERCORR):
        ok = _ok(rec)
        if not ok:
            return NEVER, f"ended {rec.state.value} (exit {rec.exit_code})"
    else:  # AFTERNOTOK
        ok = not _ok(rec)
        if not ok:
            return NEVER, "completed successfully"
    if end + delay_s > now:
        return WAIT, f"ended; waiting {delay_s}s after its end"
    return OK, ""
