"""Job commands: ``submit``, ``queue``, ``show``, ``cancel``, ``hold``, ``release``,
``requeue``, ``update``, ``history``.

``corral submit`` takes ``sbatch``'s options (flags, ``#SBATCH`` lines, ``--wrap``) through
the same parser as the ``sbatch`` shim (``corral.frontends.slurm_options``), so a script
that works with one works with the other. Read commands take ``--json``. Exit codes are
documented in ``corral.cli.output``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.output import (
    EXIT_INPUT,
    JSON_OPTION,
    api_errors,
    connect,
    fail,
    note,
    print_json,
    print_table,
    stdout_console,
)

_JOB_ID = re.compile(r"^\d+(_\d+)?$")
SUBMIT_PROG = "corral submit"


def _check_ids(ids: list[str], prog: str) -> list[str]:
    for i in ids:
        if not _JOB_ID.match(i):
            fail(
                f"invalid job id {i!r} (expected a number such as 12, or 12_3 for an array task)",
                prog=prog,
            )
    return ids


def current_user() -> str:
    import os
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


# ---- submit ----------------------------------------------------------------------------


def _submit_help() -> None:
    from corral.frontends.slurm_table import help_rows

    out = stdout_console()
    out.print("Usage: corral submit [OPTIONS] [SCRIPT [ARGS...]]\n", markup=False)
    out.print(
        "Submit a batch script (read from SCRIPT, or standard input), or a command "
        "with --wrap.\n#SBATCH lines in the script are read; options given here win. "
        "Every sbatch option is accepted.\n",
        markup=False,
    )
    out.print("Options:", markup=False)
    out.print("      --json                   print the submission result as JSON", markup=False)
    out.print("      --image=REF              run in this container image (--container-image)",
              markup=False)
    for spell, text in help_rows("b"):
        out.print(f"  {spell:<28} {text}", markup=False)
    out.print(
        "\nExamples:\n  corral submit job.sh\n  corral submit -p gpu --gpus=a100:2 -t "
        "2:00:00 train.sh --epochs 10\n  corral submit --wrap 'python -c \"print(1)\"'"
        "\n  corral submit --array=0-9%2 -o 'out-%A_%a.txt' sweep.sh"
        "\n  corral submit --image docker://registry.local/rocky:9 job.sh",
        markup=False,
    )


def submit(ctx: typer.Context) -> None:
    """Submit a batch job (sbatch options; run `corral submit --help` for the list)."""
    from corral.frontends.context import local_context
    from corral.frontends.errors import SubmitError
    from corral.frontends.getopt import Arg, Opt
    from corral.frontends.slurm_options import parse_sbatch
    from corral.frontends.slurm_table import table_for

    argv = list(ctx.args)
    from corral.cli.kube import is_manifest, submit_manifest

    manifest = is_manifest(argv)
    if manifest is not None:  # a Volcano Job (docs/kubernetes.md)
        submit_manifest(manifest)
        return
    table = table_for("b", (Opt("json", ("json",), None, Arg.NONE),
                            Opt("container_image", ("image",), None, Arg.REQUIRED)))
    sctx = local_context(SUBMIT_PROG)
    try:
        req = parse_sbatch(argv, sctx, table=table, local_keys=frozenset({"json"}))
    except SubmitError as exc:
        fail(_strip_prog(exc.message), EXIT_INPUT, prog=SUBMIT_PROG)
    opts = req.options
    if opts.help or opts.usage:
        _submit_help()
        return
    if opts.version:
        from corral import __version__

        stdout_console().print(f"corral {__version__}", markup=False)
        return
    as_json = "json" in req.local
    sub = req.submission
    if opts.test_only:
        summary = {"would_submit": sub.to_json()}
        if as_json:
            print_json(summary)
        else:
            s = sub.spec
            note(
                f"{SUBMIT_PROG}: test only, nothing submitted: job {s.name!r}, "
                f"{s.nodes_min} node(s), {s.cpus_per_task} CPU(s) per task, partition "
                f"{','.join(s.partitions) or '(default)'}"
            )
        return
    client = connect()
    with api_errors(SUBMIT_PROG, changes=True):
        result = client.submit_result(sub.to_json())
    display = str(result.get("display_id") or result["job_ids"][0])
    if as_json:
        print_json(result)
    elif opts.parsable:
        typer.echo(display)
    elif not opts.quiet:
        ids = result.get("job_ids") or []
        if sub.array:
            typer.echo(f"Submitted array job {display} ({len(ids)} tasks)")
        else:
            typer.echo(f"Submitted job {display}")


def _strip_prog(message: str) -> str:
    """Parser messages carry ``prog: error: `` already; ``fail`` adds its own."""
    lines = []
    for line in message.splitlines():
        for prefix in (f"{SUBMIT_PROG}: error: ", f"{SUBMIT_PROG}: fatal: ", f"{SUBMIT_PROG}: "):
            if line.startswith(prefix):
                line = line[len(prefix) :]
                break
        lines.append(line)
    return "\n".join(lines)


# ---- queue / show / history ------------------------------------------------------------


def queue(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs.")] = None,
    me: Annotated[bool, typer.Option("--me", help="Only my jobs.")] = False,
    state: Annotated[
        str | None,
        typer.Option("--state", "-t", help="States, comma separated (PENDING,RUNNING or PD,R)."),
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", "-p", help="Only this partition.")
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="Include recently finished jobs.")
    ] = False,
    as_json: bool = JSON_OPTION,
) -> None:
    """List pending and running jobs."""
    from corral.cli.render import QUEUE_COLUMNS

    states = _states(state)
    client = connect()
    with api_errors("corral queue"):
        if me:  # remote users (CORRAL_URL) may have another name here than there
            user = str(client.whoami()["user"]) if client.url else current_user()
        jobs = client.jobs(
            user=user,
            states=states,
            partition=partition,
            include_finished=all_ or bool(states),
        )
    if as_json:
        print_json({"jobs": jobs})
        return
    print_table(jobs, QUEUE_COLUMNS)


_SHORT_STATES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "CG": "COMPLETING",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "OOM": "OUT_OF_MEMORY",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
}


def _states(text: str | None) -> list[str] | None:
    if not text:
        return None
    from corral.core.model.job import JobState

    valid = {s.value for s in JobState}
    out: list[str] = []
    for item in (s.strip().upper() for s in text.split(",")):
        if not item:
            continue
        if item == "ALL":
            return sorted(valid)
        name = _SHORT_STATES.get(item, item)
        if name not in valid:
            fail(
                f"unknown job state {item!r}; states are {', '.join(sorted(valid))} "
                "(or their short codes PD, R, CD, ...)"
            )
        out.append(name)
    return out or None


def show(
    job_id: Annotated[str, typer.Argument(help="Job id (12, or 12_3 for an array task).")],
    as_json: bool = JSON_OPTION,
) -> None:
    """Everything about one job: state and pending reason, estimated start, allocation."""
    from rich.table import Table

    from corral.cli.render import job_sections

    _check_ids([job_id], "corral show")
    client = connect()
    with api_errors("corral show"):
        job = client.job(job_id)
    if as_json:
        print_json({"job": job})
        return
    out = stdout_console()
    for title, rows in job_sections(job):
        table = Table(
            title=title,
            title_justify="left",
            title_style="bold",
            show_header=False,
            box=None,
            pad_edge=False,
        )
        table.add_column("key", style="cyan", no_wrap=True)
        table.add_column("value", overflow="fold")
        for k, v in rows:
            table.add_row(k, v)
        out.print(table)
        out.print()


def history(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs.")] = None,
    all_users: Annotated[
        bool, typer.Option("--all-users", "-A", help="Every user's jobs (operators).")
    ] = False,
    state: Annotated[
        str | None, typer.Option("--state", "-s", help="States, comma separated.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "-S",
            help="Jobs alive after this time (now-1day, 2026-11-01, 2026-11-01T08:00).",
        ),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", "-E", help="Jobs alive before this time.")
    ] = None,
    partition: Annotated[str | None, typer.Option("--partition", "-p")] = None,
    account: Annotated[str | None, typer.Option("--account")] = None,
    job: Annotated[
        list[str] | None, typer.Option("--job", "-j", help="Only these job ids (repeatable).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", help="At most this many jobs.")
    ] = None,
    swf: Annotated[
        Path | None,
        typer.Option("--swf", help="Write the finished jobs selected as an SWF trace "
                     "(.swf or .swf.gz) to replay with `corral sim run`."),
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Accounting: finished (and other) jobs from the database."""
    from corral.cli.render import HISTORY_COLUMNS

    t0 = _when(since, "--since")
    t1 = _when(until, "--until")
    if job:
        _check_ids(job, "corral history")
    client = connect()
    with api_errors("corral history"):
        jobs = client.history(
            user=user,
            since=t0,
            until=t1,
            states=_states(state),
            ids=job or None,
            account=account,
            partition=partition,
            limit=limit,
            all_users=all_users,
        )
        nodes = client.nodes() if swf is not None else []
        cluster = str(client.ping().get("cluster", "corral")) if swf is not None else ""
    if swf is not None:
        _write_swf(swf, jobs, nodes, cluster)
        return
    if as_json:
        print_json({"jobs": jobs})
        return
    print_table(jobs, HISTORY_COLUMNS, empty="No jobs in that window.")


