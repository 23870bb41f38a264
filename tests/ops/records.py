"""Job records shaped like ``corral.client`` documents them, for report tests."""

from __future__ import annotations

from typing import Any


def record(id: int, *, user: str = "alice", account: str | None = "physics",
           partition: str = "batch", state: str = "COMPLETED", submit: float = 0.0,
           start: float | None = None, end: float | None = None, cpus: int = 1,
           gpus: int = 0, mem_per_node_mb: int | None = None,
           mem_per_cpu_mb: int | None = None, alloc_mem_mb: int = 0,
           cpu_time_s: float = 0.0, max_rss_mb: float = 0.0, time_limit_s: int | None = 3600,
           name: str = "job", exit_code: int | None = 0, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": id, "job_id": str(id), "name": name, "user": user, "uid": 1000, "gid": 1000,
        "account": account, "qos": None, "partition": partition, "partitions": [partition],
        "state": state, "reason": "None", "reason_detail": "", "priority": 0.0,
        "rank": None, "est_start": None, "hold": "NONE", "submit_time": submit,
        "eligible_time": submit, "start_time": start, "end_time": end,
        "time_limit_s": time_limit_s, "num_nodes": 1, "nodelist": "n1" if start else "",
        "nodes": ["n1"] if start else [], "num_cpus": cpus, "num_tasks": 1,
        "cpus_per_task": cpus, "mem_per_node_mb": mem_per_node_mb,
        "mem_per_cpu_mb": mem_per_cpu_mb, "alloc_mem_mb": alloc_mem_mb, "gpus": gpus,
        "exit_code": exit_code, "signal": 0, "cpu_time_s": cpu_time_s,
        "max_rss_mb": max_rss_mb, "dependency": "", "begin_time": None,
    }
    rec.update(extra)
    return rec
