"""Property: preemption only ever evicts jobs of a lower partition tier, or of a QOS the
preemptor's QOS may preempt; and the preemptor would fit once its victims are gone."""

from __future__ import annotations

from dataclasses import replace

from builders import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import Ordering, PreemptType, SchedulerConfig
from corral.core.model.job import Job, JobSpec, JobState
from corral.core.model.node import Node, NodeSpec
from corral.core.model.partition import Partition, PreemptMode, Qos

SETTINGS = settings(max_examples=int(__import__("os").environ.get("CORE_EXAMPLES", "60")),
                    deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def setups(draw: st.DrawFn) -> tuple[Cluster, list[Job], list[Job], PreemptType]:
    n = draw(st.integers(1, 4))
    nodes = [Node(NodeSpec(f"n{k}", 1, draw(st.integers(1, 4)), 1, 8000)) for k in range(n)]
    names = tuple(x.spec.name for x in nodes)
    tiers = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))
    parts = [Partition(f"p{k}", names, priority_tier=t,
                       preempt_mode=draw(st.sampled_from(list(PreemptMode))),
                       is_default=k == 0) for k, t in enumerate(tiers)]
    qos = [Qos("low", 0, frozenset(), draw(st.sampled_from(list(PreemptMode)))),
           Qos("mid", 10, frozenset({"low"}), PreemptMode.REQUEUE),
           Qos("high", 20, frozenset({"low", "mid"}), PreemptMode.CANCEL)]
    c = Cluster(nodes, parts, qos)
    kind = draw(st.sampled_from([PreemptType.PARTITION_PRIO, PreemptType.QOS]))

    def spec() -> JobSpec:
        return JobSpec(cpus_per_task=draw(st.integers(1, 3)),
                       partitions=(draw(st.sampled_from([p.name for p in parts])),),
                       qos=draw(st.sampled_from(["low", "mid", "high"])),
                       time_limit_s=100, requeue=draw(st.booleans()))

    first = [Job(k + 1, spec(), float(k)) for k in range(draw(st.integers(1, 8)))]
    later = [Job(100 + k, spec(), 100.0 + k) for k in range(draw(st.integers(1, 4)))]
    return c, first, later, kind


@SETTINGS
@given(setups(), st.booleans())
def test_only_lower_tier_or_listed_qos_is_preempted(setup, allow_suspend) -> None:  # type: ignore[no-untyped-def]
    c, first, later, kind = setup
    fill = SchedulerConfig(ordering=Ordering.FCFS)
    r = run_cycle(c.snapshot(pending=first), fill, 0.0)
    by_id = {j.id: j for j in first}
    running = [replace(by_id[s.job_id], state=JobState.RUNNING, start_time=0.0,
                       allocation=s.allocation, partition=s.allocation.partition)
               for s in r.starts]
    cfg = SchedulerConfig(ordering=Ordering.FCFS, preempt_type=kind, allow_suspend=allow_suspend)
    r = run_cycle(c.snapshot(pending=later, running=running), cfg, 10.0)
    tiers = {p.name: p.priority_tier for p in c.partitions}
    qos = {q.name: q for q in c.qos}
    run_by_id = {j.id: j for j in running}
    later_by_id = {j.id: j for j in later}
    for p in r.preemptions:
        victim = run_by_id[p.victim_id]
        job = later_by_id[p.for_job_id]
        if kind == PreemptType.PARTITION_PRIO:
            assert tiers[victim.partition or ""] < max(tiers[x] for x in job.spec.partitions)
        else:
            assert victim.spec.qos in qos[job.spec.qos or ""].preempt
        assert p.mode != PreemptMode.OFF
        if p.mode == PreemptMode.SUSPEND:
            assert allow_suspend
        if p.mode == PreemptMode.REQUEUE:
            assert victim.spec.requeue
    victims = {p.victim_id for p in r.preemptions}
    assert len(victims) == len(r.preemptions), "a job was preempted twice in one cycle"
