"""``corral check``: cluster acceptance checks (``cluster``) and their ``history``.

``corral check cluster`` submits MPI ping-pong, hpcc (HPL, STREAM) and fio as ordinary
jobs (``corral.checks.runner``), compares every node and link with the median and with
``[checks]`` (``corral.checks.verdict``), prints a table and the verdicts (or ``--json``),
keeps ``result.json`` and ``report.md`` with a bandwidth heat map under
``<state dir>/checks/reports/<run id>/``, and with ``--drain`` drains the convicted nodes.
Exit status: 0 when every node and link passed, 2 when there are outliers, 1 bad input,
3 no controller.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.output import (
    Column,
    api_errors,
    connect,
    fail,
    note,
    print_json,
    print_table,
    stdout_console,
)

check_app = typer.Typer(name="check", help="Cluster acceptance checks: MPI ping-pong, HPL/"
                        "STREAM (hpcc), fio; outliers named.", no_args_is_help=True)
PROG = "corral check cluster"
EXIT_OUTLIERS = 2


def _checks_dir() -> Path:
    from corral.client import default_state_dir

    return Path(default_state_dir()) / "checks"


@check_app.command("cluster")
def cluster_cmd(
    nodes: Annotated[str | None, typer.Option(
        "--nodes", "-w", help="Nodes to check (hostlist; default: every usable node)")] = None,
    quick: Annotated[bool, typer.Option(
        "--quick", help="Small problem sizes and short runs (well under a minute)")] = False,
    only: Annotated[str, typer.Option(
        "--checks", help="Which checks: network,compute,storage,gpu")
    ] = "network,compute,storage,gpu",
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Run directory visible on every node (default: [checks] work_dir"
        " or <state dir>/checks/runs)")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="A TOML file whose [checks] table overrides the controller's")] = None,
    drain: Annotated[bool, typer.Option(
        "--drain", help="Drain every node named as an outlier (operators)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Run the acceptance checks as jobs and name the outlier nodes and links."""
    from corral.checks.cluster import CheckError, run_cluster
    from corral.checks.runner import CHECKS

    wanted = tuple(c.strip() for c in only.split(",") if c.strip())
    bad = [c for c in wanted if c not in CHECKS]
    if bad or not wanted:
        fail(f"--checks: unknown {', '.join(bad) or '(none given)'}; choose from "
             f"{', '.join(CHECKS)}", prog=PROG)
    override: dict[str, Any] = {}
    if config is not None:
        from corral.checks.conffile import load_checks_file

        try:
            override = load_checks_file(config)
        except (OSError, ValueError) as exc:
            fail(f"--config {config}: {exc}", prog=PROG)
    client = connect()
    try:
        with api_errors(PROG, changes=True):
            record = run_cluster(client, _checks_dir(), nodes=nodes, quick=quick,
                                 wanted=wanted, work_dir=work_dir, override=override,
                                 drain=drain, prog=PROG, note=None if as_json else note)
    except CheckError as exc:
        fail(exc.message, prog=PROG)
    if as_json:
        print_json(record)
    else:
        _print(record)
        note(f"report: {record['report']}")
    if record["verdicts"]:
        raise typer.Exit(EXIT_OUTLIERS)


def _print(record: dict[str, Any]) -> None:
    from corral.checks.report import COLUMNS, fmt, node_rows

    def cell(key: str) -> Any:
        if key == "efficiency":
            return lambda r: "-" if r[key] is None else f"{100 * r[key]:.0f}%"
        return lambda r: fmt(r[key])

    cols = [Column(h, cell(k), "left" if k in ("node", "status") else "right")
            for k, h in COLUMNS]
    print_table(node_rows(record), cols, title=f"cluster check {record['run_id']}")
    con = stdout_console()
    if record["verdicts"]:
        for v in record["verdicts"]:
            con.print(f"OUTLIER {v['message']}", markup=False, highlight=False)
    else:
        con.print("every node and link within limits", markup=False)
    for n in record.get("drained", []):
        con.print(f"drained {n}", markup=False)


@check_app.command("history")
def history_cmd(
    last: Annotated[int, typer.Option("--last", "-n", help="Show the last N runs")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Earlier check runs: medians and outliers of each, oldest first."""
    from corral.checks.report import fmt, history, history_row

    rows = [history_row(r) for r in history(_checks_dir() / "reports")][-max(last, 1):]
    if as_json:
        print_json({"runs": rows})
        return
    cols = [Column("run", lambda r: r["run_id"]),
            Column("started", lambda r: time.strftime("%Y-%m-%d %H:%M:%S",
                                                      time.localtime(r["started"]))),
            Column("nodes", lambda r: str(r["nodes"]), "right"),
            Column("median MB/s", lambda r: fmt(r["median_bandwidth_mb_s"]), "right"),
            Column("median lat us", lambda r: fmt(r["median_latency_us"]), "right"),
            Column("median HPL Gflops", lambda r: fmt(r["median_hpl_gflops"]), "right"),
            Column("outliers", lambda r: ", ".join(r["outliers"]) or "-", no_wrap=False)]
    print_table(rows, cols, empty="No check runs yet (`corral check cluster`).")


def register(app: typer.Typer) -> None:
    app.add_typer(check_app)
