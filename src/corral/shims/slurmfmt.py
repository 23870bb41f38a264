"""Shared pieces of Slurm's output formats: field fitting, times, ids, states, reasons.

Everything takes the controller's job records (``dict``, documented in
``corral.client``) and returns text exactly as Slurm 22.05 prints it (checked against
``shared/compat/slurm-22.05``):

- ``fit(value, width, right)``: Slurm's ``_print_str``: no width, the value as is; with a
  width, cut to it and padded left (``right``) or right;
- times print in local time as ``YYYY-MM-DDTHH:MM:SS``; missing ones as ``Unknown`` or
  ``N/A`` depending on the field, as Slurm does;
- the display id of a job is ``12`` or, for an array task, ``<array id>_<index>``;
  ``collapse_pending_arrays`` turns never-started tasks of one array that wait for the
  same reason into one ``12_[3-6%2]`` row, as squeue does without ``-r``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from corral.core.parse.arrayspec import format_array

Record = dict[str, Any]

NO_VAL_TASK = 4294967294  # Slurm's %a outside an array / ArrayTaskId of none

# Reasons squeue/scontrol show for finished jobs (Slurm sets them at the end).
_END_REASON = {
    "FAILED": "NonZeroExitCode",
    "TIMEOUT": "TimeLimit",
    "NODE_FAIL": "NodeDown",
    "OUT_OF_MEMORY": "OutOfMemory",
    "BOOT_FAIL": "BootFail",
    "DEADLINE": "DeadLine",
}


def fit(value: str, width: int, right: bool) -> str:
    """Slurm's ``_print_str`` with ``cut_output``: cut to ``width``, then pad."""
    if width <= 0:
        return value
    if len(value) > width:
        value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def fit_sacct(value: str, width: int, right: bool) -> str:
    """``sacct`` fixed width: a value longer than the field is cut and ends in ``+``."""
    if width <= 0:
        return value
    if len(value) > width:
        value = value[: width - 1] + "+"
    return value.rjust(width) if right else value.ljust(width)


def iso(ts: float | None, missing: str = "Unknown") -> str:
    if ts is None or ts <= 0:
        return missing
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def display_id(rec: Record) -> str:
    task = rec.get("array_task_id")
    if task is not None and rec.get("array_job_id") is not None:
        return f"{rec['array_job_id']}_{task}"
    return str(rec["id"])


def array_job_id(rec: Record) -> int:
    aj = rec.get("array_job_id")
    return int(aj) if aj is not None else int(rec["id"])


def is_array(rec: Record) -> bool:
    return rec.get("array_task_id") is not None and rec.get("array_job_id") is not None


def job_state(rec: Record) -> str:
    """The base state (what sacct and every decision use)."""
    return str(rec.get("state") or "PENDING")


def shown_state(rec: Record) -> str:
    """The state squeue and scontrol print: CONFIGURING while a running job's nodes boot."""
    state = job_state(rec)
    return "CONFIGURING" if state == "RUNNING" and rec.get("configuring") else state


_SHORT = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETING": "CG",
    "COMPLETED": "CD", "CANCELLED": "CA", "FAILED": "F", "TIMEOUT": "TO",
    "NODE_FAIL": "NF", "PREEMPTED": "PR", "OUT_OF_MEMORY": "OOM", "BOOT_FAIL": "BF",
    "DEADLINE": "DL", "CONFIGURING": "CF", "REQUEUED": "RQ", "REVOKED": "RV",
    "SPECIAL_EXIT": "SE", "STOPPED": "ST", "RESIZING": "RS", "SIGNALING": "SI",
    "STAGE_OUT": "SO",
}
LONG_OF_SHORT = {v: k for k, v in _SHORT.items()}


def state_short(state: str) -> str:
    return _SHORT.get(state, state[:2])


def is_pending(rec: Record) -> bool:
    return job_state(rec) == "PENDING"


def is_finished(rec: Record) -> bool:
    return job_state(rec) not in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING",
                                  "CONFIGURING")


def reason(rec: Record) -> str:
    """Slurm's ``Reason`` field: the pending reason, or why a finished job ended."""
    state = job_state(rec)
    r = str(rec.get("reason") or "None")
    if state in _END_REASON and r in ("None", ""):
        if state == "FAILED" and (rec.get("exit_code") or 0) == 0 and not rec.get("signal"):
            return "None"
        return _END_REASON[state]
    if state == "RUNNING":
        return "None"
    return r or "None"


