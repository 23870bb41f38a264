"""``corral events``: job state changes, in order, resumable by id.

Without ``--follow`` it prints the retained events after ``--since`` (default 0: all the
database keeps) and exits; with it, it keeps waiting for new ones (from ``--since``, or
from now on) and rides out a controller restart. ``--json`` prints one JSON object per
line (JSON Lines, the API's event records), for programs; the ``id`` of the last line is
the ``--since`` to resume with.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer

from corral.cli.output import JSON_OPTION, api_errors, connect, stdout_console


def _line(ev: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(ev["time"])))
    old = ev.get("old_state") or "-"
    text = f"{ev['id']:>8}  {when}  {ev['display_id']:<14} {ev.get('user', '')}  " \
           f"{old} -> {ev['state']}"
    if ev.get("exit_code") is not None:
        text += f"  exit {ev['exit_code']}:{ev.get('signal') or 0}"
    if ev.get("reason") and ev["reason"] != "None":
        text += f"  ({ev['reason']})"
    return text


def events(
    since: Annotated[int | None, typer.Option(
        "--since", help="Events after this id (0: all retained; default: 0, or from now "
        "on with --follow).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f",
                                         help="Keep waiting for new events.")] = False,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs "
                                             "(others' need an operator).")] = None,
    jobs: Annotated[str | None, typer.Option("--jobs", "-j", help="Job ids, comma "
                                             "separated (an array id: all its tasks).")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Job names, comma "
                                             "separated.")] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Comment or wckey values, comma "
                                            "separated.")] = None,
    state: Annotated[str | None, typer.Option("--state", "-s", help="New states, comma "
                                              "separated.")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Job events: each state change with its old and new state, reason and exit code."""

    def words(v: str | None) -> list[str] | None:
        return [w.strip() for w in v.split(",") if w.strip()] if v else None

    client = connect()
    start = since if since is not None else (None if follow else 0)
    out = stdout_console()
    with api_errors("corral events"):
        try:
            for ev in client.events(start, user=user, jobs=words(jobs), names=words(name),
                                    tags=words(tag), states=words(state), follow=follow):
                if as_json:
                    sys.stdout.write(json.dumps(ev, separators=(",", ":")) + "\n")
                    sys.stdout.flush()
                else:
                    out.print(_line(ev), markup=False, highlight=False)
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    app.command("events")(events)
