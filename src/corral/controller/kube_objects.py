"""Corral records as Kubernetes objects: Volcano Jobs, Pods, Nodes, Queues, Namespaces, Events.

Pure functions of the controller's records (no I/O). Mapping (docs/kubernetes.md):

* a job submitted as a Volcano Job (dialect ``volcano``) is a ``batch.volcano.sh/v1alpha1``
  ``Job`` named by its ``metadata.name``, in namespace = its account (``default`` when none);
  its status phase from the Corral state and the launcher's exit status
  (``corral.frontends.volcano_run``): PENDING -> Pending, RUNNING -> Running,
  COMPLETING -> Completing, COMPLETED -> Completed, exit 2 -> Aborted, 3 -> Terminated,
  CANCELLED -> Terminated, other ends -> Failed;
* each replica is a read-only ``Pod`` ``<job>-<task>-<index>``: its phase from the job step
  the launcher records for it (RUNNING -> Running, COMPLETED -> Succeeded, other ends ->
  Failed), Pending before; its node from that step or the allocation;
* nodes are ``Node``s (capacity = the node's CPUs, memory, ``nvidia.com/gpu``, GRES as
  ``corral.dev/<name>``; labels from features: ``F: "true"`` and
  ``feature.node.kubernetes.io/F: "true"``, ``key=value`` features as labels,
  ``nvidia.com/gpu.product`` from the GPU type); partitions are ``Queue``s.

``resourceVersion`` of a job's objects comes from ``Versions``: it grows whenever the
controller sees the record change, so a watch from a list's version sends what changed
after the list.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.controller import kube_foreign as kf
from corral.controller.kube_time import ts
from corral.core.model.job import JobState
from corral.core.model.node import NodeSpec
from corral.core.placement import task_cores
from corral.frontends.volcano import (
    API_VERSION,
    EXIT_ABORTED,
    EXIT_TERMINATED,
    plan_of_script,
    selector_feature,
)

if TYPE_CHECKING:
    from corral.controller.records import JobRecord, NodeRecord

CORE_MAP = {JobState.PENDING: "Pending", JobState.RUNNING: "Running",
            JobState.SUSPENDED: "Running", JobState.COMPLETING: "Completing",
            JobState.COMPLETED: "Completed", JobState.CANCELLED: "Terminated"}


def namespace_of(rec: JobRecord) -> str:
    return str(rec.sub.spec.account or "default")


def is_vcjob(rec: JobRecord) -> bool:
    return rec.sub.dialect == "volcano"


def job_name(rec: JobRecord) -> str:
    """The Job's ``metadata.name``: a Volcano job's own, else ``<name>-<id>``."""
    return str(rec.sub.spec.name) if is_vcjob(rec) else kf.name_of(rec)


def k8s_meta(rec: JobRecord) -> dict[str, Any]:
    try:
        got = json.loads(rec.sub.extra.get("k8s_meta") or "{}")
    except ValueError:
        got = {}
    return got if isinstance(got, dict) else {}


def uid_of(kind: str, key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"corral:{kind}:{key}"))


class Versions:
    """``resourceVersion``: a number that grows each time the controller sees a job's
    record change (its state, times, reason, labels, steps), from a clock in ms kept
    strictly increasing. Versions are stamped when the controller sees a change, not with
    the times the agents report (an end stamped before a list was answered would make a
    watch from that list's version miss it)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[Any, int]] = {}
        self.last = 0

    def current(self) -> int:
        """The version of a list answered now: below every later change's."""
        return max(int(time.time() * 1000), self.last)

    def of(self, rec: JobRecord) -> int:
        key = (rec.state, rec.start_time, rec.end_time, rec.exit_code, rec.reason,
               rec.reason_detail, rec.restarts, rec.sub.extra.get("k8s_meta"),
               rec.sub.extra.get("k8s_deleted"),
               tuple((s.name, s.state, s.end_time, s.exit_code) for s in rec.steps))
        got = self.seen.get(rec.id)
        if got is not None and got[0] == key:
            return got[1]
        if len(self.seen) > 100_000:
            self.seen.clear()  # re-stamped later: at worst a spurious MODIFIED
        self.last = self.current() + 1
        self.seen[rec.id] = (key, self.last)
        return self.last


VERSIONS = Versions()


def version_of(rec: JobRecord, parts: list[JobRecord] | None = None) -> int:
    """The version of ``rec``'s objects; with ``parts`` (its late replicas' companion
    jobs, which change its status and pods too) the newest of them all."""
    return max([VERSIONS.of(rec), *(VERSIONS.of(p) for p in parts or ())])


def phase_of(rec: JobRecord) -> str:
    if rec.state in CORE_MAP:
        return CORE_MAP[rec.state]
    if rec.state is JobState.FAILED and rec.exit_code == EXIT_ABORTED:
        return "Aborted"
    if rec.state is JobState.FAILED and rec.exit_code == EXIT_TERMINATED:
        return "Terminated"
    return "Failed"


def hidden(rec: JobRecord, now: float) -> bool:
    """Deleted through the API, or past its ``ttlSecondsAfterFinished``."""
    if rec.sub.extra.get("k8s_deleted"):
        return True
    ttl = rec.sub.extra.get("vc_ttl_s")
    return bool(ttl and rec.end_time is not None and now >= rec.end_time + int(ttl))


def plan(rec: JobRecord) -> dict[str, Any]:
    if not is_vcjob(rec):
        return kf.plan(rec)
    return plan_of_script(rec.sub.script or "") or {"tasks": [], "job": rec.sub.spec.name}


def layout(rec: JobRecord) -> dict[str, list[str]]:
    """Each task's replica slots on the allocation (as ``CORRAL_VC_LAYOUT`` says)."""
    if not is_vcjob(rec):
        return kf.layout(rec)
    out: dict[str, list[str]] = {}
    if rec.allocation is not None:
        for na in rec.allocation.nodes:
            out.setdefault(str(na.group), []).extend([na.node] * na.tasks)
    return out


def layout_text(rec: JobRecord) -> str:
    return ";".join(f"{g}=" + ",".join(f"{n}:1" for n in nodes)
                    for g, nodes in layout(rec).items())


ALIGNED = ("restricted", "single-numa-node")


def replica_cpus_text(rec: JobRecord, spec_of: Callable[[str], NodeSpec | None]) -> str:
    """``CORRAL_VC_CPUS``: the logical CPUs of each replica of a task whose group has a
    NUMA policy, slot by slot as ``layout`` lists them (``task=0,1,2|4,5,6;...``: the
    allocation entry's cores task by task, ``corral.core.placement.task_cores``);
    ``""`` when no task has one. A slot of a node the controller does not know is empty."""
    if rec.allocation is None or not is_vcjob(rec):
        return ""
    aligned = {g.name: g for g in rec.sub.spec.task_groups if g.numa_policy in ALIGNED}
    if not aligned:
        return ""
    out: dict[str, list[str]] = {}
    for na in rec.allocation.nodes:
        g = aligned.get(str(na.group))
        if g is None:
            continue
        spec = spec_of(na.node)
        slots = out.setdefault(g.name, [])
        if spec is None:
            slots.extend([""] * na.tasks)
            continue
        per = -(-g.cpus_per_task // max(1, spec.threads_per_core))
        for cores in task_cores(na, per):
            slots.append(",".join(str(c) for core in cores for c in spec.cpus_of_core(core)))
    return ";".join(f"{name}=" + "|".join(slots) for name, slots in out.items())


def replica_gpus_text(rec: JobRecord) -> str:
    """``CORRAL_VC_GPUS``: the GPU ids of each replica of a task whose group has a NUMA
    policy and GPUs, slot by slot as ``layout`` lists them (``task=0|1;...``: the
    allocation entry's GPUs task by task); ``""`` when no task has both."""
    if rec.allocation is None or not is_vcjob(rec):
        return ""
    aligned = {g.name: g for g in rec.sub.spec.task_groups
               if g.numa_policy in ALIGNED and g.gpus_per_task > 0}
    out: dict[str, list[str]] = {}
    for na in rec.allocation.nodes:
        g = aligned.get(str(na.group))
        if g is None:
            continue
        per = g.gpus_per_task
        out.setdefault(g.name, []).extend(
            ",".join(str(x) for x in na.gpus[k * per:(k + 1) * per]) for k in range(na.tasks))
    return ";".join(f"{name}=" + "|".join(slots) for name, slots in out.items())


def pods(rec: JobRecord, steps: list[dict[str, Any]], now: float,
         waiting: bool = False, parts: list[JobRecord] | None = None) -> list[dict[str, Any]]:
    """One Pod per replica of a Volcano job (``waiting``: late replicas still wait in a
    companion job, so a replica not started is Pending, not NotStarted)."""
    p = plan(rec)
    slots = layout(rec)
    by_name = {s["name"]: s for s in steps}  # the last run of each replica wins
    runs: dict[str, int] = {}
    for s in steps:
        runs[s["name"]] = runs.get(s["name"], 0) + 1
    out = []
    ns = namespace_of(rec)
    version = version_of(rec, parts)
    for t in p["tasks"]:
        for i in range(int(t["replicas"])):
            name = f"{p['job']}-{t['name']}-{i}"
            st = by_name.get(name)
            mine = slots.get(t["name"], [])
            node = (str(st["nodes"][0]) if st and st.get("nodes")
                    else mine[i] if i < len(mine) else None)
            out.append(pod(rec, t, i, name, ns, node, st, max(0, runs.get(name, 0) - 1),
                           waiting, version))
    return out


def container_error_reason(error: str) -> str:
    """The reason kubelet gives a container that could not be started: ``ErrImagePull``
    for an image that could not be had, ``CreateContainerError`` otherwise (no command,
    a mount or runtime that failed)."""
    return "ErrImagePull" if error.startswith("image pull failed") else \
        "CreateContainerError"


def _pod_phase(rec: JobRecord, st: dict[str, Any] | None,
               waiting: bool = False) -> tuple[str, dict[str, Any]]:
    if not is_vcjob(rec):
        return kf.pod_phase(rec)
    if st is None:
        if rec.state.is_finished and not waiting:
            return "Failed", {"terminated": {"exitCode": 0, "reason": "NotStarted"}}
        return "Pending", {"waiting": {"reason": "ContainerCreating" if rec.start_time
                                       else "Unschedulable"}}
    if st.get("state") == "RUNNING" and st.get("end_time") is None:
        return "Running", {"running": {"startedAt": ts(st.get("start_time"))}}
    code = int(st.get("exit_code") or 0)
    ok = st.get("state") == "COMPLETED" and code == 0
    term: dict[str, Any] = {"exitCode": code, "reason": "Completed" if ok else "Error",
            "startedAt": ts(st.get("start_time")), "finishedAt": ts(st.get("end_time"))}
    if st.get("error"):  # its container could not be made (the image, its command)
        term["reason"] = container_error_reason(str(st["error"]))
        term["message"] = str(st["error"])
    if st.get("signal"):
        term["signal"] = int(st["signal"])
    return ("Succeeded" if ok else "Failed"), {"terminated": term}


def pod(rec: JobRecord, task: dict[str, Any], index: int, name: str, ns: str,
        node: str | None, st: dict[str, Any] | None, restarts: int,
        waiting: bool = False, version: int | None = None) -> dict[str, Any]:
    """The Pod of one replica (``restarts``: its runs in this job run, less one)."""
    phase, cstate = _pod_phase(rec, st, waiting)
    req: dict[str, str] = {"cpu": str(task["cpus"])}
    if task.get("mem_mb"):
        req["memory"] = f"{task['mem_mb']}Mi"
    if task.get("gpus"):
        req["nvidia.com/gpu"] = str(task["gpus"])
    for gname, n in task.get("gres") or ():
        req[f"corral.dev/{gname}"] = str(n)
    container: dict[str, Any] = {"name": task.get("container") or task["name"],
                                 "image": task.get("image") or "corral.host/none",
                                 "resources": {"requests": req, "limits": req}}
    if "command" in task:  # as the manifest gave them (plans before: command + args)
        for key in ("command", "args"):
            if task[key]:
                container[key] = list(task[key])
    else:
        container["command"] = list(task["argv"])
    started = st.get("start_time") if st else None
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid_of("pod", f"{rec.id}/{name}"),
                     "resourceVersion": str(version_of(rec) if version is None
                                            else version),
                     "creationTimestamp": ts(rec.start_time or rec.submit_time),
                     "labels": {"volcano.sh/job-name": job_name(rec),
                                "volcano.sh/task-spec": task["name"],
                                "volcano.sh/task-index": str(index),
                                "corral.dev/job-id": str(rec.id)},
                     "annotations": {"volcano.sh/task-index": str(index)},
                     "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Job",
                                          "name": job_name(rec), "controller": True,
                                          "uid": uid_of("job", str(rec.id))}]},
        "spec": {"containers": [container], "nodeName": node, "restartPolicy": "Never",
                 "schedulerName": "corral"},
        "status": {"phase": phase, "hostIP": None, "startTime": ts(started),
                   "containerStatuses": [{"name": container["name"], "image": container[
                       "image"], "imageID": "", "ready": phase == "Running",
                       "restartCount": restarts, "started": phase == "Running",
                       "state": cstate}]},
    }


