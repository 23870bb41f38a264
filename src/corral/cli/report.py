"""``corral report``: accounting reports, like Slurm's ``sreport``, ``seff`` and ``sshare``.

Subcommands (all read the controller's accounting history; ``--json`` or ``--csv`` for
programs, ``--plot FILE.png`` for a picture):

- ``utilization``: cluster utilization over a period, with a time series;
- ``usage --by user|account``: allocated CPU/GPU-hours per user or account;
- ``top``: the users with the most CPU-hours;
- ``efficiency JOB``: CPU and memory efficiency of a finished job (``seff``);
- ``fairshare``: shares, usage and fair-share factors per account and user (``sshare``);
- ``swf FILE``: finished jobs as an SWF trace for ``corral sim``.

Periods: ``--since``/``--until`` take ``7d``, ``24h``, ``2024-05-01``,
``2024-05-01T13:00``, epoch seconds or ``now`` (default: the last 24 hours).
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.output import Column, api_errors, connect, fail, print_json, print_table

report_app = typer.Typer(name="report", help="Accounting reports: utilization, usage, top "
                         "users, job efficiency, fair share, SWF export.",
                         no_args_is_help=True)

SinceOpt = Annotated[str | None, typer.Option(
    "--since", "-S", help="Start of the period: 7d, 24h, 2024-05-01, 2024-05-01T13:00, "
    "epoch seconds (default: 24 hours before --until)")]
UntilOpt = Annotated[str | None, typer.Option(
    "--until", "-E", help="End of the period (default: now)")]
PartitionOpt = Annotated[str | None, typer.Option(
    "--partition", "-p", help="Only jobs and nodes of this partition")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table")]
PlotOpt = Annotated[Path | None, typer.Option(
    "--plot", help="Also draw the report into this file (.png, .svg or .pdf)")]


def _fmt_h(seconds: float) -> str:
    """Hours: two decimals, four below one hour (short jobs on a small cluster)."""
    h = seconds / 3600.0
    return f"{h:.2f}" if h >= 1 or h == 0 else f"{h:.4f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _wait(s: float | None) -> str:
    from corral.ops.efficiency import hms

    return "-" if s is None else hms(s)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _formats(as_json: bool, as_csv: bool) -> None:
    if as_json and as_csv:
        fail("--json and --csv exclude each other: choose one")


def _write_csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(r)


def _period(since: str | None, until: str | None, now: float) -> tuple[float, float]:
    from corral.ops.period import period

    try:
        return period(since, until, now)
    except ValueError as exc:
        fail(str(exc))


def _load(since: float, until: float, partition: str | None) -> tuple[list[Any], int, int, str]:
    """(jobs of the period, CPUs, GPUs, cluster name)."""
    from corral.ops.jobs import acct_jobs

    client = connect()
    with api_errors("corral report"):
        records = client.history(all_users=True, since=since, until=until)
        nodes = client.nodes()
        cluster = str(client.ping().get("cluster", ""))
        if partition is not None:
            parts = {p["name"]: p for p in client.partitions()}
            if partition not in parts:
                fail(f"unknown partition {partition!r}; partitions are "
                     f"{', '.join(sorted(parts)) or 'none'}")
            members = set(parts[partition]["nodes"])
            nodes = [n for n in nodes if n["name"] in members]
            records = [r for r in records if r.get("partition") == partition]
    jobs = acct_jobs(records)
    cpus = sum(int(n.get("cpus") or 0) for n in nodes)
    gpus = sum(int(n.get("gpus") or 0) for n in nodes)
    return jobs, cpus, gpus, cluster


@report_app.command("utilization")
def utilization_cmd(since: SinceOpt = None, until: UntilOpt = None,
                    partition: PartitionOpt = None,
                    bins: Annotated[int, typer.Option(help="Time bins of the series")] = 24,
                    as_json: JsonOpt = False, as_csv: CsvOpt = False,
                    plot: PlotOpt = None) -> None:
    """Cluster utilization: allocated CPU/GPU-hours against the capacity, jobs, waits."""
    from corral.ops.accounting import series, utilization

    _formats(as_json, as_csv)
    if not 1 <= bins <= 10000:
        fail(f"--bins must be between 1 and 10000, got {bins}")
    now = time.time()
    start, end = _period(since, until, now)
    jobs, cpus, gpus, cluster = _load(start, end, partition)
    u = utilization(jobs, cpus, gpus, start, end, now)
    pts = series(jobs, start, end, now, bins)
    if plot is not None:
        from corral.ops.plots import plot_utilization

        _plot(lambda: plot_utilization(pts, cpus, gpus, plot, title=(
            f"Cluster {cluster} utilization" + (f", partition {partition}" if partition else ""))))
    if as_json:
        print_json({"utilization": u.to_json(), "series": [p.to_json() for p in pts],
                    "cluster": cluster, "partition": partition})
        return
    if as_csv:
        _write_csv(["start", "end", "allocated_cpus", "allocated_gpus", "pending_jobs"],
                   [[round(p.start, 3), round(p.end, 3), round(p.cpus, 4), round(p.gpus, 4),
                     p.pending] for p in pts])
        return
    used_frac = u.used_cpu_s / u.allocated_cpu_s if u.allocated_cpu_s else None
    rows = [
        ("Cluster", cluster + (f" (partition {partition})" if partition else "")),
        ("Period", f"{_when(start)} - {_when(end)} ({_wait(end - start)})"),
        ("CPUs / GPUs", f"{cpus} / {gpus}"),
        ("Allocated CPU-hours", f"{_fmt_h(u.allocated_cpu_s)} of {_fmt_h(cpus * u.window_s)}"),
        ("CPU utilization", _pct(u.cpu_utilization)),
        ("Used CPU-hours", f"{_fmt_h(u.used_cpu_s)} ({_pct(used_frac)} of allocated)"),
        ("Allocated GPU-hours", f"{_fmt_h(u.allocated_gpu_s)} of {_fmt_h(gpus * u.window_s)}"),
        ("GPU utilization", _pct(u.gpu_utilization) if gpus else "-"),
        ("Jobs submitted / started / ended",
         f"{u.jobs_submitted} / {u.jobs_started} / {u.jobs_ended}"),
        ("Wait (mean / median)", f"{_wait(u.wait_mean_s)} / {_wait(u.wait_median_s)}"),
    ]
    print_table([{"k": k, "v": v} for k, v in rows],
                [Column("Utilization", lambda r: r["k"]), Column("", lambda r: r["v"])])


def _usage_table(rows: Sequence[Any], by: str, as_json: bool, as_csv: bool,
                 extra: Mapping[str, Any]) -> None:
    if as_json:
        print_json({**extra, "rows": [r.to_json() for r in rows]})
        return
    if as_csv:
        _write_csv([by, "jobs", "cpu_hours", "gpu_hours", "used_cpu_hours", "share",
                    "wait_mean_s"],
                   [[r.key, r.jobs, round(r.cpu_s / 3600, 4), round(r.gpu_s / 3600, 4),
                     round(r.used_cpu_s / 3600, 4), round(r.share, 4),
                     "" if r.wait_mean_s is None else round(r.wait_mean_s, 3)] for r in rows])
        return
    dicts = [{"r": r} for r in rows]
    print_table(dicts, [
        Column(by.capitalize(), lambda d: d["r"].key),
        Column("Jobs", lambda d: str(d["r"].jobs), "right"),
        Column("CPU-h", lambda d: _fmt_h(d["r"].cpu_s), "right"),
        Column("GPU-h", lambda d: _fmt_h(d["r"].gpu_s), "right"),
        Column("Used CPU-h", lambda d: _fmt_h(d["r"].used_cpu_s), "right"),
        Column("Share", lambda d: _pct(d["r"].share), "right"),
        Column("Mean wait", lambda d: _wait(d["r"].wait_mean_s), "right"),
    ], title=str(extra.get("title", "")), empty="no usage in this period")


@report_app.command("usage")
def usage_cmd(by: Annotated[str, typer.Option(help="Group by user or account")] = "user",
              since: SinceOpt = None, until: UntilOpt = None, partition: PartitionOpt = None,
              as_json: JsonOpt = False, as_csv: CsvOpt = False, plot: PlotOpt = None) -> None:
    """Allocated CPU- and GPU-hours per user or account over a period."""
    from corral.ops.accounting import usage_by

    _formats(as_json, as_csv)
    if by not in ("user", "account"):
        fail(f"--by takes user or account, not {by!r}")
    now = time.time()
    start, end = _period(since, until, now)
    jobs, _cpus, _gpus, cluster = _load(start, end, partition)
    rows = usage_by(jobs, by, start, end, now)
    if plot is not None:
        from corral.ops.plots import plot_usage

        _plot(lambda: plot_usage(rows, plot, by=by))
    _usage_table(rows, by, as_json, as_csv, {
        "by": by, "since": start, "until": end, "cluster": cluster,
        "title": f"Usage by {by}, {_when(start)} - {_when(end)}"})


@report_app.command("top")
def top_cmd(count: Annotated[int, typer.Option("--count", "-n", help="How many users")] = 10,
            since: SinceOpt = None, until: UntilOpt = None, partition: PartitionOpt = None,
            as_json: JsonOpt = False, as_csv: CsvOpt = False, plot: PlotOpt = None) -> None:
    """The users with the most allocated CPU-hours over a period."""
    from corral.ops.accounting import top_users

    _formats(as_json, as_csv)
    if count < 1:
        fail(f"--count must be at least 1, got {count}")
    now = time.time()
    start, end = _period(since, until, now)
    jobs, _c, _g, cluster = _load(start, end, partition)
    rows = top_users(jobs, start, end, now, count)
    if plot is not None:
        from corral.ops.plots import plot_usage

        _plot(lambda: plot_usage(rows, plot, by="user", title=f"Top {count} users"))
    _usage_table(rows, "user", as_json, as_csv, {
        "count": count, "since": start, "until": end, "cluster": cluster,
        "title": f"Top {count} users, {_when(start)} - {_when(end)}"})


@report_app.command("efficiency")
def efficiency_cmd(job: Annotated[str, typer.Argument(help="Job id (12 or 12_3)")],
                   as_json: JsonOpt = False, plot: PlotOpt = None) -> None:
    """CPU and memory efficiency of a job, as ``seff`` prints it."""
    from corral.ops.efficiency import efficiency, seff_lines

    client = connect()
    with api_errors("corral report efficiency"):
        rec = client.job(job)
        cluster = str(client.ping().get("cluster", ""))
    e = efficiency(rec, time.time())
    if plot is not None:
        from corral.ops.plots import plot_efficiency

        _plot(lambda: plot_efficiency(e, plot))
    if as_json:
        print_json({"efficiency": e.to_json()})
        return
    for line in seff_lines(e, cluster):
        sys.stdout.write(line + "\n")


@report_app.command("fairshare")
def fairshare_cmd(as_json: JsonOpt = False, as_csv: CsvOpt = False) -> None:
    """Shares, usage and fair-share factors per account and user (like ``sshare -a``)."""
    _formats(as_json, as_csv)
    client = connect()
    with api_errors("corral report fairshare"):
        rows: list[dict[str, Any]] = client.request("GET", "/ops/fairshare")["rows"]
    if as_json:
        print_json({"rows": rows})
        return
    keys = ["account", "user", "shares", "norm_shares", "raw_usage", "eff_usage", "fairshare",
            "fair_tree"]
    if as_csv:
        _write_csv(keys, [[r.get(k) if r.get(k) is not None else "" for k in keys]
                          for r in rows])
        return

    def num(key: str, digits: int = 3) -> Any:
        return lambda r: "" if r.get(key) is None else f"{float(r[key]):.{digits}f}"

    print_table(rows, [
        Column("Account", lambda r: "" if r["user"] else "  " * int(r["depth"]) + r["account"]),
        Column("User", lambda r: r["user"]),
        Column("RawShares", lambda r: str(r["shares"]), "right"),
        Column("NormShares", num("norm_shares"), "right"),
        Column("RawUsage", num("raw_usage", 0), "right"),
        Column("EffectvUsage", num("eff_usage"), "right"),
        Column("FairShare", num("fairshare"), "right"),
        Column("FairTree", num("fair_tree"), "right"),
    ], empty="no accounts or usage yet")


@report_app.command("swf")
def swf_cmd(out: Annotated[Path, typer.Argument(help="Output file (.swf or .swf.gz)")],
            since: Annotated[str | None, typer.Option(
                "--since", "-S", help="Only jobs that ended after this (default: all)")] = None,
            until: UntilOpt = None) -> None:
    """Export finished jobs as an SWF trace, to replay with ``corral sim``."""
    from corral.ops.jobs import acct_jobs
    from corral.ops.period import parse_when
    from corral.ops.swf_export import write_history_swf

    now = time.time()
    try:
        start = parse_when(since, now) if since else None
        end = parse_when(until, now) if until else None
    except ValueError as exc:
        fail(str(exc))
    client = connect()
    with api_errors("corral report swf"):
        records = client.history(all_users=True, since=start, until=end)
        nodes = client.nodes()
        cluster = str(client.ping().get("cluster", "corral"))
    try:
        n = write_history_swf(out, acct_jobs(records), cluster=cluster, total_nodes=len(nodes),
                              total_cpus=sum(int(x.get("cpus") or 0) for x in nodes))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    sys.stderr.write(f"wrote {n} finished jobs to {out}; replay them with "
                     f"`corral sim run {out}`\n")


def _plot(draw: Any) -> None:
    try:
        path = draw()
    except (ValueError, OSError) as exc:
        fail(str(exc))
    sys.stderr.write(f"plot written to {path}\n")


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
