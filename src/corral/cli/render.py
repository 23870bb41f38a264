"""How job and node records (``corral.client`` shapes) look in tables and ``corral show``.

Pure functions of the records (and ``now``), so they are tested without a cluster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from corral.cli.output import Column, text
from corral.core.parse.memory import format_mem_mb
from corral.core.parse.timefmt import format_squeue_time_s, format_time_s

#: Pending reasons in plain words (Slurm's reason codes are kept in the REASON column).
REASON_WORDS: dict[str, str] = {
    "Priority": "waiting for jobs with a higher priority to start first",
    "Resources": "waiting for enough free CPUs, memory or GPUs",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "a job it depends on ended in a way that can never satisfy "
                                "the dependency; cancel it or change the dependency",
    "BeginTime": "its requested start time (--begin) has not come yet",
    "JobHeldUser": "held by its owner; `corral release ID` lets it run",
    "JobHeldAdmin": "held by an administrator",
    "JobArrayTaskLimit": "the array's '%' limit of tasks running at once is reached",
    "PartitionConfig": "the request exceeds what its partition allows (CPUs, memory, GPUs "
                       "or nodes); it waits until the partition changes",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionTimeLimit": "the time limit is above the partition's MaxTime",
    "PartitionDown": "its partition is DOWN",
    "PartitionInactive": "its partition is INACTIVE",
    "ReqNodeNotAvail": "a node it requires is not available (down, drained or reserved)",
    "NodeDown": "a node it needs is DOWN",
    "BadConstraints": "no node has the requested features",
    "QOSMaxJobsPerUserLimit": "you already run as many jobs as your QOS allows",
    "QOSMaxSubmitJobPerUserLimit": "you have as many jobs queued as your QOS allows",
    "QOSMaxCpuPerUserLimit": "your running jobs already use the CPUs your QOS allows",
    "QOSGrpCpuLimit": "the QOS's jobs together use all the CPUs it allows",
    "AssocMaxJobsLimit": "your account's running-job limit is reached",
    "AssocGrpCpuLimit": "your account's jobs together use all the CPUs it allows",
    "Reservation": "waiting for its reservation",
    "Licenses": "waiting for licenses",
    "Preempted": "preempted and waiting to run again",
    "BeginTimeNotReached": "its requested start time has not come yet",
    "JobLaunchFailure": "its last launch failed",
    "None": "",
}


def reason_words(job: Mapping[str, Any]) -> str:
    """Why a job waits, in plain words (the controller's detail if it gave one)."""
    detail = str(job.get("reason_detail") or "")
    if detail:
        return detail
    reason = str(job.get("reason") or "")
    if reason in REASON_WORDS:
        return REASON_WORDS[reason]
    return reason


def epoch(value: Any, default: str = "-") -> str:
    """Local ISO time (seconds) of an epoch value, as ``scontrol`` prints times."""
    if value is None or value == 0:
        return default
    try:
        return dt.datetime.fromtimestamp(float(value)).strftime("%Y-%m-%dT%H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return default


def duration(value: Any, unlimited: str = "UNLIMITED") -> str:
    return format_time_s(None if value is None else float(value), unlimited=unlimited)


def mem(value: Any, default: str = "-") -> str:
    if value is None:
        return default
    try:
        return format_mem_mb(int(value))
    except (TypeError, ValueError):
        return default


def job_id(job: Mapping[str, Any]) -> str:
    return str(job.get("job_id") or job.get("id") or "")


def reason_or_nodes(job: Mapping[str, Any]) -> str:
    """squeue's NODELIST(REASON): the nodes when running, ``(Reason)`` when pending."""
    if job.get("state") == "PENDING":
        return f"({job.get('reason') or 'None'})"
    return text(job.get("nodelist")) or f"({job.get('reason') or 'None'})"


QUEUE_COLUMNS = (
    Column("JOBID", job_id, justify="right", style="bold"),
    Column("PARTITION", lambda j: text(j.get("partition")) or "(default)"),
    Column("NAME", lambda j: text(j.get("name"))),
    Column("USER", lambda j: text(j.get("user"))),
    Column("ST", lambda j: text(j.get("state_short") or j.get("state"))),
    Column("TIME", lambda j: format_squeue_time_s(float(j.get("time_used_s") or 0)),
           justify="right"),
    Column("TIME_LIMIT", lambda j: format_squeue_time_s(
        None if j.get("time_limit_s") is None else float(j["time_limit_s"])), justify="right"),
    Column("NODES", lambda j: text(j.get("num_nodes")), justify="right"),
    Column("CPUS", lambda j: text(j.get("num_cpus")), justify="right"),
    Column("RUNTIME", lambda j: text(j.get("runtime"), "host")),
    Column("NODELIST(REASON)", reason_or_nodes, no_wrap=False),
)

HISTORY_COLUMNS = (
    Column("JOBID", job_id, justify="right", style="bold"),
    Column("NAME", lambda j: text(j.get("name"))),
    Column("USER", lambda j: text(j.get("user"))),
    Column("PARTITION", lambda j: text(j.get("partition"))),
    Column("STATE", lambda j: text(j.get("state"))),
    Column("EXIT", lambda j: text(j.get("derived_exit"), "-")),
    Column("SUBMIT", lambda j: epoch(j.get("submit_time"))),
    Column("START", lambda j: epoch(j.get("start_time"))),
    Column("ELAPSED", lambda j: duration(j.get("time_used_s") or 0), justify="right"),
    Column("NODES", lambda j: text(j.get("num_nodes")), justify="right"),
    Column("CPUS", lambda j: text(j.get("num_cpus")), justify="right"),
    Column("MAXRSS", lambda j: mem(round(float(j["max_rss_mb"])) if j.get("max_rss_mb")
                                   else None), justify="right"),
    Column("NODELIST", lambda j: text(j.get("nodelist"), "-"), no_wrap=False),
)


def _used_total(used: Any, total: Any) -> str:
    return f"{text(used, '0')}/{text(total, '0')}"


def _gpus(node: Mapping[str, Any]) -> str:
    total = int(node.get("gpus") or 0)
    if not total:
        return "-"
    types = node.get("gpu_types") or {}
    kind = ",".join(f"{t}:{n}" for t, n in types.items()) if isinstance(types, Mapping) else ""
    return f"{text(node.get('alloc_gpus'), '0')}/{total}" + (f" ({kind})" if kind else "")


NODE_COLUMNS = (
    Column("NODE", lambda n: text(n.get("name")), style="bold"),
    Column("STATE", lambda n: text(n.get("state"))),
    Column("PARTITIONS", lambda n: text(n.get("partitions"))),
    Column("ADDRESS", lambda n: text(n.get("address") or n.get("hostname"), "-") or "-"),
    Column("CPUS(A/T)", lambda n: _used_total(n.get("alloc_cpus"), n.get("cpus")),
           justify="right"),
    Column("S:C:T", lambda n: ":".join(text(n.get(k), "?") for k in (
        "sockets", "cores_per_socket", "threads_per_core")), justify="right"),
    Column("MEMORY(A/T)", lambda n: f"{mem(n.get('alloc_mem_mb') or 0)}/{mem(n.get('mem_mb'))}",
           justify="right"),
    Column("GPUS(A/T)", _gpus, justify="right"),
    Column("FEATURES", lambda n: text(n.get("features"), "-") or "-"),
    Column("REASON", lambda n: text(n.get("reason"), ""), no_wrap=False),
)


def runtime_words(job: Mapping[str, Any]) -> str:
    """The runtime class, with the VM image: ``vm (image default)``."""
    runtime = text(job.get("runtime"), "host")
    if runtime == "vm":
        return f"vm (image {job.get('vm_image') or 'default'})"
    return runtime


def job_sections(job: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """What ``corral show`` prints, as (section, [(label, value)]) in reading order."""
    state = str(job.get("state") or "")
    pending = state == "PENDING"
    status: list[tuple[str, str]] = [("State", "CONFIGURING" if job.get("configuring")
                                      else state)]
    if job.get("reason") and job.get("reason") != "None":
        status.append(("Reason", f"{job.get('reason')}: {reason_words(job)}".rstrip(": ")))
    if pending:
        status.append(("Estimated start", epoch(job.get("est_start"), "unknown")))
        if job.get("rank") is not None:
            status.append(("Place in queue", text(job.get("rank"))))
    if job.get("hold") and job.get("hold") != "NONE":
        status.append(("Hold", text(job.get("hold"))))
    if job.get("dependency"):
        status.append(("Dependency", text(job.get("dependency"))))
    if job.get("exit_code") is not None:
        status.append(("Exit code", text(job.get("derived_exit") or job.get("exit_code"))))
    if job.get("end_reason"):
        status.append(("Ended because", text(job.get("end_reason"))))
    if state == "SUSPENDED" and job.get("reason_detail"):
        status.append(("Suspended", text(job.get("reason_detail"))))
    if job.get("suspended_s"):
        status.append(("Time suspended", duration(job.get("suspended_s") or 0)))
    if job.get("warning"):
        status.append(("Warning", text(job.get("warning"))))
    if job.get("container"):  # the image, its digest and whether the node had it cached
        status.append(("Container", text(job.get("container"))))
    if job.get("image_prefetch"):  # early pulls of a pending job's image (per node)
        status.append(("Image pull", "; ".join(
            f"{node}: {note}" for node, note in sorted(dict(job["image_prefetch"]).items()))))
    if job.get("restarts"):
        status.append(("Restarts", text(job.get("restarts"))))

    ident = [
        ("Job", job_id(job)), ("Name", text(job.get("name"))),
        ("User", f"{text(job.get('user'))} ({text(job.get('uid'))})"),
        ("Account", text(job.get("account"), "-")), ("QOS", text(job.get("qos"), "-")),
        ("Partition", text(job.get("partition"), "-")),
        ("Runtime", runtime_words(job)),
        ("Submitted by", text(job.get("dialect"), "native")),
    ]
    if job.get("array_job_id") is not None:
        ident.append(("Array", f"{job.get('array_job_id')} task {text(job.get('array_task_id'))}"
                      + (f" (of {job.get('array_task_str')})" if job.get("array_task_str")
                         else "")))

    times = [
        ("Submitted", epoch(job.get("submit_time"))),
        ("Eligible", epoch(job.get("eligible_time"))),
        ("Started", epoch(job.get("start_time"))),
        ("Ended", epoch(job.get("end_time"))),
        ("Run time", duration(job.get("time_used_s") or 0)),
        ("Time limit", duration(job.get("time_limit_s"))),
    ]
    if job.get("begin_time"):
        times.insert(1, ("Begin after", epoch(job.get("begin_time"))))

    mem_req = (f"{mem(job.get('mem_per_node_mb'))} per node"
               if job.get("mem_per_node_mb") is not None
               else f"{mem(job.get('mem_per_cpu_mb'))} per CPU"
               if job.get("mem_per_cpu_mb") is not None else "default")
    resources = [
        ("Nodes", text(job.get("num_nodes"))), ("CPUs", text(job.get("num_cpus"))),
        ("Tasks", text(job.get("num_tasks"))), ("CPUs per task", text(job.get("cpus_per_task"))),
        ("Memory", mem_req), ("GPUs", text(job.get("gpus"), "0")),
        ("TRES", text(job.get("tres"), "-")),
    ]
    if job.get("constraint"):
        resources.append(("Features", text(job.get("constraint"))))
    if job.get("exclusive"):
        resources.append(("Exclusive", "yes"))

    sections = [("Status", status), ("Job", ident), ("Times", times),
                ("Request", resources)]
    alloc = job.get("allocation")
    if isinstance(alloc, Mapping):
        alloc = alloc.get("nodes")
    if isinstance(alloc, list) and alloc:
        rows = []
        for n in alloc:
            cores = n.get("cores") or []
            gpus = n.get("gpus") or []
            rows.append((text(n.get("node")),
                         f"cores {_ranges(cores)} ({len(cores)}), {text(n.get('cpus'))} CPUs, "
                         f"{mem(n.get('mem_mb'))}, "
                         f"GPUs {_ranges(gpus) if gpus else '-'}, {text(n.get('tasks'))} tasks"))
        sections.append(("Allocation", rows))
    elif job.get("nodelist"):
        sections.append(("Allocation", [("Nodes", text(job.get("nodelist")))]))
    steps = job.get("steps")
    if isinstance(steps, list) and steps:
        sections.append(("Steps", [
            (f"{job_id(job)}.{s.get('step_id')}",
             f"{text(s.get('name'))}: {text(s.get('state'))}"
             + (f" (exit {s.get('exit_code')}:{s.get('signal') or 0})"
                if s.get("end_time") is not None else "")
             + f", {text(s.get('ntasks'))} tasks on {text(s.get('nodes'))}")
            for s in steps]))

    factors = job.get("priority_factors")
    prio: list[tuple[str, str]] = []
    if job.get("priority"):
        prio.append(("Priority", f"{float(job['priority']):.0f}"))
    if isinstance(factors, Mapping):
        for k, v in factors.items():
            prio.append((str(k), f"{v:.4g}" if isinstance(v, float) else text(v)))
    if prio:
        sections.append(("Priority", prio))

    files = [("Working dir", text(job.get("workdir"), "-")),
             ("Stdout", text(job.get("stdout"), "-") or "-"),
             ("Stderr", text(job.get("stderr"), "-") or "-"),
             ("Command", text(job.get("command"), "-") or "-")]
    sections.append(("Files", files))
    if job.get("comment"):
        sections.append(("Comment", [("Comment", text(job.get("comment")))]))
    return sections


def _ranges(values: list[Any]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    nums = sorted(int(v) for v in values)
    out: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)
