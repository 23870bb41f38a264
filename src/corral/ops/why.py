""""Why is my job pending?" in plain words, for ``corral show`` and the web dashboard.

``explain_pending(job, factors=None, now=None, pending_total=None) -> list[str]`` turns a
job record (``corral.client`` shape: ``state``, ``reason``, ``reason_detail``, ``rank``,
``est_start``, ``priority``, ...) and, when known, its priority factors into a few
sentences: what the scheduler's reason means, what blocks the job (the core's detail,
with epoch times turned into clock times), its priority and where it comes from, its
place in the queue and the estimated start. Pure: no I/O, the clock is an argument.

``factors`` is ``corral.core.priority.PriorityFactors`` or its JSON form
(``factors_to_json``), as the controller's ``/api/v1/ops/why/<job>`` returns it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

# reason code -> (what it means, what the user can do; "" if nothing)
_MEANING: dict[str, tuple[str, str]] = {
    "Priority": ("jobs with a higher priority are ahead of it in the queue",
                 "it starts once those have started and enough resources are free"),
    "Resources": ("it is next in line, but the resources it asks for are not free yet",
                  "it starts as soon as running jobs end and free them"),
    "Dependency": ("it waits for the jobs it depends on", ""),
    "DependencyNeverSatisfied": (
        "its dependency can never be satisfied (a job it depends on ended the wrong way)",
        "it will never start: cancel it, or change its dependency"),
    "JobHeldUser": ("it is held by its owner",
                    "release it (corral release / scontrol release) to let it run"),
    "JobHeldAdmin": ("it is held by an administrator", "only an operator can release it"),
    "BeginTime": ("it asked not to start before a given time (--begin)", ""),
    "JobArrayTaskLimit": ("its array may only run a limited number of tasks at once (%N)",
                          "it starts when another task of the array ends"),
    "PartitionDown": ("its partition is down", "an operator must bring the partition up"),
    "PartitionInactive": ("its partition is inactive",
                          "an operator must activate the partition"),
    "ReqNodeNotAvail": ("a node it requires is not available (down or drained)",
                        "it waits until the node is back"),
    "NodeDown": ("a node it needs is down", "it waits until the node is back"),
    "Licenses": ("the licenses it asks for are in use", "it starts when they are released"),
    "None": ("the scheduler has not looked at it yet (it was just submitted)",
             "wait a moment"),
}
_NEVER = {
    "PartitionTimeLimit": "its time limit is longer than its partition allows",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionConfig": "its account or QOS may not use the partition",
    "BadConstraints": "no node has the features it asks for",
    "NodeConfigUnavailable": "no node could ever satisfy its request",
    "InvalidAccount": "its account does not exist or it may not use it",
    "InvalidQOS": "its QOS does not exist or it may not use it",
    "InvalidPartition": "its partition does not exist",
    "BadLicenses": "it asks for licenses the cluster does not have",
}
_LIMIT_WHAT = (("WallDuration", "run time"), ("Jobs", "running jobs"), ("Cpu", "CPUs"),
               ("Memory", "memory"), ("Mem", "memory"), ("GRES", "GPUs"), ("Node", "nodes"))
_EPOCH = re.compile(r"t=(\d{9,}(?:\.\d+)?)")


def clock(ts: float, now: float) -> str:
    """``2024-05-01 13:45:00 (in 5 min)`` in local time."""
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    return f"{text} ({relative(ts - now)})"


def relative(delta_s: float) -> str:
    """``in 5 min`` / ``3 h ago`` / ``now``."""
    d = abs(delta_s)
    if d < 1:
        return "now"
    if d < 90:
        amount = f"{d:.0f} s"
    elif d < 5400:
        amount = f"{d / 60:.0f} min"
    elif d < 2 * 86400:
        amount = f"{d / 3600:.1f} h"
    else:
        amount = f"{d / 86400:.1f} days"
    return f"in {amount}" if delta_s > 0 else f"{amount} ago"


def _humanize(detail: str, now: float) -> str:
    return _EPOCH.sub(lambda m: clock(float(m.group(1)), now), detail)


def _limit_meaning(reason: str) -> str | None:
    """Plain words for Slurm's QOS*/Assoc* limit reasons (``QOSMaxCpuPerUserLimit``...)."""
    m = re.fullmatch(r"(QOS|Assoc)(Max|Grp)(\w+?)(Limit)?", reason)
    if m is None:
        return None
    who = "its QOS" if m.group(1) == "QOS" else "its account"
    body = m.group(3)
    what = next((w for k, w in _LIMIT_WHAT if k in body), "resources")
    if m.group(2) == "Grp":
        scope = "for the whole group"
    elif "PerAccount" in body:
        scope = "per account"
    elif "PerJob" in body:
        scope = "per job"
    else:
        scope = "per user"
    if scope == "per job":
        return f"it asks for more {what} than {who} allows per job"
    return f"the limit of {who} on {what} {scope} is reached"


