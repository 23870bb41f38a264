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

import os
import time
from collections.abc import Sequence
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
USABLE = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}


def _checks_dir() -> Path:
    from corral.client import default_state_dir

    return Path(default_state_dir()) / "checks"


def _expand(expr: str) -> list[str]:
    from corral.core.parse.errors import ParseError
    from corral.core.parse.hostlist import expand

    try:
        return list(expand(expr))
    except ParseError as exc:
        fail(f"--nodes {expr!r}: {exc}", prog=PROG)


def _submitter(run_dir: Path) -> Any:
    from corral.frontends.context import local_context
    from corral.frontends.errors import SubmitError
    from corral.frontends.slurm_options import parse_sbatch

    client = connect()
    count = [0]

    def submit(argv: Sequence[str], script: str) -> int:
        count[0] += 1
        path = run_dir / f"job{count[0]}.sh"
        path.write_text(script)
        try:
            req = parse_sbatch([*argv, str(path)], local_context(PROG))
        except SubmitError as exc:
            fail(exc.message, prog=PROG)
        with api_errors(PROG, changes=True):
            return int(client.submit(req.submission.to_json())[0])

    return submit


@check_app.command("cluster")
def cluster_cmd(
    nodes: Annotated[str | None, typer.Option(
        "--nodes", "-w", help="Nodes to check (hostlist; default: every usable node)")] = None,
    quick: Annotated[bool, typer.Option(
        "--quick", help="Small problem sizes and short runs (well under a minute)")] = False,
    only: Annotated[str, typer.Option(
        "--checks", help="Which checks: network,compute,storage")] = "network,compute,storage",
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
    from corral.checks.pingpong import BuildError, build
    from corral.checks.report import run_record, write_report
    from corral.checks.runner import CHECKS, RunPlan, run_checks
    from corral.checks.verdict import Limits, pairs_to_measure, verdicts

    wanted = tuple(c.strip() for c in only.split(",") if c.strip())
    bad = [c for c in wanted if c not in CHECKS]
    if bad or not wanted:
        fail(f"--checks: unknown {', '.join(bad) or '(none given)'}; choose from "
             f"{', '.join(CHECKS)}", prog=PROG)
    override: dict[str, Any] = {}
    if config is not None:
        from corral.checks.settings import load_checks_file

        try:
            override = load_checks_file(config)
        except (OSError, ValueError) as exc:
            fail(f"--config {config}: {exc}", prog=PROG)
    client = connect()
    with api_errors(PROG):
        recs = client.nodes()
        settings: dict[str, Any] = dict(client.cluster_config().get("checks") or {})
    settings.update(override)
    known = {n["name"]: n for n in recs}
    if nodes:
        names = _expand(nodes)
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"--nodes: unknown node(s) {', '.join(unknown)}; nodes are "
                 f"{', '.join(sorted(known)) or 'none'}", prog=PROG)
    else:
        names = sorted(n for n, r in known.items()
                       if r.get("connected") and str(r.get("state")) in USABLE)
    if not names:
        fail("no usable nodes to check", prog=PROG)
    limits = Limits(**{k: settings[k] for k in Limits.__dataclass_fields__
                       if settings.get(k) is not None})
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    base = work_dir or Path(settings.get("work_dir") or _checks_dir() / "runs")
    run_dir = base / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o755)
    exe = None
    pairs: list[tuple[str, str]] = []
    if "network" in wanted and len(names) >= 2:
        try:
            cached = build(str(settings.get("mpicc") or "mpicc.mpich"), _checks_dir() / "bin")
        except BuildError as exc:
            fail(str(exc), prog=PROG)
        exe = run_dir / "pingpong"
        exe.write_bytes(cached.read_bytes())
        os.chmod(exe, 0o755)
        pairs = pairs_to_measure(names, int(settings.get("max_pairs") or 64))
    elif "network" in wanted:
        note(f"{PROG}: one node: no ping-pong pair to measure")
    plan = RunPlan(run_id, run_dir, tuple(names), tuple(pairs), wanted, quick, settings)
    started = time.time()
    if not as_json:
        note(f"{PROG}: run {run_id}: {', '.join(wanted)} on {len(names)} node(s), "
             f"{len(pairs)} pair(s); files in {run_dir}")

    def state(jid: int) -> str:
        with api_errors(PROG):
            return str(client.job(jid)["state"])

    def cancel(jid: int) -> None:
        with api_errors(PROG, changes=True):
            client.cancel([jid])

    node_res, links, job_ids = run_checks(
        plan, _submitter(run_dir), state, {n: int(known[n].get("cpus") or 1) for n in names},
        exe, float(settings.get("timeout_s") or 1800), cancel)
    found = verdicts(node_res, links, limits)
    record = run_record(run_id, started, time.time(), node_res, links, found,
                        {"nodes": names, "checks": list(wanted), "quick": quick,
                         "pairs": [list(p) for p in pairs], "jobs": job_ids,
                         "run_dir": str(run_dir), "limits": limits.__dict__,
                         "settings": settings})
    report = write_report(record, _checks_dir() / "reports" / run_id)
    record["report"] = str(report)
    drained: list[str] = []
    if drain:
        for v in found:
            if v.subject in known and v.subject not in drained:
                with api_errors(PROG, changes=True):
                    client.drain(v.subject, f"corral check: {v.message}"[:200])
                drained.append(v.subject)
    record["drained"] = drained
    if as_json:
        print_json(record)
    else:
        _print(record)
        note(f"report: {report}")
    if found:
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
