"""Jobs: the user's request (``JobSpec``), its allocation, and the job record (``Job``).

A ``JobSpec`` is what a front end (``#SBATCH``, ``#PBS``, Volcano YAML, the native API)
parses to; it is immutable and never edited by scheduling. ``Job`` is the record the
controller persists and hands to the core in a snapshot: the spec plus state, times,
holds and, while running, the exact ``Allocation``.

Conventions (as in Slurm): ``nodes_max=None`` means ``nodes_min``; ``ntasks=None`` means one
task per node unless ``ntasks_per_node`` says otherwise; memory is per node
(``mem_per_node_mb``) or per allocated CPU (``mem_per_cpu_mb``), never both; GPUs may be
asked per job (``gpus``), per node or per task, optionally of one ``gpu_type``.
``task_groups`` make a heterogeneous gang (Volcano ``tasks[]``): each group has its own
per-task shape and replica count, and the job starts only when ``min_available`` tasks
(default: all) can start together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from corral.core.model.resources import GresItems, Resources


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"

    @property
    def is_finished(self) -> bool:
        return self not in (
            JobState.PENDING,
            JobState.RUNNING,
            JobState.SUSPENDED,
            JobState.COMPLETING,
        )

    @property
    def is_active(self) -> bool:
        """Holds resources on nodes."""
        return self in (JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING)

    @property
    def short(self) -> str:
        """Slurm's compact state code as ``squeue`` prints it."""
        return _SHORT[self]


_SHORT = {
    JobState.PENDING: "PD",
    JobState.RUNNING: "R",
    JobState.SUSPENDED: "S",
    JobState.COMPLETING: "CG",
    JobState.COMPLETED: "CD",
    JobState.CANCELLED: "CA",
    JobState.FAILED: "F",
    JobState.TIMEOUT: "TO",
    JobState.NODE_FAIL: "NF",
    JobState.PREEMPTED: "PR",
    JobState.OUT_OF_MEMORY: "OOM",
    JobState.BOOT_FAIL: "BF",
    JobState.DEADLINE: "DL",
}


class HoldKind(str, Enum):
    NONE = "NONE"
    USER = "USER"  # JobHeldUser: the owner may release
    ADMIN = "ADMIN"  # JobHeldAdmin: only an operator may release


class DependencyKind(str, Enum):
    AFTER = "after"  # target started (or was cancelled)
    AFTERANY = "afterany"  # target finished in any state
    AFTEROK = "afterok"  # target completed with exit 0
    AFTERNOTOK = "afternotok"  # target finished unsuccessfully
    AFTERCORR = "aftercorr"  # array task finished ok with the same task id
    SINGLETON = "singleton"  # no other job of same name+user running


@dataclass(frozen=True, slots=True)
class Dependency:
    kind: DependencyKind
    job_ids: tuple[int, ...] = ()
    delay_s: int = 0  # after:<id>+<minutes> (stored in seconds)
    # afterok:<id>_<task>: one task of array job <id> (applies to every id of this item);
    # None: the whole job, or every task of it when <id> is an array (also '<id>_*').
    array_task_id: int | None = None


@dataclass(frozen=True, slots=True)
class DependencySpec:
    items: tuple[Dependency, ...] = ()
    any_of: bool = False  # '?' separator: satisfied when any item is


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """A group of identical tasks inside a job (Volcano ``tasks[]``)."""

    name: str
    replicas: int = 1
    cpus_per_task: int = 1
    mem_per_task_mb: int = 0
    gpus_per_task: int = 0
    gpu_type: str | None = None
    min_available: int | None = None  # per-group minimum; None: all replicas
    constraint: str | None = None
    gres: GresItems = ()  # generic resources per task (such a group runs one task a node)
    # NUMA alignment of each task (``corral.core.placement.numa``): "none"/"best-effort"
    # (as few domains as fit, never a reason to wait), "restricted" (the fewest domains
    # that could ever hold one task on that node), "single-numa-node" (one domain)
    numa_policy: str = "none"


