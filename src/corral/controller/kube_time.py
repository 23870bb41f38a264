"""Time as the Kubernetes API and kubectl write it: RFC 3339 timestamps in UTC with
whole seconds (``ts``, the API objects' ``creationTimestamp``, ``startedAt`` ...) and
kubectl's short ages (``age``: 5s, 3m, 2h, 4d, its AGE column)."""

from __future__ import annotations

from datetime import datetime, timezone


def ts(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(t: float | None, now: float) -> str:
    """kubectl's short age: 5s, 3m, 2h, 4d."""
    if t is None:
        return "<unknown>"
    s = max(0, int(now - t))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= 2 * n or (unit == "m" and s >= 120):
            return f"{s // n}{unit}"
    return f"{s}s"
