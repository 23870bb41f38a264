"""Normalize a ``JobSpec`` into what placement needs: task sets with per-task and per-node demands.

A job becomes one or more ``TaskSet``s (one for an ordinary job, one per task group for a
Volcano-style gang). Each set says how many tasks it has, how they may spread over nodes
and what one task needs; per-node numbers that depend on the hardware (whole cores per
task under ``CR_Core``: ``ceil(cpus_per_task / threads_per_core)``; the default memory
share of a node) are worked out by placement per node class.

Slurm conventions reproduced here:

* ``nodes_max=None`` means exactly ``nodes_min`` nodes.
* Without ``ntasks``, every node runs ``ntasks_per_node`` tasks (default 1): a *fixed* set.
  With ``ntasks``, the tasks are spread over ``nodes_min..nodes_max`` nodes, at least one
  per node and at most ``ntasks_per_node`` when given: a *flexible* set (``-n 64`` gets
  ``nodes_max=64`` from the front end and lands on as few nodes as fit).
* Memory is per node (``--mem``; ``0`` means the whole node), or per CPU (``--mem-per-cpu``),
  else the partition's or the configuration's default per CPU, else the node's memory
  divided by its CPUs (a proportional share), always counted on the *requested* CPUs.
* GPUs per node, per task, or per job (``--gpus``); a per-job count on a fixed node count
  that divides evenly becomes a per-node count, otherwise it is spread over the nodes.
* ``exclusive`` (or an ``OverSubscribe=EXCLUSIVE`` partition) takes whole idle nodes.

Task groups: each group's tasks may land anywhere (any number of nodes; one a node for a
group with GRES, whose per-task GRES are then the per-node ones). The job starts
only when every group can place at least its minimum and the total reaches the job's
``min_available`` (Volcano ``minAvailable``); the group minimum defaults to all replicas
when the job gives no ``min_available``, else to zero, and the job's minimum defaults to
the sum of the group minimums (at least one task). Replicas beyond the minimum that do not
fit at the start are not started later: the job runs with the tasks it was given. A
group's ``numa_policy`` (``TaskSet.numa``) asks each of its tasks for NUMA alignment
inside its node (``corral.core.placement.numa``); an unknown policy is a ``ShapeError``.

Shapes are memoized per (spec, partition, config); the cache is a bounded memo keyed by
object identity (holding the object, so ids cannot be reused) and never changes a result.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.config import SchedulerConfig
from corral.core.model.job import NUMA_POLICIES, Job, JobSpec
from corral.core.model.partition import Partition
from corral.core.model.resources import GresItems
from corral.core.runtime import VM, VM_FEATURE, RuntimeConflict, effective_runtime, with_feature


class ShapeError(ValueError):
    """The request is malformed or contradictory: it can never run as asked."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class TaskSet:
    """Tasks with one per-task shape, and how they may spread over nodes."""

    name: str | None
    tasks: int  # tasks wanted (fixed sets: nodes_max * tasks_per_node)
    fixed: bool  # True: exactly ``hi`` tasks on every node used
    hi: int  # tasks per node: exact (fixed) or upper bound (flexible; 0 = none)
    nodes_min: int
    nodes_max: int
    min_tasks: int  # fewest tasks that let the job start (gang minimum)
    cpus_per_task: int
    mem_per_task_mb: int | None  # None: the node's share per CPU (unless mem_per_node_mb)
    mem_per_node_mb: int | None  # fixed per node; 0 = the whole node
    gpus_per_node: int
    gpus_per_task: int
    gpus_total: int  # per-job GPUs spread over the nodes used
    gpu_type: str | None
    gres: GresItems  # per node
    constraint: str | None  # group constraint (and-ed with the job's)
    mem_overhead_mb: int = 0  # added to the set's memory on its node (a VM job's qemu)
    # NUMA alignment each task must have (``corral.core.placement.numa``): 0 none (the
    # best-effort choice of ``within``), 1 single-numa-node, 2 restricted
    numa: int = 0

    @property
    def uniform(self) -> bool:
        """Fixed tasks per node, no per-job GPU total: every node needs the same."""
        return self.fixed and self.gpus_total == 0


@dataclass(frozen=True, slots=True)
class Shape:
    sets: tuple[TaskSet, ...]
    exclusive: bool
    constraint: str | None
    nodelist: tuple[str, ...]
    exclude: tuple[str, ...]
    switches: int | None
    switches_wait_s: int
    min_available: int  # total tasks needed to start (sum of set minimums for plain jobs)
    spread: bool
    cpus_min: int  # requested CPUs at the smallest start (for O(1) early rejection)
    gpus_min: int
    nodes_min: int  # fewest nodes the job can start on (1 for task groups)
    grouped: bool  # built from task groups
    prefer: tuple[str, ...] = ()  # nodes tried first (JobSpec.prefer_nodes)

    @property
    def single(self) -> TaskSet:
        return self.sets[0]


def default_mem_per_cpu(partition: Partition | None, config: SchedulerConfig) -> int | None:
    if partition is not None and partition.default_mem_per_cpu_mb:
        return partition.default_mem_per_cpu_mb
    if config.default_mem_per_cpu_mb > 0:
        return config.default_mem_per_cpu_mb
    return None


