"""A tiny forward simulator and invariant checks for the core's property tests.

Jobs run exactly their time limit (the case backfill guarantees are stated for); a cycle
runs at t=0 and at every job end. ``check_allocations`` verifies independently of the core's
own bookkeeping that no core or GPU is given twice and no node's memory is exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from builders import Cluster
from hypothesis import strategies as st

from corral.core import run_cycle
from corral.core.config import SchedulerConfig
from corral.core.decisions import CycleResult, Reserve
from corral.core.model.job import Job, JobSpec, JobState
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState


def check_allocations(cluster: Cluster, running: list[Job]) -> None:
    specs = {n.spec.name: n.spec for n in cluster.nodes}
    cores: dict[str, set[int]] = {}
    gpus: dict[str, set[int]] = {}
    mem: dict[str, int] = {}
    for j in running:
        assert j.allocation is not None
        for na in j.allocation.nodes:
            spec = specs[na.node]
            used = cores.setdefault(na.node, set())
            assert all(0 <= c < spec.cores for c in na.cores), (j.id, na)
            assert not used & set(na.cores), f"core given twice on {na.node}: job {j.id}"
            assert len(set(na.cores)) == len(na.cores)
            used |= set(na.cores)
            g_used = gpus.setdefault(na.node, set())
            ids = {g.index for g in spec.gpus}
            assert set(na.gpus) <= ids and not g_used & set(na.gpus), (j.id, na)
            g_used |= set(na.gpus)
            mem[na.node] = mem.get(na.node, 0) + na.mem_mb
            assert mem[na.node] <= spec.mem_mb, f"memory over-allocated on {na.node}"


def check_shape(job: Job, result_alloc_tasks: int, nodes: int) -> None:
    spec = job.spec
    if spec.task_groups:
        need = spec.min_available if spec.min_available is not None else sum(
            g.replicas for g in spec.task_groups)
        assert result_alloc_tasks >= need, "gang started below min_available"
        return
    nmax = spec.nodes_max if spec.nodes_max is not None else spec.nodes_min
    if spec.ntasks is not None:
        assert result_alloc_tasks == spec.ntasks
        assert min(spec.nodes_min, spec.ntasks) <= nodes <= min(nmax, spec.ntasks)
    else:
        assert spec.nodes_min <= nodes <= nmax


@dataclass
class Trace:
    starts: dict[int, float] = field(default_factory=dict)
    reserved_at: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    rejected: set[int] = field(default_factory=set)
    results: list[CycleResult] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)
    cycles: int = 0


def simulate(cluster: Cluster, jobs: list[Job], config: SchedulerConfig,
             max_cycles: int = 400) -> Trace:
    trace = Trace()
    pending = list(jobs)
    running: list[Job] = []
    reserved: tuple[int, ...] = ()
    plans: tuple[Reserve, ...] = ()
    t = 0.0
    for _ in range(max_cycles):
        snap = cluster.snapshot(pending=pending, running=running, reserved=reserved,
                                reservations=plans)
        r = run_cycle(snap, config, t)
        trace.cycles += 1
        trace.results.append(r)
        reserved = r.reserved
        plans = r.reservations
        by_id = {j.id: j for j in pending}
        for x in r.rejects:
            trace.rejected.add(x.job_id)
        for res in r.reservations:
            trace.reserved_at.setdefault(res.job_id, []).append((t, res.start_time))
        for s in r.starts:
            j = by_id[s.job_id]
            check_shape(j, s.allocation.tasks, len(s.allocation.node_names))
            running.append(replace(j, state=JobState.RUNNING, start_time=t,
                                   allocation=s.allocation, partition=s.allocation.partition,
                                   time_limit_s=s.time_limit_s))
            trace.starts[j.id] = t
        gone = {s.job_id for s in r.starts} | trace.rejected
        pending = [j for j in pending if j.id not in gone]
        check_allocations(cluster, running)
        if not pending:
            break
        ends = [j.start_time + j.time_limit_s for j in running
                if j.start_time is not None and j.time_limit_s is not None]
        if not ends:
            trace.stuck = [j.id for j in pending]
            break
        t = min(ends)
        running = [j for j in running if j.start_time + j.time_limit_s > t]  # type: ignore[operator]
    else:
        trace.stuck = [j.id for j in pending]
    return trace


# -- strategies --------------------------------------------------------------------------

@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 6) -> Cluster:
    n = draw(st.integers(1, max_nodes))
    sockets = draw(st.integers(1, 2))
    cps = draw(st.integers(1, 4))
    mem = draw(st.sampled_from([4000, 8000, 16000]))
    tree = draw(st.booleans())  # leaves sw0..sw2 under spines sp0/sp1 under top
    nodes = []
    for k in range(n):
        ngpu = draw(st.sampled_from([0, 0, 2]))
        gtype = draw(st.sampled_from(["a100", "h100"]))
        gpus = tuple(GpuSpec(g, gtype, numa=g % sockets) for g in range(ngpu))
        leaf = k % 3 if tree else k % 2
        nodes.append(Node(NodeSpec(f"n{k:02d}", sockets, cps, 1, mem, gpus,
                                   switch=f"sw{leaf}",
                                   uplinks=(f"sp{leaf % 2}", "top") if tree else ()),
                          NodeState.IDLE))
    from corral.core.model.partition import Partition

    return Cluster(nodes, [Partition("batch", tuple(x.spec.name for x in nodes),
                                     is_default=True)])


@st.composite
def unit_clusters(draw: st.DrawFn, max_nodes: int = 12) -> Cluster:
    """One-core nodes (the count-only planning path, as in SWF trace replays)."""
    from corral.core.model.partition import Partition

    n = draw(st.integers(1, max_nodes))
    nodes = [Node(NodeSpec(f"u{k:02d}", 1, 1, 1, 1000), NodeState.IDLE) for k in range(n)]
    return Cluster(nodes, [Partition("all", tuple(x.spec.name for x in nodes),
                                     is_default=True)])


@st.composite
def unit_workloads(draw: st.DrawFn, max_jobs: int = 14) -> list[Job]:
    n = draw(st.integers(1, max_jobs))
    return [Job(k + 1, JobSpec(nodes_min=draw(st.integers(1, 6)),
                               time_limit_s=draw(st.integers(1, 40))), float(k))
            for k in range(n)]


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    kind = draw(st.sampled_from(["plain", "plain", "flex", "excl", "gang", "gpu"]))
    wall = draw(st.integers(1, 50))
    if kind == "gang":
        from corral.core.model.job import TaskGroup

        groups = tuple(TaskGroup(f"g{k}", draw(st.integers(1, 3)), draw(st.integers(1, 2)),
                                 0, draw(st.sampled_from([0, 0, 1])))
                       for k in range(draw(st.integers(1, 2))))
        return JobSpec(task_groups=groups, time_limit_s=wall)
    nodes = draw(st.integers(1, 3))
    if kind == "flex":
        return JobSpec(ntasks=draw(st.integers(1, 8)), nodes_min=1,
                       nodes_max=draw(st.integers(1, 4)), time_limit_s=wall,
                       mem_per_cpu_mb=draw(st.sampled_from([None, 500])))
    if kind == "excl":
        return JobSpec(nodes_min=nodes, exclusive=True, time_limit_s=wall)
    if kind == "gpu":
        return JobSpec(nodes_min=1, gpus_per_node=draw(st.integers(1, 2)),
                       cpus_per_task=draw(st.integers(1, 2)), time_limit_s=wall)
    return JobSpec(nodes_min=nodes, ntasks_per_node=draw(st.integers(1, 3)),
                   cpus_per_task=draw(st.integers(1, 2)), time_limit_s=wall,
                   mem_per_node_mb=draw(st.sampled_from([None, 1000, 3000])),
                   time_min_s=draw(st.sampled_from([None, None, 1, max(1, wall // 3)])))


@st.composite
def workloads(draw: st.DrawFn, max_jobs: int = 10) -> list[Job]:
    n = draw(st.integers(1, max_jobs))
    return [Job(k + 1, draw(specs()), float(k)) for k in range(n)]