def vcjob(rec: JobRecord, steps: list[dict[str, Any]], now: float,
          parts: list[JobRecord] | None = None) -> dict[str, Any]:
    """``parts``: companion jobs of late replicas (``corral.frontends.volcano_late``)."""
    from corral.controller import kube_late

    meta = k8s_meta(rec)
    phase = phase_of(rec)
    waiting = kube_late.waiting(parts or [])
    try:
        spec = json.loads(rec.sub.extra.get("vc_spec") or "{}") if is_vcjob(rec) \
            else kf.manifest(rec)["spec"]
    except ValueError:
        spec = {}
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    tasks: dict[str, dict[str, dict[str, int]]] = {}  # task -> {"phase": {phase: n}}
    restarted = 0
    for pd in pods(rec, steps, now, waiting, parts):
        restarted = max(restarted, pd["status"]["containerStatuses"][0]["restartCount"])
        ph = pd["status"]["phase"]
        key = {"Pending": "pending", "Running": "running", "Succeeded": "succeeded"}.get(
            ph, "failed")
        counts[key] += 1
        per = tasks.setdefault(pd["metadata"]["labels"]["volcano.sh/task-spec"],
                               {"phase": {}})["phase"]
        per[ph] = per.get(ph, 0) + 1
    if parts:
        phase = kube_late.phase(rec, parts, phase, counts, phase_of,
                                plan(rec).get("min_success"))
    changed = rec.end_time or rec.start_time or rec.submit_time
    state: dict[str, Any] = {"phase": phase, "lastTransitionTime": ts(changed)}
    if rec.state is JobState.PENDING and rec.reason not in ("None", ""):
        state["reason"] = rec.reason
        state["message"] = rec.reason_detail or rec.reason
    elif rec.end_reason:
        state["reason"] = rec.end_reason
    conds = [{"status": "Pending", "lastTransitionTime": ts(rec.submit_time)}]
    if rec.start_time:
        conds.append({"status": "Running", "lastTransitionTime": ts(rec.start_time)})
    if rec.end_time:
        conds.append({"status": phase, "lastTransitionTime": ts(rec.end_time)})
    status: dict[str, Any] = {
        "state": state, "minAvailable": int(rec.sub.spec.min_available or 1),
        "retryCount": rec.restarts + restarted, "version": 1, "conditions": conds,
        "taskStatusCount": tasks, **counts}
    if rec.start_time:
        run = (rec.end_time or now) - rec.start_time
        status["runningDuration"] = f"{run:.0f}s"
    annotations = dict(meta.get("annotations") or {})
    annotations["corral.dev/job-id"] = str(rec.id)
    if not is_vcjob(rec):
        annotations.update(kf.read_only_annotations(rec))
    md: dict[str, Any] = {"name": job_name(rec), "namespace": namespace_of(rec),
                          "uid": uid_of("job", str(rec.id)),
                          "resourceVersion": str(version_of(rec, parts)), "generation": 1,
                          "creationTimestamp": ts(rec.submit_time),
                          "labels": dict(meta.get("labels") or {}), "annotations": annotations}
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": md, "spec": spec,
            "status": status}


