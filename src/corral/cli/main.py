"""Entry point of the ``corral`` command: a Typer app assembled from command modules.

Each module in ``COMMAND_MODULES`` exposes ``register(app: typer.Typer) -> None`` and adds
its commands or sub-apps. A module that is missing is skipped, so parts can land
independently. Keep module-level imports in command modules light: the CLI starts on
every call, so heavy imports (SQLAlchemy, FastAPI, matplotlib) belong inside commands.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = (
    "corral.cli.daemons",  # up, controller, agent
    "corral.cli.jobs",  # submit, queue, show, cancel, hold, release, requeue, history, update
    "corral.cli.nodes",  # nodes, drain, resume
    "corral.cli.reservations",  # reservation list/create/update/delete
    "corral.cli.accounts",  # account list/add/modify/delete/assoc, account user ...
    "corral.cli.events",  # events (job state changes)
    "corral.cli.images",  # images, image pull
    "corral.cli.audit",  # audit (operators)
    "corral.cli.dbcmd",  # db copy, admin backup
    "corral.cli.configcmd",  # config show/check/import-slurm
    "corral.cli.shims",  # shims install
    "corral.cli.report",  # report
    "corral.cli.sim",  # sim run/compare/convert
    "corral.cli.kube",  # kubeconfig, export --volcano
    "corral.cli.checks",  # check cluster/history
    "corral.cli.vmimage",  # image build-vm
)

app = typer.Typer(
    name="corral",
    help="Corral: a workload manager for HPC clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def build_app() -> typer.Typer:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app)
    return app


def main() -> None:
    build_app()()
