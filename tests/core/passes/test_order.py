"""Queue order: priority, then submit time, then id; admin priority; HIGHEST reservations."""

from __future__ import annotations

import pytest
from builders import job

from corral.core.config import ReservationPolicy
from corral.core.passes.order import order_jobs


def test_priority_then_submit_then_id() -> None:
    jobs = [job(3).submit(5).build(), job(1).submit(5).build(), job(2).submit(1).build(),
            job(4).submit(9).build()]
    prio = {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0}
    got = order_jobs(jobs, prio, (), ReservationPolicy.CURRENT_HIGHEST)
    assert [j.id for j in got] == [4, 2, 1, 3]


def test_admin_priority_overrides() -> None:
    jobs = [job(1).build(), job(2).priority(10**6).build()]
    got = order_jobs(jobs, {1: 5.0, 2: 0.0}, (), ReservationPolicy.CURRENT_HIGHEST)
    assert [j.id for j in got] == [2, 1]


def test_highest_keeps_reserved_jobs_first_in_reservation_order() -> None:
    jobs = [job(k).build() for k in (1, 2, 3, 4)]
    prio = {1: 4.0, 2: 3.0, 3: 2.0, 4: 1.0}
    got = order_jobs(jobs, prio, (4, 3, 99), ReservationPolicy.HIGHEST)
    assert [j.id for j in got] == [4, 3, 1, 2]
    got = order_jobs(jobs, prio, (4, 3), ReservationPolicy.CURRENT_HIGHEST)
    assert [j.id for j in got] == [1, 2, 3, 4]


def test_higher_partition_tier_comes_first_whatever_the_priority() -> None:
    from corral.core.model.partition import Partition

    parts = (Partition("low", ("n1",), priority_tier=1, is_default=True),
             Partition("high", ("n1",), priority_tier=2))
    jobs = [job(1).partition("low").build(), job(2).partition("high").build(),
            job(3).build(), job(4).partition("low", "high").build()]
    prio = {1: 9.0, 2: 1.0, 3: 8.0, 4: 0.5}
    got = order_jobs(jobs, prio, (), ReservationPolicy.CURRENT_HIGHEST, parts)
    # tier 2 first (job 2, and job 4 which may run in "high"), then tier 1 by priority;
    # job 3 names no partition, so it counts with the default partition's tier
    assert [j.id for j in got] == [2, 4, 1, 3]
    same = (Partition("a", ("n1",), is_default=True), Partition("b", ("n1",)))
    got = order_jobs(jobs, prio, (), ReservationPolicy.CURRENT_HIGHEST, same)
    assert [j.id for j in got] == [1, 3, 2, 4]


def test_fcfs_shortcut_gives_the_order_of_the_fcfs_priorities() -> None:
    """``fcfs=True`` reads ``-submit_time`` off the jobs (``prio`` unused): the same order
    as the FCFS priorities, with ties, admin priorities, tiers and HIGHEST."""
    from corral.core.model.partition import Partition

    parts = (Partition("low", ("n1",), priority_tier=1, is_default=True),
             Partition("high", ("n1",), priority_tier=2))
    jobs = [job(5).submit(3).build(), job(2).submit(3).build(), job(7).submit(1.5).build(),
            job(1).submit(9).partition("high").build(), job(3).submit(2).build()]
    with_admin = [*jobs, job(9).submit(8).priority(1).build()]
    for pending in (jobs, with_admin):
        prio = {j.id: -j.submit_time for j in pending}
        for partitions in ((), parts):
            for policy, reserved in ((ReservationPolicy.CURRENT_HIGHEST, ()),
                                     (ReservationPolicy.HIGHEST, (3, 1))):
                want = order_jobs(pending, prio, reserved, policy, partitions)
                got = order_jobs(pending, {}, reserved, policy, partitions, fcfs=True)
                assert [j.id for j in got] == [j.id for j in want]