def node_labels(rec: NodeRecord) -> dict[str, str]:
    s = rec.spec
    labels = {"kubernetes.io/hostname": s.name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                  s.arch or "", s.arch or "amd64")}
    for f in sorted(s.features):
        if "=" in f:
            k, _, v = f.partition("=")
            labels[k] = v
        else:
            labels[f] = "true"
            labels[f"feature.node.kubernetes.io/{f}"] = "true"
    types = s.gpu_types()
    if types:
        labels["nvidia.com/gpu.product"] = sorted(types)[0]
        labels["nvidia.com/gpu.present"] = "true"
    for p in rec.partitions:
        labels[f"corral.dev/partition-{p}"] = "true"
    return labels


def node(rec: NodeRecord, now: float) -> dict[str, Any]:
    s = rec.spec
    cap = {"cpu": str(s.cpus), "memory": f"{s.mem_mb}Mi", "pods": str(max(110, s.cpus))}
    if s.gpus:
        cap["nvidia.com/gpu"] = str(len(s.gpus))
    for name, n in s.gres:
        cap[f"corral.dev/{name}"] = str(n)
    alloc = dict(cap)
    alloc["cpu"] = str(max(0, s.cpus - rec.alloc_cpus))
    alloc["memory"] = f"{max(0, s.mem_mb - rec.alloc_mem_mb)}Mi"
    if s.gpus:
        alloc["nvidia.com/gpu"] = str(max(0, len(s.gpus) - rec.alloc_gpus))
    ready = rec.state.value not in ("DOWN", "UNKNOWN", "FAIL")
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": s.name, "uid": uid_of("node", s.name), "labels": node_labels(rec),
                     "resourceVersion": str(int((rec.last_seen or now) * 1000)),
                     "creationTimestamp": ts(rec.boot_time or rec.last_seen)},
        "spec": {"unschedulable": bool(rec.admin_state)},
        "status": {"capacity": cap, "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": rec.state.value, "message": rec.reason,
                                   "lastHeartbeatTime": ts(rec.last_seen)}],
                   "addresses": [{"type": "Hostname", "address": rec.hostname or s.name}],
                   "nodeInfo": {"kubeletVersion": f"corral-{rec.agent_version}",
                                "operatingSystem": "linux", "architecture":
                                    node_labels(rec)["kubernetes.io/arch"]}},
    }


