"""In-memory job and node records of the controller, and their API (JSON) form.

``JobRecord`` is the mutable record the controller keeps for every active job (and for a
while after it ends); the database row is its durable copy (``store.py``). ``to_core()``
gives the frozen ``corral.core.model.Job`` the scheduling core sees, cached until the
record changes (``touch()``), so building a snapshot of thousands of pending jobs costs
little. ``to_api()`` gives the record shape documented in ``corral.client``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.core.model.job import Allocation, HoldKind, Job, JobState, NodeAllocation
from corral.core.model.node import Node, NodeSpec, NodeState
from corral.core.parse.dependency import format_dependency
from corral.core.parse.hostlist import compress
from corral.submission import JobSubmission

if TYPE_CHECKING:
    from corral.controller.steprecord import StepRecord

ACTIVE_STATES = frozenset(s for s in JobState if not s.is_finished)


@dataclass(slots=True)
class JobRecord:
    id: int
    sub: JobSubmission
    submit_time: float
    state: JobState = JobState.PENDING
    hold: HoldKind = HoldKind.NONE
    start_time: float | None = None
    end_time: float | None = None
    eligible_time: float | None = None
    allocation: Allocation | None = None
    partition: str | None = None  # where it runs, once started
    time_limit_s: int | None = None  # effective limit (admin updates land here)
    time_limit_set: bool = False  # an admin/owner update set time_limit_s explicitly
    admin_priority: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_running: int | None = None
    array_task_count: int = 0
    array_task_min: int = 0
    array_task_max: int = 0
    restarts: int = 0
    exit_code: int | None = None
    signal: int = 0
    reason: str = "None"
    reason_detail: str = ""
    priority: float = 0.0
    rank: int | None = None
    est_start: float | None = None
    end_reason: str = ""
    cpu_time_s: float = 0.0
    max_rss_mb: float = 0.0
    stdout: str = ""
    stderr: str = ""
    submit_host: str = ""
    cancel_requested: bool = False
    fail_state: str = ""  # a cancel because a node lost its share: the job ends NODE_FAIL
    alloc_seen: float | None = None  # an allocation's last keepalive (controller.allocations)
    requeue_requested: bool = False
    requeue_hold: bool = False
    requeue_admin_hold: bool = False  # a node's prolog failed: requeue held by the admin
    preempted_by: int | None = None  # the job this run is being preempted for (not persisted)
    cancelled_by_uid: int | None = None  # who cancelled it (sacct's "CANCELLED by <uid>")
    warning: str = ""  # e.g. a multi-node job was suspended: MPI jobs often cannot resume
    # a container job on its first node: "pulling <ref>", then "<ref> (<digest>, cached)"
    container: str = ""
    runtime: str = ""  # the runtime class it ran in (partition's included), set at launch
    suspended_by: int | None = None  # SUSPENDED: the preemptor it yields its cores to
    suspended_at: float | None = None  # SUSPENDED since (epoch seconds)
    suspended_s: float = 0.0  # total time spent suspended in this run (before suspended_at)
    default_partition: str = ""  # the cluster's default partition (display; not persisted)
    steps: list[StepRecord] = field(default_factory=list)  # srun steps of this run
    steps_unsaved: list[StepRecord] = field(default_factory=list)  # closed, not yet persisted
    dispatched: bool = False  # the agent confirmed the launch (not persisted)
    # allocated on nodes still powered down or powering up: Slurm's CONFIGURING
    # (``corral.controller.power``; not persisted, found again after a restart)
    configuring: bool = False
    prolog_running: bool = False  # PrologSlurmctld runs: also CONFIGURING (not persisted)
    # nodes whose image cache holds this pending container job's image: tried first
    # (JobSpec.prefer_nodes of the core view; corral.controller.images; not persisted)
    prefer: tuple[str, ...] = ()
    # early pulls of this pending job's image: node -> what happens there
    # (corral.controller.prefetch; not persisted)
    # (None when there are none: no empty dict per pending job)
    image_prefetch: dict[str, str] | None = None
    event_state: str = ""  # the state the last job event announced ("": none yet)
    tail_text: str = ""  # a large array's compact remainder (``arraytail.ArrayTail.view``)
    _core: Job | None = None
    _api: dict[str, Any] | None = None  # cached summary record (not while running)
    _api_json: bytes | None = None

    @property
    def spec(self) -> Any:
        return self.sub.spec

    @property
    def shown_configuring(self) -> bool:
        """Slurm's CONFIGURING: running, its nodes still booting or PrologSlurmctld on."""
        return (self.configuring or self.prolog_running) and self.state is JobState.RUNNING

    @property
    def user(self) -> str:
        return str(self.sub.spec.user)

    @property
    def uid(self) -> int:
        return int(self.sub.spec.uid)

    @property
    def display_id(self) -> str:
        if self.tail_text:  # a large array's compact remainder
            return f"{self.array_job_id}_[{self.tail_text}]"
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)

    def touch(self) -> None:
        """Forget the cached core and API views after any change."""
        self._core = None
        self._api = None
        self._api_json = None

    def touch_api(self) -> None:
        """Forget the cached API view (reason, priority, estimates changed)."""
        self._api = None
        self._api_json = None

    def api_json(self, now: float) -> bytes:
        """The summary record, JSON-encoded (cached unless the job is running)."""
        if self._api_json is not None:
            return self._api_json
        import json

        data = json.dumps(self.to_api(now), separators=(",", ":")).encode()
        if self.start_time is None or self.end_time is not None:
            self._api_json = data
        return data

    def to_core(self) -> Job:
        if self._core is None:
            self._core = Job(
                id=self.id,
                spec=(self.sub.spec if not self.prefer
                      else dataclasses.replace(self.sub.spec, prefer_nodes=self.prefer)),
                submit_time=self.submit_time,
                # a job being killed (cancel, preemption grace) is COMPLETING to the core:
                # it still holds its resources but is never offered as a victim again
                state=(JobState.COMPLETING
                       if self.state is JobState.RUNNING
                       and (self.cancel_requested or self.requeue_requested)
                       else self.state),
                # time spent suspended does not count against the limit: the job ends
                # that much later than start + limit
                start_time=(self.start_time + self.suspended_s
                            if self.start_time is not None and self.suspended_s
                            else self.start_time),
                end_time=self.end_time,
                hold=self.hold,
                allocation=self.allocation,
                time_limit_s=self.time_limit_s if self.time_limit_set else None,
                admin_priority=self.admin_priority,
                array_job_id=self.array_job_id,
                array_task_id=self.array_task_id,
                array_max_running=self.array_max_running,
                restarts=self.restarts,
                exit_code=self.exit_code,
                partition=self.partition,
                eligible_time=self.eligible_time,
            )
        return self._core

    # ---- API form ---------------------------------------------------------------------

    def to_api(self, now: float | None = None, detail: bool = False,
               private: bool = False) -> dict[str, Any]:
        if not detail and self._api is not None:
            if self.start_time is not None and self.end_time is None:
                rec = dict(self._api)
                t = now if now is not None else time.time()
                paused = self.suspended_s
                if self.suspended_at is not None:
                    paused += t - self.suspended_at
                    rec["suspended_s"] = paused
                rec["time_used_s"] = max(0.0, t - self.start_time - paused)
                return rec
            return self._api
        rec = self._build_api(now)
        if not detail:
            self._api = rec
            return rec
        rec = dict(rec)
        self._add_detail(rec, private)
        return rec

    def _build_api(self, now: float | None) -> dict[str, Any]:
        spec = self.sub.spec
        alloc = self.allocation
        nodes = list(alloc.node_names) if alloc else []
        if alloc:
            num_cpus = alloc.cpus
            num_tasks = alloc.tasks
            tres = alloc.resources.tres_string(len(nodes))
            alloc_mem = sum(n.mem_mb for n in alloc.nodes)
            gpus = sum(len(n.gpus) for n in alloc.nodes)
        else:
            num_tasks = spec.ntasks or (spec.ntasks_per_node or 1) * spec.nodes_min
            num_cpus = num_tasks * spec.cpus_per_task
            mem = spec.mem_per_node_mb * spec.nodes_min if spec.mem_per_node_mb else (
                (spec.mem_per_cpu_mb or 0) * num_cpus)
            tres = f"cpu={num_cpus},mem={mem}M,node={spec.nodes_min}"
            alloc_mem = 0
            gpus = spec.gpus or spec.gpus_per_node * spec.nodes_min
            if gpus:
                tres += f",gres/gpu={gpus}"
        t = now if now is not None else time.time()
        if self.start_time is not None:
            used = (self.end_time if self.end_time is not None else t) - self.start_time
            used -= self.suspended_s + (t - self.suspended_at
                                        if self.suspended_at is not None else 0.0)
        else:
            used = 0.0
        command = self.sub.extra.get("command", "")
        if not command and self.sub.script is not None:
            command = self.sub.extra.get("script_path", "") or "(batch script)"
        elif not command:
            command = " ".join(self.sub.argv)
        rec: dict[str, Any] = {
            "id": self.id,
            "job_id": self.display_id,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
            "array_task_str": self.sub.array,
            "array_tail_indices": self.tail_text or None,
            "array_max_running": self.array_max_running,
            "name": spec.name,
            "user": spec.user,
            "uid": spec.uid,
            "gid": spec.gid,
            "account": spec.account,
            "qos": spec.qos,
            "partition": self.partition or ",".join(spec.partitions) or self.default_partition,
            "partitions": list(spec.partitions),
            "state": self.state.value,
            "state_short": "CF" if self.shown_configuring else self.state.short,
            "configuring": self.shown_configuring,
            "reason": self.reason,
            "reason_detail": self.reason_detail,
            "priority": self.priority,
            "rank": self.rank,
            "est_start": self.est_start,
            "hold": self.hold.value,
            "submit_time": self.submit_time,
            "eligible_time": self.eligible_time,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "begin_time": spec.begin_time,
            "time_limit_s": self.time_limit_s,
            "time_min_s": spec.time_min_s,
            "time_used_s": max(0.0, used),
            "nodes": nodes,
            "nodelist": compress(nodes) if nodes else "",
            "num_nodes": len(nodes) if nodes else spec.nodes_min,
            "num_cpus": num_cpus,
            "num_tasks": num_tasks,
            "cpus_per_task": spec.cpus_per_task,
            "mem_per_node_mb": spec.mem_per_node_mb,
            "mem_per_cpu_mb": spec.mem_per_cpu_mb,
            "alloc_mem_mb": alloc_mem,
            "gpus": gpus,
            "tres": tres,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "derived_exit": f"{self.exit_code or 0}:{self.signal}",
            "restarts": self.restarts,
            "requeue": spec.requeue,
            "workdir": self.sub.workdir,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "command": command,
            "dependency": format_dependency(spec.dependency) if spec.dependency else "",
            "licenses": [list(x) for x in spec.licenses],
            "submit_host": self.submit_host,
            "comment": spec.comment,
            "constraint": spec.constraint or "",
            "exclusive": spec.exclusive,
            "end_reason": self.end_reason,
            "cpu_time_s": self.cpu_time_s,
            "max_rss_mb": self.max_rss_mb,
            "dialect": self.sub.dialect,
            "interactive": self.sub.interactive,
            "cancelled_by_uid": self.cancelled_by_uid,
            "warning": self.warning,
            "container": self.container,
            "image_prefetch": dict(self.image_prefetch or {}),
            "runtime": self.runtime or spec.runtime,
            "vm_image": self.sub.extra.get("vm_image"),
            "suspended_s": self.suspended_s + (t - self.suspended_at
                                               if self.suspended_at is not None else 0.0),
        }
        return rec

    def _add_detail(self, rec: dict[str, Any], private: bool) -> None:
        sub = self.sub.to_json()
        rec["spec"] = sub.pop("spec")
        if not private:
            sub.pop("script", None)
            sub.pop("env", None)
            sub.pop("argv", None)
        rec["submission"] = sub
        rec["allocation"] = allocation_to_json(self.allocation) if self.allocation else None
        rec["admin_priority"] = self.admin_priority


