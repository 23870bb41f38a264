"""Scheduling metrics of a simulation, per job and aggregated (JSON and CSV).

Definitions (``s`` submit, ``b`` start, ``e`` end, ``r = e - b`` the run time the job got
in the simulation, ``c`` the CPUs allocated; only jobs that started count unless said):

* wait ``b - s``; response (turnaround) ``e - s``; slowdown ``(e - s) / r`` for ``r > 0``;
* bounded slowdown ``max(1, (e - s) / max(r, tau))`` with ``tau = 10 s`` (Feitelson et al.,
  "Theory and practice in parallel job scheduling", 1997);
* utilization, three common definitions, all over the machine's ``C`` CPUs:

  - ``makespan`` (headline): ``sum(c * r) / (C * (max e - min s))``, the busy fraction
    from the first submit to the last end;
  - ``arrival_window``: the busy CPU-seconds that fall inside ``[min s, max s]`` divided
    by ``C * (max s - min s)``; leaves out the drain after the last arrival, when load
    must fall, so it is the better steady-state figure for long traces;
  - ``rlscheduler``: ``sum(logged run * procs) / ((max b - min s) * C)``, the definition
    used by RLScheduler (SC'20) and its published tables;

* makespan ``max e - min s``; queue length: time-weighted mean and max of pending jobs;
* fairness: per user and per account (SWF group) jobs, CPU-seconds, mean wait and mean
  bounded slowdown; Jain's index ``(sum x)^2 / (n * sum x^2)`` over the per-user means
  (1 = all users fare the same); usage share against the share target (account shares
  over their sum; equal shares when none are given); wait by job size class (CPUs:
  1, 2-4, 5-16, 17-64, 65-256, 257-1024, >1024).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from corral.sim.result import STATE_NAMES, TIMEOUT, SimResult

FloatArray = npt.NDArray[np.float64]
TAU_S = 10.0
SIZE_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-4", 2, 4), ("5-16", 5, 16), ("17-64", 17, 64), ("65-256", 65, 256),
    ("257-1024", 257, 1024), (">1024", 1025, 2**62),
)


def _stats(x: FloatArray) -> dict[str, float]:
    if x.size == 0:
        return {"mean": math.nan, "median": math.nan, "p95": math.nan, "p99": math.nan,
                "max": math.nan}
    return {
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "p95": float(np.percentile(x, 95)),
        "p99": float(np.percentile(x, 99)),
        "max": float(x.max()),
    }


def per_job(res: SimResult, tau_s: float = TAU_S) -> dict[str, FloatArray]:
    """Per-job wait, response, run, slowdown and bounded slowdown (``nan`` if not started)."""
    s, b, e = res.workload.submit_s, res.start_s, res.end_s
    r = e - b
    wait = b - s
    resp = e - s
    with np.errstate(divide="ignore", invalid="ignore"):
        sld = np.where(r > 0, resp / r, np.nan)
        bsld = np.maximum(1.0, resp / np.maximum(r, tau_s))
    return {"wait_s": wait, "response_s": resp, "run_s": r, "slowdown": sld, "bsld": bsld}


def _jain(x: FloatArray) -> float:
    x = x[~np.isnan(x)]
    if x.size == 0 or not np.any(x):
        return math.nan
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))


def _group_table(
    keys: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_], usage: FloatArray,
    wait: FloatArray, bsld: FloatArray, prefix: str,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    k = keys[mask]
    if k.size == 0:
        return out
    uniq, inv = np.unique(k, return_inverse=True)
    n = np.bincount(inv)
    use = np.bincount(inv, weights=usage[mask])
    w = np.bincount(inv, weights=wait[mask]) / n
    bs = np.bincount(inv, weights=bsld[mask]) / n
    for i, key in enumerate(uniq.tolist()):
        out.append({
            "name": f"{prefix}{key}" if key >= 0 else "unknown",
            "jobs": int(n[i]), "usage_cpu_s": float(use[i]),
            "mean_wait_s": float(w[i]), "mean_bsld": float(bs[i]),
        })
    return out


def summarize(
    res: SimResult, *, tau_s: float = TAU_S, share_targets: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """All aggregate metrics of one run as a JSON-ready dict (see the module doc)."""
    wl = res.workload
    pj = per_job(res, tau_s)
    started = res.started
    ended = started & ~np.isnan(res.end_s)
    c = res.alloc_cpus.astype(np.float64)
    C = float(res.total_cpus)
    usage = np.where(ended, c * pj["run_s"], 0.0)
    t0 = float(wl.submit_s.min()) if len(wl) else 0.0
    t_last_submit = float(wl.submit_s.max()) if len(wl) else 0.0
    t_end = float(np.nanmax(res.end_s)) if ended.any() else t0
    t_last_start = float(np.nanmax(res.start_s)) if started.any() else t0
    makespan = t_end - t0

    util: dict[str, float] = {}
    util["makespan"] = float(usage.sum() / (C * makespan)) if makespan > 0 else math.nan
    if t_last_submit > t0:
        lo = np.clip(res.start_s, t0, t_last_submit)
        hi = np.clip(res.end_s, t0, t_last_submit)
        inside = np.where(ended, np.maximum(hi - lo, 0.0) * c, 0.0)
        util["arrival_window"] = float(inside.sum() / (C * (t_last_submit - t0)))
    else:
        util["arrival_window"] = math.nan
    logged = float((wl.run_s[started] * wl.procs[started]).sum())
    span = (t_last_start - t0) * C
    util["rlscheduler"] = logged / span if span > 0 else math.nan

    q_mean, q_max = math.nan, math.nan
    if res.samples_t.size:
        t = res.samples_t
        dt = np.diff(np.append(t, t_end if t_end > t[-1] else t[-1]))
        total = dt.sum()
        q_mean = float((res.samples_pending * dt).sum() / total) if total > 0 else math.nan
        q_max = float(res.samples_pending.max())

    users = _group_table(wl.user_id, started, usage, pj["wait_s"], pj["bsld"], "u")
    accounts = _group_table(wl.group_id, started, usage, pj["wait_s"], pj["bsld"], "g")
    total_use = sum(a["usage_cpu_s"] for a in accounts) or 1.0
    if share_targets is None:
        share_targets = {a["name"]: 1.0 / len(accounts) for a in accounts} if accounts else {}
    for a in accounts:
        a["usage_share"] = a["usage_cpu_s"] / total_use
        a["share_target"] = float(share_targets.get(a["name"], 0.0))

    by_size = []
    for name, lo_c, hi_c in SIZE_CLASSES:
        m = started & (wl.procs >= lo_c) & (wl.procs <= hi_c)
        if m.any():
            by_size.append({
                "class": name, "jobs": int(m.sum()),
                "mean_wait_s": float(pj["wait_s"][m].mean()),
                "p95_wait_s": float(np.percentile(pj["wait_s"][m], 95)),
                "mean_bsld": float(pj["bsld"][m].mean()),
            })

    counts = {name.lower(): int(np.count_nonzero(res.state == i))
              for i, name in enumerate(STATE_NAMES)}
    return {
        "label": res.label,
        "jobs": {"total": len(wl), "started": int(started.sum()), **counts},
        "wait_s": _stats(pj["wait_s"][started]),
        "response_s": _stats(pj["response_s"][ended]),
        "bsld": _stats(pj["bsld"][ended]),
        "slowdown": _stats(pj["slowdown"][ended & ~np.isnan(pj["slowdown"])]),
        "utilization": util,
        "makespan_s": makespan,
        "queue_length": {"time_weighted_mean": q_mean, "max": q_max},
        "fairness": {
            "users": len(users),
            "jain_mean_wait": _jain(np.array([u["mean_wait_s"] for u in users])),
            "jain_mean_bsld": _jain(np.array([u["mean_bsld"] for u in users])),
        },
        "by_size": by_size,
        "by_account": accounts,
        "by_user": users,
        "machine": {"cpus": res.total_cpus, "nodes": res.total_nodes},
        "definitions": {"tau_s": tau_s, "utilization": "see corral.sim.metrics"},
        "stats": res.stats,
        "settings": res.settings,
    }


def _clean(obj: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: str | Path, summary: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
    Path(path).write_text(json.dumps(_clean(summary), indent=1, sort_keys=False) + "\n")


JOB_CSV_FIELDS = (
    "job_id", "submit_s", "start_s", "end_s", "wait_s", "run_s", "logged_run_s", "limit_s",
    "procs", "alloc_cpus", "user_id", "group_id", "state", "bsld",
)


def write_jobs_csv(path: str | Path, res: SimResult, *, tau_s: float = TAU_S) -> None:
    """One row per job (times in trace seconds; empty where a time does not exist)."""
    wl = res.workload
    pj = per_job(res, tau_s)

    def f(x: float) -> str:
        return "" if math.isnan(x) else (str(int(x)) if x == int(x) else f"{x:.3f}")

    cols = [
        wl.job_id.tolist(), [f(x) for x in wl.submit_s.tolist()],
        [f(x) for x in res.start_s.tolist()], [f(x) for x in res.end_s.tolist()],
        [f(x) for x in pj["wait_s"].tolist()], [f(x) for x in pj["run_s"].tolist()],
        [f(x) for x in wl.run_s.tolist()], [f(x) for x in wl.limit_s.tolist()],
        wl.procs.tolist(), res.alloc_cpus.tolist(), wl.user_id.tolist(), wl.group_id.tolist(),
        [STATE_NAMES[s] for s in res.state.tolist()], [f(x) for x in pj["bsld"].tolist()],
    ]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_CSV_FIELDS)
        w.writerows(zip(*cols, strict=True))


def write_summary_csv(path: str | Path, summaries: Sequence[Mapping[str, Any]]) -> None:
    """One row per run with the headline numbers (for spreadsheets)."""
    fields = ("label", "jobs", "mean_wait_s", "median_wait_s", "p95_wait_s", "max_wait_s",
              "mean_bsld", "mean_response_s", "util_makespan", "util_arrival_window",
              "util_rlscheduler", "makespan_s", "mean_queue", "jain_bsld", "killed")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for s in summaries:
            w.writerow([
                s["label"], s["jobs"]["started"], s["wait_s"]["mean"], s["wait_s"]["median"],
                s["wait_s"]["p95"], s["wait_s"]["max"], s["bsld"]["mean"],
                s["response_s"]["mean"], s["utilization"]["makespan"],
                s["utilization"]["arrival_window"], s["utilization"]["rlscheduler"],
                s["makespan_s"], s["queue_length"]["time_weighted_mean"],
                s["fairness"]["jain_mean_bsld"], s["jobs"][STATE_NAMES[TIMEOUT].lower()],
            ])
