"""``corral reservation list|create|update|delete``: advance reservations (operators change
them; ``docs/lifecycle.md``). The same operations as ``scontrol ... reservation``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from corral.cli.output import (
    JSON_OPTION,
    Column,
    api_errors,
    connect,
    fail,
    print_json,
    print_table,
)

resv_app = typer.Typer(help="Advance reservations: nodes set aside for a time window.",
                       no_args_is_help=True)


def _iso(ts: Any) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(ts)))


def _duration(secs: Any) -> str:
    from corral.core.parse.timefmt import format_time_s

    return format_time_s(float(secs))


COLUMNS = [
    Column("NAME", lambda r: str(r["name"]), style="bold"),
    Column("STATE", lambda r: str(r["state"])),
    Column("START", lambda r: _iso(r["start_time"])),
    Column("END", lambda r: _iso(r["end_time"])),
    Column("DURATION", lambda r: _duration(r["duration_s"]), justify="right"),
    Column("NODES", lambda r: str(r.get("nodelist") or "")),
    Column("USERS", lambda r: ",".join(r.get("users") or ()) or "-"),
    Column("ACCOUNTS", lambda r: ",".join(r.get("accounts") or ()) or "-"),
    Column("FLAGS", lambda r: ",".join(r.get("flags") or ())),
]


@resv_app.command("list")
def list_cmd(as_json: bool = JSON_OPTION) -> None:
    """The reservations, earliest first."""
    client = connect()
    with api_errors("corral reservation list"):
        rows = client.reservations()
    if as_json:
        print_json({"reservations": rows})
        return
    print_table(rows, COLUMNS, empty="No reservations.")


def _when(value: str | None, what: str) -> Any:
    if value is None:
        return None
    if value == "now":
        return "now"
    from corral.shims.slurmtime import DateError, parse_date

    try:
        return parse_date(value, time.time())
    except DateError:
        fail(f"bad {what} {value!r} (now, now+1hour, 2026-12-24T08:00)",
             prog="corral reservation")


def _body(start: str | None, end: str | None, duration: str | None, nodes: str | None,
          node_count: int | None, users: str | None, accounts: str | None,
          partition: str | None, flags: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if start is not None:
        body["start_time"] = _when(start, "--start")
    if end is not None:
        body["end_time"] = _when(end, "--end")
    if duration is not None:
        from corral.core.parse.errors import ParseError
        from corral.core.parse.timefmt import parse_time_limit_s

        try:
            body["duration_s"] = parse_time_limit_s(duration)
        except ParseError:
            fail(f"bad --duration {duration!r}", prog="corral reservation")
    for key, value in (("nodes", nodes), ("partition", partition)):
        if value is not None:
            body[key] = value
    if node_count is not None:
        body["node_count"] = node_count
    for key, value in (("users", users), ("accounts", accounts), ("flags", flags)):
        if value is not None:
            body[key] = [x for x in value.split(",") if x]
    return body


Start = Annotated[str | None, typer.Option("--start", help="now, now+1hour, a date.")]
End = Annotated[str | None, typer.Option("--end", help="When it ends.")]
Duration = Annotated[str | None, typer.Option("--duration", help="Minutes or [D-]HH:MM:SS.")]
Nodes = Annotated[str | None, typer.Option("--nodes", "-w", help="Host list or ALL.")]
Count = Annotated[int | None, typer.Option("--node-count", "-N", help="That many nodes.")]
Users = Annotated[str | None, typer.Option("--users", help="Who may use it (comma list).")]
Accounts = Annotated[str | None, typer.Option("--accounts", help="Accounts (comma list).")]
Part = Annotated[str | None, typer.Option("--partition", "-p")]
Flags = Annotated[str | None, typer.Option("--flags", help="MAINT,IGNORE_JOBS,OVERLAP,...")]


@resv_app.command("create")
def create_cmd(name: Annotated[str, typer.Argument()], start: Start = "now", end: End = None,
               duration: Duration = None, nodes: Nodes = None, node_count: Count = None,
               users: Users = None, accounts: Accounts = None, partition: Part = None,
               flags: Flags = None, as_json: bool = JSON_OPTION) -> None:
    """Create a reservation (operators)."""
    body = _body(start, end, duration, nodes, node_count, users, accounts, partition, flags)
    client = connect()
    with api_errors("corral reservation create", changes=True):
        got = client.create_reservation(name=name, **body)
    if as_json:
        print_json(got)
    else:
        typer.echo(f"Reservation created: {got['name']}")


@resv_app.command("update")
def update_cmd(name: Annotated[str, typer.Argument()], start: Start = None, end: End = None,
               duration: Duration = None, nodes: Nodes = None, node_count: Count = None,
               users: Users = None, accounts: Accounts = None, partition: Part = None,
               flags: Flags = None, as_json: bool = JSON_OPTION) -> None:
    """Change a reservation (operators); +name/-name in lists add and remove."""
    body = _body(start, end, duration, nodes, node_count, users, accounts, partition, flags)
    client = connect()
    with api_errors("corral reservation update", changes=True):
        got = client.update_reservation(name, **body)
    if as_json:
        print_json(got)
    else:
        typer.echo(f"Reservation updated: {name}")


@resv_app.command("delete")
def delete_cmd(name: Annotated[str, typer.Argument()]) -> None:
    """Delete a reservation (operators)."""
    client = connect()
    with api_errors("corral reservation delete", changes=True):
        client.delete_reservation(name)
    typer.echo(f"Reservation deleted: {name}")


def register(app: typer.Typer) -> None:
    app.add_typer(resv_app, name="reservation")