def selector_matches(labels: dict[str, str], key: str, value: str) -> bool:
    return labels.get(key) == value or selector_feature(key, value) in labels


def queue(part: Any, total_cpus: int, now: float) -> dict[str, Any]:
    state = {"UP": "Open", "DRAIN": "Closing", "DOWN": "Closed", "INACTIVE": "Closed"}.get(
        part.state.value, "Open")
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": part.name, "uid": uid_of("queue", part.name),
                         "resourceVersion": "1", "creationTimestamp": ts(now),
                         "annotations": {"corral.dev/default": str(part.is_default).lower()}},
            "spec": {"weight": max(1, int(part.priority_job_factor)), "reclaimable": True,
                     "capability": {"cpu": str(total_cpus)}},
            "status": {"state": state}}


def namespace(name: str, now: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uid_of("ns", name), "resourceVersion": "1",
                         "creationTimestamp": ts(now)},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def events(rec: JobRecord, now: float) -> list[dict[str, Any]]:
    """The scheduling story of a Volcano job as Events of its Job object."""
    name = job_name(rec)
    ns = namespace_of(rec)
    out: list[tuple[str, str, str, float]] = []
    if rec.state is JobState.PENDING:
        out.append(("Warning", "PodGroupPending", f"{rec.reason}: {rec.reason_detail}"
                    if rec.reason_detail else f"waiting: {rec.reason}", now))
    if rec.start_time:
        nodes = ",".join(rec.allocation.node_names) if rec.allocation else ""
        n = rec.allocation.tasks if rec.allocation else 0
        out.append(("Normal", "Scheduled", f"gang of {n} replicas started on {nodes}",
                    rec.start_time))
    if rec.end_time:
        kind = "Normal" if rec.state is JobState.COMPLETED else "Warning"
        out.append((kind, phase_of(rec), f"job ended {rec.state.value}"
                    + (f" (exit {rec.exit_code})" if rec.exit_code is not None else ""),
                    rec.end_time))
    job_obj = {"apiVersion": API_VERSION, "kind": "Job", "name": name, "namespace": ns,
               "uid": uid_of("job", str(rec.id))}
    objs = [job_obj] * len(out)
    if is_vcjob(rec):  # replicas whose container could not be made: kubelet's event
        for st in rec.steps:
            if st.error:
                out.append(("Warning", container_error_reason(st.error), f"Error: {st.error}",
                            st.end_time or st.start_time))
                objs.append({"apiVersion": "v1", "kind": "Pod", "name": st.name,
                             "namespace": ns, "uid": uid_of("pod", f"{rec.id}/{st.name}")})
    return [{"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": f"{name}.{rec.id}.{k}", "namespace": ns,
                          "uid": uid_of("event", f"{rec.id}/{k}"),
                          "resourceVersion": str(int(t * 1000)),
                          "creationTimestamp": ts(t)},
             "involvedObject": objs[k],
             "type": kind, "reason": reason, "message": msg, "count": 1,
             "firstTimestamp": ts(t), "lastTimestamp": ts(t),
             "source": {"component": "corral-scheduler" if objs[k] is job_obj
                        else "corral-agent"}}
            for k, (kind, reason, msg, t) in enumerate(out)]


def now_version() -> str:
    return str(VERSIONS.current())
