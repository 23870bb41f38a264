"""``corral config``: ``show`` (running or file), ``check FILE``, ``import-slurm slurm.conf``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.output import (
    EXIT_INPUT,
    EXIT_UNAVAILABLE,
    JSON_OPTION,
    START_HINT,
    api_errors,
    connect,
    fail,
    note,
    print_json,
    stderr_console,
)

config_app = typer.Typer(
    name="config",
    help="Show, check and import cluster configuration (corral.toml).",
    no_args_is_help=True,
)


def _toml(data: dict[str, Any]) -> str:
    from corral.frontends.tomlwrite import dumps

    return dumps(_drop_none(data))


def _drop_none(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_none(x) for x in v]
    return v


@config_app.command("show")
def show(
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Show this corral.toml with every default filled in "
            "(instead of the running controller's).",
        ),
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """The configuration in effect (the running controller's, or a file's)."""
    if file is not None:
        from corral.config import ConfigError, config_to_json, load_config

        try:
            data = config_to_json(load_config(file))
        except ConfigError as exc:
            fail(str(exc), prog="corral config show")
    else:
        from corral.client import CorralError

        client = connect()
        try:
            data = client.cluster_config()
        except CorralError as exc:
            if exc.code == "unavailable":
                fail(
                    f"{exc.message}\n{START_HINT}\n(Or give --file corral.toml to see a "
                    "file's effective configuration.)",
                    EXIT_UNAVAILABLE,
                    prog="corral config show",
                )
            with api_errors("corral config show"):
                raise
    if as_json:
        print_json({"config": data})
    else:
        typer.echo(_toml(data), nl=False)


@config_app.command("reload")
def reload_cmd(as_json: bool = JSON_OPTION) -> None:
    """Make the running controller re-read its corral.toml: what can change live is
    applied at once (accounts, users, QOS, partitions, scheduler settings, scripts...);
    what needs a restart is listed (nodes, listen address, database...)."""
    client = connect()
    with api_errors("corral config reload"):
        got = client.config_reload()
    if as_json:
        print_json(got)
        return
    typer.echo(f"reloaded {got['file']}")
    typer.echo(f"applied: {', '.join(got['applied']) or 'nothing changed'}")
    if got["restart_needed"]:
        typer.echo(f"needs a restart of the controller: {', '.join(got['restart_needed'])}")


@config_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="The corral.toml to check.")],
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a corral.toml: every error names its key."""
    from corral.config import ConfigError, load_config

    try:
        cfg = load_config(file)
    except ConfigError as exc:
        if as_json:
            print_json({"ok": False, "file": str(file), "key": exc.key, "error": exc.message})
            raise typer.Exit(EXIT_INPUT) from None
        fail(str(exc), prog="corral config check")
    nodes = cfg.node_configs()
    summary = {
        "ok": True,
        "file": str(file),
        "cluster_name": cfg.cluster_name,
        "nodes": len(nodes),
        "partitions": [p.name for p in cfg.partitions],
        "qos": [q.name for q in cfg.qos],
        "accounts": len(cfg.accounts),
        "users": len(cfg.users),
    }
    if as_json:
        print_json(summary)
        return
    parts = ", ".join(summary["partitions"])  # type: ignore[arg-type]
    typer.echo(
        f"{file}: OK: cluster {cfg.cluster_name!r}, {len(nodes)} configured node(s)"
        f"{' (the local machine is discovered)' if not nodes else ''}, partitions "
        f"{parts}, {len(cfg.qos)} QOS, {len(cfg.accounts)} account(s), "
        f"{len(cfg.users)} user(s)"
    )


@config_app.command("import-slurm")
def import_slurm(
    slurm_conf: Annotated[
        Path, typer.Argument(help="The slurm.conf to read (includes are followed).")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write corral.toml here (default: stdout)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite --output if it exists.")
    ] = False,
    topology: Annotated[
        Path | None,
        typer.Option("--topology", help="A topology.conf with the switch tree (default: "
                     "the one next to slurm.conf when TopologyPlugin=topology/tree)."),
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Translate a slurm.conf into corral.toml and list everything that did not map."""
    import tomllib

    from corral.config import ConfigError, parse_config
    from corral.frontends.slurmconf import SlurmConfError, import_slurm_conf

    prog = "corral config import-slurm"
    try:
        result = import_slurm_conf(str(slurm_conf),
                                   topology=str(topology) if topology else None)
    except SlurmConfError as exc:
        fail(str(exc), prog=prog)
    text = _toml(result.data)
    try:
        parse_config(tomllib.loads(text))
    except ConfigError as exc:
        fail(
            f"the translated configuration is not valid: {exc}\n(please report this with "
            "your slurm.conf)",
            prog=prog,
        )
    header = (
        f"# corral.toml translated from {slurm_conf} by `corral config import-slurm`.\n"
        "# Check it with `corral config check FILE`; the notes at the end list what\n"
        "# could not be translated.\n\n"
    )
    footer_lines = [f"# NOTE: {n}" for n in result.notes]
    footer_lines += [f"# NOT MAPPED: {u}" for u in result.unmapped]
    footer = ("\n" + "\n".join(footer_lines) + "\n") if footer_lines else ""
    document = header + text + footer
    if as_json:
        print_json(
            {
                "config": result.data,
                "unmapped": [
                    {"where": u.where, "key": u.key, "value": u.value, "reason": u.reason}
                    for u in result.unmapped
                ],
                "notes": result.notes,
                "toml": document,
            }
        )
    elif output is None:
        typer.echo(document, nl=False)
    if output is not None:
        if output.exists() and not force:
            fail(f"{output} exists; use --force to overwrite it", prog=prog)
        output.write_text(document)
        if not as_json:
            note(f"wrote {output}")
    if not as_json:
        err = stderr_console()
        nodes = len(result.data.get("nodes", []))
        parts = len(result.data.get("partitions", []))
        err.print(
            f"Translated {nodes} node line(s) and {parts} partition(s); "
            f"{len(result.unmapped)} setting(s) not mapped:",
            markup=False,
        )
        for u in result.unmapped:
            err.print(f"  {u}", markup=False)
        for n in result.notes:
            err.print(f"  note: {n}", markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
