"""One srun step of a job as the controller keeps it: ``StepRecord``, its row in the
``steps`` table (``insert_row``/``update_row``/``from_row``; the row's JSON ``data`` holds
argv, tasks, usage and error), and its API form (``to_api``). What the controller
does with steps (start, end, listing, closing a job's open steps, attaching loaded rows)
is ``corral.controller.steps``; this module is a leaf, so job records can hold steps
without importing the controller.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class StepRecord:
    job_id: int
    restarts: int
    step_id: int
    name: str
    argv: list[str]
    ntasks: int
    nodes: list[str]
    num_cpus: int
    start_time: float
    pid: int | None = None
    state: str = "RUNNING"
    end_time: float | None = None
    exit_code: int | None = None
    signal: int = 0
    # global task ids on each node (same order as ``nodes``; [] when not known: steps
    # recorded without a launch)
    node_tasks: list[list[int]] = field(default_factory=list)
    # what the end report measured (``check_usage``'s form), None when not measured
    usage: dict[str, Any] | None = None
    # why its tasks could not start on a node (srun's end report: a container that could
    # not be made, an image that could not be pulled); "" when they started
    error: str = ""

    @property
    def is_open(self) -> bool:
        return self.end_time is None

    def to_api(self) -> dict[str, Any]:
        usage = self.usage
        return {
            "step_id": self.step_id, "job_id": self.job_id, "restarts": self.restarts,
            "name": self.name, "argv": list(self.argv), "ntasks": self.ntasks,
            "nodes": list(self.nodes), "num_cpus": self.num_cpus,
            "start_time": self.start_time, "end_time": self.end_time, "state": self.state,
            "exit_code": self.exit_code, "signal": self.signal, "pid": self.pid,
            "node_tasks": [list(t) for t in self.node_tasks],
            "usage": _copy_usage(usage) if usage is not None else None,
            "cpu_time_s": usage.get("cpu_time_s") if usage is not None else None,
            "max_rss_mb": usage.get("max_rss_mb") if usage is not None else None,
            "error": self.error or None,
        }

    def _data(self) -> str:
        data: dict[str, Any] = {"argv": self.argv, "ntasks": self.ntasks, "nodes": self.nodes,
                                "num_cpus": self.num_cpus, "pid": self.pid,
                                "exit_code": self.exit_code, "signal": self.signal}
        if self.node_tasks:
            data["tasks"] = self.node_tasks
        if self.usage is not None:
            data["usage"] = self.usage
        if self.error:
            data["error"] = self.error
        return json.dumps(data, separators=(",", ":"))

    def insert_row(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "restarts": self.restarts, "step_id": self.step_id,
                "name": self.name, "state": self.state, "start_time": self.start_time,
                "end_time": self.end_time, "data": self._data()}

    def update_row(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "restarts": self.restarts, "step_id": self.step_id,
                "state": self.state, "end_time": self.end_time, "data": self._data()}

    @staticmethod
    def from_row(row: Any) -> StepRecord:
        data = json.loads(row.data)
        return StepRecord(
            job_id=int(row.job_id), restarts=int(row.restarts), step_id=int(row.step_id),
            name=str(row.name), argv=[str(a) for a in data.get("argv") or []],
            ntasks=int(data.get("ntasks") or 1), nodes=[str(n) for n in data.get("nodes") or []],
            num_cpus=int(data.get("num_cpus") or 0), start_time=float(row.start_time),
            pid=data.get("pid"), state=str(row.state), end_time=row.end_time,
            exit_code=data.get("exit_code"), signal=int(data.get("signal") or 0),
            node_tasks=_stored_tasks(data.get("tasks")), usage=_stored_usage(data.get("usage")),
            error=str(data.get("error") or ""))


def _copy_usage(usage: dict[str, Any]) -> dict[str, Any]:
    nodes = usage.get("nodes") or {}
    return {"nodes": {k: dict(v, pids=list(v.get("pids") or [])) for k, v in nodes.items()},
            "cpu_time_s": usage.get("cpu_time_s"), "max_rss_mb": usage.get("max_rss_mb")}


def _stored_tasks(raw: Any) -> list[list[int]]:
    """A stored row's per-node task ids (rows written before they were kept have none)."""
    if not isinstance(raw, list):
        return []
    try:
        return [[int(t) for t in ids] for ids in raw]
    except (TypeError, ValueError):
        return []


def _stored_usage(raw: Any) -> dict[str, Any] | None:
    """A stored row's usage, as ``check_usage`` wrote it (None for older rows)."""
    if not isinstance(raw, dict):
        return None
    nodes = raw.get("nodes")
    return {"nodes": {str(k): v for k, v in nodes.items() if isinstance(v, dict)}
            if isinstance(nodes, dict) else {},
            "cpu_time_s": raw.get("cpu_time_s"), "max_rss_mb": raw.get("max_rss_mb")}
