"""Any Corral job as a Volcano Job manifest (``corral export --volcano JOB``).

A job submitted as a Volcano Job renders as its own manifest (name, namespace, labels,
annotations, spec as given). Any other job (``sbatch``, ``qsub``, ``corral submit``) is
translated for a site moving work to a Kubernetes cluster with Volcano:

* a job of task groups: one Volcano task per group, ``minAvailable`` the gang minimum;
* otherwise the batch script runs in a task ``batch`` of one replica on the first node,
  and a multi-node job's other nodes are a task ``worker`` (replicas = nodes - 1) that
  hosts the tasks ``mpirun``/``srun`` start there (``svc`` and ``ssh`` plugins, Volcano's
  MPI pattern); ``TaskCompleted`` of ``batch`` completes the job; ``minAvailable`` = nodes;
* per replica: cpu = CPUs per task x tasks per node, memory per node (or per CPU x CPUs),
  ``nvidia.com/gpu`` = GPUs per node (+ per task x tasks); a plain feature constraint
  (``a&b``, ``a,b``) becomes a ``nodeSelector`` of ``feature.node.kubernetes.io/F: "true"``
  (any other expression is kept in the ``corral.dev/constraint`` annotation); the time
  limit becomes ``activeDeadlineSeconds``; partition -> ``queue``; QOS ->
  ``priorityClassName``; account -> namespace;
* the image is the job's own container image (``--container-image``, ``--image``) in
  Kubernetes' form (``registry/name:tag``), its ``--container-entrypoint`` as ``args``
  (the image's ENTRYPOINT runs before them) instead of ``command``, its mounts of a host
  path at the same path as ``hostPath`` volumes (other mounts, and an image that is no
  registry image, a SIF or a directory, are named in annotations); a job that ran on the
  host has **no** ``image``: Corral runs such a manifest on the host again, and a
  Kubernetes cluster refuses it (``containers[0].image: Required value``) until an image
  is set, rather than pulling a made-up one. The submit environment is not copied (it
  holds the submitting shell's whole environment).

Every rendered manifest validates against the Volcano v1.15 CRD schema
(``shared/schemas/volcano``; tested).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from corral.frontends.volcano_spec import API_VERSION
from corral.submission import JobSubmission


def dns_label(text: str, suffix: str = "") -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "job"
    room = 63 - len(suffix) - (1 if suffix else 0)
    base = base[:room].strip("-") or "job"
    return f"{base}-{suffix}" if suffix else base


def _resources(cpus: int, mem_mb: int, gpus: int,
               gres: tuple[tuple[str, int], ...] = ()) -> dict[str, Any]:
    req: dict[str, str] = {"cpu": str(max(1, cpus))}
    for name, n in gres:  # Corral's GRES as the extended resources its nodes advertise
        req[f"corral.dev/{name.split(':')[0]}"] = str(n)
    if mem_mb:
        req["memory"] = f"{mem_mb}Mi"
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(req), "limits": dict(req)}


def _selector(constraint: str | None) -> tuple[dict[str, str], str | None]:
    if not constraint:
        return {}, None
    parts = [p.strip() for p in re.split(r"[&,]", constraint)]
    if all(p and re.fullmatch(r"[A-Za-z0-9_.\-/=]+", p) for p in parts):
        out: dict[str, str] = {}
        for p in parts:
            if "=" in p:
                k, _, v = p.partition("=")
                out[k] = v
            else:
                out[f"feature.node.kubernetes.io/{p}"] = "true"
        return out, None
    return {}, constraint


class Image:
    """The container part of an exported replica (``image`` None: the host)."""

    def __init__(self, sub: JobSubmission, annotations: dict[str, str]) -> None:
        from corral.containers.spec import ContainerError
        from corral.frontends.container_options import spec_of

        self.image: str | None = None
        self.entrypoint = False
        self.workdir: str | None = None
        self.mounts: list[tuple[str, bool]] = []  # host paths mounted at the same path
        try:
            spec = spec_of(sub.extra)
        except ContainerError:
            spec = None
        if spec is None:
            return
        if spec.image.kind != "docker":
            annotations["corral.dev/container-image"] = spec.image.canonical or \
                str(spec.name or "")
            return
        self.image = spec.image.canonical.removeprefix("docker://")
        self.entrypoint = spec.entrypoint
        self.workdir = spec.workdir
        other = []
        for m in spec.mounts:
            if m.source == m.target and not m.flags:
                self.mounts.append((m.source, m.readonly))
            else:
                other.append(f"{m.source}:{m.target}" + (":ro" if m.readonly else ""))
        if other:
            annotations["corral.dev/container-mounts"] = ",".join(other)

    def without_entrypoint(self) -> Image:
        """For a multi-node job's ``worker`` task, whose command is the export's own."""
        out = copy.copy(self)
        out.entrypoint = False
        return out

    def apply(self, container: dict[str, Any], pod: dict[str, Any]) -> None:
        if self.image is None:
            return
        container["image"] = self.image
        if self.entrypoint:  # the image's ENTRYPOINT, then these (Kubernetes' args)
            container["args"] = container.pop("command")
        if self.workdir:
            container["workingDir"] = self.workdir
        if self.mounts:
            pod["volumes"] = [{"name": f"host-{i}", "hostPath": {"path": path}}
                              for i, (path, _ro) in enumerate(self.mounts)]
            container["volumeMounts"] = [
                {"name": f"host-{i}", "mountPath": path} | ({"readOnly": True} if ro else {})
                for i, (path, ro) in enumerate(self.mounts)]


def _pod(name: str, argv: list[str], res: dict[str, Any], selector: dict[str, str],
         workdir: str, deadline: int | None, gpu_type: str | None,
         image: Image | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "command": argv, "resources": res}
    if workdir and workdir != "/":
        container["workingDir"] = workdir
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if image is not None:
        image.apply(container, spec)
    sel = dict(selector)
    if gpu_type:
        sel["nvidia.com/gpu.product"] = gpu_type
    if sel:
        spec["nodeSelector"] = sel
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    return {"spec": spec}


def export(sub: JobSubmission, job_id: int, partition: str | None = None) -> dict[str, Any]:
    """The Volcano Job manifest of job ``job_id`` (``partition``: where it ran, if it did)."""
    spec = sub.spec
    ns = spec.account or "default"
    if sub.dialect == "volcano" and sub.extra.get("vc_spec"):
        meta = json.loads(sub.extra.get("k8s_meta") or "{}")
        md: dict[str, Any] = {"name": spec.name, "namespace": ns}
        if meta.get("labels"):
            md["labels"] = meta["labels"]
        ann = {k: v for k, v in (meta.get("annotations") or {}).items()
               if not k.startswith("kubectl.kubernetes.io/")}
        if ann:
            md["annotations"] = ann
        return {"apiVersion": API_VERSION, "kind": "Job", "metadata": md,
                "spec": json.loads(sub.extra["vc_spec"])}
    annotations = {"corral.dev/job-id": str(job_id), "corral.dev/dialect": sub.dialect}
    image = Image(sub, annotations)
    selector, rest = _selector(spec.constraint)
    if rest:
        annotations["corral.dev/constraint"] = rest
    deadline = spec.time_limit_s
    queue = partition or (spec.partitions[0] if spec.partitions else "default")
    argv = ["/bin/bash", "-c", sub.script] if sub.script else list(sub.argv) or ["true"]
    tasks: list[dict[str, Any]] = []
    plugins: dict[str, list[str]] = {}
    policies: list[dict[str, Any]] = []
    if spec.task_groups:
        for g in spec.task_groups:
            t: dict[str, Any] = {"name": dns_label(g.name), "replicas": g.replicas,
                                 "template": _pod(dns_label(g.name), argv, _resources(
                                     g.cpus_per_task, g.mem_per_task_mb, g.gpus_per_task,
                                     g.gres),
                                     _selector(g.constraint)[0] | selector, sub.workdir,
                                     deadline, g.gpu_type or spec.gpu_type, image)}
            if g.min_available is not None:
                t["minAvailable"] = g.min_available
            if g.numa_policy != "none":
                t["topologyPolicy"] = g.numa_policy
            tasks.append(t)
        min_av = spec.min_available or sum(g.replicas if g.min_available is None
                                           else g.min_available for g in spec.task_groups)
    else:
        nodes = spec.nodes_min
        per_node = spec.ntasks_per_node or (
            -(-spec.ntasks // nodes) if spec.ntasks else 1)
        cpus = spec.cpus_per_task * per_node
        mem = spec.mem_per_node_mb or (spec.mem_per_cpu_mb or 0) * cpus
        gpus = spec.gpus_per_node + spec.gpus_per_task * per_node + (
            spec.gpus // nodes if spec.gpus else 0)
        res = _resources(cpus, mem, gpus, spec.gres)
        tasks.append({"name": "batch", "replicas": 1, "template": _pod(
            "batch", argv, res, selector, sub.workdir, deadline, spec.gpu_type, image)})
        if nodes > 1:
            tasks.append({"name": "worker", "replicas": nodes - 1, "template": _pod(
                "worker", ["/bin/sh", "-c", "sleep infinity"], res, selector, sub.workdir,
                deadline, spec.gpu_type, image.without_entrypoint())})
            plugins = {"svc": [], "ssh": []}
            policies = [{"event": "TaskCompleted", "action": "CompleteJob"}]
            tasks[0]["policies"] = policies
        min_av = nodes
    out_spec: dict[str, Any] = {"schedulerName": "volcano", "queue": queue,
                                "minAvailable": min_av, "tasks": tasks}
    if spec.qos:
        out_spec["priorityClassName"] = spec.qos
    if plugins:
        out_spec["plugins"] = plugins
    return {"apiVersion": API_VERSION, "kind": "Job",
            "metadata": {"name": dns_label(spec.name, str(job_id)), "namespace": ns,
                         "annotations": annotations},
            "spec": out_spec}
