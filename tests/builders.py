"""Fluent builders for core test data: jobs, clusters and snapshots.

    job().nodes(4).gpus(2).walltime_s(3600).account("a").build()
    c = cluster(nodes=16, switches=4, gpus_per_node=4)
    snap = c.snapshot(pending=[...], running=[...])

Shared by every team's tests; keep it general. Job ids come from a counter unless given
(``job(7)``); a job's submit time defaults to its id, so submit order is id order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from corral.core.config import SchedulerConfig
from corral.core.decisions import CycleResult
from corral.core.model.account import Account, AccountTree, Association
from corral.core.model.job import (
    Allocation,
    Dependency,
    DependencyKind,
    DependencySpec,
    HoldKind,
    Job,
    JobSpec,
    JobState,
    NodeAllocation,
    TaskGroup,
)
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState
from corral.core.model.partition import Partition, PreemptMode, Qos, QosLimits
from corral.core.snapshot import ClusterSnapshot, FinishedJob

_ids = itertools.count(1)


class JobBuilder:
    """Builds a ``Job`` (pending by default) around a ``JobSpec``."""

    def __init__(self, job_id: int | None = None) -> None:
        self._id = job_id if job_id is not None else next(_ids) + 100_000
        self._spec: dict[str, Any] = {}
        self._job: dict[str, Any] = {}

    # spec -------------------------------------------------------------------------------
    def name(self, name: str) -> JobBuilder:
        self._spec["name"] = name
        return self

    def user(self, user: str) -> JobBuilder:
        self._spec["user"] = user
        return self

    def account(self, account: str) -> JobBuilder:
        self._spec["account"] = account
        return self

    def partition(self, *names: str) -> JobBuilder:
        self._spec["partitions"] = tuple(names)
        return self

    def qos(self, qos: str) -> JobBuilder:
        self._spec["qos"] = qos
        return self

    def nodes(self, nmin: int, nmax: int | None = None) -> JobBuilder:
        self._spec["nodes_min"] = nmin
        self._spec["nodes_max"] = nmax
        return self

    def tasks(self, n: int) -> JobBuilder:
        self._spec["ntasks"] = n
        return self

    def tasks_per_node(self, n: int) -> JobBuilder:
        self._spec["ntasks_per_node"] = n
        return self

    def cpus(self, n: int) -> JobBuilder:
        """CPUs per task."""
        self._spec["cpus_per_task"] = n
        return self

    def mem(self, mb: int) -> JobBuilder:
        """Memory per node (``--mem``; 0 = whole node)."""
        self._spec["mem_per_node_mb"] = mb
        return self

    def mem_per_cpu(self, mb: int) -> JobBuilder:
        self._spec["mem_per_cpu_mb"] = mb
        return self

    def gpus(self, n: int, gpu_type: str | None = None) -> JobBuilder:
        """GPUs per node."""
        self._spec["gpus_per_node"] = n
        if gpu_type is not None:
            self._spec["gpu_type"] = gpu_type
        return self

    def gpus_per_task(self, n: int) -> JobBuilder:
        self._spec["gpus_per_task"] = n
        return self

    def gpus_total(self, n: int) -> JobBuilder:
        """GPUs per job (``--gpus``)."""
        self._spec["gpus"] = n
        return self

    def gpu_type(self, t: str) -> JobBuilder:
        self._spec["gpu_type"] = t
        return self

    def gres(self, **counts: int) -> JobBuilder:
        self._spec["gres"] = tuple(sorted(counts.items()))
        return self

    def licenses(self, **counts: int) -> JobBuilder:
        self._spec["licenses"] = tuple(sorted(counts.items()))
        return self

    def walltime_s(self, s: int) -> JobBuilder:
        self._spec["time_limit_s"] = s
        return self

    def constraint(self, expr: str) -> JobBuilder:
        self._spec["constraint"] = expr
        return self

    def exclusive(self, on: bool = True) -> JobBuilder:
        self._spec["exclusive"] = on
        return self

    def switches(self, n: int, wait_s: int = 0) -> JobBuilder:
        self._spec["switches"] = n
        self._spec["switches_wait_s"] = wait_s
        return self

    def nodelist(self, *names: str) -> JobBuilder:
        self._spec["nodelist"] = tuple(names)
        return self

    def exclude(self, *names: str) -> JobBuilder:
        self._spec["exclude"] = tuple(names)
        return self

    def group(self, name: str, replicas: int = 1, cpus: int = 1, mem_mb: int = 0,
              gpus: int = 0, gpu_type: str | None = None, min_available: int | None = None,
              constraint: str | None = None, numa: str = "none") -> JobBuilder:
        groups = tuple(self._spec.get("task_groups", ()))
        self._spec["task_groups"] = groups + (TaskGroup(
            name, replicas, cpus, mem_mb, gpus, gpu_type, min_available, constraint,
            numa_policy=numa),)
        return self

    def min_available(self, n: int) -> JobBuilder:
        self._spec["min_available"] = n
        return self

    def depends(self, kind: str | DependencyKind, *job_ids: int, delay_s: int = 0,
                any_of: bool = False) -> JobBuilder:
        dep: DependencySpec = self._spec.get("dependency") or DependencySpec()
        item = Dependency(DependencyKind(kind), tuple(job_ids), delay_s)
        self._spec["dependency"] = DependencySpec(dep.items + (item,), any_of or dep.any_of)
        return self

    def begin(self, t: float) -> JobBuilder:
        self._spec["begin_time"] = t
        return self

    def nice(self, n: int) -> JobBuilder:
        self._spec["nice"] = n
        return self

    def requeue(self, on: bool) -> JobBuilder:
        self._spec["requeue"] = on
        return self

    def spread(self, on: bool = True) -> JobBuilder:
        self._spec["spread"] = on
        return self

    def spec(self, **fields: Any) -> JobBuilder:
        self._spec.update(fields)
        return self

    # record -----------------------------------------------------------------------------
    def id(self, job_id: int) -> JobBuilder:
        self._id = job_id
        return self

    def submit(self, t: float) -> JobBuilder:
        self._job["submit_time"] = t
        return self

    def hold(self, kind: HoldKind = HoldKind.USER) -> JobBuilder:
        self._job["hold"] = kind
        return self

    def priority(self, p: int) -> JobBuilder:
        """Admin priority override."""
        self._job["admin_priority"] = p
        return self

    def array(self, array_job_id: int, task_id: int, max_running: int | None = None
              ) -> JobBuilder:
        self._job["array_job_id"] = array_job_id
        self._job["array_task_id"] = task_id
        self._job["array_max_running"] = max_running
        return self

    def eligible(self, t: float) -> JobBuilder:
        self._job["eligible_time"] = t
        return self

    def running_on(self, *nodes: NodeAllocation | tuple[str, int], start: float = 0.0,
                   partition: str = "batch", state: JobState = JobState.RUNNING) -> JobBuilder:
        """Mark the job running with an explicit allocation.

        Each node is a ``NodeAllocation`` or ``(node_name, cores)``, the latter using
        cores ``0..cores-1`` and 1000 MB per core (``alloc_on`` builds precise ones).
        """
        nas: list[NodeAllocation] = []
        for n in nodes:
            if isinstance(n, NodeAllocation):
                nas.append(n)
            else:
                nas.append(NodeAllocation(n[0], tuple(range(n[1])), n[1], n[1] * 1000))
        self._job.update(state=state, start_time=start, partition=partition,
                         allocation=Allocation(partition, tuple(nas)))
        return self

    def build(self) -> Job:
        spec = JobSpec(**self._spec)
        fields = {"submit_time": float(self._id)}
        fields.update(self._job)
        return Job(self._id, spec, **fields)


def job(job_id: int | None = None) -> JobBuilder:
    return JobBuilder(job_id)


def alloc_on(node: str, cores: Iterable[int], mem_mb: int = 0, gpus: Sequence[int] = (),
             gpu_type: str = "a100", tasks: int = 1) -> NodeAllocation:
    cs = tuple(cores)
    return NodeAllocation(node, cs, len(cs), mem_mb, tuple(gpus), tuple(gpu_type for _ in gpus),
                          tasks=tasks)


@dataclass
class Cluster:
    nodes: list[Node]
    partitions: list[Partition]
    qos: list[Qos] = field(default_factory=list)
    accounts: AccountTree = field(default_factory=AccountTree)
    licenses: tuple[tuple[str, int], ...] = ()

    def snapshot(self, pending: Sequence[Job] = (), running: Sequence[Job] = (),
                 finished: Sequence[FinishedJob] = (), reserved: Sequence[int] = (),
                 **extra: Any) -> ClusterSnapshot:
        return ClusterSnapshot(
            nodes=tuple(self.nodes), partitions=tuple(self.partitions), qos=tuple(self.qos),
            accounts=self.accounts, pending=tuple(pending), running=tuple(running),
            finished={f.id: f for f in finished}, licenses=self.licenses,
            reserved=tuple(reserved), **extra,
        )

    def names(self) -> list[str]:
        return [n.spec.name for n in self.nodes]

    def set_state(self, name: str, state: NodeState, reason: str = "") -> Cluster:
        self.nodes = [replace(n, state=state, reason=reason) if n.spec.name == name else n
                      for n in self.nodes]
        return self

    def partition(self, name: str, nodes: Sequence[str] | None = None, **kw: Any) -> Cluster:
        """Add (or replace) a partition over ``nodes`` (default: all nodes)."""
        names = tuple(nodes) if nodes is not None else tuple(self.names())
        self.partitions = [p for p in self.partitions if p.name != name]
        self.partitions.append(Partition(name, names, **kw))
        return self

    def add_qos(self, name: str, priority: int = 0, preempt: Iterable[str] = (),
                mode: PreemptMode = PreemptMode.CANCEL, grace_s: int = 0,
                limits: QosLimits | None = None) -> Cluster:
        self.qos.append(Qos(name, priority, frozenset(preempt), mode, grace_s,
                            limits=limits or QosLimits()))
        return self

    def add_account(self, name: str, parent: str = "root", shares: int = 1,
                    users: Iterable[str] = (), limits: QosLimits | None = None) -> Cluster:
        acc = Account(name, parent, shares, limits or QosLimits())
        assoc = tuple(Association(u, name) for u in users)
        self.accounts = AccountTree(self.accounts.accounts + (acc,),
                                    self.accounts.associations + assoc)
        return self


def node_spec(name: str, sockets: int = 2, cores_per_socket: int = 4, mem_mb: int = 16000,
              gpus: int = 0, gpu_type: str = "a100", features: Iterable[str] = (),
              switch: str | None = None, threads_per_core: int = 1,
              gres: Sequence[tuple[str, int]] = (), weight: int = 1) -> NodeSpec:
    gpu_list = tuple(GpuSpec(k, gpu_type, 80_000, numa=k * sockets // gpus if gpus else None)
                     for k in range(gpus))
    return NodeSpec(name, sockets, cores_per_socket, threads_per_core, mem_mb, gpu_list,
                    features=frozenset(features), switch=switch, gres=tuple(gres), weight=weight)


def cluster(nodes: int = 4, sockets: int = 2, cores_per_socket: int = 4, mem_mb: int = 16000,
            gpus_per_node: int = 0, gpu_type: str = "a100", gpu_nodes: int | None = None,
            switches: int = 1, features: Iterable[str] = (), partition: str = "batch",
            prefix: str = "n", max_time_s: int | None = None, threads_per_core: int = 1,
            **partition_kw: Any) -> Cluster:
    """``nodes`` identical nodes named ``n001``...; GPUs on the first ``gpu_nodes`` (default
    all when ``gpus_per_node``), spread round-robin-free over ``switches`` leaf switches in
    contiguous blocks, one default partition over all of them."""
    width = max(3, len(str(nodes)))
    out: list[Node] = []
    per_switch = -(-nodes // max(1, switches))
    gpu_n = nodes if gpu_nodes is None else gpu_nodes
    for k in range(nodes):
        name = f"{prefix}{k + 1:0{width}d}"
        sw = f"sw{k // per_switch + 1}" if switches > 1 else "sw1"
        spec = node_spec(name, sockets, cores_per_socket, mem_mb,
                         gpus_per_node if k < gpu_n else 0, gpu_type, features, sw,
                         threads_per_core)
        out.append(Node(spec, NodeState.IDLE))
    c = Cluster(out, [])
    c.partition(partition, is_default=True, max_time_s=max_time_s, **partition_kw)
    return c


def config(**kw: Any) -> SchedulerConfig:
    return SchedulerConfig(**kw)


def finished(job_id: int, state: JobState = JobState.COMPLETED, exit_code: int = 0,
             end_time: float = 0.0, **kw: Any) -> FinishedJob:
    return FinishedJob(job_id, state, exit_code, end_time=end_time, **kw)


def apply_starts(snap: ClusterSnapshot, result: CycleResult, now: float) -> ClusterSnapshot:
    """The snapshot after the shell has applied ``result``'s starts (and nothing else)."""
    started = {s.job_id: s for s in result.starts}
    running = list(snap.running)
    pending = []
    for j in snap.pending:
        s = started.get(j.id)
        if s is None:
            pending.append(j)
        else:
            running.append(replace(j, state=JobState.RUNNING, start_time=now,
                                   allocation=s.allocation, partition=s.allocation.partition,
                                   time_limit_s=s.time_limit_s))
    return replace(snap, pending=tuple(pending), running=tuple(running),
                   reserved=result.reserved)

