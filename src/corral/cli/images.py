"""Node image caches: ``corral images`` (per node: image, digest, size, last used) and
``corral image pull REF [--nodes ...]`` (pre-pull into the caches)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from corral.cli.output import JSON_OPTION, api_errors, connect, note, print_json, print_table


def image_rows(nodes: list[dict[str, Any]], node: str | None = None) -> list[dict[str, Any]]:
    """One row per (node, reference) of the nodes' image lists; an image known only by
    digest has one row with the digest as its image."""
    rows = []
    for n in nodes:
        if node and n.get("name") != node:
            continue
        for img in n.get("images") or []:
            for ref in img.get("refs") or [img.get("digest", "")]:
                rows.append({"node": n.get("name"), "image": ref, "digest": img.get("digest"),
                             "size_bytes": img.get("size_bytes", 0),
                             "last_used": img.get("last_used"),
                             "in_use": img.get("in_use", False)})
    rows.sort(key=lambda r: (str(r["node"]), str(r["image"])))
    return rows


def _size(n: Any) -> str:
    v = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(n)


def _ago(t: Any) -> str:
    if not t:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(t)))


def images(
    node: Annotated[str | None, typer.Option("--node", "-w", help="Only this node.")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """List the container images cached on each node."""
    from corral.cli.output import Column

    client = connect()
    with api_errors("corral images"):
        rows = image_rows(client.nodes(), node)
    if as_json:
        print_json(rows)
        return
    cols = (
        Column("NODE", lambda r: str(r["node"]), style="bold"),
        Column("IMAGE", lambda r: str(r["image"])),
        Column("DIGEST", lambda r: str(r["digest"] or "")[:19]),
        Column("SIZE", lambda r: _size(r["size_bytes"]), justify="right"),
        Column("LAST USED", lambda r: _ago(r["last_used"])),
    )
    print_table(rows, cols, empty="No images cached on any node.")


image_app = typer.Typer(help="Container images in the node caches.", no_args_is_help=True)


@image_app.command("pull")
def pull(
    ref: Annotated[str, typer.Argument(
        help="docker://[host/]name[:tag], name[:tag], or a .sif file")],
    nodes: Annotated[str | None, typer.Option(
        "--nodes", "-w", help="Nodes (hostlist); default: every connected node.")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Pull an image into the image cache of nodes before jobs need it."""
    from corral.core.parse.hostlist import expand

    names = expand(nodes) if nodes else None
    if ref.endswith(".sif") and "://" not in ref and not ref.startswith("/"):
        import os

        ref = os.path.abspath(ref)  # the nodes see the file at the same absolute path
    client = connect()
    with api_errors("corral image pull", changes=True):
        out = client.pull_image(ref, names)
    if as_json:
        print_json(out)
        return
    sent = out.get("nodes") or []
    note(f"pulling {out.get('ref')} on {len(sent)} node(s): {','.join(sent) or '-'}"
         + (f"; not connected: {','.join(out['not_connected'])}"
            if out.get("not_connected") else "") + " (see corral images)")


def merge_group(app: typer.Typer, name: str, sub: typer.Typer) -> None:
    """Add ``sub``'s commands to ``app``'s group ``name``, creating the group with
    ``sub`` when it is not there yet: several modules share ``corral image`` (pull here,
    build-vm in ``corral.cli.vmimage``); two groups of one name would hide each other."""
    for group in app.registered_groups:
        if group.name == name and group.typer_instance is not None:
            if group.typer_instance is not sub:
                group.typer_instance.registered_commands.extend(sub.registered_commands)
            return
    app.add_typer(sub, name=name, help="Container images in the node caches, VM images.")


def register(app: typer.Typer) -> None:
    app.command("images")(images)
    merge_group(app, "image", image_app)
