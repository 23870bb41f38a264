"""``corral shims install DIR`` / ``uninstall DIR`` / ``list``: the Slurm and PBS commands.

``install`` writes small launchers (``sbatch``, ``srun``, ``salloc``, ``squeue``, ``scancel``,
``sinfo``, ``sacct``, ``scontrol``, ``qsub``, ``qstat``, ``qdel``) into DIR; put DIR first on
``PATH`` to use them. Where the system C compiler works they are compiled (``launcher.c``),
``srun``/``salloc`` and everything without a compiler are Python (``--python-only`` forces
that). It refuses when DIR holds a command that is not ours or when a real
Slurm/PBS command is already on ``PATH`` (``--force`` overrides), so a real scheduler is
never shadowed by accident.
"""

from __future__ import annotations

from typing import Annotated

import typer

shims_app = typer.Typer(name="shims", help="Slurm/PBS-compatible commands (sbatch, qsub...).",
                        no_args_is_help=True)


@shims_app.command("install")
def install_cmd(
    directory: Annotated[str, typer.Argument(help="Where to write the commands (e.g. ~/bin).")],
    force: Annotated[bool, typer.Option(
        "--force", help="Install even where a real Slurm/PBS command exists.")] = False,
    slurm_only: Annotated[bool, typer.Option("--slurm-only", help="Skip qsub/qstat/qdel.")]
    = False,
    python_only: Annotated[bool, typer.Option(
        "--python-only", help="Do not build the compiled launcher (cc); Python launchers only.")]
    = False,
) -> None:
    """Write the Slurm and PBS commands into DIRECTORY."""
    from corral.shims.install import COMMANDS, SLURM_COMMANDS, InstallError, install

    cmds = SLURM_COMMANDS if slurm_only else COMMANDS
    try:
        result = install(directory, force=force, commands=cmds, compiled=not python_only)
    except InstallError as exc:
        typer.echo(f"corral shims install: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        typer.echo(f"corral shims install: cannot write to {directory}: {exc.strerror}",
                   err=True)
        raise typer.Exit(1) from None
    typer.echo(f"Installed {' '.join(result.written)} in {result.directory}")
    if result.compiled:
        typer.echo(f"Compiled launcher for {' '.join(result.compiled)}")
    elif result.compile_error:
        typer.echo(f"Python launchers only (slower, ~10 ms more per call): the compiled "
                   f"launcher could not be built: {result.compile_error}")
    if result.replaced:
        typer.echo(f"Replaced (--force): {' '.join(result.replaced)}")
    typer.echo(f'Put it first on PATH:  export PATH="{result.directory.resolve()}:$PATH"')


@shims_app.command("uninstall")
def uninstall_cmd(
    directory: Annotated[str, typer.Argument(help="Directory given to `install`.")],
) -> None:
    """Remove Corral's commands from DIRECTORY (other files are left alone)."""
    from corral.shims.install import uninstall

    removed = uninstall(directory)
    typer.echo(f"Removed {' '.join(removed)}" if removed else "No Corral shims there.")


def register(app: typer.Typer) -> None:
    app.add_typer(shims_app)
