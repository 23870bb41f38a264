"""Dates as Slurm commands accept them (``sacct -S/-E``, ``sbatch --begin``).

Accepted (Slurm ``parse_time``): ``YYYY-MM-DD[THH:MM[:SS]]``, ``MM/DD[/YY]``,
``MMDD[YY]``, ``HH:MM[:SS]`` (today, or tomorrow when already past for ``--begin``),
``now[{+|-}N[seconds|minutes|hours|days|weeks]]`` (bare N: seconds), ``today``,
``midnight``, ``noon``, ``elevenses`` (11:00), ``fika`` (15:00), ``teatime`` (16:00),
``tomorrow``, a plain epoch number (``sacct`` accepts it too). All in local time.
"""

from __future__ import annotations

import time


class DateError(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(f"Invalid time specification: {text}")
        self.text = text


_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600,
          "hour": 3600, "d": 86400, "day": 86400, "w": 604800, "week": 604800}
_NAMED = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0),
          "teatime": (16, 0)}


def _local(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> float:
    return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))


def _hms(text: str, parts: list[str]) -> tuple[int, int, int]:
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise DateError(text)
    h, m = int(parts[0]), int(parts[1])
    s = int(parts[2]) if len(parts) == 3 else 0
    if h > 23 or m > 59 or s > 59:
        raise DateError(text)
    return h, m, s


def parse_date(text: str, now: float) -> float:
    """Epoch seconds of ``text`` relative to ``now``; raises ``DateError``."""
    t = text.strip().lower()
    if not t:
        raise DateError(text)
    today = time.localtime(now)
    if t.startswith("now"):
        rest = t[3:]
        if not rest:
            return now
        sign = 1 if rest[0] == "+" else -1 if rest[0] == "-" else 0
        if not sign:
            raise DateError(text)
        num = ""
        rest = rest[1:]
        while rest and rest[0].isdigit():
            num += rest[0]
            rest = rest[1:]
        if not num:
            raise DateError(text)
        unit = rest.rstrip("s") if rest not in ("s",) else "s"
        mult = _UNITS.get(unit or "s")
        if mult is None:
            raise DateError(text)
        return now + sign * int(num) * mult
    if t in ("today", "midnight"):
        return _local(today.tm_year, today.tm_mon, today.tm_mday)
    if t == "tomorrow":
        return _local(today.tm_year, today.tm_mon, today.tm_mday + 1)
    if t in _NAMED:
        h, m = _NAMED[t]
        return _local(today.tm_year, today.tm_mon, today.tm_mday, h, m)
    if t.isdigit() and len(t) > 6:
        return float(t)
    date_part, tee, time_part = t.partition("t")
    if "-" in date_part:
        ymd = date_part.split("-")
        if len(ymd) != 3 or not all(p.isdigit() for p in ymd):
            raise DateError(text)
        y, mo, d = (int(p) for p in ymd)
        h = mi = s = 0
        if tee and time_part:
            h, mi, s = _hms(text, time_part.split(":"))
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            raise DateError(text)
        return _local(y, mo, d, h, mi, s)
    if ":" in t:
        h, mi, s = _hms(text, t.split(":"))
        return _local(today.tm_year, today.tm_mon, today.tm_mday, h, mi, s)
    if "/" in t:
        parts = t.split("/")
        if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise DateError(text)
        mo, d = int(parts[0]), int(parts[1])
        y = today.tm_year if len(parts) == 2 else 2000 + int(parts[2]) % 100
        return _local(y, mo, d)
    if t.isdigit() and len(t) in (4, 6):
        mo, d = int(t[:2]), int(t[2:4])
        y = today.tm_year if len(t) == 4 else 2000 + int(t[4:6])
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            raise DateError(text)
        return _local(y, mo, d)
    raise DateError(text)
