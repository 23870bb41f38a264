"""Late replicas of a Volcano job: replicas beyond the gang minimum that did not fit when
the job started run later, when resources free up (Volcano schedules those pods then).

Algorithm (run by the job's launcher, ``corral.frontends.volcano_run``):

1. **What is missing.** The allocation (``CORRAL_VC_LAYOUT``) has fewer slots than a task
   has replicas: the replicas without a slot are late.
2. **A companion job runs them.** The launcher submits, as the job's user, a companion
   job named ``<job>-late-<root id>``: same account, partition, QOS, time limit; one task
   group per task holding its late replicas, gang minimum 1 (any one may start alone).
   Its batch program is the same launcher with a plan of just those replicas (their
   original indices): each is recorded as a step named after its pod on the companion,
   its log goes to the root job's log directory, and a companion that starts short
   submits the next companion for the rest (same name).
3. **One Volcano job.** ``kubectl`` shows the companions' replicas as pods of the root
   job and does not list the companions (``corral.controller.kube_late``); the phase is
   ``Running`` while any part runs or waits, and the verdict is taken over every replica
   of all parts. The root's launcher does not wait for companions (its allocation would
   then hold the resources a late replica waits for); when it ends the job early
   (``CompleteJob``, ``AbortJob``, ``TerminateJob``, ``minSuccess``, ``maxRetry``, or a
   stop), it cancels the companions; a job action in a companion (``AbortJob``,
   ``TerminateJob``) cancels the root.

Known limits: the ``svc`` host files and ``VC_<TASK>_HOSTS`` of replicas started earlier do
not list late replicas' hosts (they are not known then); a restart action in a companion
restarts replicas of that companion only.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from corral.core.model.job import JobSpec, TaskGroup
from corral.submission import JobSubmission


def late_name(job: str, root_id: str) -> str:
    return f"{job}-late-{root_id}"


def missing(plan: dict[str, Any], slots: dict[str, list[str]]) -> dict[str, list[int]]:
    """Each task's replica indices without a slot in this allocation."""
    out: dict[str, list[int]] = {}
    for t in plan["tasks"]:
        idx = list(t.get("indices") or range(int(t["replicas"])))
        have = len(slots.get(t["name"], []))
        if have < len(idx):
            out[t["name"]] = idx[have:]
    return out


def companion(plan: dict[str, Any], late: dict[str, list[int]], root_id: str,
              workdir: str, env: dict[str, str], python: str = sys.executable
              ) -> dict[str, Any]:
    """The companion job's submission (wire form) for the ``late`` replicas."""
    from corral.frontends.volcano import launcher_script

    sub_plan = copy.deepcopy(plan)
    sub_plan["tasks"] = []
    for t in plan["tasks"]:
        if t["name"] in late:
            t2 = dict(t, indices=late[t["name"]], replicas=len(late[t["name"]]),
                      min_available=0, depends_on=[])
            sub_plan["tasks"].append(t2)
    sub_plan["late_of"] = root_id
    sub_plan["min_success"] = None
    groups = tuple(TaskGroup(t["name"], t["replicas"], t["cpus"], t["mem_mb"], t["gpus"],
                             t["gpu_type"], 0, t["constraint"],
                             tuple((str(k), int(v)) for k, v in t["gres"]),
                             numa_policy=t.get("numa_policy") or "none")
                   for t in sub_plan["tasks"])
    ns = plan.get("namespace") or "default"
    queue = plan.get("queue") or "default"
    spec = JobSpec(name=late_name(plan["job"], root_id),
                   account=None if ns == "default" else ns,
                   partitions=() if queue == "default" else (queue,),
                   qos=plan.get("qos") or None, task_groups=groups, min_available=1,
                   time_limit_s=plan.get("time_limit_s"), requeue=False)
    keep: dict[str, str] = {k: env[k] for k in ("PATH", "HOME", "USER", "LOGNAME", "SHELL")
                            if k in env}
    sub = JobSubmission(spec=spec, script=launcher_script(sub_plan, python), workdir=workdir,
                        env=keep, dialect="volcano", extra={"vc_late_of": root_id})
    return sub.to_json()


def part_results(client: Any, job: str, root_id: str) -> tuple[list[dict[str, Any]], bool]:
    """The companions' job records (with steps) and whether any is still active."""
    rows = client.jobs(name=late_name(job, root_id), include_finished=True)
    active = any(r.get("state") in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
                 for r in rows)
    return rows, active


def cancel_parts(client: Any, job: str, root_id: str) -> None:
    try:
        rows, _active = part_results(client, job, root_id)
        live = [r["id"] for r in rows if r.get("state") in ("PENDING", "RUNNING",
                                                             "SUSPENDED")]
        if live:
            client.cancel(live)
    except Exception as exc:  # noqa: BLE001 - the root ends anyway
        print(f"corral: cannot cancel the late replicas' jobs: {exc}", file=sys.stderr)