def _write_swf(path: Path, jobs: list[dict[str, Any]], nodes: list[dict[str, Any]],
               cluster: str) -> None:
    import sys

    from corral.ops.jobs import acct_jobs
    from corral.ops.swf_export import write_history_swf

    try:
        n = write_history_swf(path, acct_jobs(jobs), cluster=cluster, total_nodes=len(nodes),
                              total_cpus=sum(int(x.get("cpus") or 0) for x in nodes))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}", EXIT_INPUT)
    sys.stderr.write(f"wrote {n} finished jobs to {path}; replay them with "
                     f"`corral sim run {path}`\n")


def _when(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    import time

    from corral.frontends.values import parse_begin

    try:
        return parse_begin(text.strip(), time.time())
    except ValueError:
        fail(
            f"{flag}: cannot read time {text!r} (try now-1day, today, 2026-11-01 or "
            "2026-11-01T08:00)"
        )


# ---- actions ---------------------------------------------------------------------------


def _report(results: list[dict[str, Any]], prog: str, as_json: bool, verb: str) -> None:
    if as_json:
        print_json({"results": results})
    failed = [r for r in results if not r.get("ok")]
    if not as_json:
        for r in results:
            if r.get("ok"):
                note(f"{verb} {r.get('id')}")
    if failed:
        from corral.cli.output import stderr_console

        err = stderr_console()
        for r in failed:
            err.print(
                f"{prog}: error: {r.get('id')}: {r.get('message') or r.get('code')}", markup=False
            )
        raise typer.Exit(EXIT_INPUT)


def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="Job ids (12, 12_3, or an array id).")],
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal", "-s", help="Send this signal instead of cancelling (USR1, TERM, 10...)."
        ),
    ] = None,
    batch: Annotated[
        bool,
        typer.Option("--batch", "-b", help="With --signal: only the batch shell, not its steps."),
    ] = False,
    as_json: bool = JSON_OPTION,
) -> None:
    """Cancel jobs, or signal them."""
    _check_ids(job_ids, "corral cancel")
    if signal is not None:
        from corral.frontends.values import signal_number

        try:
            signal_number(signal)
        except ValueError as exc:
            fail(str(exc), prog="corral cancel")
    client = connect()
    with api_errors("corral cancel", changes=True):
        results = client.cancel(job_ids, signal=signal, batch_only=batch)
    _report(results, "corral cancel", as_json, "signalled" if signal else "cancelled")


