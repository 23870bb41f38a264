"""Report periods: ``--since``/``--until`` values as people type them.

Accepted forms (``now`` is an argument, the module reads no clock):

- ``now``;
- a span back from now: ``7d``, ``24h``, ``90m``, ``30s``, ``2w`` (optionally written
  ``-7d`` or ``now-7d``);
- a local date or date and time: ``2024-05-01``, ``2024-05-01T13:00``,
  ``2024-05-01 13:00:30``;
- epoch seconds: ``1714561200``.
"""

from __future__ import annotations

import re
import time

_SPAN = re.compile(r"^(?:now)?-?(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
            "%Y-%m-%d %H:%M:%S")


def parse_when(text: str, now: float) -> float:
    """Epoch seconds for ``text`` (see the module docstring); ``ValueError`` if unreadable."""
    t = text.strip().lower()
    if t == "now":
        return now
    m = _SPAN.match(t)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    if re.fullmatch(r"\d{9,}(\.\d+)?", t):
        return float(t)
    for fmt in _FORMATS:
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    raise ValueError(f"cannot read the time {text!r}: use now, a span back from now (7d, 24h, "
                     "90m), a date (2024-05-01), a date and time (2024-05-01T13:00) or epoch "
                     "seconds")


def period(since: str | None, until: str | None, now: float,
           default_span_s: float = 86400.0) -> tuple[float, float]:
    """The report window; by default the last ``default_span_s`` seconds up to now."""
    end = parse_when(until, now) if until else now
    start = parse_when(since, now) if since else end - default_span_s
    if end <= start:
        raise ValueError(f"the period is empty: --until ({until or 'now'}) is not after "
                         f"--since ({since})")
    return start, end
