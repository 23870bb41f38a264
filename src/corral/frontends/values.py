"""Small value notations of the Slurm front end that need no cluster knowledge.

- ``parse_node_count``: ``-N 2``, ``-N 2-4``, ``-N 1k`` (Slurm's ``verify_node_count``);
- ``parse_signal``: ``--signal=[{R|B|RB}:]SIG[@secs]`` (Slurm ``get_signal_opts``), normalized
  to ``B:USR2@30`` form;
- ``parse_export``: ``--export=ALL|NONE|[ALL,]VAR[=value],...`` applied to a submit
  environment;
- ``parse_licenses``: ``-L name[:count],...`` (``name@server:count`` keeps the name);
- ``parse_switches``: ``--switches=N[@wait]``;
- ``parse_begin``: ``--begin`` absolute and relative times (Slurm ``parse_time``) in the
  caller's local time zone, relative to a ``now`` the caller passes.

All raise ``ValueError`` with a short reason; callers turn that into the dialect's message.
"""

from __future__ import annotations

import datetime as dt
import re
import signal as _signal
from collections.abc import Mapping

from corral.core.parse.timefmt import parse_time_s

_COUNT = re.compile(r"^(\d+)([kKmM]?)$")


def _count(text: str) -> int:
    m = _COUNT.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a count")
    mult = {"": 1, "K": 1024, "M": 1024 * 1024}[m.group(2).upper()]
    return int(m.group(1)) * mult


def parse_node_count(text: str) -> tuple[int, int | None]:
    """``(min, max)`` nodes; ``max`` is None when only one number is given."""
    lo_s, dash, hi_s = text.strip().partition("-")
    lo = _count(lo_s)
    if lo < 1:
        raise ValueError("node count must be at least 1")
    if not dash:
        return lo, None
    hi = _count(hi_s)
    if hi < lo:
        raise ValueError(f"maximum {hi} is below minimum {lo}")
    return lo, hi


def signal_number(name: str) -> int:
    """A signal by name (``USR2``, ``SIGUSR2``, any case) or number."""
    s = name.strip()
    if s.isdigit():
        num = int(s)
        if not 0 < num < 65:
            raise ValueError(f"signal number {num} out of range")
        return num
    up = s.upper()
    if not up.startswith("SIG"):
        up = "SIG" + up
    try:
        return int(getattr(_signal.Signals, up))
    except AttributeError:
        raise ValueError(f"unknown signal {name!r}") from None


def signal_name(num: int) -> str:
    """``12`` -> ``USR2`` (no ``SIG`` prefix, as Slurm prints)."""
    try:
        return _signal.Signals(num).name.removeprefix("SIG")
    except ValueError:
        return str(num)


def parse_signal(text: str) -> str:
    """Normalized ``[{R|B|RB}:]SIG@secs``; the time defaults to 60 s as in Slurm."""
    s = text.strip()
    flags = ""
    head, colon, rest = s.partition(":")
    if colon and head.upper() in ("B", "R", "RB", "BR"):
        flags, s = head.upper(), rest
    sig_s, at, secs_s = s.partition("@")
    num = signal_number(sig_s)
    secs = 60
    if at:
        if not secs_s.isdigit():
            raise ValueError(f"signal time {secs_s!r} is not a number of seconds")
        secs = int(secs_s)
        if secs > 0xFFFF:
            raise ValueError("signal time is above 65535 seconds")
    prefix = f"{flags}:" if flags else ""
    return f"{prefix}{signal_name(num)}@{secs}"