def hold(
    job_ids: Annotated[list[str], typer.Argument(help="Pending job ids.")],
    admin: Annotated[
        bool, typer.Option("--admin", help="An administrator hold (operators).")
    ] = False,
    as_json: bool = JSON_OPTION,
) -> None:
    """Keep pending jobs from starting until released."""
    _check_ids(job_ids, "corral hold")
    client = connect()
    with api_errors("corral hold", changes=True):
        results = client.hold(job_ids, admin=admin)
    _report(results, "corral hold", as_json, "held")


def release(
    job_ids: Annotated[list[str], typer.Argument(help="Held job ids.")],
    as_json: bool = JSON_OPTION,
) -> None:
    """Release held jobs."""
    _check_ids(job_ids, "corral release")
    client = connect()
    with api_errors("corral release", changes=True):
        results = client.release(job_ids)
    _report(results, "corral release", as_json, "released")


def requeue(
    job_ids: Annotated[list[str], typer.Argument(help="Running or finished job ids.")],
    hold_: Annotated[bool, typer.Option("--hold", help="Requeue held.")] = False,
    as_json: bool = JSON_OPTION,
) -> None:
    """Put jobs back in the queue (same id; the restart count goes up)."""
    _check_ids(job_ids, "corral requeue")
    client = connect()
    with api_errors("corral requeue", changes=True):
        results = client.requeue(job_ids, hold=hold_)
    _report(results, "corral requeue", as_json, "requeued")


