"""The Kubernetes API subset kubectl needs, served by the controller (issue 14).

Routes (``mount(app, ctl, identity)``; docs/kubernetes.md): discovery and OpenAPI
(``corral.controller.kube_discovery``); ``batch.volcano.sh/v1alpha1`` Jobs: create, get,
list, watch, patch (JSON merge patch, what ``kubectl apply`` sends for custom resources),
update, delete; read-only ``v1`` Pods (and ``pods/{name}/log``), Nodes, Namespaces,
Events, and ``scheduling.volcano.sh/v1beta1`` Queues. Authentication is the API's (Unix
socket peer or ``Authorization: Bearer`` token); a caller sees and changes only their own
jobs (operators: all). A Job's ``spec`` cannot change after submission (refused with its
path); labels and annotations can. Watches poll the controller's records every 0.2 s and
send what changed after the given ``resourceVersion``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pwd
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from corral.controller import kube_foreign as kf
from corral.controller import kube_objects as ko
from corral.controller.errors import ApiError
from corral.controller.kube_http import (
    Column,
    KubeError,
    field_selector,
    invalid,
    label_selector,
    not_found,
    table,
    wants_table,
)
from corral.controller.kube_time import age
from corral.core.config import PlacementMode
from corral.frontends.volcano import ManifestError, parse_job

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

BATCH = "/apis/batch.volcano.sh/v1alpha1"
SCHED = "/apis/scheduling.volcano.sh/v1beta1"
GROUP = "batch.volcano.sh"
WATCH_POLL_S = 0.2


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data, separators=(",", ":")), status_code=status,
                    media_type="application/json")


def host_commands(ctl: Controller) -> bool:
    """``[controller] volcano_host_commands``: with ``volcano_images = "host"``, a task
    with an image runs its command on the host (default true; false refuses it)."""
    return ctl.cfg.controller.volcano_host_commands


def _pod_status(o: dict[str, Any]) -> str:
    """kubectl's STATUS: the reason of a container that could not be made
    (``CreateContainerError``, ``ErrImagePull``), else the phase's word."""
    ph = str(o["status"]["phase"])
    for cs in o["status"].get("containerStatuses") or ():
        state = cs.get("state") or {}
        reason = (state.get("terminated") or {}).get("reason") or \
            (state.get("waiting") or {}).get("reason")
        if reason in ("CreateContainerError", "ErrImagePull"):
            return str(reason)
    return {"Succeeded": "Completed", "Failed": "Error"}.get(ph, ph)


