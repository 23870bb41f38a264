"""The start cap (``SchedulerConfig.max_starts_per_cycle``, Slurm's sched_max_job_start).

Property: a capped cycle decides for the jobs before the cap exactly what the uncapped
cycle decides for them: its starts are the uncapped cycle's first ``cap`` starts, in
order, and (EASY and strict) its reservations the first ones of the uncapped cycle's, so a
capped cycle never starts a job the uncapped one would not have started at that point
and delays no reservation. Cycles repeated with the starts applied run every job that
fits, ``cap`` at a time, and the jobs behind the cap wait with reason ``Priority``.
"""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.cycle import clear_caches
from corral.core.model.job import Job, JobState

QUEUE = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 50), st.integers(1, 2),
                           st.integers(1, 20)), min_size=1, max_size=40)


def _queue(spec: list[tuple[int, int, int, int]]) -> list[Job]:
    return [job(k).cpus(cpus).nodes(nodes).submit(float(submit)).walltime_s(60 * limit)
            .build() for k, (cpus, submit, nodes, limit) in enumerate(spec, 1)]


@settings(max_examples=80, deadline=None)
@given(QUEUE, st.sampled_from(list(BackfillMode)),
       st.sampled_from([Ordering.FCFS, Ordering.MULTIFACTOR]), st.integers(1, 6),
       st.booleans())
def test_capped_cycle_is_a_prefix_of_the_uncapped_one(
        spec: list[tuple[int, int, int, int]], mode: BackfillMode, ordering: Ordering,
        cap: int, annotate: bool) -> None:
    c = cluster(nodes=3)
    running = [job(1000).cpus(6).walltime_s(900).running_on(("n001", 6), start=0).build()]
    snap = c.snapshot(pending=_queue(spec), running=running)
    base = SchedulerConfig(backfill=mode, ordering=ordering, annotate_pending=annotate)
    clear_caches()
    full = run_cycle(snap, base, 100.0)
    capped = run_cycle(snap, replace(base, max_starts_per_cycle=cap), 100.0)
    assert capped.starts == full.starts[:cap]
    assert len(capped.starts) == min(cap, len(full.starts))
    if mode is not BackfillMode.CONSERVATIVE:
        n = len(capped.reservations)
        assert capped.reservations == full.reservations[:n]
    if annotate and len(full.starts) > cap:
        started = {s.job_id for s in capped.starts}
        behind = [info for jid, info in capped.pending.items() if jid not in started
                  and "max_starts_per_cycle" in info.detail]
        assert behind and all(i.reason == "Priority" for i in behind)


def test_a_burst_is_split_over_cycles() -> None:
    """20 one-CPU jobs on 3 idle 8-CPU nodes, cap 4: 4 per cycle until 20 run; the
    jobs behind the cap come as one compact tail from the second cycle on."""
    c = cluster(nodes=3)
    pending = {j.id: j for j in (job(k).cpus(1).submit(float(k)).walltime_s(600).build()
                                 for k in range(1, 21))}
    running: dict[int, Job] = {}
    cfg = SchedulerConfig(ordering=Ordering.FCFS, max_starts_per_cycle=4)
    clear_caches()
    per_cycle = []
    for cycle in range(8):
        r = run_cycle(c.snapshot(pending=list(pending.values()),
                                 running=list(running.values())), cfg, 10.0 + cycle)
        per_cycle.append(len(r.starts))
        if cycle == 1:
            tail = r.pending.tail  # type: ignore[union-attr]
            assert "max_starts_per_cycle=4" in tail.detail and tail.reason == "Priority"
            assert list(tail.job_ids) == list(range(9, 21))  # in queue order
            assert list(tail.ranks) == list(range(5, 17))
        for s in r.starts:
            j = pending.pop(s.job_id)
            running[j.id] = replace(j, state=JobState.RUNNING, start_time=10.0 + cycle,
                                    allocation=s.allocation,
                                    partition=s.allocation.partition,
                                    time_limit_s=s.time_limit_s)
    assert per_cycle == [4, 4, 4, 4, 4, 0, 0, 0]
    assert sorted(running) == list(range(1, 21))  # in priority order, 4 at a time
