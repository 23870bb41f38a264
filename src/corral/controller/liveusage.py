"""Live usage of running jobs, as agents sample it (``sstat``).

Each agent heartbeat may carry ``usage``: ``[{job_id, cpu_time_s, rss_mb, pids}]``, the
same sample its metrics export (``corral.ops.agent_metrics.sample_job``: the job's cgroup
CPU counter, else its processes'; resident memory of its processes). ``live_samples``
checks it (whole job ids, finite numbers >= 0, at most ``MAX_JOBS`` entries and
``MAX_PIDS`` pids each; anything else is dropped, never an error: a heartbeat must not
fail for it) and stamps each with the controller's receive time. The node record keeps
the last one (``NodeRecord.live_usage``), replaced by each heartbeat, so a job that
ended on the node disappears with the next beat. An entry may carry ``steps``: each
running ``srun`` step's share of the node (``corral.agent.stepusage``: ``{step_id,
cpu_time_s, rss_mb, ntasks, pids}``, at most ``MAX_STEPS``), kept as
``{step id: {cpu_time_s, max_rss_mb, ntasks, pids}}`` under the job's sample. On the
batch host it may carry ``batch``: the batch script's own processes' figures (no step's
processes: ``corral.agent.stepusage.batch_sample``), kept as ``{cpu_time_s, max_rss_mb,
pids}``; ``sstat``'s ``.batch`` row shows those.

``job_usage`` gives what ``GET /api/v1/ops/usage/{job}`` and the in-controller client
return: ``{"job_id", "state", "nodes": {node: {node, cpu_time_s, max_rss_mb, pids,
time}}}``, the nodes of the job that reported it.
"""

from __future__ import annotations

import math
from typing import Any

MAX_JOBS = 512
MAX_PIDS = 64
MAX_STEPS = 64


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
        pids = _pids(item.get("pids"))
        out[jid] = {"cpu_time_s": cpu, "max_rss_mb": rss, "pids": pids, "time": now}
        steps = _steps(item.get("steps"))
        if steps:
            out[jid]["steps"] = steps
        batch = item.get("batch")
        if isinstance(batch, dict):
            bcpu, brss = _num(batch.get("cpu_time_s")), _num(batch.get("rss_mb"))
            if bcpu is not None and brss is not None:
                out[jid]["batch"] = {"cpu_time_s": bcpu, "max_rss_mb": brss,
                                     "pids": _pids(batch.get("pids"))}
    return out


def _pids(raw: Any) -> list[int]:
    if not isinstance(raw, list):
        return []
    return [p for p in raw[:MAX_PIDS]
            if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 1 << 31]


def _steps(raw: Any) -> dict[str, dict[str, Any]]:
    """A job's running ``srun`` steps on the node: ``{step id: {cpu_time_s, max_rss_mb,
    ntasks, pids}}``; entries with a bad id or figure are dropped."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw, list):
        return out
    for item in raw[:MAX_STEPS]:
        if not isinstance(item, dict):
            continue
        sid = item.get("step_id")
        if not isinstance(sid, str) or not sid.isdigit() or len(sid) > 9:
            continue
        cpu, rss = _num(item.get("cpu_time_s")), _num(item.get("rss_mb"))
        ntasks = item.get("ntasks")
        if cpu is None or rss is None or isinstance(ntasks, bool) \
                or not isinstance(ntasks, int) or not 0 < ntasks < 1 << 20:
            continue
        out[sid] = {"cpu_time_s": cpu, "max_rss_mb": rss, "ntasks": ntasks,
                    "pids": _pids(item.get("pids"))}
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
