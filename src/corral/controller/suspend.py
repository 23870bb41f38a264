"""Preemption by suspension (Slurm's ``PreemptMode=SUSPEND``), only where configured.

``[preemption] allow_suspend = true`` lets the scheduling core return ``Preempt`` with
mode SUSPEND (``corral.core.preempt``). The controller then:

1. marks the victim SUSPENDED (persisted) and tells its agent to freeze it (``suspend``:
   cgroup freezer, else SIGSTOP to every process; the job's time limit clock pauses);
2. gives the victim's CPUs back and keeps its memory, GPUs and GRES allocated: exactly
   what the core's pool does for a SUSPENDED job, so the preemptor starts on those cores
   in the next cycle while nobody can take the victim's memory;
3. resumes it (``resume``, state RUNNING) once its preemptor is no longer pending or
   running and no other running job uses any of its cores. The check runs before each
   scheduling cycle builds its snapshot, so a freed core goes back to the suspended job
   before any pending job can be placed on it (the victim resumes when the preemptor
   ends, as with Slurm's gang scheduler; a job that backfilled onto the victim's cores
   meanwhile delays the resume until it ends).

A multi-node victim carries the core's warning ("MPI jobs often cannot resume") in its
record (``warning``) and in the controller log. Time spent suspended counts neither
against the time limit (the agent pauses the clock; the core sees the start shifted by
``suspended_s``) nor in ``time_used_s`` nor as fair-share usage. A suspended job that is
cancelled or requeued is thawed by its supervisor before the SIGTERM (a frozen process
cannot act on it).

Reference: Slurm's preempt.html (PreemptMode=SUSPEND, "the preempted job will be
suspended ... resumed when the preemptor completes"). Invariant: a job is in
``Controller.suspended`` exactly when its state is SUSPENDED.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from corral.core.model.job import HoldKind, JobState
from corral.core.model.transitions import JobEvent, job_transition

if TYPE_CHECKING:
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

log = logging.getLogger("corral.controller")


def suspend(ctl: Controller, rec: JobRecord, for_job: int, warning: str, now: float) -> None:
    """Suspend a running victim in memory (the caller persists, then tells the agent)."""
    rec.state = job_transition(rec.state, JobEvent.SUSPEND)
    rec.suspended_by = for_job
    rec.suspended_at = now
    rec.reason_detail = f"suspended for job {for_job}"
    if warning:
        rec.warning = warning
        log.warning("job %d suspended for job %d: %s", rec.id, for_job, warning)
    rec.touch()
    ctl.nodes.suspend(rec)
    ctl._place(rec)


def end_suspension(ctl: Controller, rec: JobRecord, now: float) -> None:
    """Bookkeeping when a SUSPENDED job leaves that state (resume, end, requeue): its CPUs
    count as allocated again and the suspended time is added up."""
    if rec.suspended_at is not None:
        rec.suspended_s += max(0.0, now - rec.suspended_at)
    rec.suspended_at = None
    rec.suspended_by = None
    ctl.nodes.suspend(rec, suspended=False)


def _blocked(ctl: Controller, rec: JobRecord) -> bool:
    by = ctl.jobs.get(rec.suspended_by) if rec.suspended_by is not None else None
    if by is not None and (by.state.is_active or (by.state is JobState.PENDING
                                                  and by.hold is HoldKind.NONE)):
        return True  # the preemptor has not run and ended yet
    assert rec.allocation is not None
    for na in rec.allocation.nodes:
        node = ctl.nodes.nodes.get(na.node)
        if node is None:
            continue
        mine = set(na.cores)
        for jid in node.jobs:
            other = ctl.jobs.get(jid)
            if other is None or other is rec or other.state is JobState.SUSPENDED \
                    or other.allocation is None:
                continue
            for ona in other.allocation.nodes:
                if ona.node == na.node and mine.intersection(ona.cores):
                    return True
    return False


def resume_ready(ctl: Controller, now: float) -> list[JobRecord]:
    """Resume (in memory) every suspended job whose cores are free again; the caller
    persists them and then sends ``resume`` to their agents."""
    out: list[JobRecord] = []
    for jid in sorted(ctl.suspended):
        rec = ctl.jobs.get(jid)
        if rec is None or rec.state is not JobState.SUSPENDED:
            ctl.suspended.discard(jid)
            continue
        if rec.cancel_requested or rec.requeue_requested or rec.allocation is None:
            continue  # being ended: its supervisor thaws it to kill it
        if _blocked(ctl, rec):
            continue
        end_suspension(ctl, rec, now)
        rec.state = job_transition(rec.state, JobEvent.RESUME)
        rec.reason_detail = ""
        rec.touch()
        ctl._place(rec)
        out.append(rec)
    return out