def nodelist(rec: Record) -> str:
    nl = rec.get("nodelist")
    if nl:
        return str(nl)
    nodes = rec.get("nodes") or []
    if not nodes:
        return ""
    from corral.core.parse.hostlist import compress

    return compress(nodes)


def batch_host(rec: Record) -> str:
    nodes = rec.get("nodes") or []
    return str(nodes[0]) if nodes else ""


def exit_code_text(rec: Record) -> str:
    """``code:signal`` as scontrol/sacct print ``ExitCode``."""
    derived = rec.get("derived_exit")
    if derived:
        return str(derived)
    return f"{int(rec.get('exit_code') or 0)}:{int(rec.get('signal') or 0)}"


def elapsed_s(rec: Record, now: float) -> float:
    start = rec.get("start_time")
    if not start:
        return 0.0
    end = rec.get("end_time")
    if end:
        return max(0.0, float(end) - float(start))
    if job_state(rec) in ("RUNNING", "COMPLETING", "SUSPENDED"):
        return max(0.0, now - float(start))
    used = rec.get("time_used_s")
    return float(used or 0.0)


def mem_text(rec: Record) -> tuple[str, bool]:
    """(min memory text, per_cpu) as squeue ``%m`` and scontrol ``MinMemory*`` show."""
    from corral.core.parse.memory import format_mem_mb

    per_cpu = rec.get("mem_per_cpu_mb")
    if per_cpu:
        return format_mem_mb(int(per_cpu)), True
    per_node = rec.get("mem_per_node_mb")
    if per_node:
        return format_mem_mb(int(per_node)), False
    return "0", False


def user_of(rec: Record) -> str:
    return str(rec.get("user") or rec.get("uid") or "")


_group_cache: dict[int, str] = {}


def group_name(gid: int) -> str:
    name = _group_cache.get(gid)
    if name is None:
        try:
            import grp

            name = grp.getgrgid(gid).gr_name
        except (KeyError, ImportError):
            name = str(gid)
        _group_cache[gid] = name
    return name


def remainder_of(rec: Record) -> tuple[int, str] | None:
    """The never-started array remainder a record belongs to (array, reason), or None."""
    if is_array(rec) and is_pending(rec) and not rec.get("restarts"):
        return (array_job_id(rec), reason(rec))
    return None


def collapse_pending_arrays(
        records: Iterable[Record],
        group_of: Callable[[Record], tuple[int, str] | None] = remainder_of) -> list[Record]:
    """One row per never-started array remainder, as squeue and scontrol show it.

    Pending tasks of one array with the same reason and no restarts become one record
    whose ``display`` is ``<array id>_[<indices>%<limit>]``; others pass through.
    ``group_of``: ``remainder_of``, or what it gave for each record before.
    """
    order: list[Record | tuple[int, str]] = []
    groups: dict[tuple[int, str], list[Record]] = {}
    for rec in records:
        key = group_of(rec)
        if key is not None:
            members = groups.get(key)
            if members is None:
                groups[key] = members = []
                order.append(key)
            members.append(rec)
        else:
            order.append(rec)
    result: list[Record] = []
    for item in order:
        if isinstance(item, dict):
            result.append(item)
            continue
        members = groups[item]
        if len(members) == 1 and not members[0].get("array_tail_indices"):
            result.append(members[0])
            continue
        first = dict(members[0])
        indices = [int(m["array_task_id"]) for m in members
                   if not m.get("array_tail_indices")]
        for m in members:  # a large array's compact remainder (all its indices)
            if m.get("array_tail_indices"):
                from corral.core.parse.arrayspec import parse_array

                indices.extend(parse_array(str(m["array_tail_indices"]),
                                           max_array_size=2 ** 31).indices)
        text = format_array(indices, first.get("array_max_running"))
        first["display"] = f"{item[0]}_[{text}]"
        first["members"] = members
        result.append(first)
    return result


def shown_id(rec: Record) -> str:
    """The id column: a collapsed array remainder shows its bracket form."""
    return str(rec.get("display") or display_id(rec))