def allocation_to_json(alloc: Allocation) -> dict[str, Any]:
    return {
        "partition": alloc.partition,
        "nodes": [
            {"node": n.node, "cores": list(n.cores), "cpus": n.cpus, "mem_mb": n.mem_mb,
             "gpus": list(n.gpus), "gpu_types": list(n.gpu_types),
             "gres": [list(g) for g in n.gres], "tasks": n.tasks, "group": n.group}
            for n in alloc.nodes
        ],
    }


def allocation_from_json(data: dict[str, Any]) -> Allocation:
    return Allocation(
        partition=str(data["partition"]),
        nodes=tuple(
            NodeAllocation(
                node=str(n["node"]), cores=tuple(n.get("cores") or ()), cpus=int(n["cpus"]),
                mem_mb=int(n["mem_mb"]), gpus=tuple(n.get("gpus") or ()),
                gpu_types=tuple(n.get("gpu_types") or ()),
                gres=tuple((str(k), int(v)) for k, v in n.get("gres") or ()),
                tasks=int(n.get("tasks", 1)), group=n.get("group"),
            )
            for n in data["nodes"]
        ),
    )


@dataclass(slots=True)
class NodeRecord:
    spec: NodeSpec
    state: NodeState = NodeState.UNKNOWN
    reason: str = ""
    admin_state: str = ""  # "" | "drain" | "down": what an operator asked for
    connected: bool = False
    last_seen: float | None = None
    down_since: float | None = None
    agent_version: str = ""
    boot_time: float | None = None
    address: str = ""  # peer address of the agent's connection at registration ("": unix)
    hostname: str = ""  # the host name the agent reported
    jobs: set[int] = field(default_factory=set)
    alloc_cpus: int = 0
    alloc_mem_mb: int = 0
    alloc_gpus: int = 0
    partitions: tuple[str, ...] = ()
    agent_stats: dict[str, Any] = field(default_factory=dict)
    # job id -> the agent's last live sample {cpu_time_s, max_rss_mb, pids, time} (sstat)
    live_usage: dict[int, dict[str, Any]] = field(default_factory=dict)
    health_drained: bool = False  # drained by a failed health check (not by an operator)
    power: str = ""  # "" | POWERED_DOWN | POWERING_UP | POWERING_DOWN (controller.power)
    power_deadline: float | None = None  # the resume/suspend timeout of ``power``
    idle_since: float | None = None  # idle (connected, no jobs) since: SuspendTime
    cloud: bool = False  # [[nodes]] cloud = true (Slurm's State=CLOUD)
    # the node's image cache as its agent reported it (corral images), and its tools
    images: list[dict[str, Any]] = field(default_factory=list)
    container_tools: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def to_core(self) -> Node:
        state = self.state
        if self.power == "POWERED_DOWN":  # planned on like an idle node: resumed on use
            state = NodeState.IDLE
        elif self.power == "POWERING_DOWN":  # no new work while it goes
            state = NodeState.DRAINED
        return Node(spec=self.spec, state=state, reason=self.reason,
                    partitions=self.partitions)

    def to_api(self) -> dict[str, Any]:
        s = self.spec
        return {
            "name": s.name,
            "state": self.state.value,
            "reason": self.reason,
            "partitions": list(self.partitions),
            "cpus": s.cpus,
            "sockets": s.sockets,
            "cores_per_socket": s.cores_per_socket,
            "threads_per_core": s.threads_per_core,
            "mem_mb": s.mem_mb,
            "gpus": len(s.gpus),
            "gpu_types": s.gpu_types(),
            "features": sorted(s.features),
            "gres": dict(s.gres),
            "alloc_cpus": self.alloc_cpus,
            "alloc_mem_mb": self.alloc_mem_mb,
            "alloc_gpus": self.alloc_gpus,
            "jobs": sorted(self.jobs),
            "arch": s.arch,
            "weight": s.weight,
            "connected": self.connected,
            "last_seen": self.last_seen,
            "agent_version": self.agent_version,
            "boot_time": self.boot_time,
            "address": self.address,
            "hostname": self.hostname,
            "agent_stats": self.agent_stats,
            "power": self.power,
            "cloud": self.cloud,
            "images": self.images,
            "container_tools": self.container_tools,
        }


MAX_NODE_IMAGES = 1000


def images_from_agent(rows: list[Any]) -> list[dict[str, Any]]:
    """A node's image list from its agent, checked field by field (bounded)."""
    out: list[dict[str, Any]] = []
    for r in rows[:MAX_NODE_IMAGES]:
        if not isinstance(r, dict):
            continue
        try:
            out.append({"digest": str(r.get("digest", ""))[:80],
                        "refs": [str(x)[:1024] for x in (r.get("refs") or [])[:32]],
                        "size_bytes": int(r.get("size_bytes") or 0),
                        "last_used": float(r.get("last_used") or 0.0),
                        "in_use": bool(r.get("in_use", False))})
        except (TypeError, ValueError):
            continue
    return out
