"""Jobs submitted another way (``sbatch``, ``qsub``, ``corral submit``) as read-only
Volcano Jobs and Pods, so that ``kubectl get vcjob``/``get pods`` show the whole queue.

Mapping (docs/kubernetes.md, "Jobs from sbatch"):

* name: ``<job name as a DNS-1123 label>-<job id>`` (``corral export --volcano``'s name),
  namespace = account; the spec is the job rendered by
  ``corral.frontends.volcano_export.export`` (a task ``batch`` of one replica, a task
  ``worker`` of nodes - 1 replicas for a multi-node job; one task per group for a job of
  task groups); the annotations say how the job was submitted
  (``corral.dev/submitted-with``) and that kubectl only reads it (``corral.dev/read-only``);
* pods: one per replica of that spec, on the allocation's nodes in order; their phase is
  the job's (PENDING -> Pending, RUNNING/SUSPENDED/COMPLETING -> Running, COMPLETED ->
  Succeeded, other ends -> Failed with the job's exit code; a job that ended without
  starting leaves its pods Failed with reason ``NotStarted``);
* ``kubectl logs`` of the ``batch`` pod reads the job's output file when its name uses no
  pattern but ``%j``/``%x``/``%u``/``%%`` (Slurm's default ``slurm-%j.out`` in the working
  directory included); the controller reads it only if the job's user owns it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.controller.kube_time import ts
from corral.core.model.job import JobState
from corral.frontends.volcano_export import dns_label, export

if TYPE_CHECKING:
    from corral.controller.records import JobRecord

DIALECTS = {"slurm": "sbatch", "pbs": "qsub", "native": "corral submit"}


def name_of(rec: JobRecord) -> str:
    return dns_label(str(rec.sub.spec.name), str(rec.id))


def manifest(rec: JobRecord) -> dict[str, Any]:
    return export(rec.sub, rec.id, rec.partition)


def read_only_annotations(rec: JobRecord) -> dict[str, str]:
    return {"corral.dev/submitted-with": DIALECTS.get(rec.sub.dialect, rec.sub.dialect),
            "corral.dev/read-only": "true"}


def _mb(text: str) -> int:
    m = re.fullmatch(r"(\d+)Mi", text)
    return int(m.group(1)) if m else 0


def plan(rec: JobRecord) -> dict[str, Any]:
    """The plan form ``kube_objects.pods`` reads (tasks with replicas and resources)."""
    tasks = []
    for t in manifest(rec)["spec"]["tasks"]:
        c = t["template"]["spec"]["containers"][0]
        req = c["resources"]["requests"]
        gres = [(k.split("/", 1)[1], int(v)) for k, v in req.items()
                if k.startswith("corral.dev/")]
        tasks.append({"name": t["name"], "replicas": int(t["replicas"]),
                      "cpus": int(req.get("cpu", 1)), "mem_mb": _mb(req.get("memory", "")),
                      "gpus": int(req.get("nvidia.com/gpu", 0)), "gres": gres,
                      "argv": list(c.get("command") or []) + list(c.get("args") or []),
                      "image": c.get("image"),
                      "container": c["name"]})
    return {"job": name_of(rec), "tasks": tasks}


def layout(rec: JobRecord) -> dict[str, list[str]]:
    """Each task's replica nodes: ``batch`` on the first node, ``worker`` on the rest; a
    job of task groups by its groups."""
    if rec.allocation is None:
        return {}
    if rec.sub.spec.task_groups:
        out: dict[str, list[str]] = {}
        for na in rec.allocation.nodes:
            out.setdefault(dns_label(str(na.group)), []).extend([na.node] * na.tasks)
        return out
    nodes = list(rec.allocation.node_names)
    return {"batch": nodes[:1], "worker": nodes[1:]}


def pod_phase(rec: JobRecord) -> tuple[str, dict[str, Any]]:
    if rec.state is JobState.PENDING:
        return "Pending", {"waiting": {"reason": "Unschedulable"}}
    if rec.state.is_active:
        return "Running", {"running": {"startedAt": ts(rec.start_time)}}
    if rec.start_time is None:
        return "Failed", {"terminated": {"exitCode": 0, "reason": "NotStarted"}}
    code = int(rec.exit_code or 0)
    ok = rec.state is JobState.COMPLETED
    return ("Succeeded" if ok else "Failed"), {"terminated": {
        "exitCode": code if not ok else 0, "reason": "Completed" if ok else rec.state.value,
        "startedAt": ts(rec.start_time), "finishedAt": ts(rec.end_time)}}


def log_path(rec: JobRecord) -> Path | None:
    """The job's output file, when its name can be known here."""
    pattern = rec.sub.stdout
    if pattern is None:
        if rec.sub.dialect != "slurm" or rec.array_job_id is not None:
            return None
        pattern = "slurm-%j.out"
    if re.search(r"%[^jxu%]", pattern):
        return None
    name = (pattern.replace("%%", "\0").replace("%j", str(rec.id))
            .replace("%x", str(rec.sub.spec.name)).replace("%u", str(rec.sub.spec.user))
            .replace("\0", "%"))
    return Path(os.path.join(rec.sub.workdir or "/", name))
