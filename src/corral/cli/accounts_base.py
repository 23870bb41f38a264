"""What the ``corral account`` commands share: the program name, the "no limit" value,
reading the cluster's configuration and sending a change, and a limits cell."""

from __future__ import annotations

from typing import Any

from corral.cli.output import api_errors, connect

PROG = "corral account"
NO_LIMIT = -1


def cluster_config() -> dict[str, Any]:
    client = connect()
    with api_errors(PROG):
        cfg: dict[str, Any] = client.cluster_config()
    return cfg


def send_change(kind: str, name: str, fields: dict[str, Any] | None, mode: str) -> Any:
    client = connect()
    with api_errors(PROG, changes=True):
        return client.admin_change(kind, name, fields, mode)


def limits_text(limits: dict[str, Any] | None) -> str:
    from corral.core.parse.timefmt import format_time_s

    parts = []
    for key, value in sorted((limits or {}).items()):
        if value is None:
            continue
        shown = format_time_s(value) if key == "max_wall_s" else value
        parts.append(f"{key}={shown}")
    return ",".join(parts) or "-"