def build_shape(spec: JobSpec, partition: Partition | None, config: SchedulerConfig) -> Shape:
    """Normalize ``spec`` for ``partition``; raises ``ShapeError`` for impossible requests."""
    exclusive = spec.exclusive or (partition is not None and partition.exclusive)
    mem_default = default_mem_per_cpu(partition, config)
    if spec.mem_per_node_mb is not None and spec.mem_per_cpu_mb is not None:
        raise ShapeError("BadMemory", "give memory per node or per CPU, not both")
    for label, value in (("--mem", spec.mem_per_node_mb), ("--mem-per-cpu", spec.mem_per_cpu_mb)):
        if value is not None and value < 0:
            raise ShapeError("BadMemory", f"{label} must not be negative (got {value} MB)")
    if spec.cpus_per_task < 1:
        raise ShapeError("BadTaskCount",
                         f"cpus per task must be at least 1 (got {spec.cpus_per_task})")
    for label, value in (("--gpus", spec.gpus), ("--gpus-per-node", spec.gpus_per_node),
                         ("--gpus-per-task", spec.gpus_per_task)):
        if value < 0:
            raise ShapeError("BadGpuCount", f"{label} must not be negative (got {value})")
    try:
        runtime = effective_runtime(spec.runtime, partition.runtime if partition else None)
    except RuntimeConflict as exc:
        raise ShapeError("BadRuntime", str(exc)) from None
    if spec.task_groups:
        if runtime == VM:
            raise ShapeError("BadRuntime", "a VM job cannot be a task-group gang")
        return _grouped(spec, exclusive, mem_default)
    nmin = spec.nodes_min
    nmax = spec.max_nodes
    if runtime == VM and nmax != 1:
        raise ShapeError("BadRuntime", f"a VM job runs on one node (asked for {nmax})")
    if nmin < 1:
        raise ShapeError("BadNodeCount", f"at least one node is needed (got {nmin})")
    if nmax < nmin:
        raise ShapeError("BadNodeCount", f"node range {nmin}-{nmax} is empty")
    tpn = spec.ntasks_per_node
    if tpn is not None and tpn < 1:
        raise ShapeError("BadTaskCount", f"tasks per node must be at least 1 (got {tpn})")
    if spec.ntasks is None:
        per = tpn or 1
        fixed = True
        tasks = nmax * per
        min_tasks = nmin * per
        hi = per
    else:
        tasks = spec.ntasks
        if tasks < 1:
            raise ShapeError("BadTaskCount", f"at least one task is needed (got {tasks})")
        nmax = min(nmax, tasks)
        nmin = min(nmin, tasks)
        hi = tpn or 0
        if hi and nmax * hi < tasks:
            raise ShapeError(
                "BadTaskCount",
                f"{tasks} tasks do not fit on at most {nmax} nodes with {hi} tasks per node",
            )
        fixed = bool(hi) and nmin == nmax and nmin * hi == tasks
        min_tasks = tasks
    mem_task: int | None
    if spec.mem_per_node_mb is not None:
        mem_task = None
    elif spec.mem_per_cpu_mb is not None:
        mem_task = spec.mem_per_cpu_mb * spec.cpus_per_task
    elif mem_default is not None:
        mem_task = mem_default * spec.cpus_per_task
    else:
        mem_task = None
    gpn = spec.gpus_per_node
    gtotal = 0
    if spec.gpus:
        if nmax == 1:
            gpn += spec.gpus
        elif fixed and nmin == nmax and spec.gpus % nmin == 0:
            gpn += spec.gpus // nmin
        else:
            gtotal = spec.gpus
    ts = TaskSet(
        name=None, tasks=tasks, fixed=fixed, hi=hi, nodes_min=nmin, nodes_max=nmax,
        min_tasks=min_tasks, cpus_per_task=spec.cpus_per_task, mem_per_task_mb=mem_task,
        mem_per_node_mb=spec.mem_per_node_mb, gpus_per_node=gpn,
        gpus_per_task=spec.gpus_per_task, gpus_total=gtotal, gpu_type=spec.gpu_type,
        gres=spec.gres, constraint=None,
        mem_overhead_mb=config.vm_mem_overhead_mb if runtime == VM else 0,
    )
    cpus_min = min_tasks * spec.cpus_per_task
    gpus_min = gpn * nmin + spec.gpus_per_task * min_tasks + gtotal
    return Shape(
        sets=(ts,), exclusive=exclusive,
        constraint=with_feature(spec.constraint, VM_FEATURE) if runtime == VM else spec.constraint,
        nodelist=spec.nodelist,
        exclude=spec.exclude, switches=spec.switches, switches_wait_s=spec.switches_wait_s,
        min_available=min_tasks, spread=spec.spread, cpus_min=cpus_min, gpus_min=gpus_min,
        nodes_min=nmin, grouped=False, prefer=spec.prefer_nodes,
    )


