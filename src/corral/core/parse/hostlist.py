"""Slurm hostlist expressions: ``node[01-04,07],gpu[1-2]`` both ways.

Grammar (as Slurm's ``hostlist_create``, plus several bracket groups per name)::

    hostlist := item ((',' | whitespace) item)*
    item     := text ( '[' ranges ']' text )*        -- commas inside brackets do not split
    ranges   := range (',' range)*
    range    := NUMBER | NUMBER '-' NUMBER           -- lo <= hi

Expansion keeps zero padding: every number of a range is padded to the width of its low
bound as written (``[08-10]`` gives ``08 09 10``; ``[8-10]`` gives ``8 9 10``). Several
bracket groups expand as a cartesian product, the first group outermost
(``rack[1-2]-n[01-02]`` gives ``rack1-n01 rack1-n02 rack2-n01 rack2-n02``). Order and
duplicates are kept as written.

``compress`` is the inverse for flat name lists: names are split at their last run of
digits into (prefix, number, suffix); names sharing prefix and suffix share one bracket
group, and consecutive numbers of the same padded width form ranges. With ``sort=True``
(default, what ``scontrol show hostlist`` users expect) names are de-duplicated and sorted
naturally first; with ``sort=False`` order is preserved, so
``expand(compress(names, sort=False)) == names`` for any list of valid names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from corral.core.parse.errors import ParseError

DEFAULT_MAX_HOSTS = 1_000_000

_KIND = "hostlist"
_TAIL_NUM = re.compile(r"^(.*?)(\d+)(\D*)$")
_FORBIDDEN = set("[],")
_BRACKET = re.compile(r"\[([^\]]*)\]")


def _err(text: str, reason: str) -> ParseError:
    return ParseError(_KIND, text, reason)


def _split_items(expr: str) -> list[str]:
    """Split at top-level commas/whitespace; brackets must balance and never nest."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise _err(expr, f"nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise _err(expr, f"unmatched ']' at position {i}")
            depth = 0
        elif depth == 0 and (ch == "," or ch.isspace()):
            if ch == "," and not cur:
                raise _err(expr, f"empty host name before ',' at position {i}")
            if cur:
                items.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if depth:
        raise _err(expr, "missing ']'")
    if cur:
        items.append("".join(cur))
    elif expr.rstrip().endswith(","):
        raise _err(expr, "empty host name after the last ','")
    return items


def _expand_ranges(body: str) -> list[str]:
    """Numbers of a bracket body already checked by ``_range_count``."""
    out: list[str] = []
    for part in body.split(","):
        lo_s, dash, hi_s = part.partition("-")
        if not dash:
            out.append(lo_s)
            continue
        width = len(lo_s)
        out.extend(str(v).zfill(width) for v in range(int(lo_s), int(hi_s) + 1))
    return out


def _range_count(expr: str, body: str) -> int:
    """Validate a bracket body and count its numbers."""
    if not body:
        raise _err(expr, "empty brackets '[]'")
    n = 0
    for part in body.split(","):
        lo_s, dash, hi_s = part.partition("-")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()):
            raise _err(expr, f"bad range {part!r} (expected N or N-M with decimal digits)")
        if dash:
            if int(hi_s) < int(lo_s):
                raise _err(expr, f"range {part!r} runs backwards")
            n += int(hi_s) - int(lo_s) + 1
        else:
            n += 1
    return n


def _count_item(expr: str, item: str) -> int:
    total = 1
    for body in _BRACKET.findall(item):
        total *= _range_count(expr, body)
    return total


def expand(expr: str, *, max_hosts: int = DEFAULT_MAX_HOSTS) -> list[str]:
    """Host names of a hostlist expression, in order (``""`` gives ``[]``).

    Raises ``ParseError`` on unbalanced or nested brackets, empty names or brackets,
    non-numeric or backwards ranges, and lists longer than ``max_hosts``.
    """
    names: list[str] = []
    budget = max_hosts
    for item in _split_items(expr):
        budget -= _count_item(expr, item)
        if budget < 0:
            raise _err(expr, f"expands to more than {max_hosts} host names")
        # split into alternating text / bracket bodies
        pieces = _BRACKET.split(item)
        partial = [pieces[0]]
        for k in range(1, len(pieces), 2):
            choices = _expand_ranges(pieces[k])
            tail = pieces[k + 1]
            partial = [p + c + tail for p in partial for c in choices]
        names.extend(partial)
    return names


