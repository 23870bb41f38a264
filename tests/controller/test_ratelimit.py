"""The per-user token buckets: Slurm's rl_* refill semantics on a controlled clock,
fairness between users, a bounded table."""

from __future__ import annotations

from corral.config.schema import RateLimitConfig
from corral.controller.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_bucket_refills_whole_periods() -> None:
    clock = Clock()
    rl = RateLimiter(RateLimitConfig(bucket_size=5, refill_rate=2, refill_period_s=1.0),
                     clock=clock)
    assert [rl.take("a") for _ in range(5)] == [0.0] * 5  # a full bucket: a burst of 5
    wait = rl.take("a")
    assert 0.99 <= wait <= 1.0  # the next token comes with the next period
    clock.t += 0.5
    assert rl.take("a") > 0  # half a period adds nothing
    clock.t += 0.5
    assert rl.take("a") == 0.0 and rl.take("a") == 0.0 and rl.take("a") > 0
    clock.t += 100
    assert sum(rl.take("a") == 0.0 for _ in range(10)) == 5  # capped at the bucket size
    assert rl.limited >= 8


def test_one_users_loop_does_not_slow_another() -> None:
    clock = Clock()
    rl = RateLimiter(RateLimitConfig(bucket_size=10, refill_rate=5, refill_period_s=1.0),
                     clock=clock)
    ok = {"hog": 0, "polite": 0}
    for step in range(100):  # 10 s: the hog asks 100 times a second, the other twice
        clock.t = 100.0 + step * 0.1
        for _ in range(10):
            ok["hog"] += rl.take("hog") == 0.0
        if step % 5 == 0:
            ok["polite"] += rl.take("polite") == 0.0
    assert ok["polite"] == 20  # every one of its requests went through
    assert 10 + 5 * 9 <= ok["hog"] <= 10 + 5 * 10  # its burst, then its refill rate


def test_table_is_bounded() -> None:
    clock = Clock()
    rl = RateLimiter(RateLimitConfig(bucket_size=3, refill_rate=1, table_size=4),
                     clock=clock)
    for i in range(4):
        rl.take(f"u{i}")
    clock.t += 10  # everyone's bucket is full again: those may go
    rl.take("new")
    assert len(rl.buckets) <= 4 and "new" in rl.buckets
    for i in range(50):  # none is full: some are dropped anyway, the table stays bounded
        rl.take(f"x{i}")
    assert len(rl.buckets) <= 4
