"""``corral audit``: the audit trail of operator actions (operators only)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from corral.cli.output import JSON_OPTION, Column, api_errors, connect, print_json, print_table


def _when(row: Mapping[str, Any]) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(row.get("time") or 0)))


def _details(row: Mapping[str, Any]) -> str:
    d = row.get("details") or {}
    if not isinstance(d, dict):
        return str(d)
    return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                    for k, v in d.items())


COLUMNS = (
    Column("TIME", _when),
    Column("USER", lambda r: f"{r.get('user')}({r.get('uid')})"),
    Column("VIA", lambda r: str(r.get("via", ""))),
    Column("ACTION", lambda r: str(r.get("action", "")), style="bold"),
    Column("TARGET", lambda r: str(r.get("target", ""))),
    Column("DETAILS", _details, no_wrap=False),
    Column("OUTCOME", lambda r: str(r.get("outcome", "")), no_wrap=False),
)


def audit(
    count: Annotated[
        int, typer.Option("-n", "--count", min=1, max=1000,
                          help="How many of the newest entries (at most 1000).")
    ] = 100,
    since: Annotated[
        float | None, typer.Option("--since", help="Only entries at or after this epoch time.")
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show the audit trail: who drained, resumed or downed nodes, updated or acted on
    other users' jobs, or minted tokens for others, when, and the outcome (operators)."""
    from urllib.parse import urlencode

    query: dict[str, Any] = {"limit": count}
    if since is not None:
        query["since"] = since
    client = connect()
    with api_errors("corral audit"):
        data = client.request("GET", "/audit?" + urlencode(query))
    entries = list((data or {}).get("entries") or [])
    if as_json:
        print_json({"entries": entries})
        return
    print_table(entries, COLUMNS, empty="No audit entries.")


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
