"""``corral db copy`` and ``corral admin backup``: moving and saving a cluster's database.

``corral db copy --to URL`` copies the cluster's SQLite database (its state directory's
``corral.db``, or ``--from URL``) into an empty PostgreSQL database, the step from one
controller to high availability (``docs/cluster.md``). ``corral admin backup FILE`` takes
a consistent online backup of the configured database (``corral.ops.dbops``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corral.cli.daemons import ConfigOpt, StateDirOpt, _load, _state_dir
from corral.cli.output import fail, note

db_app = typer.Typer(help="The cluster's database: copy it to another one.",
                     no_args_is_help=True)
admin_app = typer.Typer(help="Administration: backups.", no_args_is_help=True)


def _configured_url(state_dir: Path | None, config: Path | None) -> str:
    cfg = _load(config)
    sd = _state_dir(state_dir, cfg)
    return cfg.controller.database_url or f"sqlite:///{sd / 'corral.db'}"


@db_app.command("copy")
def copy(
    to_url: Annotated[str, typer.Option("--to", help="Target: an empty database "
                                        "(postgresql+psycopg://user@host/db).")],
    from_url: Annotated[str | None, typer.Option(
        "--from", help="Source database URL (default: the configured one, else the state "
                       "directory's corral.db).")] = None,
    state_dir: StateDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Copy every job, step, node, audit entry and setting into an empty database."""
    from corral.ops.dbops import DbOpError, copy_database, describe

    src = from_url or _configured_url(state_dir, config)
    if src.startswith("sqlite") and not Path(src.split("///", 1)[-1].split("?")[0]).exists():
        fail(f"no database at {src}", prog="corral db copy")
    try:
        counts = copy_database(src, to_url)
    except DbOpError as exc:
        fail(str(exc), prog="corral db copy")
    note(f"copied {describe(counts)} from {src.split('?')[0]}")
    note("next: set [controller] database_url to the new database on every controller "
         "(docs/cluster.md, High availability)")


@admin_app.command("backup")
def backup(
    file: Annotated[Path, typer.Argument(help="New file to write the backup to.")],
    url: Annotated[str | None, typer.Option(
        "--url", help="Database URL (default: the configured one).")] = None,
    state_dir: StateDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """A consistent online backup: SQLite's backup API, or pg_dump for PostgreSQL."""
    from corral.ops.dbops import DbOpError
    from corral.ops.dbops import backup as take

    src = url or _configured_url(state_dir, config)
    try:
        how = take(src, file)
    except DbOpError as exc:
        fail(str(exc), prog="corral admin backup")
    note(f"backup written to {file} ({how})")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
    app.add_typer(admin_app, name="admin")