def _split_name(name: str) -> tuple[str, str, str] | None:
    m = _TAIL_NUM.match(name)
    if not m:
        return None
    return m.group(1), m.group(2), m.group(3)


def _natural_key(name: str) -> tuple[str, str, int, int, str]:
    parts = _split_name(name)
    if parts is None:
        return (name, "", -1, 0, name)
    prefix, digits, suffix = parts
    return (prefix, suffix, int(digits), len(digits), name)


def _group_text(prefix: str, suffix: str, runs: list[tuple[str, str]]) -> str:
    if len(runs) == 1 and runs[0][0] == runs[0][1]:
        return f"{prefix}{runs[0][0]}{suffix}"
    body = ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in runs)
    return f"{prefix}[{body}]{suffix}"


def _sorted_runs(digit_strings: set[str]) -> list[tuple[str, str]]:
    """Fewest runs covering a set of numbers written with possibly different paddings."""
    remaining = set(digit_strings)
    runs: list[tuple[str, str]] = []
    for lo in sorted(digit_strings, key=lambda d: (int(d), len(d))):
        if lo not in remaining:
            continue
        remaining.discard(lo)
        hi, v = lo, int(lo)
        while (nxt := str(v + 1).zfill(len(lo))) in remaining:
            remaining.discard(nxt)
            hi, v = nxt, v + 1
        runs.append((lo, hi))
    return runs


def compress(names: Iterable[str], *, sort: bool = True) -> str:
    """The Slurm-style expression of ``names`` (inverse of ``expand``).

    ``compress(["n01", "n02", "n03", "n07", "gpu1"])`` gives ``"gpu1,n[01-03,07]"``.
    Raises ``ParseError`` for a name containing ``[``, ``]``, ``,`` or whitespace.
    """
    seq = list(names)
    for n in seq:
        if not n or _FORBIDDEN.intersection(n) or any(c.isspace() for c in n):
            raise _err(n, "a host name must be non-empty, without '[', ']', ',' or spaces")
    if sort:
        return _compress_sorted(seq)
    out: list[str] = []
    cur: tuple[str, str, list[tuple[str, str]]] | None = None
    for name in seq:
        parts = _split_name(name)
        if parts is None:
            if cur:
                out.append(_group_text(*cur))
                cur = None
            out.append(name)
            continue
        prefix, digits, suffix = parts
        if cur and cur[0] == prefix and cur[1] == suffix:
            lo, hi = cur[2][-1]
            if str(int(hi) + 1).zfill(len(lo)) == digits:
                cur[2][-1] = (lo, digits)
            else:
                cur[2].append((digits, digits))
            continue
        if cur:
            out.append(_group_text(*cur))
        cur = (prefix, suffix, [(digits, digits)])
    if cur:
        out.append(_group_text(*cur))
    return ",".join(out)


def _compress_sorted(seq: list[str]) -> str:
    groups: dict[tuple[str, str], set[str]] = {}
    plain: set[str] = set()
    for name in seq:
        parts = _split_name(name)
        if parts is None:
            plain.add(name)
        else:
            groups.setdefault((parts[0], parts[2]), set()).add(parts[1])
    entries: list[tuple[tuple[str, str, int, int, str], str]] = [
        (_natural_key(n), n) for n in plain
    ]
    for (prefix, suffix), digits in groups.items():
        runs = _sorted_runs(digits)
        first = runs[0][0]
        key = (prefix, suffix, int(first), len(first), prefix + first + suffix)
        entries.append((key, _group_text(prefix, suffix, runs)))
    return ",".join(text for _, text in sorted(entries))


def count(expr: str) -> int:
    """Number of host names ``expr`` expands to, without building them."""
    return sum(_count_item(expr, item) for item in _split_items(expr))