def parse_export(text: str, submit_env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``(mode, env)`` for ``--export``: mode is ``ALL``, ``NONE`` or ``LIST``.

    ``ALL`` (optionally with ``VAR=value`` items) is the submit environment plus those;
    ``NONE`` is empty (the agent provides the user's login environment, as
    ``--get-user-env``); a list without ``ALL`` carries only the named variables (those
    present in the submit environment) and the assignments.
    """
    items = [i for i in (p.strip() for p in text.split(",")) if i]
    if not items:
        raise ValueError("empty --export list")
    upper = [i.upper() for i in items]
    if upper == ["NONE"]:
        return "NONE", {}
    if "NONE" in upper:
        raise ValueError("NONE cannot be combined with other names")
    mode = "ALL" if "ALL" in upper else "LIST"
    env: dict[str, str] = dict(submit_env) if mode == "ALL" else {}
    for item, up in zip(items, upper, strict=True):
        if up == "ALL":
            continue
        name, eq, value = item.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError(f"{name!r} is not a variable name")
        if eq:
            env[name] = value
        elif name in submit_env:
            env[name] = submit_env[name]
    return mode, env


def parse_licenses(text: str) -> tuple[tuple[str, int], ...]:
    """``-L matlab:2,ansys`` -> ``(("ansys", 1), ("matlab", 2))``; ``@server`` kept in the name."""
    merged: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise ValueError("empty license name")
        name, colon, count_s = item.partition(":")
        if not re.match(r"^[A-Za-z0-9_.\-@]+$", name):
            raise ValueError(f"{name!r} is not a license name")
        count = 1
        if colon:
            if not count_s.isdigit() or int(count_s) < 1:
                raise ValueError(f"license count {count_s!r} is not a positive number")
            count = int(count_s)
        merged[name] = merged.get(name, 0) + count
    return tuple(sorted(merged.items()))


def parse_switches(text: str) -> tuple[int, int]:
    """``--switches=2@1:00:00`` -> ``(2, 3600)``; no ``@`` means no waiting limit (0)."""
    count_s, at, wait_s = text.strip().partition("@")
    if not count_s.isdigit() or int(count_s) < 1:
        raise ValueError(f"switch count {count_s!r} is not a positive number")
    wait = 0
    if at:
        w = parse_time_s(wait_s)
        wait = 0 if w is None else w
    return int(count_s), wait


_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_NAMED = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0),
          "teatime": (16, 0)}  # fmt: skip
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*([AaPp][Mm])?$")
_ISO = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2}))?)?$")
_MDY = re.compile(r"^(\d{1,2})[/.]?(\d{1,2})(?:[/.]?(\d{2}))?$")


def _local(now: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(now).astimezone()


def parse_begin(text: str, now: float) -> float:
    """Epoch seconds of a Slurm ``--begin`` value, in the local time zone.

    ``now``, ``now+60`` (seconds), ``now+1hour``, ``16:00`` (today, or tomorrow once
    past), ``4:00PM``, ``midnight``/``noon``/``teatime``..., ``today``, ``tomorrow``,
    ``2026-12-01``, ``2026-12-01T16:00[:00]``, ``MMDD[YY]``, ``MM/DD[/YY]``.
    """
    s = text.strip()
    low = s.lower()
    base = _local(now)
    if low.startswith("now"):
        rest = low[3:].strip()
        if not rest:
            return now
        sign = 1
        if rest[0] in "+-":
            sign = 1 if rest[0] == "+" else -1
            rest = rest[1:].strip()
        else:
            raise ValueError(f"expected now+COUNT[units], got {text!r}")
        m = re.match(r"^(\d+)\s*([a-z]*)$", rest)
        if not m:
            raise ValueError(f"expected now+COUNT[units], got {text!r}")
        unit = m.group(2) or "s"
        if unit not in _UNITS:
            raise ValueError(f"unknown time unit {m.group(2)!r}")
        return now + sign * int(m.group(1)) * _UNITS[unit]
    if low in ("today", "tomorrow"):
        day = base.replace(hour=0, minute=0, second=0, microsecond=0)
        if low == "tomorrow":
            day += dt.timedelta(days=1)
        return day.timestamp()
    if low in _NAMED:
        h, mi = _NAMED[low]
        return _next_clock(base, h, mi, 0)
    m = _CLOCK.match(s)
    if m:
        h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        ampm = (m.group(4) or "").lower()
        if ampm:
            if not 1 <= h <= 12:
                raise ValueError(f"hour {h} with {ampm.upper()}")
            h = h % 12 + (12 if ampm == "pm" else 0)
        return _next_clock(base, h, mi, sec)
    m = _ISO.match(s)
    if m:
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        h, mi, sec = int(m.group(4) or 0), int(m.group(5) or 0), int(m.group(6) or 0)
        return _at(base, y, mo, d, h, mi, sec)
    m = _MDY.match(s)
    if m:
        mo, d = int(m.group(1)), int(m.group(2))
        y = 2000 + int(m.group(3)) if m.group(3) else base.year
        when = _at(base, y, mo, d, 0, 0, 0)
        if not m.group(3) and when < now - 86400:
            when = _at(base, y + 1, mo, d, 0, 0, 0)  # a past date without year: next year
        return when
    raise ValueError(f"unrecognized time {text!r}")


def _at(base: dt.datetime, y: int, mo: int, d: int, h: int, mi: int, sec: int) -> float:
    try:
        return base.replace(year=y, month=mo, day=d, hour=h, minute=mi, second=sec,
                            microsecond=0).timestamp()
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def _next_clock(base: dt.datetime, h: int, mi: int, sec: int) -> float:
    if not (0 <= h < 24 and 0 <= mi < 60 and 0 <= sec < 60):
        raise ValueError(f"{h}:{mi:02d}:{sec:02d} is not a time of day")
    when = base.replace(hour=h, minute=mi, second=sec, microsecond=0)
    if when.timestamp() <= base.timestamp():
        when += dt.timedelta(days=1)
    return when.timestamp()
