"""Live usage of running jobs, as agents sample it (``sstat``).

Each agent heartbeat may carry ``usage``: ``[{job_id, cpu_time_s, rss_mb, pids}]``, the
same sample its metrics export (``corral.ops.agent_metrics.sample_job``: the job's cgroup
CPU counter, else its processes'; resident memory of its processes). ``live_samples``
checks it (whole job ids, finite numbers >= 0, at most ``MAX_JOBS`` entries and
``MAX_PIDS`` pids each; anything else is dropped, never an error: a heartbeat must not
fail for it) and stamps each with the controller's receive time. The node record keeps
the last one (``NodeRecord.live_usage``), replaced by each heartbeat, so a job that
ended on the node disappears with the next beat.

``job_usage`` gives what ``GET /api/v1/ops/usage/{job}`` and the in-controller client
return: ``{"job_id", "state", "nodes": {node: {node, cpu_time_s, max_rss_mb, pids,
time}}}``, the nodes of the job that reported it.
"""

from __future__ import annotations

import math
from typing import Any

MAX_JOBS = 512
MAX_PIDS = 64


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if math.isfinite(x) and x >= 0 else None


def live_samples(raw: Any, now: float) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    if not isinstance(raw, list):
        return out
    for item in raw[:MAX_JOBS]:
        if not isinstance(item, dict):
            continue
        jid = item.get("job_id")
        if isinstance(jid, bool) or not isinstance(jid, int) or jid < 0:
            continue
        cpu, rss = _num(item.get("cpu_time_s")), _num(item.get("rss_mb"))
        if cpu is None or rss is None:
            continue
        pids = [p for p in (item.get("pids") or [])[:MAX_PIDS]
                if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 1 << 31] \
            if isinstance(item.get("pids"), list) else []
        out[jid] = {"cpu_time_s": cpu, "max_rss_mb": rss, "pids": pids, "time": now}
    return out


def job_usage(ctl: Any, job_id: int) -> dict[str, Any]:
    """The live samples of a job on each of its nodes ({} when none reported it)."""
    rec = ctl.running.get(job_id)
    nodes: dict[str, Any] = {}
    alloc = rec.allocation if rec is not None else None
    names = list(alloc.node_names) if alloc is not None else []
    for name in names:
        node = ctl.nodes.nodes.get(name)
        sample = node.live_usage.get(job_id) if node is not None else None
        if sample is not None:
            nodes[name] = {"node": name, **sample}
    return {"job_id": job_id, "running": rec is not None, "nodes": nodes}
