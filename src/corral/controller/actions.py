"""Job actions of the API: cancel (or signal), hold, release, requeue, and updates.

Each action applies to every job an id reference names (``12``, ``12_3``, ``12_[1-3]``,
an array id for all of its tasks) after checking the caller may act on each one (its
owner, or an operator); the result is one entry per reference, so a bad id never hides
the others. Order of effects, as everywhere in the controller: change the records in
memory, persist them in one commit, and only then message the agents (a signal, a
cancel), so an agent never acts on a change that a crash could lose.

Slurm semantics kept: cancelling a pending job ends it at once (CANCELLED); a running
one is asked to stop (SIGTERM, SIGKILL after KillWait) and ends when its agent reports
it; ``scancel --signal`` reaches the job's steps, not the batch shell, unless ``-b``/``-f``
(``scope``); requeue keeps the job id and counts ``restarts``; an admin hold can only be
released by an operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord
from corral.core.model.job import HoldKind, JobState

if TYPE_CHECKING:
    from corral.controller.service import Controller


async def act(ctl: Controller, action: str, refs: list[str], who: Identity,
              opts: dict[str, Any]) -> list[dict[str, Any]]:
    """cancel / hold / release / requeue on every referenced job; per-id results."""
    results: list[dict[str, Any]] = []
    changed: list[JobRecord] = []
    after: list[Callable[[], None]] = []
    now = time.time()
    for ref in refs:
        recs: list[JobRecord] = []
        try:
            recs = await ctl.resolve(ref, split=True)
            if not recs:
                raise ApiError("not_found", f"Invalid job id specified: {ref}",
                               slurm="Invalid job id specified")
            for rec in recs:
                ctl._check_owner(rec, who)
            done = 0
            tail_views = [r for r in recs if r.tail_text]  # a large array's remainder
            recs = [r for r in recs if not r.tail_text]
            for rec in recs:
                if _act_one(ctl, action, rec, who, opts, now, changed, after, len(recs) > 1):
                    done += 1
            if tail_views and action in ("cancel", "hold", "release") \
                    and opts.get("signal") in (None, "", "KILL", 9):
                from corral.controller.arraytail import act_whole

                assert tail_views[0].array_job_id is not None
                done += await act_whole(ctl, action, tail_views[0].array_job_id, who.uid,
                                        bool(opts.get("admin")) and who.is_admin, now)
            results.append({"id": ref, "ok": True, "code": "ok", "message": "",
                            "jobs": done})
            _audit(ctl, who, action, ref, recs, opts, None)
        except ApiError as exc:
            res = {"id": ref, "ok": False, "code": exc.code, "message": exc.message}
            if exc.slurm:
                res["slurm"] = exc.slurm
            results.append(res)
            _audit(ctl, who, action, ref, recs, opts, exc)
    if changed:
        await ctl.persist(updates=_unique(changed))
    for fn in after:
        fn()
    if changed:
        ctl.sched.trigger()
    return results


def _act_one(ctl: Controller, action: str, rec: JobRecord, who: Identity,
             opts: dict[str, Any], now: float, changed: list[JobRecord],
             after: list[Callable[[], None]], many: bool) -> bool:
    finished_msg = f"Job has already finished for job {rec.display_id}"
    if action == "cancel":
        sig = opts.get("signal")
        if rec.state.is_finished:
            if many:
                return False
            raise ApiError("conflict", finished_msg, slurm="Job/step already completing "
                           "or completed")
        if sig is not None:
            if not rec.state.is_active:
                if many:
                    return False
                raise ApiError("conflict", f"job {rec.display_id} is not running: "
                               "a signal can only be sent to a running job")
            batch_only = bool(opts.get("batch_only"))
            # scope "steps" (scancel --signal without -b/-f): not the batch shell
            steps_only = opts.get("scope") == "steps" and not batch_only
            after.append(lambda: ctl.hub.signal(rec, str(sig), batch_only, steps_only))
            return True
        if rec.state is JobState.PENDING:
            rec.cancelled_by_uid = who.uid
            ctl.finish(rec, JobState.CANCELLED, now, reason=f"cancelled by {who.user}")
            changed.append(rec)
            return True
        if rec.cancel_requested:
            return True
        rec.cancel_requested = True
        rec.cancelled_by_uid = who.uid
        rec.end_reason = f"cancelled by {who.user}"
        if not ctl.hub.connected(rec):
            ctl.finish(rec, JobState.CANCELLED, now, reason=rec.end_reason)
        changed.append(rec)
        after.append(lambda: ctl.hub.cancel(rec))
        return True
    if action == "hold":
        if rec.state.is_finished:
            raise ApiError("conflict", finished_msg, slurm="Job has already finished")
        if rec.state is not JobState.PENDING:
            if many:
                return False
            raise ApiError("conflict", f"job {rec.display_id} is not pending",
                           slurm="Job is no longer pending execution")
        admin = bool(opts.get("admin")) or (who.is_admin and who.uid != rec.uid)
        if admin and not who.is_admin:
            raise ApiError("forbidden", "only an operator may place an admin hold")
        rec.hold = HoldKind.ADMIN if admin else HoldKind.USER
        rec.reason = "JobHeldAdmin" if admin else "JobHeldUser"
        rec.priority = 0.0  # as Slurm shows a held job; the next cycle after a release
        rec.est_start = None  # gives it its own again (held jobs are not in the pass)
        rec.touch()
        changed.append(rec)
        return True
    if action == "release":
        if rec.state.is_finished:
            raise ApiError("conflict", finished_msg, slurm="Job has already finished")
        if rec.hold is HoldKind.NONE:
            return False
        if rec.hold is HoldKind.ADMIN and not who.is_admin:
            raise ApiError("forbidden", f"job {rec.display_id} has an admin hold: "
                           "only an operator may release it",
                           slurm="Access/permission denied")
        rec.hold = HoldKind.NONE
        rec.reason = "None"
        rec.touch()
        changed.append(rec)
        return True
    if action == "requeue":
        if not rec.sub.spec.requeue and not who.is_admin:
            raise ApiError("conflict", f"job {rec.display_id} is not requeueable "
                           "(submitted with --no-requeue)",
                           slurm="Requested operation is presently disabled")
        hold = bool(opts.get("hold"))
        if rec.state is JobState.PENDING:
            if many:
                return False
            raise ApiError("conflict", f"job {rec.display_id} is pending: nothing to "
                           "requeue", slurm="Job is pending execution")
        if rec.state.is_finished:
            ctl.requeue_record(rec, now, hold=hold)
            if rec.id not in ctl.jobs:
                ctl._index(rec)
            changed.append(rec)
            return True
        if rec.requeue_requested:
            return True
        rec.requeue_requested = True
        rec.requeue_hold = hold
        if not ctl.hub.connected(rec):
            ctl.requeue_record(rec, now, hold=hold)
        changed.append(rec)
        after.append(lambda: ctl.hub.cancel(rec))
        return True
    raise ApiError("invalid", f"unknown action {action!r}")


async def update_job(ctl: Controller, ref: str, fields: dict[str, Any],
                     who: Identity) -> dict[str, Any]:
    from corral.controller.updates import apply_update

    recs = await ctl.resolve(ref)
    if not recs:
        raise ApiError("not_found", f"Invalid job id specified: {ref}",
                       slurm="Invalid job id specified")
    changed, spec_changed = [], []
    after: list[Callable[[], None]] = []
    try:
        for rec in recs:
            ctl._check_owner(rec, who)
            old_name = rec.sub.spec.name
            spec_touched = apply_update(ctl, rec, fields, who, after)
            if rec.tail_text:  # a large array's remainder: its tasks-to-be change
                tail = ctl.tails.get(rec.array_job_id or 0)
                if tail is not None:
                    tail.sub = rec.sub
                    ctl.store.submit(ctl.store.op_save_tail(tail.row()))
                continue
            if rec.id in ctl.jobs:
                ctl.index.rename(rec, old_name)
            changed.append(rec)
            if spec_touched:
                spec_changed.append(rec)
    except ApiError as exc:
        if who.is_admin:  # updates by an operator are audited (refusals too)
            _audit(ctl, who, "update", ref, recs, {"fields": fields}, exc, always=True)
        raise
    if who.is_admin:
        _audit(ctl, who, "update", ref, recs, {"fields": fields}, None, always=True)
    await ctl.persist(updates=changed, with_submission=spec_changed)
    for fn in after:
        fn()
    ctl.sched.trigger()
    return recs[0].to_api(time.time(), detail=True, private=True)  # (a view if tail only)


_AUDIT_OPTS = ("signal", "scope", "admin", "batch_only", "hold", "fields")


def _audit(ctl: Controller, who: Identity, action: str, ref: str, recs: list[JobRecord],
           opts: dict[str, Any], exc: ApiError | None, *, always: bool = False) -> None:
    """Record an action on jobs that are not all the caller's own (or, ``always``, any
    action: an operator's update) in the audit trail, with its outcome."""
    from corral.controller.audit import outcome_of, record

    owners = {rec.user for rec in recs if rec.uid != who.uid and rec.user != who.user}
    if not owners and not always:
        return
    details: dict[str, Any] = {k: opts[k] for k in _AUDIT_OPTS if opts.get(k) is not None}
    details["owners"] = sorted({rec.user for rec in recs})
    details["jobs"] = [rec.display_id for rec in recs[:20]]
    if len(recs) > 20:
        details["jobs_total"] = len(recs)
    record(ctl.store, who, action, f"job {ref}", details, outcome_of(exc))


def _unique(recs: list[JobRecord]) -> list[JobRecord]:
    seen: dict[int, JobRecord] = {}
    for r in recs:
        seen[r.id] = r
    return list(seen.values())
