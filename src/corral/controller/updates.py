"""``scontrol update job``: which fields may change, by whom, and in which states.

Rules (as Slurm's): a user may lower a time limit, an operator may also raise it, on
pending and running jobs (a running job's new limit reaches its agent); priority is for
operators only; nice may only grow for users; partition, account, QOS, dependency, begin
time, node counts and name may change while the job is pending; comment any time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord
from corral.core.model.job import JobState
from corral.core.parse.errors import ParseError

if TYPE_CHECKING:
    from corral.controller.service import Controller

_PENDING_ONLY = {"partition", "partitions", "account", "qos", "dependency", "begin_time",
                 "nodes_min", "nodes_max", "ntasks", "cpus_per_task", "constraint"}
_ANY_STATE = {"comment", "time_limit_s", "priority", "nice", "name", "requeue"}


def _int_or_none(key: str, v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError("invalid", f"{key} must be a whole number or null")
    if not -(2 ** 63) <= v < 2 ** 63:
        raise ApiError("invalid", f"{key}: integer out of range (64 bits)")
    return v


def apply_update(ctl: Controller, rec: JobRecord, fields: dict[str, Any], who: Identity,
                 after: list[Callable[[], None]]) -> bool:
    """Apply ``fields`` to ``rec`` in memory; returns True when the spec changed."""
    unknown = set(fields) - _PENDING_ONLY - _ANY_STATE
    if unknown:
        raise ApiError("invalid", f"cannot update {sorted(unknown)}: updatable fields are "
                                  f"{sorted(_PENDING_ONLY | _ANY_STATE)}")
    if rec.state.is_finished:
        raise ApiError("conflict", f"Job has already finished for job {rec.display_id}",
                       slurm="Job has already finished")
    pending = rec.state is JobState.PENDING
    if not pending and set(fields) & _PENDING_ONLY:
        raise ApiError("conflict", f"job {rec.display_id} is not pending: "
                       f"{sorted(set(fields) & _PENDING_ONLY)} can only change before it starts",
                       slurm="Job is no longer pending execution")
    spec = rec.sub.spec
    changes: dict[str, Any] = {}
    if "time_limit_s" in fields:
        new = _int_or_none("time_limit_s", fields["time_limit_s"])
        cur = rec.time_limit_s
        raising = new is None and cur is not None or (
            new is not None and cur is not None and new > cur)
        if raising and not who.is_admin:
            raise ApiError("forbidden", "only an operator may raise a time limit",
                           slurm="Access/permission denied")
        if new is not None and new <= 0:
            raise ApiError("invalid", "time_limit_s must be positive (null: unlimited)")
        rec.time_limit_s = new
        rec.time_limit_set = True
        if rec.state.is_active:
            after.append(lambda: ctl.hub.time_limit(rec))
    if "priority" in fields:
        if not who.is_admin:
            raise ApiError("forbidden", "only an operator may set a job's priority",
                           slurm="Access/permission denied")
        rec.admin_priority = _int_or_none("priority", fields["priority"])
    if "nice" in fields:
        nice = _int_or_none("nice", fields["nice"]) or 0
        if nice < spec.nice and not who.is_admin:
            raise ApiError("forbidden", "only an operator may lower nice",
                           slurm="Access/permission denied")
        changes["nice"] = nice
    for key in ("name", "comment", "account", "qos", "constraint"):
        if key in fields:
            v = fields[key]
            if v is not None and not isinstance(v, str):
                raise ApiError("invalid", f"{key} must be a string")
            changes[key] = v if key != "name" else (v or spec.name)
    if "requeue" in fields:
        changes["requeue"] = bool(fields["requeue"])
    if "partition" in fields or "partitions" in fields:
        raw = fields.get("partitions", fields.get("partition"))
        if raw is not None and not isinstance(raw, str) and not (
                isinstance(raw, list) and all(isinstance(p, str) for p in raw)):
            raise ApiError("invalid", "partitions must be a string or a list of strings")
        parts = tuple(raw.split(",")) if isinstance(raw, str) else tuple(raw or ())
        names = {p.name for p in ctl.cfg.partitions}
        for p in parts:
            if p not in names:
                raise ApiError("invalid", f"invalid partition specified: {p}",
                               slurm="Invalid partition name specified")
        changes["partitions"] = parts
    if "qos" in changes and changes["qos"] is not None and \
            changes["qos"] not in {q.name for q in ctl.cfg.qos}:
        raise ApiError("invalid", f"invalid qos specified: {changes['qos']}")
    if "begin_time" in fields:
        v = fields["begin_time"]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not -1e18 < v < 1e18):
            raise ApiError("invalid", "begin_time must be epoch seconds or null")
        changes["begin_time"] = None if v is None else float(v)
    for key in ("nodes_min", "nodes_max", "ntasks", "cpus_per_task"):
        if key in fields:
            changes[key] = _int_or_none(key, fields[key])
            if changes[key] is None and key in ("nodes_min", "cpus_per_task"):
                raise ApiError("invalid", f"{key} must be a whole number")
    if "dependency" in fields:
        v = fields["dependency"]
        if v in (None, ""):
            changes["dependency"] = None
        else:
            from corral.core.parse.dependency import parse_dependency

            try:
                changes["dependency"] = parse_dependency(str(v))
            except ParseError as exc:
                raise ApiError("invalid", str(exc), slurm="Job dependency problem") from None
    if changes:
        new_spec = dataclasses.replace(spec, **changes)
        if not who.is_admin or set(changes) & {"nodes_min", "ntasks", "cpus_per_task"}:
            ctl.sched.check_feasible(new_spec)
        rec.sub = dataclasses.replace(rec.sub, spec=new_spec)
    rec.touch()
    return bool(changes)
