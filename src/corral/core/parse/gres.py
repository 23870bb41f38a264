"""Generic resources and GPU requests: ``--gres``, ``--gpus``, ``--gpus-per-node``...

``--gres`` (Slurm)::

    list := item (',' item)*
    item := ['gres/' | 'gres:'] NAME [':' TYPE] [':' COUNT]

``gpu`` is one GPU of any type; ``gpu:2`` two of any type; ``gpu:a100`` one A100;
``gpu:a100:2`` two. With two fields the second is a count when it is all digits, else a
type (as Slurm decides). ``none`` is no GRES; a count of 0 is kept (it overrides a
default). ``COUNT`` may carry a ``k``/``m``/``g`` multiplier (powers of
1024, for counted resources such as bandwidth), as Slurm allows.

``--gpus``, ``--gpus-per-node``, ``--gpus-per-task`` (and ``--gpus-per-socket``) take
``[TYPE:]COUNT`` items: ``2``, ``a100:2``, ``a100:1,v100:1``; the count is required.

Both parse to ``GresRequest`` values; ``gpu_request`` folds them into the single
(count, type) pair a ``JobSpec`` holds and the non-GPU rest, rejecting several GPU types
in one job with a precise message. ``format_gres`` is the inverse for display.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from corral.core.parse.errors import ParseError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_TYPE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")  # MIG types start with a digit: 3g.20gb
_COUNT = re.compile(r"^(\d+)([kKmMgG]?)$")
_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True, slots=True)
class GresRequest:
    name: str  # "gpu", "nvme", "shard"...
    type: str | None = None  # "a100"; None: any type
    count: int = 1

    @property
    def key(self) -> str:
        """The model's ``gres`` key: ``gpu:a100`` or ``gpu``."""
        return f"{self.name}:{self.type}" if self.type else self.name


def _count(kind: str, text: str, s: str) -> int:
    m = _COUNT.match(s)
    if not m:
        raise ParseError(kind, text, f"count {s!r} is not a whole number")
    return int(m.group(1)) * _MULT[m.group(2).upper()]


def _check_word(kind: str, text: str, what: str, word: str) -> str:
    if not (_NAME if what == "resource name" else _TYPE).match(word):
        raise ParseError(kind, text, f"{what} {word!r} is not a valid name")
    return word


def parse_gres(text: str) -> tuple[GresRequest, ...]:
    """``parse_gres("gpu:a100:2,nvme:1")`` -> ``(GresRequest("gpu","a100",2), ...)``."""
    kind = "gres"
    s = text.strip()
    if not s:
        raise ParseError(kind, text, "empty GRES specification")
    if s.lower() == "none":
        return ()
    out: list[GresRequest] = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            raise ParseError(kind, text, "empty item (doubled or trailing ',')")
        low = item.lower()
        if low.startswith(("gres/", "gres:")):
            item = item[5:]
        fields = item.split(":")
        if len(fields) > 3:
            raise ParseError(kind, text, f"{item!r} has too many ':' fields (NAME[:TYPE][:COUNT])")
        name = _check_word(kind, text, "resource name", fields[0])
        if len(fields) == 1:
            out.append(GresRequest(name))
        elif len(fields) == 2:
            second = fields[1]
            if _COUNT.match(second):
                out.append(GresRequest(name, None, _count(kind, text, second)))
            else:
                out.append(GresRequest(name, _check_word(kind, text, "type", second)))
        else:
            gtype = _check_word(kind, text, "type", fields[1])
            out.append(GresRequest(name, gtype, _count(kind, text, fields[2])))
    return tuple(out)


def parse_gpus(text: str) -> tuple[GresRequest, ...]:
    """``--gpus``-style ``[TYPE:]COUNT`` items: ``parse_gpus("a100:2")``; name is ``gpu``."""
    kind = "GPU specification"
    s = text.strip()
    if not s:
        raise ParseError(kind, text, "empty GPU specification")
    out: list[GresRequest] = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            raise ParseError(kind, text, "empty item (doubled or trailing ',')")
        fields = item.split(":")
        if fields[0].lower() == "gpu" and len(fields) > 1:  # tolerate "gpu:a100:2"
            fields = fields[1:]
        if len(fields) == 1:
            out.append(GresRequest("gpu", None, _count(kind, text, fields[0])))
        elif len(fields) == 2:
            gtype = _check_word(kind, text, "GPU type", fields[0])
            out.append(GresRequest("gpu", gtype, _count(kind, text, fields[1])))
        else:
            raise ParseError(kind, text, f"{item!r} has too many ':' fields ([TYPE:]COUNT)")
    return tuple(out)


def gpu_request(
    reqs: Iterable[GresRequest], text: str = ""
) -> tuple[int, str | None, tuple[tuple[str, int], ...]]:
    """Fold requests into ``(gpu_count, gpu_type, other_gres)`` for a ``JobSpec``.

    ``other_gres`` is the model's sorted ``(key, count)`` tuple (``("nvme", 1)``, or
    ``("fpga:xilinx", 2)`` for a typed non-GPU resource). Several GPU types in one job
    raise ``ParseError``: the model holds one GPU type per job.
    """
    reqs = tuple(reqs)
    count = 0
    gtype: str | None = None
    seen_type = False
    other: dict[str, int] = {}
    for r in reqs:
        if r.name.lower() == "gpu":
            if seen_type and r.type != gtype:
                raise ParseError(
                    "GPU specification",
                    text or format_gres(reqs),
                    f"one GPU type per job, got {gtype or 'any'!s} and {r.type or 'any'!s}",
                )
            seen_type, gtype = True, r.type
            count += r.count
        else:
            other[r.key] = other.get(r.key, 0) + r.count
    return count, gtype, tuple(sorted(other.items()))


def format_gres(reqs: Iterable[GresRequest]) -> str:
    """``gpu:a100:2,nvme:1`` (count omitted only when it is 1 and there is no type)."""
    parts: list[str] = []
    for r in reqs:
        if r.type:
            parts.append(f"{r.name}:{r.type}:{r.count}")
        elif r.count == 1:
            parts.append(r.name)
        else:
            parts.append(f"{r.name}:{r.count}")
    return ",".join(parts)
