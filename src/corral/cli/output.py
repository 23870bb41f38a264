"""The CLI's one output layer: Rich tables for people, ``--json`` for programs.

Conventions every command follows:

- ``--json`` prints exactly one JSON document on stdout: the API records unchanged (field
  names as documented in ``corral.client``), wrapped in an object named after the command's
  subject (``{"jobs": [...]}``, ``{"nodes": [...]}``, ``{"job": {...}}``...). Nothing else goes
  to stdout in that mode; messages go to stderr.
- Tables print to stdout; notes and errors go to stderr.
- Exit codes: ``EXIT_INPUT`` (1) bad input or a request the controller refused (unknown
  job, partition, permission...); ``EXIT_UNAVAILABLE`` (3) the controller cannot be
  reached (the message says how to start it); ``EXIT_SERVER`` (4) the controller failed
  internally; ``EXIT_UNCERTAIN`` (5) the controller did not confirm a change it may have
  made (the message says how to check). Typer's usage errors keep their code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from corral.client import Client

EXIT_INPUT = 1
EXIT_UNAVAILABLE = 3
EXIT_SERVER = 4
EXIT_UNCERTAIN = 5

START_HINT = "Is the cluster running? Start one with `corral up` (or set CORRAL_URL / " \
             "CORRAL_SOCKET / CORRAL_STATE_DIR)."

JSON_OPTION = typer.Option(False, "--json", help="Print JSON (stable field names) instead of "
                           "a table.")


def stdout_console() -> Console:
    """Console for stdout; when it is not a terminal, lines are never cut or wrapped
    (scripts and pipes get whole values)."""
    from rich.console import Console

    console = Console(soft_wrap=False, highlight=False)
    if not console.is_terminal:
        console = Console(soft_wrap=False, highlight=False, width=4096)
    return console


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """One JSON document on stdout (keys in the order given; non-JSON values as strings)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    """An informational line on stderr."""
    stderr_console().print(text, markup=False)


def fail(message: str, code: int = EXIT_INPUT, *, prog: str = "corral") -> NoReturn:
    """Print ``prog: error: message`` on stderr and exit with ``code``."""
    err = stderr_console()
    for line in message.splitlines() or [""]:
        err.print(f"[bold red]{prog}: error:[/] {_escape(line)}")
    raise typer.Exit(code)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _with_hint(message: str) -> str:
    return message if "corral up" in message else f"{message}\n{START_HINT}"


def connect() -> Client:
    """A client for the controller this user should talk to (see ``corral.client``)."""
    from corral.client import Client, CorralError

    try:
        return Client()
    except CorralError as exc:
        fail(_with_hint(exc.message), EXIT_UNAVAILABLE)


def is_uncertain(message: str) -> bool:
    """A transport failure after the request was sent: the change may have happened."""
    return message.startswith(("lost the controller connection", "the controller did not "
                               "answer"))


@contextmanager
def api_errors(prog: str = "corral", *, changes: bool = False) -> Iterator[None]:
    """Turn ``CorralError`` into a clear message and the documented exit code.

    With ``changes`` (a request that modifies state), a connection lost after sending is
    reported as uncertain rather than failed.
    """
    from corral.client import CorralError

    try:
        yield
    except CorralError as exc:
        if exc.code == "unavailable":
            if changes and is_uncertain(exc.message):
                fail(f"{exc.message}: the controller may have applied the request before "
                     "the connection was lost; check with `corral queue --me` before "
                     "trying again", EXIT_UNCERTAIN, prog=prog)
            fail(_with_hint(exc.message), EXIT_UNAVAILABLE, prog=prog)
        if exc.code == "internal":
            fail(f"the controller failed: {exc.message}", EXIT_SERVER, prog=prog)
        fail(exc.message, EXIT_INPUT, prog=prog)


@dataclass(frozen=True)
class Column:
    """A table column: header and how to get the cell text from a record."""

    header: str
    get: Callable[[Mapping[str, Any]], str]
    justify: str = "left"  # "left" | "right"
    style: str | None = None
    no_wrap: bool = True


def make_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column],
               *, title: str | None = None) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  header_style="bold")
    for c in columns:
        table.add_column(c.header, justify=c.justify, style=c.style,  # type: ignore[arg-type]
                         no_wrap=c.no_wrap, overflow="fold")
    for row in rows:
        table.add_row(*(c.get(row) for c in columns))
    return table


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column],
                *, title: str | None = None, empty: str | None = None) -> None:
    if not rows and empty:
        note(empty)
        return
    stdout_console().print(make_table(rows, columns, title=title))


def text(value: Any, default: str = "") -> str:
    """A record value as cell text (None -> default)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
