"""A ``[checks]`` table read from a TOML file of its own (``corral check cluster --config
FILE``), validated as ``corral.toml``'s is."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from corral.checks.settings import ChecksConfig
from corral.config.load import build


def load_checks_file(path: Path) -> dict[str, Any]:
    """The keys set in the ``[checks]`` table of a TOML file, validated (``ConfigError``
    naming the key, ``OSError``/``ValueError`` for an unreadable or malformed file)."""
    import tomllib

    with open(path, "rb") as f:
        data = tomllib.load(f)
    table = data.get("checks", {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [checks] must be a table")
    full = asdict(build(ChecksConfig, table, "checks"))
    return {k: full[k] for k in table}  # only what the file sets overrides
