"""Preemption by partition priority tier and by QOS."""

from __future__ import annotations

from builders import cluster, job

from corral.core import run_cycle
from corral.core.config import Ordering, PreemptType, SchedulerConfig
from corral.core.model.job import JobState
from corral.core.model.partition import PreemptMode
from corral.core.preempt import SUSPEND_WARNING


def two_tier(mode: PreemptMode = PreemptMode.REQUEUE, grace: int = 30):  # type: ignore[no-untyped-def]
    c = cluster(nodes=2, sockets=1, cores_per_socket=4)
    c.partition("low", ["n001", "n002"], priority_tier=1, preempt_mode=mode, grace_time_s=grace)
    c.partition("high", ["n001", "n002"], priority_tier=10)
    return c


def cfg(**kw: object) -> SchedulerConfig:
    kw.setdefault("preempt_type", PreemptType.PARTITION_PRIO)
    return SchedulerConfig(ordering=Ordering.FCFS, **kw)  # type: ignore[arg-type]


def test_fewest_lowest_victims_by_tier() -> None:
    c = two_tier()
    running = [
        job(1).running_on(("n001", 2), partition="low", start=10).build(),
        job(2).running_on(("n001", 2), partition="low", start=20).build(),
        job(3).running_on(("n002", 4), partition="low", start=5).build(),
    ]
    # n001 holds two 2-core jobs at cores 0-1 and... make them disjoint
    from builders import alloc_on

    running[1] = job(2).running_on(alloc_on("n001", [2, 3], 2000), partition="low",
                                   start=20).build()
    pend = job(9).partition("high").cpus(4).build()
    r = run_cycle(c.snapshot(pending=[pend], running=running), cfg(), 100.0)
    assert not r.starts
    # one victim suffices (job 3 frees a whole node); two would be needed on n001
    assert [(p.victim_id, p.mode, p.grace_s) for p in r.preemptions] == [
        (3, PreemptMode.REQUEUE, 30)]
    assert r.pending[9].reason == "Resources" and "preempting 1" in r.pending[9].detail


def test_equal_or_higher_tier_is_never_evicted() -> None:
    c = two_tier()
    running = [job(1).running_on(("n001", 4), partition="high").build(),
               job(2).running_on(("n002", 4), partition="high").build()]
    r = run_cycle(c.snapshot(pending=[job(9).partition("high").cpus(4).build()],
                             running=running), cfg(), 0.0)
    assert not r.preemptions


def test_no_preemption_when_off_or_not_needed() -> None:
    c = two_tier(mode=PreemptMode.OFF)
    running = [job(1).running_on(("n001", 4), partition="low").build(),
               job(2).running_on(("n002", 4), partition="low").build()]
    snap = c.snapshot(pending=[job(9).partition("high").cpus(4).build()], running=running)
    assert not run_cycle(snap, cfg(), 0.0).preemptions
    c = two_tier()
    snap = c.snapshot(pending=[job(9).partition("high").cpus(4).build()], running=running[:1])
    r = run_cycle(snap, cfg(), 0.0)
    assert not r.preemptions and len(r.starts) == 1


def test_jobs_already_ending_are_waited_for() -> None:
    c = two_tier()
    running = [job(1).running_on(("n001", 4), partition="low",
                                 state=JobState.COMPLETING).build(),
               job(2).running_on(("n002", 4), partition="low").build()]
    r = run_cycle(c.snapshot(pending=[job(9).partition("high").cpus(4).build()],
                             running=running), cfg(), 0.0)
    assert not r.preemptions and not r.starts


def test_suspend_only_when_allowed_and_warns_for_multi_node() -> None:
    c = two_tier(mode=PreemptMode.SUSPEND)
    running = [job(1).running_on(("n001", 4), ("n002", 4), partition="low").build()]
    pend = job(9).partition("high").cpus(4).mem_per_cpu(100).build()
    snap = c.snapshot(pending=[pend], running=running)
    r = run_cycle(snap, cfg(), 0.0)
    assert [p.mode for p in r.preemptions] == [PreemptMode.REQUEUE]
    r = run_cycle(snap, cfg(allow_suspend=True), 0.0)
    (p,) = r.preemptions
    assert p.mode == PreemptMode.SUSPEND and p.warning == SUSPEND_WARNING and p.grace_s == 0


def test_requeue_falls_back_to_cancel_for_non_requeueable_jobs() -> None:
    c = two_tier()
    running = [job(1).requeue(False).running_on(("n001", 4), ("n002", 4),
                                                partition="low").build()]
    r = run_cycle(c.snapshot(pending=[job(9).partition("high").cpus(4).build()],
                             running=running), cfg(), 0.0)
    assert [p.mode for p in r.preemptions] == [PreemptMode.CANCEL]


def test_qos_preemption_uses_the_preempt_list() -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=4)
    c.add_qos("normal").add_qos("scavenger", mode=PreemptMode.REQUEUE, grace_s=5)
    c.add_qos("urgent", priority=100, preempt=["scavenger"])
    running = [job(1).qos("scavenger").running_on(("n001", 2)).build(),
               job(2).qos("normal").running_on(
                   __import__("builders").alloc_on("n001", [2, 3], 2000)).build()]
    snap = c.snapshot(pending=[job(9).qos("urgent").cpus(2).build()], running=running)
    r = run_cycle(snap, cfg(preempt_type=PreemptType.QOS), 0.0)
    assert [(p.victim_id, p.grace_s) for p in r.preemptions] == [(1, 5)]
    snap = c.snapshot(pending=[job(9).qos("urgent").cpus(4).build()], running=running)
    assert not run_cycle(snap, cfg(preempt_type=PreemptType.QOS), 0.0).preemptions