def fill_default_partition(records: list[Record], client: Any) -> None:
    """Pending jobs that asked for no partition show the default one, as in Slurm."""
    if all(r.get("partition") for r in records):
        return
    default = ""
    for p in client.partitions():
        if p.get("default"):
            default = str(p["name"])
            break
    for r in records:
        if not r.get("partition"):
            r["partition"] = default


UNIT_LETTERS = "\0KMGTP"  # Slurm's unit types: index 0 none, 1 kilo, ... 5 peta


def unit_type(text: str) -> int | None:
    """Slurm's ``get_unit_type``: ``K``..``P`` (first letter, any case) -> 1..5."""
    if not text:
        return None
    i = UNIT_LETTERS.find(text[0].upper(), 1)
    return i if i > 0 else None


def convert_num_unit(num: float, orig: int, spec: int | None = None, *,
                     noconvert: bool = False) -> str:
    """Slurm's ``convert_num_unit`` (divisor 1024) as sacct calls it: ``spec`` (from
    ``--units``) converts to that unit, ``noconvert`` keeps ``orig``, else Slurm's
    ``CONVERT_NUM_UNIT_EXACT``: go up while the value stays exact (halves count:
    ``1536K`` is ``1.50M``). Whole values print bare (``1234K``), others with 2 decimals."""
    if int(num) == 0:
        return "0"
    if spec is not None:
        while spec < orig:
            num *= 1024
            orig -= 1
        while spec > orig:
            num /= 1024
            orig += 1
    elif not noconvert:
        while num >= 1024 and int(num) % 512 == 0:
            num /= 1024
            orig += 1
    letter = UNIT_LETTERS[orig] if 0 <= orig < len(UNIT_LETTERS) else "?"
    letter = "" if letter == "\0" else letter
    if float(int(num)) == num:
        return f"{int(num)}{letter}"
    return f"{num:.2f}{letter}"


def cpu_time_text(secs: float, *, subsec: bool = True) -> str:
    """Slurm's sacct ``_elapsed_time``: ``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS.mmm`` (under
    an hour, with milliseconds) or ``00:MM:SS`` (no milliseconds, or ``subsec`` False as
    for ``AveCPU``/``MinCPU``). Milliseconds are cut, not rounded, as Slurm's are."""
    usecs = max(0, int(round(secs * 1_000_000)))
    whole, ms = usecs // 1_000_000, (usecs % 1_000_000) // 1000 if subsec else 0
    d, h, m, s = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h:02d}:{m:02d}:{s:02d}"
    if ms:
        return f"{m:02d}:{s:02d}.{ms:03d}"
    return f"00:{m:02d}:{s:02d}"


def batch_step(rec: Record) -> Record | None:
    """The ``.batch`` step of a started batch job (sacct's row, squeue -s's line); None
    for a job not started yet or without a batch script (srun/salloc allocations).

    Its usage is the job's own (``cpu_time_s``, ``max_rss_mb`` of the record, measured on
    the first node when the job ended): one task, task 0, on the batch host; None while
    the job runs or when nothing was measured."""
    if not rec.get("start_time") or rec.get("interactive"):
        return None
    state = job_state(rec)
    signal = int(rec.get("signal") or 0)
    exit_code = int(rec.get("exit_code") or 0)
    if state in ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE"):
        step_state, exit_code, signal = "CANCELLED", 0, signal or 15
    elif state == "COMPLETING":
        step_state = "RUNNING"
    else:
        step_state = state
    nodes = rec.get("nodes") or []
    cpu = float(rec.get("cpu_time_s") or 0.0)
    rss = float(rec.get("max_rss_mb") or 0.0)
    usage: Record | None = None
    if rec.get("end_time") and nodes and (cpu > 0 or rss > 0):
        host = str(nodes[0])
        usage = {"nodes": {host: {"node": host, "cpu_time_s": cpu, "max_rss_mb": rss,
                                  "pids": []}},
                 "cpu_time_s": cpu, "max_rss_mb": rss}
    return {
        "id": "batch", "name": "batch", "state": step_state, "exit_code": exit_code,
        "signal": signal, "start_time": rec.get("start_time"),
        "end_time": rec.get("end_time"), "nodes": nodes[:1], "ntasks": 1,
        "num_cpus": rec.get("num_cpus"), "node_tasks": [[0]] if nodes else [],
        "usage": usage, "cpu_time_s": cpu if usage is not None else None,
        "max_rss_mb": rss if usage is not None else None,
    }