NUMA_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str = "job"
    user: str = "root"
    uid: int = 0
    gid: int = 0
    account: str | None = None
    partitions: tuple[str, ...] = ()  # empty: the default partition
    qos: str | None = None
    nodes_min: int = 1
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    gpus: int = 0  # per job (--gpus)
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    gpu_type: str | None = None
    gres: GresItems = ()  # other per-node generic resources
    licenses: GresItems = ()  # cluster-wide licenses
    time_limit_s: int | None = None  # None: the partition default
    time_min_s: int | None = None
    constraint: str | None = None  # feature expression, e.g. "avx512&(ib|roce)"
    exclusive: bool = False
    switches: int | None = None  # --switches=N
    switches_wait_s: int = 0  # --switches=N@wait
    nodelist: tuple[str, ...] = ()  # required nodes (-w)
    exclude: tuple[str, ...] = ()  # excluded nodes (-x)
    task_groups: tuple[TaskGroup, ...] = ()
    min_available: int | None = None  # gang minimum over all task groups
    dependency: DependencySpec | None = None
    nice: int = 0
    begin_time: float | None = None
    requeue: bool = True
    spread: bool = False  # --spread-job: prefer more nodes, fewer tasks each
    comment: str = ""
    runtime: str = "host"  # host | container | vm (``corral.core.runtime``)
    # nodes to try first, a placement preference only (never a reason to wait); the
    # controller sets it for a container job: the nodes whose image cache holds its image
    prefer_nodes: tuple[str, ...] = ()

    @property
    def max_nodes(self) -> int:
        return self.nodes_max if self.nodes_max is not None else self.nodes_min


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """What one node gives a job: exact cores, GPUs and memory, for the agent to pin."""

    node: str
    cores: tuple[int, ...]
    cpus: int
    mem_mb: int
    gpus: tuple[int, ...] = ()
    gpu_types: tuple[str, ...] = ()  # type of each entry of ``gpus``
    gres: GresItems = ()
    tasks: int = 1
    group: str | None = None

    @property
    def resources(self) -> Resources:
        gres = dict(self.gres)
        for t in self.gpu_types:
            gres[f"gpu:{t}"] = gres.get(f"gpu:{t}", 0) + 1
        return Resources.of(self.cpus, self.mem_mb, len(self.gpus), gres)


@dataclass(frozen=True, slots=True)
class Allocation:
    partition: str
    nodes: tuple[NodeAllocation, ...]

    @property
    def node_names(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for n in self.nodes:
            seen.setdefault(n.node, None)
        return tuple(seen)

    @property
    def resources(self) -> Resources:
        total = Resources()
        for n in self.nodes:
            total = total + n.resources
        return total

    @property
    def cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @property
    def tasks(self) -> int:
        return sum(n.tasks for n in self.nodes)


@dataclass(frozen=True, slots=True, init=False)
class Job:
    """The record of a job as the core sees it in a snapshot."""

    id: int
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    start_time: float | None = None
    end_time: float | None = None
    hold: HoldKind = HoldKind.NONE
    allocation: Allocation | None = None
    time_limit_s: int | None = None  # effective limit once resolved (admin changes land here)
    admin_priority: int | None = None  # scontrol update Priority=: overrides the computed one
    site_factor: int = 0  # scontrol update SiteFactor=: added unweighted to the priority
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_running: int | None = None  # '%' limit, shared by tasks of one array
    restarts: int = 0
    exit_code: int | None = None
    partition: str | None = None  # partition it runs in, once started
    eligible_time: float | None = None
    extra: tuple[tuple[str, str], ...] = field(default=())

    def __init__(self, id: int, spec: JobSpec, submit_time: float,  # noqa: A002
                 state: JobState = JobState.PENDING, start_time: float | None = None,
                 end_time: float | None = None, hold: HoldKind = HoldKind.NONE,
                 allocation: Allocation | None = None, time_limit_s: int | None = None,
                 admin_priority: int | None = None, site_factor: int = 0,
                 array_job_id: int | None = None, array_task_id: int | None = None,
                 array_max_running: int | None = None, restarts: int = 0,
                 exit_code: int | None = None, partition: str | None = None,
                 eligible_time: float | None = None,
                 extra: tuple[tuple[str, str], ...] = ()) -> None:
        """The dataclass's own frozen ``__init__`` with each field stored through its slot
        (``_JOB_SLOTS``) rather than ``object.__setattr__``: half the cost, for a record
        the simulator builds twice per job. Same fields, order and defaults (pinned by
        tests/core/test_slot_inits.py)."""
        (s_id, s_spec, s_submit, s_state, s_start, s_end, s_hold, s_alloc, s_limit,
         s_admin, s_site, s_array, s_task, s_max, s_restarts, s_exit, s_part, s_elig,
         s_extra) = _JOB_SLOTS
        s_id(self, id)
        s_spec(self, spec)
        s_submit(self, submit_time)
        s_state(self, state)
        s_start(self, start_time)
        s_end(self, end_time)
        s_hold(self, hold)
        s_alloc(self, allocation)
        s_limit(self, time_limit_s)
        s_admin(self, admin_priority)
        s_site(self, site_factor)
        s_array(self, array_job_id)
        s_task(self, array_task_id)
        s_max(self, array_max_running)
        s_restarts(self, restarts)
        s_exit(self, exit_code)
        s_part(self, partition)
        s_elig(self, eligible_time)
        s_extra(self, extra)

    @property
    def user(self) -> str:
        return self.spec.user

    @property
    def name(self) -> str:
        return self.spec.name


# the slot descriptors' setters of ``Job``'s fields, in field order (``Job.__init__``)
_JOB_SLOTS: tuple[Callable[[Job, Any], None], ...] = tuple(
    Job.__dict__[f.name].__set__ for f in fields(Job))