def factors_to_json(f: Any) -> dict[str, Any]:
    """``PriorityFactors`` -> JSON (the form ``explain_pending`` also accepts)."""
    return {
        "factors": [{"name": x.name, "value": x.value, "weight": x.weight,
                     "contribution": x.contribution} for x in f.factors],
        "site": f.site, "nice": f.nice, "computed": f.computed,
        "admin_priority": f.admin_priority, "total": f.total,
        "ordering": getattr(f.ordering, "value", str(f.ordering)),
    }


def _factor_line(factors: Any) -> str | None:
    data = factors if isinstance(factors, Mapping) else factors_to_json(factors)
    if data.get("admin_priority") is not None:
        return f"Priority: {float(data['total']):.0f}, set by an administrator."
    parts = []
    for x in data.get("factors", ()):
        contrib = float(x["contribution"])
        if int(x["weight"]) == 0:
            continue
        parts.append((contrib, f"{x['name'].replace('_', ' ')} {contrib:.0f} "
                               f"({float(x['value']):.2f} x {int(x['weight'])})"))
    parts.sort(key=lambda p: -p[0])
    text = ", ".join(p[1] for p in parts) or "no weighted factors"
    extra = []
    if data.get("site"):
        extra.append(f"site {data['site']}")
    if data.get("nice"):
        extra.append(f"nice -{data['nice']}")
    if extra:
        text += "; " + ", ".join(extra)
    ordering = data.get("ordering", "multifactor")
    tail = "" if ordering in ("multifactor", "MULTIFACTOR") else \
        f" (the queue is ordered by {ordering}, not by this sum)"
    return f"Priority: {float(data['total']):.0f} = {text}{tail}."


def explain_pending(job: Mapping[str, Any], factors: Any = None, now: float | None = None,
                    pending_total: int | None = None) -> list[str]:
    """Plain-words lines on why ``job`` (a ``corral.client`` job record) is pending."""
    t = time.time() if now is None else now
    jid = job.get("job_id") or job.get("id")
    state = str(job.get("state", ""))
    if state != "PENDING":
        line = f"Job {jid} is not pending: it is {state or 'UNKNOWN'}"
        if job.get("start_time"):
            line += f" (started {clock(float(job['start_time']), t)}"
            line += f" on {job['nodelist']})" if job.get("nodelist") else ")"
        return [line + "."]
    reason = str(job.get("reason") or "None")
    detail = _humanize(str(job.get("reason_detail") or ""), t)
    lines: list[str] = []
    if reason in _NEVER:
        lines.append(f"Job {jid} is pending ({reason}) and can never run as asked: "
                     f"{_NEVER[reason]}.")
        if detail:
            lines.append(f"Detail: {detail}.")
        lines.append("Cancel it and submit it again with a request the cluster can meet.")
        return lines
    meaning, action = _MEANING.get(reason, ("", ""))
    if not meaning:
        meaning = _limit_meaning(reason) or f"the scheduler reports {reason}"
        action = action or "it starts when your running jobs (or the group's) end"
    lines.append(f"Job {jid} is pending ({reason}): {meaning}.")
    if reason == "Dependency" and job.get("dependency"):
        lines.append(f"It depends on: {job['dependency']}.")
    if reason == "BeginTime" and job.get("begin_time"):
        lines.append(f"Earliest start asked for: {clock(float(job['begin_time']), t)}.")
    if detail:
        lines.append(f"What blocks it: {detail}.")
    if action:
        lines.append(f"Next: {action}.")
    if factors is not None:
        fl = _factor_line(factors)
        if fl:
            lines.append(fl)
    elif job.get("priority"):
        lines.append(f"Priority: {float(job['priority']):.0f}.")
    rank = job.get("rank")
    if rank:
        ahead = int(rank) - 1
        of = f" of {pending_total} pending jobs" if pending_total else ""
        lines.append(f"Place in queue: {int(rank)}{of} ({ahead} job{'s' if ahead != 1 else ''}"
                     " ahead of it).")
    est = job.get("est_start")
    if est:
        lines.append(f"Estimated start: {clock(float(est), t)}.")
    elif reason in ("Priority", "Resources"):
        lines.append("Estimated start: not known yet (the backfill window does not reach it,"
                     " or the jobs ahead have no time limits).")
    if job.get("submit_time"):
        lines.append(f"Waiting since {clock(float(job['submit_time']), t)}.")
    return lines
