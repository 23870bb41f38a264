"""The cycle histogram resolves deep-queue cycles: a p99 read from its buckets (as
``bench/scale.py`` does, linear within a bucket) is told apart between 0.6 s and 0.95 s,
which the old 0.5-1.0 s bucket read as one interpolated value; from 0.25 s to 2.5 s no
bucket's upper bound is more than twice its lower one (the old 1.0-2.5 s one was 2.5x)."""

from __future__ import annotations

from corral.controller.metrics import _CYCLE_BUCKETS, Metrics


def test_cycle_buckets_are_fine_where_deep_queues_cycle() -> None:
    m = Metrics()
    for s in (0.3, 0.6, 0.95, 1.2):
        m.cycle(s, 1)

    def below(le: float) -> float | None:
        return m.registry.get_sample_value("corral_scheduler_cycle_seconds_bucket",
                                           {"le": str(le)})

    assert [below(le) for le in (0.375, 0.75, 1.0, 1.5)] == [1.0, 2.0, 3.0, 4.0]
    inside = [b for b in _CYCLE_BUCKETS if 0.25 <= b <= 2.5]
    assert all(hi / lo <= 2.0 for lo, hi in zip(inside, inside[1:], strict=False)), inside
