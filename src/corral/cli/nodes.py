"""Node commands: ``nodes`` (table), ``drain NODE --reason``, ``resume NODE``."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.cli.output import (
    JSON_OPTION,
    api_errors,
    connect,
    fail,
    note,
    print_json,
    print_table,
)


def nodes(
    state: Annotated[
        str | None,
        typer.Option("--state", "-t", help="Only nodes in these states (IDLE,MIXED,...)."),
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", "-p", help="Only nodes of this partition.")
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """List nodes: state, CPUs/memory/GPUs allocated and total, features, reason."""
    from corral.cli.render import NODE_COLUMNS

    client = connect()
    with api_errors("corral nodes"):
        recs = client.nodes()
    if state:
        wanted = {s.strip().upper() for s in state.split(",") if s.strip()}
        recs = [n for n in recs if str(n.get("state", "")).upper() in wanted]
    if partition:
        recs = [n for n in recs if partition in (n.get("partitions") or [])]
    if as_json:
        print_json({"nodes": recs})
        return
    _leader_note(client)
    print_table(
        recs,
        NODE_COLUMNS,
        empty="No nodes match."
        if (state or partition)
        else "No nodes have registered yet (is an agent running? `corral up` starts one).",
    )


def _leader_note(client: object) -> None:
    """With several controllers (HA): which one leads, and the standbys (one line)."""
    try:
        pong = client.ping()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - decoration only
        return
    if not isinstance(pong, dict) or not pong.get("ha"):
        return
    leader = (pong.get("leader") or {}).get("holder") or "(none)"
    standbys = [str(p.get("name")) for p in pong.get("controllers") or ()
                if p.get("name") != leader]
    note(f"controller {leader} leads (epoch {pong.get('epoch', '?')}); standby: "
         + (", ".join(standbys) or "none"))


def drain(
    node_names: Annotated[list[str], typer.Argument(help="Node names or a hostlist (n[01-04]).")],
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (shown in `corral nodes`).")],
    as_json: bool = JSON_OPTION,
) -> None:
    """Drain nodes: running jobs finish, nothing new starts there (operators)."""
    names = _expand(node_names, "corral drain")
    if not reason.strip():
        fail("--reason must not be empty", prog="corral drain")
    client = connect()
    out = []
    for name in names:
        with api_errors("corral drain", changes=True):
            out.append(client.drain(name, reason))
        if not as_json:
            note(f"draining {name}: {reason}")
    if as_json:
        print_json({"nodes": out})


def resume(
    node_names: Annotated[list[str], typer.Argument(help="Node names or a hostlist.")],
    as_json: bool = JSON_OPTION,
) -> None:
    """Return drained or down nodes to service (operators)."""
    names = _expand(node_names, "corral resume")
    client = connect()
    out = []
    for name in names:
        with api_errors("corral resume", changes=True):
            out.append(client.resume(name))
        if not as_json:
            note(f"resumed {name}")
    if as_json:
        print_json({"nodes": out})


def _expand(exprs: list[str], prog: str) -> list[str]:
    from corral.core.parse.errors import ParseError
    from corral.core.parse.hostlist import expand

    names: list[str] = []
    for e in exprs:
        try:
            names.extend(expand(e))
        except ParseError as exc:
            fail(f"bad node name or hostlist {e!r}: {exc.reason}", prog=prog)
    return names


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes)
    app.command("drain")(drain)
    app.command("resume")(resume)
