"""The cycle histogram resolves deep-queue cycles: a p99 read from its buckets (as
``bench/scale.py`` does) lands in a bucket a quarter to a half of its bound wide between
0.25 s and 2.5 s, so 0.6 s and 0.95 s are told apart (with the old 0.5-1.0 s bucket both
read as the same interpolated value)."""

from __future__ import annotations

from prometheus_client import generate_latest

from corral.controller.metrics import Metrics


def _buckets(text: str) -> dict[float, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("corral_scheduler_cycle_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            if le != "+Inf":
                out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def test_cycle_buckets_are_fine_where_deep_queues_cycle() -> None:
    m = Metrics()
    for s in (0.3, 0.6, 0.95, 1.2):
        m.cycle(s, 1)
    got = _buckets(generate_latest(m.registry).decode())
    bounds = sorted(got)
    inside = [b for b in bounds if 0.25 <= b <= 2.5]
    assert all(hi / lo <= 2.0 for lo, hi in zip(inside, inside[1:], strict=False)), inside
    assert got[0.375] == 1 and got[0.75] == 2 and got[1.0] == 3 and got[1.5] == 4