def update(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time",
            "-t",
            help="New time limit (Slurm format; +MIN/-MIN "
            "changes the current one). Raising it needs "
            "an operator.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J")] = None,
    partition: Annotated[str | None, typer.Option("--partition", "-p")] = None,
    account: Annotated[str | None, typer.Option("--account", "-A")] = None,
    qos: Annotated[str | None, typer.Option("--qos", "-q")] = None,
    nice: Annotated[int | None, typer.Option("--nice")] = None,
    priority: Annotated[
        int | None, typer.Option("--priority", help="Fixed priority (operators).")
    ] = None,
    begin: Annotated[
        str | None, typer.Option("--begin", help="Earliest start (now+1hour, 16:00).")
    ] = None,
    dependency: Annotated[str | None, typer.Option("--dependency", "-d")] = None,
    comment: Annotated[str | None, typer.Option("--comment")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Change a job (time limit, name, partition, priority...)."""
    import time

    from corral.core.parse.errors import ParseError
    from corral.core.parse.timefmt import parse_time_limit_s

    prog = "corral update"
    _check_ids([job_id], prog)
    fields: dict[str, Any] = {}
    client = connect()
    if time_limit is not None:
        t = time_limit.strip()
        try:
            if t[:1] in "+-" and t[1:2].isdigit():
                delta = parse_time_limit_s(t[1:]) or 0
                with api_errors(prog):
                    current = client.job(job_id).get("time_limit_s")
                if current is None:
                    fail(
                        "the job has no time limit to change relatively; give an absolute one",
                        prog=prog,
                    )
                fields["time_limit_s"] = max(60, int(current) + (delta if t[0] == "+" else -delta))
            else:
                fields["time_limit_s"] = parse_time_limit_s(t)
        except ParseError:
            fail(
                f"Invalid --time specification {time_limit!r} (minutes, M:S, H:M:S, D-H, "
                "D-H:M, D-H:M:S, UNLIMITED, or +/-MINUTES)",
                prog=prog,
            )
    if begin is not None:
        from corral.frontends.values import parse_begin

        try:
            fields["begin_time"] = parse_begin(begin, time.time())
        except ValueError:
            fail(f"Invalid --begin specification {begin!r}", prog=prog)
    if dependency is not None and dependency.strip():
        from corral.core.parse.dependency import parse_dependency

        try:
            parse_dependency(dependency)
        except ParseError as exc:
            fail(f"Invalid --dependency: {exc.reason}", prog=prog)
    for key, value in (
        ("name", name),
        ("partition", partition),
        ("account", account),
        ("qos", qos),
        ("nice", nice),
        ("priority", priority),
        ("dependency", dependency),
        ("comment", comment),
    ):
        if value is not None:
            fields[key] = value
    if not fields:
        fail("nothing to change: give --time, --name, --partition, ... (see --help)", prog=prog)
    with api_errors(prog, changes=True):
        job = client.update_job(job_id, **fields)
    if as_json:
        print_json({"job": job})
    else:
        note(f"updated {job_id}: " + ", ".join(f"{k}={v}" for k, v in fields.items()))


def register(app: typer.Typer) -> None:
    app.command(
        "submit",
        context_settings={
            "ignore_unknown_options": True,
            "allow_extra_args": True,
            "help_option_names": [],
        },
        add_help_option=False,
    )(submit)
    app.command("queue")(queue)
    app.command("show")(show)
    app.command("cancel")(cancel)
    app.command("hold")(hold)
    app.command("release")(release)
    app.command("requeue")(requeue)
    app.command("update")(update)
    app.command("history")(history)
