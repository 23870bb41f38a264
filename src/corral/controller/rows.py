"""Conversion between ``JobRecord`` and its database row.

Indexed/queried fields are columns; the other mutable fields travel in the ``data`` JSON
column; the submission (spec, script, environment) is written once, at insert.
"""

from __future__ import annotations

import json
from typing import Any

from corral.controller.records import JobRecord, allocation_from_json, allocation_to_json
from corral.core.model.job import HoldKind, JobState
from corral.submission import JobSubmission

_DATA_FIELDS = (
    "eligible_time", "time_limit_s", "time_limit_set", "admin_priority", "array_max_running",
    "array_task_count", "array_task_min", "array_task_max", "signal", "reason",
    "reason_detail", "end_reason", "cpu_time_s", "max_rss_mb", "stdout", "stderr",
    "submit_host", "cancel_requested", "requeue_requested", "requeue_hold",
    "cancelled_by_uid", "warning", "suspended_by", "suspended_at", "suspended_s",
)


def mutable_columns(rec: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = {k: getattr(rec, k) for k in _DATA_FIELDS}
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
        "data": json.dumps(data, separators=(",", ":")),
    }


def insert_row(rec: JobRecord) -> dict[str, Any]:
    row = mutable_columns(rec)
    row.update(
        id=rec.id,
        array_job_id=rec.array_job_id,
        array_task_id=rec.array_task_id,
        user=rec.sub.spec.user,
        uid=rec.sub.spec.uid,
        submit_time=rec.submit_time,
        submission=json.dumps(rec.sub.to_json(), separators=(",", ":")),
    )
    return row


def update_row(rec: JobRecord) -> dict[str, Any]:
    row = mutable_columns(rec)
    row["_id"] = rec.id
    return row


def record_from_row(row: Any) -> JobRecord:
    sub = JobSubmission.from_json(json.loads(row.submission))
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
    alloc = data.get("allocation")
    rec.allocation = allocation_from_json(alloc) if alloc else None
    if rec.allocation is not None:
        rec.partition = rec.allocation.partition
    return rec
