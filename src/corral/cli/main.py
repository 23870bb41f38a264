"""Entry point of the ``corral`` command: a Typer app that mounts each command group.

Subcommand modules are imported here; keep their module-level imports light (the CLI
starts on every call).
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="corral",
    help="Corral: a workload manager for HPC clusters.",
    no_args_is_help=True,
    add_completion=False,
)


def _mount() -> None:
    try:
        from corral.cli.sim import sim_app
    except ImportError:  # simulator CLI not built yet
        pass
    else:
        app.add_typer(sim_app, name="sim")


def main() -> None:
    _mount()
    app()
