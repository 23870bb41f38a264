"""Multifactor priorities with every memo kept across calls equal a plain computation.

``multifactor_priorities`` keeps, from one call to the next, a static context
(``_static_context``), per-job terms (``_job_terms``) and the fair-share structure and
ranking (``fs_cache``, with ``fs_flat`` counting on flat trees). Property: over a sequence
of calls like a replay's (time advancing, usage decaying and growing, users arriving,
jobs leaving and arriving, held jobs, dependencies, admin priorities, both size modes),
each result is float for float the one computed from scratch with fresh memos and the
fair share ranked in full (``FairShareCache.factors``).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from priority_helpers import job, snapshot

from corral.core.config import PriorityWeights, SchedulerConfig
from corral.core.model import Account, Association, HoldKind, Partition, Qos
from corral.core.model.job import Dependency, DependencyKind, DependencySpec, Job
from corral.core.priority import compute
from corral.core.priority import multifactor as mf
from corral.core.snapshot import ClusterSnapshot


def _plain(snap: ClusterSnapshot, config: SchedulerConfig, now: float) -> dict[int, float]:
    """``compute`` with fresh memos and the whole Fair Tree ranking (no counting)."""
    kept = mf._MEMO
    mf._MEMO = mf._Memo()
    fs = mf._MEMO.fs
    fs.factors_of = fs.factors  # type: ignore[method-assign]
    try:
        return dict(compute(snap, config, now))
    finally:
        mf._MEMO = kept


def _job(rng: random.Random, i: int, now: float, users: int, odd: bool) -> Job:
    extra: dict[str, object] = {}
    if odd:  # off the common path now and then
        extra = dict(hold=rng.choice([HoldKind.NONE] * 6 + [HoldKind.USER]),
                     begin_time=rng.choice([None, None, now + rng.random() * 1e5]),
                     dependency=rng.choice([None] * 6 + [DependencySpec(
                         (Dependency(DependencyKind.AFTEROK, (max(1, i - 3),)),))]),
                     admin_priority=rng.choice([None] * 15 + [7]),
                     site_factor=rng.choice([0, 0, 2]))
    return job(i, now - rng.random() * 9e5, user=f"u{rng.randrange(users + 2)}",
               account="g", nodes_min=rng.choice([1, 2]), ntasks=rng.choice([None, 4]),
               partitions=rng.choice([(), ("fast",)]), qos=rng.choice([None, "high"]),
               nice=rng.choice([0, 0, 5]), time_limit_s=rng.choice([None, 600]), **extra)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", ["flat", "nested"])
def test_kept_memos_give_the_plain_priorities(seed: int, shape: str) -> None:
    rng = random.Random(seed)
    users = 12
    odd = seed % 2 == 1
    if shape == "flat":  # a replay's tree: every user in one account, equal shares
        accounts = [Account("g")]
        assocs = [Association(f"u{u}", "g") for u in range(users)]
    else:
        accounts = [Account("g"), Account("sub", "g", shares=2)]
        assocs = [Association(f"u{u}", "g" if u % 3 else "sub", shares=1 + u % 2)
                  for u in range(users)]
    w = PriorityWeights(assoc=rng.choice([0, 300]), favor_small=seed == 2,
                        size_relative=seed == 4)
    config = SchedulerConfig(weights=w)
    parts = [Partition("batch", (), is_default=True, priority_job_factor=2),
             Partition("fast", (), priority_job_factor=5)]
    base = snapshot(accounts=accounts, assocs=assocs, partitions=parts,
                    qos=[Qos("normal", 0), Qos("high", 30)])
    now = 1e6
    usage: dict[tuple[str, str], float] = {}
    pending = [_job(rng, i, now, users, odd) for i in range(1, 40)]
    next_id = 40
    mf.clear_memo()
    for _ in range(12):
        now += rng.choice([0.0, 1.0, 60.0, 3600.0])
        usage = {k: v * 0.99 for k, v in usage.items()}  # decay
        for _ in range(rng.randrange(4)):  # running users' usage grows
            key = ("g", f"u{rng.randrange(users + 2)}")  # sometimes one the tree lacks
            usage[key] = usage.get(key, 0.0) + rng.choice([1.0, 60.0, 3600.0])
        pending = [j for j in pending if rng.random() > 0.1]  # some start
        for _ in range(rng.randrange(5)):
            pending.append(_job(rng, next_id, now, users, odd))
            next_id += 1
        snap = dataclasses.replace(base, pending=tuple(pending), usage=dict(usage))
        assert dict(compute(snap, config, now)) == _plain(snap, config, now)
    if shape == "flat" and not odd:
        assert mf._MEMO.fs.flat_hits > 0  # the counting path was the one compared
