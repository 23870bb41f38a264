"""``corral account qos ...``: QOS and their limits at run time.

The same store as ``corral account`` and the ``sacctmgr`` shim's ``add|modify|delete|show
qos`` (``corral.controller.livecfg``: kept in the database over ``corral.toml``, checked
like the file, audited, operators only; the scheduler uses a change from its next
cycle):

- ``corral account qos list`` / ``show NAME``: every QOS, or one, with its priority,
  preemption and limits (``--json``: the ``corral.toml`` field names);
- ``add NAME`` / ``modify NAME``: ``--priority``, ``--preempt Q1,Q2`` (``""``: none),
  ``--preempt-mode``, ``--grace-time``, ``--usage-factor`` and the limits (per user
  ``--max-jobs``, ``--max-submit``, ``--max-cpus-per-user``, ``--max-mem-per-user``,
  ``--max-gpus-per-user``; per account ``--max-jobs-per-account``,
  ``--max-cpus-per-account``; the QOS as a whole ``--grp-jobs``, ``--grp-cpus``,
  ``--grp-mem``, ``--grp-gpus``; per job ``--max-cpus-per-job``, ``--max-gpus-per-job``,
  ``--max-nodes``, ``--max-wall``); ``-1`` clears a limit;
- ``delete NAME``: refused while another QOS preempts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from corral.cli.accounts_base import NO_LIMIT, PROG, cluster_config, limits_text, send_change
from corral.cli.output import JSON_OPTION, Column, fail, print_json, print_table

qos_app = typer.Typer(help="QOS and their limits (as sacctmgr changes them).",
                      no_args_is_help=True)

MODES = ("off", "cancel", "requeue", "suspend")

#: Count limits: option -> corral.toml limit key.
COUNTS = {
    "max_jobs": "max_jobs_per_user", "max_submit": "max_submit_per_user",
    "max_cpus_per_user": "max_cpus_per_user", "max_gpus_per_user": "max_gpus_per_user",
    "max_jobs_per_account": "max_jobs_per_account",
    "max_cpus_per_account": "max_cpus_per_account", "grp_jobs": "grp_jobs",
    "grp_cpus": "grp_cpus", "grp_gpus": "grp_gpus", "max_cpus_per_job": "max_cpus_per_job",
    "max_gpus_per_job": "max_gpus_per_job", "max_nodes": "max_nodes_per_job",
}
MEMS = {"max_mem_per_user": "max_mem_mb_per_user", "grp_mem": "grp_mem_mb"}


def _count_opt(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"{what} (-1: no limit).")


Name = Annotated[str, typer.Argument(help="QOS name")]
Priority = Annotated[int | None, typer.Option("--priority", help="Priority of its jobs.")]
Preempt = Annotated[str | None, typer.Option("--preempt", help="QOS its jobs may preempt "
                                             "(comma list; \"\": none).")]
Mode = Annotated[str | None, typer.Option("--preempt-mode", help="off, cancel, requeue or "
                                          "suspend: what happens to a job it preempts.")]
Grace = Annotated[str | None, typer.Option("--grace-time", help="Grace before a preempted "
                                           "job is killed ([D-]HH:MM:SS or seconds).")]
Factor = Annotated[float | None, typer.Option("--usage-factor", min=0.0,
                                              help="Multiplier of its jobs' usage.")]
MaxJobs = Annotated[int | None, _count_opt("--max-jobs", "Running jobs per user")]
MaxSubmit = Annotated[int | None, _count_opt("--max-submit", "Queued jobs per user")]
MaxCpusU = Annotated[int | None, _count_opt("--max-cpus-per-user", "CPUs per user")]
MaxMemU = Annotated[str | None, _count_opt("--max-mem-per-user", "Memory per user (8G)")]
MaxGpusU = Annotated[int | None, _count_opt("--max-gpus-per-user", "GPUs per user")]
MaxJobsA = Annotated[int | None, _count_opt("--max-jobs-per-account",
                                            "Running jobs per account")]
MaxCpusA = Annotated[int | None, _count_opt("--max-cpus-per-account", "CPUs per account")]
GrpJobs = Annotated[int | None, _count_opt("--grp-jobs", "Running jobs of the QOS")]
GrpCpus = Annotated[int | None, _count_opt("--grp-cpus", "CPUs of the QOS")]
GrpMem = Annotated[str | None, _count_opt("--grp-mem", "Memory of the QOS (8G)")]
GrpGpus = Annotated[int | None, _count_opt("--grp-gpus", "GPUs of the QOS")]
MaxCpusJ = Annotated[int | None, _count_opt("--max-cpus-per-job", "CPUs per job")]
MaxGpusJ = Annotated[int | None, _count_opt("--max-gpus-per-job", "GPUs per job")]
MaxNodes = Annotated[int | None, _count_opt("--max-nodes", "Nodes per job")]
MaxWall = Annotated[str | None, _count_opt("--max-wall", "Time limit per job "
                                           "([D-]HH:MM:SS or minutes)")]


def _fields(priority: int | None, preempt: str | None, preempt_mode: str | None,
            grace_time: str | None, usage_factor: float | None,
            opts: dict[str, Any]) -> dict[str, Any]:
    """The corral.toml fields the options give (only those given)."""
    from corral.core.parse.errors import ParseError
    from corral.core.parse.memory import parse_mem_mb
    from corral.core.parse.timefmt import parse_time_limit_s, parse_time_s

    out: dict[str, Any] = {}
    if priority is not None:
        out["priority"] = priority
    if preempt is not None:
        out["preempt"] = [q.strip() for q in preempt.split(",") if q.strip()]
    if preempt_mode is not None:
        if preempt_mode.lower() not in MODES:
            fail(f"bad --preempt-mode {preempt_mode!r} ({', '.join(MODES)})", prog=PROG)
        out["preempt_mode"] = preempt_mode.upper()
    if grace_time is not None:
        try:
            out["grace_time_s"] = parse_time_s(grace_time)
        except ParseError:
            fail(f"bad --grace-time {grace_time!r} ([D-]HH:MM:SS or seconds)", prog=PROG)
    if usage_factor is not None:
        out["usage_factor"] = usage_factor
    limits: dict[str, Any] = {}
    for opt, key in COUNTS.items():
        value = opts.get(opt)
        if value is not None:
            if value < NO_LIMIT:
                fail(f"--{opt.replace('_', '-')} must be -1 (no limit) or more, got "
                     f"{value}", prog=PROG)
            limits[key] = None if value == NO_LIMIT else value
    for opt, key in MEMS.items():
        value = opts.get(opt)
        if value is not None:
            try:
                limits[key] = None if value == "-1" else parse_mem_mb(value)
            except ParseError:
                fail(f"bad --{opt.replace('_', '-')} {value!r} (8G, 512M, -1)", prog=PROG)
    wall = opts.get("max_wall")
    if wall is not None:
        try:
            limits["max_wall_s"] = None if wall == "-1" else parse_time_limit_s(wall)
        except ParseError:
            fail(f"bad --max-wall {wall!r} ([D-]HH:MM:SS, minutes, -1)", prog=PROG)
    if limits:
        out["limits"] = limits
    return out


def _grace(r: Mapping[str, Any]) -> str:
    from corral.core.parse.timefmt import format_time_s

    return format_time_s(r.get("grace_time_s") or 0)


QOS_COLUMNS = [
    Column("QOS", lambda r: str(r["name"]), style="bold"),
    Column("PRIORITY", lambda r: str(r.get("priority") or 0), justify="right"),
    Column("PREEMPT", lambda r: ",".join(r.get("preempt") or ()) or "-"),
    Column("MODE", lambda r: str(r.get("preempt_mode") or "CANCEL").lower()),
    Column("GRACE", _grace),
    Column("FACTOR", lambda r: f"{float(r.get('usage_factor', 1.0)):g}", justify="right"),
    Column("LIMITS", lambda r: limits_text(r.get("limits"))),
]


def _all() -> list[dict[str, Any]]:
    return list(cluster_config().get("qos") or ())


@qos_app.command("list")
def qos_list_cmd(as_json: bool = JSON_OPTION) -> None:
    """Every QOS with its priority, preemption and limits."""
    rows = _all()
    if as_json:
        print_json({"qos": rows})
        return
    print_table(rows, QOS_COLUMNS, empty="No QOS.")


@qos_app.command("show")
def qos_show_cmd(name: Name, as_json: bool = JSON_OPTION) -> None:
    """One QOS, every field on its own line."""
    got = next((q for q in _all() if q["name"] == name), None)
    if got is None:
        fail(f"no such qos: {name}", prog=PROG)
    if as_json:
        print_json(got)
        return
    for col in QOS_COLUMNS:
        typer.echo(f"{col.header.lower():>9}: {col.get(got)}")


@qos_app.command("add")
def qos_add_cmd(name: Name, priority: Priority = None, preempt: Preempt = None,
                preempt_mode: Mode = None, grace_time: Grace = None,
                usage_factor: Factor = None, max_jobs: MaxJobs = None,
                max_submit: MaxSubmit = None, max_cpus_per_user: MaxCpusU = None,
                max_mem_per_user: MaxMemU = None, max_gpus_per_user: MaxGpusU = None,
                max_jobs_per_account: MaxJobsA = None,
                max_cpus_per_account: MaxCpusA = None, grp_jobs: GrpJobs = None,
                grp_cpus: GrpCpus = None, grp_mem: GrpMem = None, grp_gpus: GrpGpus = None,
                max_cpus_per_job: MaxCpusJ = None, max_gpus_per_job: MaxGpusJ = None,
                max_nodes: MaxNodes = None, max_wall: MaxWall = None) -> None:
    """Add a QOS (operators)."""
    opts = {k: v for k, v in locals().items() if k in COUNTS or k in MEMS or k == "max_wall"}
    send_change("qos", name, _fields(priority, preempt, preempt_mode, grace_time, usage_factor,
                                 opts), "add")
    typer.echo(f"QOS added: {name}")


@qos_app.command("modify")
def qos_modify_cmd(name: Name, priority: Priority = None, preempt: Preempt = None,
                   preempt_mode: Mode = None, grace_time: Grace = None,
                   usage_factor: Factor = None, max_jobs: MaxJobs = None,
                   max_submit: MaxSubmit = None, max_cpus_per_user: MaxCpusU = None,
                   max_mem_per_user: MaxMemU = None, max_gpus_per_user: MaxGpusU = None,
                   max_jobs_per_account: MaxJobsA = None,
                   max_cpus_per_account: MaxCpusA = None, grp_jobs: GrpJobs = None,
                   grp_cpus: GrpCpus = None, grp_mem: GrpMem = None,
                   grp_gpus: GrpGpus = None, max_cpus_per_job: MaxCpusJ = None,
                   max_gpus_per_job: MaxGpusJ = None, max_nodes: MaxNodes = None,
                   max_wall: MaxWall = None) -> None:
    """Change a QOS's priority, preemption or limits (operators)."""
    opts = {k: v for k, v in locals().items() if k in COUNTS or k in MEMS or k == "max_wall"}
    fields = _fields(priority, preempt, preempt_mode, grace_time, usage_factor, opts)
    if not fields:
        fail("nothing to change: give --priority, --preempt, --preempt-mode, --grace-time, "
             "--usage-factor or a limit", prog=PROG)
    send_change("qos", name, fields, "modify")
    typer.echo(f"QOS modified: {name}")


@qos_app.command("delete")
def qos_delete_cmd(name: Name) -> None:
    """Delete a QOS (operators)."""
    send_change("qos", name, None, "delete")
    typer.echo(f"QOS deleted: {name}")
