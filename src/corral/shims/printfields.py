"""Slurm's ``print_fields`` tables, as ``sshare``, ``sreport`` and ``sacctmgr`` print them.

A column has a name, a width and a side: fixed-width output right-aligns headers and
values unless the width is negative (left-aligned), ends each cell with one space and
marks a value that does not fit with a ``+`` in its last column; the header is followed
by a line of dashes of each width. ``-p``/``--parsable`` joins
cells with ``|`` and ends each line with one; ``-P``/``--parsable2`` joins without the
trailing one; neither pads nor cuts. ``-n``/``--noheader`` drops both header lines.

``--format`` lists (``name%width``) are parsed by ``choose``: a name matches a column whose
keyword it is a case-insensitive prefix of, at least ``min_len`` characters long, the
first in table order winning, as Slurm's ``xstrncasecmp`` tables do; the width replaces
the column's, sign and all (``Account%256`` right-aligns, ``%-256`` left-aligns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

Getter = Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class Column:
    name: str  # the header text
    width: int  # negative: values left-aligned
    get: Getter
    keywords: tuple[str, ...] = ()  # what --format accepts (the name when empty)
    min_len: int = 1  # the shortest accepted prefix
    cut: bool = True  # strings are cut with "+"; numbers print whole, as Slurm's do


class FormatError(ValueError):
    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


def choose(table: Sequence[Column], spec: str) -> list[Column]:
    """The columns of a ``--format`` list (``Account,User%20,rawu``)."""
    out: list[Column] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        name, _, width = item.partition("%")
        low = name.lower()
        hit = None
        for col in table:
            words = col.keywords or (col.name.replace(" ", ""),)
            if any(len(low) >= min(col.min_len, len(w)) and w.lower().startswith(low)
                   for w in words):
                hit = col
                break
        if hit is None or not low:
            raise FormatError(name)
        if width:
            if not width.lstrip("-").isdigit():
                raise FormatError(item)
            if int(width):  # Slurm takes the number as the field's length, sign and all
                hit = replace(hit, width=int(width))
        out.append(hit)
    return out


def _pad(value: str, width: int) -> str:
    n = abs(width)
    return value.ljust(n) if width < 0 else value.rjust(n)


def cell(value: str, width: int, cut: bool = True) -> str:
    n = abs(width)
    if cut and len(value) > n > 0:
        value = value[: n - 1] + "+"
    return _pad(value, width)


def render(cols: Sequence[Column], rows: Iterable[Any], *, header: bool = True,
           mode: str = "fixed") -> list[str]:
    """The lines of the table; ``mode`` is ``fixed``, ``parsable`` or ``parsable2``."""
    lines: list[str] = []
    tail = "|" if mode == "parsable" else ""
    if header:
        if mode == "fixed":
            lines.append(" ".join(_pad(c.name[: abs(c.width)], c.width) for c in cols)
                         + " ")
            lines.append(" ".join("-" * abs(c.width) for c in cols) + " ")
        else:
            lines.append("|".join(c.name for c in cols) + tail)
    for r in rows:
        vals = [c.get(r) for c in cols]
        if mode == "fixed":
            lines.append(" ".join(cell(v, c.width, c.cut)
                                  for v, c in zip(vals, cols, strict=True)) + " ")
        else:
            lines.append("|".join(vals) + tail)
    return lines