NUMA_NONE, NUMA_SINGLE, NUMA_RESTRICTED = 0, 1, 2
_NUMA_CODES = {"none": NUMA_NONE, "best-effort": NUMA_NONE, "single-numa-node": NUMA_SINGLE,
               "restricted": NUMA_RESTRICTED}


def _grouped(spec: JobSpec, exclusive: bool, mem_default: int | None) -> Shape:
    sets: list[TaskSet] = []
    names: set[str] = set()
    total = 0
    for g in spec.task_groups:
        if g.name in names:
            raise ShapeError("BadTaskGroup", f"task group name {g.name!r} is used twice")
        names.add(g.name)
        if g.replicas < 1:
            raise ShapeError("BadTaskGroup", f"task group {g.name!r} needs at least 1 replica")
        if g.cpus_per_task < 1:
            raise ShapeError("BadTaskGroup", f"task group {g.name!r}: cpus per task must be >= 1")
        if g.gpus_per_task < 0 or g.mem_per_task_mb < 0:
            raise ShapeError("BadTaskGroup", f"task group {g.name!r}: negative GPUs or memory")
        if g.min_available is not None and not 0 <= g.min_available <= g.replicas:
            raise ShapeError(
                "BadTaskGroup",
                f"task group {g.name!r}: min_available {g.min_available} is outside "
                f"0..{g.replicas}",
            )
        if g.numa_policy not in NUMA_POLICIES:
            raise ShapeError(
                "BadTaskGroup",
                f"task group {g.name!r}: unknown NUMA policy {g.numa_policy!r} (one of "
                + ", ".join(NUMA_POLICIES) + ")")
        if g.min_available is not None:
            gmin = g.min_available
        else:
            gmin = g.replicas if spec.min_available is None else 0
        mem_task: int | None
        if g.mem_per_task_mb:
            mem_task = g.mem_per_task_mb
        elif mem_default is not None:
            mem_task = mem_default * g.cpus_per_task
        else:
            mem_task = None
        # per-node GRES accounting is exact for per-task GRES with one task per node
        sets.append(TaskSet(
            name=g.name, tasks=g.replicas, fixed=False, hi=1 if g.gres else 0,
            nodes_min=1 if gmin else 0,
            nodes_max=g.replicas, min_tasks=gmin, cpus_per_task=g.cpus_per_task,
            mem_per_task_mb=mem_task, mem_per_node_mb=None, gpus_per_node=0,
            gpus_per_task=g.gpus_per_task, gpus_total=0, gpu_type=g.gpu_type or spec.gpu_type,
            gres=g.gres, constraint=g.constraint, numa=_NUMA_CODES[g.numa_policy],
        ))
        total += g.replicas
    set_min = sum(s.min_tasks for s in sets)
    # no job minimum: the groups' minimums (each all its replicas unless it sets one), as
    # Volcano's admission defaults minAvailable to the sum of the tasks' minAvailable
    job_min = spec.min_available if spec.min_available is not None else max(1, set_min)
    if not 1 <= job_min <= total:
        raise ShapeError("BadTaskGroup", f"min_available {job_min} is outside 1..{total} tasks")
    need = max(job_min, set_min)
    cpus_min = min(s.cpus_per_task for s in sets) * need
    return Shape(
        sets=tuple(sets), exclusive=exclusive, constraint=spec.constraint,
        nodelist=spec.nodelist, exclude=spec.exclude, switches=spec.switches,
        switches_wait_s=spec.switches_wait_s, min_available=need, spread=spec.spread,
        cpus_min=cpus_min, gpus_min=0, nodes_min=1, grouped=True, prefer=spec.prefer_nodes,
    )


def time_limit_s(job: Job, partition: Partition | None, config: SchedulerConfig) -> int:
    """Effective time limit: the job's resolved one, its spec, the partition default, else max."""
    if job.time_limit_s is not None:
        return job.time_limit_s
    if job.spec.time_limit_s is not None:
        return job.spec.time_limit_s
    if partition is not None:
        if partition.default_time_s is not None:
            return partition.default_time_s
        if partition.max_time_s is not None:
            return partition.max_time_s
    return config.default_time_s


_SHAPES: dict[
    int, tuple[JobSpec, SchedulerConfig, dict[str, tuple[Partition | None, Shape | ShapeError]]]
] = {}
_SHAPES_MAX = 200_000


def shape_of(spec: JobSpec, partition: Partition | None, config: SchedulerConfig) -> Shape:
    """Memoized ``build_shape``; raises the memoized ``ShapeError`` as well."""
    entry = _SHAPES.get(id(spec))
    if entry is None or entry[0] is not spec or (entry[1] is not config and entry[1] != config):
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        entry = (spec, config, {})
        _SHAPES[id(spec)] = entry
    key = partition.name if partition is not None else ""
    cached = entry[2].get(key)
    if cached is not None and (cached[0] is partition or cached[0] == partition):
        got = cached[1]
    else:
        try:
            got = build_shape(spec, partition, config)
        except ShapeError as exc:
            got = exc
        entry[2][key] = (partition, got)
    if isinstance(got, ShapeError):
        raise got
    return got