def test_multifactor_order_matches_the_tuple_key() -> None:
    """The C-level sort of ``Priorities`` (negated priority, then runs of equal
    priorities by submit time and id) gives the tuple-key order, ties and admin
    priorities included."""
    import random
    from dataclasses import replace

    from builders import cluster

    from corral.core import priority
    from corral.core.config import PriorityWeights, SchedulerConfig
    from corral.core.priority.multifactor import Priorities

    rng = random.Random(7)
    pending = []
    for k in range(1, 400):
        b = job(k).cpus(rng.choice([1, 2, 4])).submit(float(rng.randint(0, 30)))
        if rng.random() < 0.05:
            b = b.priority(rng.choice([0, 3, 10**6]))
        pending.append(b.build())
    snap = cluster().snapshot(pending=pending)
    for w in (PriorityWeights(), PriorityWeights(age=0, fairshare=0, job_size=0,
                                                 partition=0, qos=0)):
        prio = priority.compute(snap, SchedulerConfig(weights=w), 100.0)
        assert isinstance(prio, Priorities)
        got = order_jobs(snap.pending, prio, (), ReservationPolicy.CURRENT_HIGHEST)
        want = sorted(snap.pending, key=lambda j: (
            -(prio[j.id] if j.admin_priority is None else j.admin_priority),
            j.submit_time, j.id))
        assert [j.id for j in got] == [j.id for j in want]
        # the same priorities as a plain dict take the general sort: the same order
        plain = order_jobs(replace(snap).pending, dict(prio), (),
                           ReservationPolicy.CURRENT_HIGHEST)
        assert [j.id for j in plain] == [j.id for j in want]


def test_vouched_submit_order_keeps_ties_in_that_order() -> None:
    """With ``in_submit_order`` (pending in (submit_time, id) order, no admin priority) the
    stable sort of ``Priorities`` alone gives the tuple-key order: each run of equal
    priorities is already in (submit_time, id) order."""
    import random

    from builders import cluster

    from corral.core import priority
    from corral.core.config import PriorityWeights, SchedulerConfig
    from corral.core.priority.multifactor import Priorities

    rng = random.Random(11)
    pending = sorted((job(k).cpus(rng.choice([1, 2, 4])).submit(float(rng.randint(0, 30)))
                      .build() for k in range(1, 300)), key=lambda j: (j.submit_time, j.id))
    snap = cluster().snapshot(pending=pending)
    for w in (PriorityWeights(), PriorityWeights(age=0, fairshare=0, job_size=0,
                                                 partition=0, qos=0),
              PriorityWeights(fairshare=0, job_size=0, partition=0, qos=0)):
        prio = priority.compute(snap, SchedulerConfig(weights=w), 100.0)
        assert isinstance(prio, Priorities)
        got = order_jobs(snap.pending, prio, (), ReservationPolicy.CURRENT_HIGHEST,
                         in_submit_order=True)
        want = sorted(snap.pending, key=lambda j: (-prio[j.id], j.submit_time, j.id))
        assert [j.id for j in got] == [j.id for j in want]
        assert len({prio[j.id] for j in pending}) < len(pending)  # ties were there


def test_priorities_read_as_the_dict_by_job_id() -> None:
    from corral.core.priority.multifactor import Priorities

    pending = tuple(job(k).build() for k in (4, 2, 9))
    prio = Priorities(pending, [1.5, -2.0, 0.0])
    assert dict(prio) == {4: 1.5, 2: -2.0, 9: 0.0} and prio == {4: 1.5, 2: -2.0, 9: 0.0}
    assert list(prio) == [4, 2, 9] and len(prio) == 3 and 2 in prio and 5 not in prio
    assert prio[9] == 0.0 and prio.get(5) is None and prio.get(5, 3.0) == 3.0
    with pytest.raises(ValueError, match="3 jobs but 2 values"):
        Priorities(pending, [1.0, 2.0])
