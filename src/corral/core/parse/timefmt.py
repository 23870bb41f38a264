"""Durations as Slurm and PBS write them, both ways. All values are whole seconds.

Slurm (``--time``, ``--time-min``, partition ``MaxTime``), as ``time_str2secs`` accepts:

    M        minutes              D-H        days-hours
    M:S      minutes:seconds      D-H:M      days-hours:minutes
    H:M:S    hours:minutes:sec    D-H:M:S    days-hours:minutes:seconds

``UNLIMITED``, ``INFINITE`` (any case) and ``-1`` mean no limit and parse to ``None``.
Fields are unsigned decimal integers and are not range-checked against 60 (``0:90`` is 90
seconds), as in Slurm. ``parse_time_limit_s`` additionally maps ``0`` to ``None``:
``sbatch --time=0`` requests no limit.

Formats Slurm prints (``src/common/parse_time.c`` and ``squeue``'s ``_print_secs``):

- ``format_time_s``: ``HH:MM:SS`` or ``D-HH:MM:SS`` — ``scontrol`` ``RunTime``/``TimeLimit``,
  ``sacct`` ``Elapsed``/``Timelimit``, ``sinfo`` ``TIMELIMIT`` (with ``unlimited="infinite"``);
- ``format_squeue_time_s``: ``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS`` — ``squeue`` ``TIME`` and
  ``TIME_LIMIT`` columns (``0:00``, ``1:29``, ``5:00``).

PBS (``-l walltime=``): ``[[[D:]H:]M:]S`` with an optional fraction of a second (rounded
up), or plain seconds; ``format_pbs_walltime_s`` prints ``HH:MM:SS`` with hours past 99 as
needed, the way ``qstat -f`` shows ``Resource_List.walltime``.
"""

from __future__ import annotations

import math

from corral.core.parse.errors import ParseError

_UNLIMITED = {"UNLIMITED", "INFINITE", "-1"}
_SLURM_TIME_MSG = "Invalid --time specification"


def _slurm_err(text: str, reason: str) -> ParseError:
    return ParseError("time", text, reason, slurm_message=_SLURM_TIME_MSG)


def _fields(text: str, raw: str, sep: str, most: int) -> list[int]:
    parts = raw.split(sep)
    if len(parts) > most:
        raise _slurm_err(text, f"too many {sep!r}-separated fields (at most {most})")
    out: list[int] = []
    for p in parts:
        if not p.isdigit() or not p.isascii():
            raise _slurm_err(text, f"{p!r} is not a non-negative whole number")
        out.append(int(p))
    return out


def parse_time_s(text: str) -> int | None:
    """Seconds of a Slurm duration; ``None`` for UNLIMITED/INFINITE/-1.

    ``parse_time_s("1-02:03:04") == 93784``; ``parse_time_s("90") == 5400`` (minutes).
    """
    s = text.strip()
    if not s:
        raise _slurm_err(text, "empty time")
    if s.upper() in _UNLIMITED:
        return None
    days_s, dash, rest = s.partition("-")
    if dash:
        if not days_s.isdigit() or not days_s.isascii():
            raise _slurm_err(text, f"days {days_s!r} is not a non-negative whole number")
        if not rest:
            raise _slurm_err(text, "nothing after 'days-'")
        hms = _fields(text, rest, ":", 3)
        hms += [0] * (3 - len(hms))  # D-H, D-H:M, D-H:M:S
        h, m, sec = hms
        return int(days_s) * 86400 + h * 3600 + m * 60 + sec
    f = _fields(text, s, ":", 3)
    if len(f) == 1:
        return f[0] * 60  # M
    if len(f) == 2:
        return f[0] * 60 + f[1]  # M:S
    return f[0] * 3600 + f[1] * 60 + f[2]  # H:M:S


def parse_time_limit_s(text: str) -> int | None:
    """Like ``parse_time_s`` but ``0`` also means no limit (``sbatch --time=0``)."""
    v = parse_time_s(text)
    return None if v == 0 else v


def _split(seconds: int) -> tuple[int, int, int, int]:
    return seconds // 86400, seconds // 3600 % 24, seconds // 60 % 60, seconds % 60


def format_time_s(seconds: float | None, *, unlimited: str = "UNLIMITED") -> str:
    """``HH:MM:SS`` / ``D-HH:MM:SS`` as scontrol and sacct print; ``None`` is ``unlimited``.

    Fractions are truncated; a negative value prints ``INVALID`` as in Slurm.
    """
    if seconds is None:
        return unlimited
    s = int(seconds)
    if s < 0:
        return "INVALID"
    d, h, m, sec = _split(s)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h:02d}:{m:02d}:{sec:02d}"


def format_squeue_time_s(seconds: float | None, *, unlimited: str = "UNLIMITED") -> str:
    """``M:SS`` / ``H:MM:SS`` / ``D-HH:MM:SS`` as the squeue TIME and TIME_LIMIT columns."""
    if seconds is None:
        return unlimited
    s = int(seconds)
    if s < 0:
        return "INVALID"
    d, h, m, sec = _split(s)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    if h:
        return f"{h}:{m:02d}:{sec:02d}"
    return f"{m}:{sec:02d}"


def parse_pbs_walltime_s(text: str) -> int:
    """Seconds of a PBS walltime: ``[[[D:]H:]M:]S[.frac]`` or plain seconds (fraction rounds up).

    ``parse_pbs_walltime_s("01:30:00") == 5400``; ``parse_pbs_walltime_s("3600") == 3600``.
    """
    s = text.strip()
    if not s:
        raise ParseError("walltime", text, "empty walltime")
    parts = s.split(":")
    if len(parts) > 4:
        raise ParseError("walltime", text, "too many ':'-separated fields (at most D:H:M:S)")
    *whole, last = parts
    for p in whole:
        if not p.isdigit() or not p.isascii():
            raise ParseError("walltime", text, f"{p!r} is not a non-negative whole number")
    sec_int, dot, frac = last.partition(".")
    if not (sec_int.isdigit() and sec_int.isascii()) or (
        dot and not (frac.isdigit() and frac.isascii())
    ):
        raise ParseError("walltime", text, f"seconds {last!r} is not a non-negative number")
    seconds = int(sec_int) + (1 if dot and int(frac) > 0 else 0)
    mult = (60, 3600, 86400)
    for i, p in enumerate(reversed(whole)):
        seconds += int(p) * mult[i]
    return seconds


def format_pbs_walltime_s(seconds: float) -> str:
    """``HH:MM:SS`` (hours may exceed 99), as PBS prints walltime; fractions round up."""
    s = math.ceil(seconds)
    if s < 0:
        raise ValueError(f"negative walltime {seconds!r}")
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
