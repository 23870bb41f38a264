"""A small TOML writer for the configuration files Corral generates.

Supports what ``corral.toml`` uses: strings, integers, floats, booleans, arrays of
scalars, inline tables of scalars, tables and arrays of tables (nested one level, as
``[qos.limits]``). Keys are written bare when they can be. Round-trips through ``tomllib``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Mapping):
        inner = ", ".join(f"{_key(str(k))} = {_scalar(x)}" for k, x in v.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _is_table_array(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and bool(v)
            and all(isinstance(x, Mapping) for x in v))


def _body(table: Mapping[str, Any], prefix: str, out: list[str], inline_keys: set[str]) -> None:
    subs: list[tuple[str, Any]] = []
    for k, v in table.items():
        if v is None:
            continue
        if _is_table_array(v) or (isinstance(v, Mapping) and k not in inline_keys):
            subs.append((k, v))
        else:
            out.append(f"{_key(k)} = {_scalar(v)}")
    for k, v in subs:
        name = f"{prefix}.{_key(k)}" if prefix else _key(k)
        if isinstance(v, Mapping):
            out.append("")
            out.append(f"[{name}]")
            _body(v, name, out, inline_keys)
        else:
            for item in v:
                out.append("")
                out.append(f"[[{name}]]")
                _body(item, name, out, inline_keys)


def dumps(data: Mapping[str, Any], *, inline_keys: Sequence[str] = ("gres",)) -> str:
    """TOML text for ``data``; keys in ``inline_keys`` are written as inline tables."""
    out: list[str] = []
    _body(data, "", out, set(inline_keys))
    text = "\n".join(out).strip("\n")
    return text + "\n"