class Kube:
    def __init__(self, ctl: Controller, identity: Callable[[Request], Identity]) -> None:
        self.ctl = ctl
        self.identity = identity
        self._late: dict[int, list[JobRecord]] = {}  # root id -> companions (kube_late)

    # ---- records -------------------------------------------------------------------------

    def visible(self, rec: JobRecord, who: Identity) -> bool:
        return self.ctl.may_see_private(rec, who)

    def vcjobs(self, who: Identity, ns: str | None, now: float) -> list[JobRecord]:
        from corral.controller import kube_late

        out = []
        self._late = kube_late.index(r for r in self.ctl.jobs.values()
                                     if r.sub.dialect == "volcano")
        for rec in sorted(self.ctl.jobs.values(), key=lambda r: r.id):
            if kube_late.root_of(rec) is not None:
                continue  # a companion of late replicas: shown as its root's pods
            if ko.hidden(rec, now) or not self.visible(rec, who):
                continue
            if ns is not None and ko.namespace_of(rec) != ns:
                continue
            out.append(rec)
        return out

    def find(self, who: Identity, ns: str, name: str, now: float) -> JobRecord:
        found = [r for r in self.vcjobs(who, ns, now) if ko.job_name(r) == name]
        if not found:
            raise not_found("jobs", GROUP, name)
        return found[-1]

    def parts(self, rec: JobRecord) -> list[JobRecord]:
        """The companion jobs of ``rec``'s late replicas (as of the last ``vcjobs``)."""
        return list(self._late.get(rec.id, ()))

    def steps_of(self, rec: JobRecord) -> list[dict[str, Any]]:
        return [s.to_api() for r in [rec, *self.parts(rec)] for s in r.steps]

    def job_obj(self, rec: JobRecord, now: float) -> dict[str, Any]:
        return ko.vcjob(rec, self.steps_of(rec), now, self.parts(rec))

    def all_pods(self, who: Identity, ns: str | None, now: float) -> list[dict[str, Any]]:
        from corral.controller import kube_late

        out: list[dict[str, Any]] = []
        for rec in self.vcjobs(who, ns, now):
            parts = self.parts(rec)
            out.extend(ko.pods(rec, self.steps_of(rec), now, kube_late.waiting(parts), parts))
        return out

    # ---- create / change -------------------------------------------------------------------

    async def create(self, who: Identity, ns: str, body: Any, dry_run: bool) -> dict[str, Any]:
        md = body.get("metadata") if isinstance(body, dict) else None
        name = str(md.get("name", "")) if isinstance(md, dict) else ""
        try:
            vj = parse_job(body, namespace=ns, host_commands=host_commands(self.ctl),
                           images=self.ctl.cfg.controller.volcano_images,
                           allowed_registries=self.ctl.cfg.containers.allowed_registries,
                           python=self.ctl.cfg.controller.volcano_python or sys.executable,
                           topology_placement=self.ctl.cfg.scheduler.placement
                           is PlacementMode.TOPOLOGY)
        except ManifestError as exc:
            raise invalid("Job", GROUP, exc.name or name, exc.causes) from None
        self.check_names(vj.name, vj.submission.spec)
        now = time.time()
        if any(ko.job_name(r) == vj.name for r in self.vcjobs(who, ns, now)):
            raise KubeError(409, f'jobs.{GROUP} "{vj.name}" already exists',
                            details={"name": vj.name, "group": GROUP, "kind": "jobs"})
        sub = vj.submission
        try:
            pw = pwd.getpwnam(who.user)
            home, shell = pw.pw_dir, pw.pw_shell
        except KeyError:
            home, shell = "/tmp", "/bin/sh"
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": home,
               "USER": who.user, "LOGNAME": who.user, "SHELL": shell}
        sub = dataclasses.replace(sub, workdir=sub.workdir or home, env=env)
        if dry_run:
            return {"apiVersion": body["apiVersion"], "kind": "Job", "metadata": {
                "name": vj.name, "namespace": ns, "labels": vj.labels,
                "annotations": vj.annotations}, "spec": body.get("spec"), "status": {}}
        try:
            got = await self.ctl.submit(sub.to_json(), who)
        except ApiError as exc:
            raise invalid("Job", GROUP, vj.name, [("spec", "FieldValueInvalid",
                                                   exc.message)]) from None
        rec = self.ctl.jobs[int(got["job_ids"][0])]
        return self.job_obj(rec, time.time())

    def check_names(self, name: str, spec: Any) -> None:
        """The queue, priority class and namespace must exist (refused by their paths)."""
        causes = []
        parts = {p.name for p in self.ctl.nodes.partitions}
        if spec.partitions and spec.partitions[0] not in parts:
            causes.append(("spec.queue", "FieldValueNotFound",
                           f"Not found: queue {spec.partitions[0]!r} (the queues are the "
                           f"partitions: {', '.join(sorted(parts))})"))
        qos = {q.name for q in self.ctl.cfg.qos}
        if spec.qos and qos and spec.qos not in qos:
            causes.append(("spec.priorityClassName", "FieldValueNotFound",
                           f"Not found: priority class {spec.qos!r} (the priority classes "
                           f"are the QOS: {', '.join(sorted(qos))})"))
        accounts = {a.name for a in self.ctl.cfg.accounts}
        if spec.account and accounts and spec.account not in accounts:
            causes.append(("metadata.namespace", "FieldValueNotFound",
                           f"Not found: namespace {spec.account!r} (namespaces are accounts: "
                           f"default, {', '.join(sorted(accounts))})"))
        if causes:
            raise invalid("Job", GROUP, name, causes)

    @staticmethod
    def writable(rec: JobRecord, verb: str) -> None:
        """A job submitted another way is only shown here: ``verb`` is refused."""
        if not ko.is_vcjob(rec):
            raise KubeError(405, f"jobs.{GROUP} \"{ko.job_name(rec)}\" is job {rec.id}, "
                                 f"submitted with {kf.DIALECTS.get(rec.sub.dialect, 'Corral')}"
                                 f": kubectl only reads it ({verb} it with Corral's or the "
                                 "scheduler's own commands, e.g. scancel, scontrol)",
                            reason="MethodNotAllowed")

    async def change(self, who: Identity, rec: JobRecord, new: dict[str, Any]) -> None:
        """Keep ``new``'s labels and annotations; its spec must be the job's."""
        self.writable(rec, "change")
        cur = self.job_obj(rec, time.time())
        name = cur["metadata"]["name"]
        if new.get("spec") != cur["spec"]:
            raise invalid("Job", GROUP, name, [(
                "spec", "FieldValueForbidden", "Forbidden: a submitted job's spec does not "
                "change in Corral (delete the job and create it again)")])
        md = new.get("metadata") or {}
        if md.get("name", name) != name:
            raise invalid("Job", GROUP, name, [("metadata.name", "FieldValueInvalid",
                                                "Invalid value: the name does not change")])
        for key in ("labels", "annotations"):
            val = md.get(key) or {}
            if not isinstance(val, dict) or not all(isinstance(v, str) for v in val.values()):
                raise invalid("Job", GROUP, name, [(f"metadata.{key}", "FieldValueInvalid",
                                                    "Invalid value: a map of strings")])
        annotations = {k: v for k, v in (md.get("annotations") or {}).items()
                       if k != "corral.dev/job-id"}
        meta = {"labels": md.get("labels") or {}, "annotations": annotations,
                "mtime": time.time()}
        await self._save_extra(rec, k8s_meta=json.dumps(meta))

    async def _save_extra(self, rec: JobRecord, **extra: str) -> None:
        sub = rec.sub
        rec.sub = dataclasses.replace(sub, extra={**sub.extra, **extra})
        rec.touch()
        await self.ctl.persist(with_submission=[rec])

    async def delete(self, who: Identity, rec: JobRecord) -> dict[str, Any]:
        self.writable(rec, "cancel")
        obj = self.job_obj(rec, time.time())
        if not rec.state.is_finished:
            res = await self.ctl.act("cancel", [str(rec.id)], who, {})
            if res and not res[0].get("ok"):
                raise KubeError(409, str(res[0].get("message")))
        await self._save_extra(rec, k8s_deleted="1")
        return obj

    # ---- lists, tables and watches ---------------------------------------------------------

    def respond(self, request: Request, kind: str, items: list[dict[str, Any]],
                columns: list[Column], api_version: str) -> Response:
        items = self.filter(request, items)
        rv = ko.now_version()
        if request.query_params.get("watch") in ("1", "true"):
            raise RuntimeError("watch is served by respond_watch")
        if wants_table(request.headers.get("accept", "")):
            return _json(table(columns, items, rv, request.query_params.get("includeObject")))
        return _json({"kind": f"{kind}List", "apiVersion": api_version,
                      "metadata": {"resourceVersion": rv}, "items": items})

    @staticmethod
    def filter(request: Request, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        fs = field_selector(request.query_params.get("fieldSelector"))
        ls = label_selector(request.query_params.get("labelSelector"))
        return [o for o in items if fs(o) and ls((o.get("metadata") or {}).get("labels") or {})]

    def watch(self, request: Request, source: Callable[[], list[dict[str, Any]]],
              columns: list[Column]) -> Response:
        tbl = wants_table(request.headers.get("accept", ""))
        include = request.query_params.get("includeObject")
        since = request.query_params.get("resourceVersion") or ""
        try:
            timeout_s = float(request.query_params.get("timeoutSeconds") or 1800)
        except ValueError:
            raise KubeError(400, "timeoutSeconds must be a number") from None
        start_rv = int(since) if since.isdigit() and since != "0" else None

        def render(kind: str, obj: dict[str, Any], first: bool) -> bytes:
            out = table(columns, [obj], obj["metadata"].get("resourceVersion", ""), include,
                        header=first) if tbl else obj
            return (json.dumps({"type": kind, "object": out}) + "\n").encode()

        async def stream() -> AsyncIterator[bytes]:
            end = time.monotonic() + min(timeout_s, 1800)
            known: dict[str, tuple[int, dict[str, Any]]] = {}
            first = True
            initial = True
            while time.monotonic() < end:
                if await request.is_disconnected():
                    return
                try:
                    objs = self.filter(request, source())
                except KubeError:
                    return
                seen = set()
                for o in objs:
                    uid = o["metadata"]["uid"]
                    rv = int(o["metadata"].get("resourceVersion") or 0)
                    seen.add(uid)
                    old = known.get(uid)
                    known[uid] = (rv, o)
                    if old is None:
                        if initial and start_rv is not None and rv <= start_rv:
                            continue
                        yield render("ADDED", o, first)
                        first = False
                    elif rv != old[0] or _steady(o) != _steady(old[1]):
                        yield render("MODIFIED", o, first)
                        first = False
                for uid in list(known):
                    if uid not in seen:
                        yield render("DELETED", known.pop(uid)[1], first)
                        first = False
                initial = False
                await asyncio.sleep(WATCH_POLL_S)

        return StreamingResponse(stream(), media_type="application/json")


def _steady(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what changes by itself (a running job's duration)."""
    status = obj.get("status")
    if not isinstance(status, dict) or "runningDuration" not in status:
        return obj
    return {**obj, "status": {k: v for k, v in status.items() if k != "runningDuration"}}


JOB_COLUMNS: list[Column] = [
    ("NAME", "string", 0, lambda o: o["metadata"]["name"]),
    ("STATUS", "string", 0, lambda o: o["status"]["state"]["phase"]),
    ("MINAVAILABLE", "integer", 0, lambda o: o["status"]["minAvailable"]),
    ("RUNNINGS", "integer", 0, lambda o: o["status"]["running"]),
    ("AGE", "string", 0, lambda o: age(_epoch(o["metadata"]["creationTimestamp"]),
                                          time.time())),
    ("QUEUE", "string", 1, lambda o: o["spec"].get("queue") or "default"),
]
POD_COLUMNS: list[Column] = [
    ("NAME", "string", 0, lambda o: o["metadata"]["name"]),
    ("READY", "string", 0, lambda o: "1/1" if o["status"]["phase"] == "Running" else "0/1"),
    ("STATUS", "string", 0, _pod_status),
    ("RESTARTS", "integer", 0,
     lambda o: o["status"]["containerStatuses"][0]["restartCount"]),
    ("AGE", "string", 0, lambda o: age(_epoch(o["metadata"]["creationTimestamp"]),
                                          time.time())),
    ("NODE", "string", 1, lambda o: o["spec"].get("nodeName") or "<none>"),
]
NODE_COLUMNS: list[Column] = [
    ("NAME", "string", 0, lambda o: o["metadata"]["name"]),
    ("STATUS", "string", 0, lambda o: ("Ready" if o["status"]["conditions"][0]["status"]
                                       == "True" else "NotReady")
     + (",SchedulingDisabled" if o["spec"].get("unschedulable") else "")),
    ("ROLES", "string", 0, lambda o: "<none>"),
    ("AGE", "string", 0, lambda o: age(_epoch(o["metadata"]["creationTimestamp"]),
                                          time.time())),
    ("VERSION", "string", 0, lambda o: o["status"]["nodeInfo"]["kubeletVersion"]),
    ("CPU", "string", 1, lambda o: o["status"]["capacity"]["cpu"]),
    ("GPU", "string", 1, lambda o: o["status"]["capacity"].get("nvidia.com/gpu", "0")),
]
NAME_AGE: list[Column] = [
    ("NAME", "string", 0, lambda o: o["metadata"]["name"]),
    ("STATUS", "string", 0, lambda o: (o.get("status") or {}).get("phase")
     or (o.get("status") or {}).get("state", "")),
    ("AGE", "string", 0, lambda o: age(_epoch(o["metadata"]["creationTimestamp"]),
                                          time.time())),
]
EVENT_COLUMNS: list[Column] = [
    ("LAST SEEN", "string", 0, lambda o: age(_epoch(o["lastTimestamp"]), time.time())),
    ("TYPE", "string", 0, lambda o: o["type"]),
    ("REASON", "string", 0, lambda o: o["reason"]),
    ("OBJECT", "string", 0, lambda o: f"job/{o['involvedObject']['name']}"),
    ("MESSAGE", "string", 0, lambda o: o["message"]),
]


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    from datetime import datetime, timezone

    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc).timestamp()
