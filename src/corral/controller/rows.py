"""Conversion between ``JobRecord`` and its database row.

Indexed/queried fields are columns; the other mutable fields travel in the ``data`` JSON
column; the submission (spec, script, environment) is written once, at insert.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from typing import Any

from corral.controller.records import JobRecord, allocation_from_json, allocation_to_json
from corral.controller.sharing import SubmissionPool
from corral.core.model.job import HoldKind, JobState
from corral.submission import JobSubmission

_DATA_FIELDS = (
    "eligible_time", "time_limit_s", "time_limit_set", "admin_priority", "array_max_running",
    "array_task_count", "array_task_min", "array_task_max", "signal", "reason",
    "reason_detail", "end_reason", "cpu_time_s", "max_rss_mb", "stdout", "stderr",
    "submit_host", "cancel_requested", "requeue_requested", "requeue_hold",
    "cancelled_by_uid", "warning", "suspended_by", "suspended_at", "suspended_s",
    "container", "runtime",
)


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators) makes one per call


_DATA_OF = operator.attrgetter(*_DATA_FIELDS)  # one C call for all of them


def mutable_columns(rec: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = dict(zip(_DATA_FIELDS, _DATA_OF(rec), strict=True))
    data["hold"] = rec.hold.value
    data["allocation"] = allocation_to_json(rec.allocation) if rec.allocation else None
    return {
        "name": rec.sub.spec.name,
        "account": rec.sub.spec.account,
        "partition": rec.partition or (rec.sub.spec.partitions[0]
                                       if rec.sub.spec.partitions else None),
        "state": rec.state.value,
        "start_time": rec.start_time,
        "end_time": rec.end_time,
        "exit_code": rec.exit_code,
        "restarts": rec.restarts,
        "nodes": ",".join(rec.allocation.node_names) if rec.allocation else "",
        "data": _COMPACT.encode(data),
    }


_FIELDS: dict[type, tuple[str, ...]] = {}


_last_sub: list[Any] = [None, ""]  # (submission, its JSON): the tasks of an array share one


def _fields_of(obj: Any) -> dict[str, Any]:
    """``json`` calls this for what it cannot encode itself: a dataclass becomes the dict
    of its fields (their values are encoded, and come back here, in turn)."""
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(obj):
            raise TypeError(f"Object of type {cls.__name__} is not JSON serializable")
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(obj))
    return {n: getattr(obj, n) for n in names}


_SUB_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_fields_of)


def submission_json(sub: JobSubmission) -> str:
    """The stored JSON of a submission (``JobSubmission.to_json``), computed once per
    submission object: every task of an array shares it. Encoded by ``json`` in one
    pass, dataclasses through ``_fields_of`` (the text of ``dataclasses.asdict`` + ``dumps``)."""
    if _last_sub[0] is sub:
        return str(_last_sub[1])
    text = _SUB_ENCODER.encode(sub)
    _last_sub[0], _last_sub[1] = sub, text
    return text


def insert_row(rec: JobRecord) -> dict[str, Any]:
    row = mutable_columns(rec)
    row.update(
        id=rec.id,
        array_job_id=rec.array_job_id,
        array_task_id=rec.array_task_id,
        user=rec.sub.spec.user,
        uid=rec.sub.spec.uid,
        submit_time=rec.submit_time,
        submission=submission_json(rec.sub),
    )
    return row


def update_row(rec: JobRecord) -> dict[str, Any]:
    row = mutable_columns(rec)
    row["_id"] = rec.id
    return row


def record_from_row(row: Any, subs: SubmissionPool | None = None) -> JobRecord:
    """The record of a stored row; ``subs``: a bulk load's pool, so that rows of the same
    submission text (an array's tasks, a loop's jobs) share one parsed submission."""
    sub = (subs.parse(row.submission) if subs is not None
           else JobSubmission.from_json(json.loads(row.submission)))
    data = json.loads(row.data)
    rec = JobRecord(
        id=int(row.id),
        sub=sub,
        submit_time=float(row.submit_time),
        state=JobState(row.state),
        start_time=row.start_time,
        end_time=row.end_time,
        partition=row.partition if row.start_time is not None else None,
        array_job_id=row.array_job_id,
        array_task_id=row.array_task_id,
        restarts=int(row.restarts),
        exit_code=row.exit_code,
    )
    for k in _DATA_FIELDS:
        if k in data:
            setattr(rec, k, data[k])
    rec.hold = HoldKind(data.get("hold", "NONE"))
    rec.event_state = rec.state.value  # its events are in the store already
    alloc = data.get("allocation")
    rec.allocation = allocation_from_json(alloc) if alloc else None
    if rec.allocation is not None:
        rec.partition = rec.allocation.partition
    return rec
