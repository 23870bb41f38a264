"""Property tests of task groups' NUMA policies (hypothesis): over random nodes (1-4
domains, some interleaving core ids, GPUs with and without NUMA affinity) and workloads
mixing plain jobs with gangs of every ``topologyPolicy``, a single-numa-node replica
never spans two domains (nor takes a GPU of another domain), a restricted replica never
spans more domains than the fewest that hold it on its node, nothing is allocated twice
(``simkit.check_allocations``), every job runs or is refused at submit, and the same
cycle gives the same decisions."""

from __future__ import annotations

import os
from itertools import combinations

from builders import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import SchedulerConfig
from corral.core.model.job import Job, JobSpec, TaskGroup
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState, NumaDomain
from corral.core.model.partition import Partition
from corral.core.placement import task_cores

from .simkit import simulate

SETTINGS = settings(max_examples=int(os.environ.get("CORE_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
POLICIES = ["none", "best-effort", "restricted", "single-numa-node"]


@st.composite
def numa_clusters(draw: st.DrawFn) -> Cluster:
    nodes = []
    for k in range(draw(st.integers(1, 3))):
        ndom = draw(st.integers(1, 4))
        per = draw(st.integers(1, 4))
        cores = ndom * per
        if draw(st.booleans()):  # interleaved: core c on domain c % ndom
            doms = tuple(NumaDomain(d, tuple(range(d, cores, ndom))) for d in range(ndom))
        else:
            doms = tuple(NumaDomain(d, tuple(range(d * per, (d + 1) * per)))
                         for d in range(ndom))
        ngpu = draw(st.sampled_from([0, 0, 2, 4]))
        affinity = draw(st.booleans())
        gpus = tuple(GpuSpec(g, "a100", numa=(g % ndom) if affinity else None)
                     for g in range(ngpu))
        nodes.append(Node(NodeSpec(f"n{k}", 1, cores, 1, 64_000, gpus, numa=doms),
                          NodeState.IDLE))
    return Cluster(nodes, [Partition("batch", tuple(n.spec.name for n in nodes),
                                     is_default=True)])


@st.composite
def numa_workloads(draw: st.DrawFn) -> list[Job]:
    jobs = []
    for k in range(draw(st.integers(1, 8))):
        wall = draw(st.integers(1, 30))
        if draw(st.integers(0, 3)) == 0:
            spec = JobSpec(cpus_per_task=draw(st.integers(1, 5)), time_limit_s=wall)
        else:
            groups = tuple(
                TaskGroup(f"g{i}", draw(st.integers(1, 4)), draw(st.integers(1, 6)),
                          gpus_per_task=draw(st.sampled_from([0, 0, 1, 2])),
                          numa_policy=draw(st.sampled_from(POLICIES)))
                for i in range(draw(st.integers(1, 2))))
            spec = JobSpec(task_groups=groups, time_limit_s=wall,
                           exclusive=draw(st.integers(0, 5)) == 0)
        jobs.append(Job(k + 1, spec, float(k)))
    return jobs


def _width(spec: NodeSpec, cores: int, gpus: int) -> int:
    """The fewest domains of ``spec`` holding ``cores`` cores and ``gpus`` GPUs (GPUs of
    no domain go with any set), worked out here independently of the core."""
    doms = [d.id for d in spec.numa]
    loose = sum(1 for g in spec.gpus if g.numa is None)
    for m in range(1, len(doms) + 1):
        for ds in combinations(spec.numa, m):
            ids = {d.id for d in ds}
            if (sum(len(d.cores) for d in ds) >= cores
                    and sum(1 for g in spec.gpus if g.numa in ids) + loose >= gpus):
                return m
    return 0


def _check_alignment(cluster: Cluster, jobs: list[Job], results: list[object]) -> None:
    specs = {n.spec.name: n.spec for n in cluster.nodes}
    by_id = {j.id: j for j in jobs}
    for r in results:
        for s in r.starts:  # type: ignore[attr-defined]
            groups = {g.name: g for g in by_id[s.job_id].spec.task_groups}
            for na in s.allocation.nodes:
                g = groups.get(na.group or "")
                if g is None or g.numa_policy not in ("restricted", "single-numa-node"):
                    continue
                spec = specs[na.node]
                dom_of = {c: d.id for d in spec.numa for c in d.cores}
                gpu_dom = {x.index: x.numa for x in spec.gpus}
                for k, cores in enumerate(task_cores(na, g.cpus_per_task)):
                    assert len(cores) == g.cpus_per_task, (s, na)
                    gids = na.gpus[k * g.gpus_per_task:(k + 1) * g.gpus_per_task]
                    assert len(gids) == g.gpus_per_task, (s, na)
                    used = {dom_of[c] for c in cores}
                    if g.numa_policy == "single-numa-node":
                        assert len(used) == 1, (g, na, used)
                        assert all(gpu_dom[x] in (None, *used) for x in gids), (g, na)
                    else:
                        gdoms = {gpu_dom[x] for x in gids} - {None}
                        width = _width(spec, g.cpus_per_task, g.gpus_per_task)
                        assert len(used | gdoms) <= width, (g, na, used, gdoms, width)


@SETTINGS
@given(numa_clusters(), numa_workloads())
def test_numa_policies_hold_and_nothing_is_given_twice(cluster, jobs) -> None:  # type: ignore[no-untyped-def]
    trace = simulate(cluster, jobs, SchedulerConfig())
    assert not trace.stuck, f"jobs never started: {trace.stuck}"
    assert set(trace.starts) | trace.rejected == {j.id for j in jobs}
    _check_alignment(cluster, jobs, trace.results)


@SETTINGS
@given(numa_clusters(), numa_workloads())
def test_numa_placement_is_deterministic(cluster, jobs) -> None:  # type: ignore[no-untyped-def]
    snap = cluster.snapshot(pending=jobs)
    first = run_cycle(snap, SchedulerConfig(), 0.0)
    again = run_cycle(cluster.snapshot(pending=list(jobs)), SchedulerConfig(), 0.0)
    assert first.starts == again.starts and first.rejects == again.rejects
