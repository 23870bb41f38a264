"""The FastAPI routes of the Kubernetes API subset (``corral.controller.kube``).

Every handler answers errors as a ``v1`` ``Status`` (``KubeError``), the way kubectl
expects them; the Corral API's own errors are translated (401, 403, 404, 409, 422).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from corral.controller import kube_discovery as disc
from corral.controller import kube_late
from corral.controller import kube_objects as ko
from corral.controller.errors import ApiError
from corral.controller.kube import (
    BATCH,
    EVENT_COLUMNS,
    JOB_COLUMNS,
    NAME_AGE,
    NODE_COLUMNS,
    POD_COLUMNS,
    SCHED,
    Kube,
)
from corral.controller.kube_http import KubeError, from_api_error, merge_patch, not_found

if TYPE_CHECKING:
    from corral.controller.auth import Identity

Handler = Callable[..., Awaitable[Response]]


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data, separators=(",", ":")), status_code=status,
                    media_type="application/json")


def kube_errors(fn: Handler) -> Handler:
    @wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Response:
        try:
            return await fn(*args, **kwargs)
        except KubeError as exc:
            return _json(exc.status(), exc.code)
        except ApiError as exc:
            err = from_api_error(exc)
            return _json(err.status(), err.code)
    return wrapped


async def _body(request: Request) -> Any:
    raw = await request.body()
    ctype = request.headers.get("content-type", "")
    if "yaml" in ctype:
        if "apply-patch" in ctype:
            raise KubeError(415, "server-side apply is not supported by Corral: use "
                                 "kubectl apply without --server-side")
        import yaml

        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise KubeError(400, f"the body is not valid YAML: {exc}") from None
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise KubeError(400, f"the body is not valid JSON: {exc}") from None


class VolcanoManifest(BaseModel):
    """A ``batch.volcano.sh/v1alpha1`` ``Job`` (checked field by field by
    ``corral.frontends.volcano.parse_job``; the CRD schema is in ``/k8s/openapi/v3``)."""

    model_config = ConfigDict(extra="allow")
    apiVersion: str = "batch.volcano.sh/v1alpha1"  # noqa: N815 (the manifest's own names)
    kind: str = "Job"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] = Field(default_factory=dict)


PREFIX = "/k8s"  # the kubeconfig's server URL ends in it: Corral's own API has /api/v1


def add_routes(app: FastAPI, k: Kube) -> None:
    ctl = k.ctl
    r = APIRouter(prefix=PREFIX)

    def who(request: Request) -> Identity:
        return k.identity(request)

    # ---- discovery -----------------------------------------------------------------------

    @r.get("/version", include_in_schema=False)
    @kube_errors
    async def version(request: Request) -> Response:
        return _json(disc.version())

    @r.get("/api", include_in_schema=False)
    @kube_errors
    async def api(request: Request) -> Response:
        who(request)
        return _json(disc.api_versions(request.headers.get("host", "")))

    @r.get("/api/v1", include_in_schema=False)
    @kube_errors
    async def api_v1(request: Request) -> Response:
        who(request)
        return _json(disc.core_resources())

    @r.get("/apis", include_in_schema=False)
    @kube_errors
    async def apis(request: Request) -> Response:
        who(request)
        return _json(disc.groups())

    @r.get("/apis/{group}", include_in_schema=False)
    @kube_errors
    async def api_group(request: Request, group: str) -> Response:
        who(request)
        for g in disc.groups()["groups"]:
            if g["name"] == group:
                return _json(g)
        raise KubeError(404, f"the server could not find the group {group}")

    @r.get("/apis/{group}/{version}", include_in_schema=False)
    @kube_errors
    async def api_group_version(request: Request, group: str, version: str) -> Response:
        who(request)
        got = disc.group_resources(group, version)
        if got is None:
            raise KubeError(404, f"the server could not find {group}/{version}")
        return _json(got)

    @r.get("/openapi/v2", include_in_schema=False)
    @kube_errors
    async def openapi_v2(request: Request) -> Response:
        who(request)
        return Response(disc.openapi_v2_protobuf(), media_type="application/octet-stream")

    @r.get("/openapi/v3", include_in_schema=False)
    @kube_errors
    async def openapi_v3(request: Request) -> Response:
        who(request)
        return _json(disc.openapi_root(PREFIX))

    @r.get("/openapi/v3/{path:path}", include_in_schema=False)
    @kube_errors
    async def openapi_v3_doc(request: Request, path: str) -> Response:
        who(request)
        doc = disc.openapi_doc(path)
        if doc is None:
            raise KubeError(404, f"no OpenAPI document for {path}")
        return _json(doc)

    # ---- Volcano Jobs ----------------------------------------------------------------------

    def jobs_list(request: Request, ns: str | None) -> Response:
        me = who(request)

        def source() -> list[dict[str, Any]]:
            now = time.time()
            return [k.job_obj(r, now) for r in k.vcjobs(me, ns, now)]

        if request.query_params.get("watch") in ("1", "true"):
            return k.watch(request, source, JOB_COLUMNS)
        return k.respond(request, "Job", source(), JOB_COLUMNS, "batch.volcano.sh/v1alpha1")

    @r.get(BATCH + "/jobs", include_in_schema=False)
    @kube_errors
    async def jobs_all(request: Request) -> Response:
        return jobs_list(request, None)

    @r.get(BATCH + "/namespaces/{ns}/jobs", include_in_schema=False)
    @kube_errors
    async def jobs_ns(request: Request, ns: str) -> Response:
        return jobs_list(request, ns)

    @r.post(BATCH + "/namespaces/{ns}/jobs", include_in_schema=False)
    @kube_errors
    async def jobs_create(request: Request, ns: str) -> Response:
        me = who(request)
        body = await _body(request)
        dry = request.query_params.get("dryRun") == "All"
        return _json(await k.create(me, ns, body, dry), 200 if dry else 201)

    @r.get(BATCH + "/namespaces/{ns}/jobs/{name}", include_in_schema=False)
    @kube_errors
    async def jobs_get(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        now = time.time()
        obj = k.job_obj(k.find(me, ns, name, now), now)
        if request.headers.get("accept", "").find("as=Table") >= 0:
            from corral.controller.kube_http import table

            return _json(table(JOB_COLUMNS, [obj], obj["metadata"]["resourceVersion"],
                               request.query_params.get("includeObject")))
        return _json(obj)

    @r.get(BATCH + "/namespaces/{ns}/jobs/{name}/status", include_in_schema=False)
    @kube_errors
    async def jobs_status(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        now = time.time()
        return _json(k.job_obj(k.find(me, ns, name, now), now))

    @r.patch(BATCH + "/namespaces/{ns}/jobs/{name}", include_in_schema=False)
    @kube_errors
    async def jobs_patch(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        ctype = request.headers.get("content-type", "")
        if "json-patch+json" in ctype:
            raise KubeError(415, "JSON patch (RFC 6902) is not supported by Corral: use a "
                                 "merge patch (kubectl patch --type=merge) or kubectl apply")
        patch = await _body(request)
        now = time.time()
        rec = k.find(me, ns, name, now)
        new = merge_patch(k.job_obj(rec, now), patch)
        await k.change(me, rec, new)
        return _json(k.job_obj(rec, time.time()))

    @r.put(BATCH + "/namespaces/{ns}/jobs/{name}", include_in_schema=False)
    @kube_errors
    async def jobs_put(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        body = await _body(request)
        rec = k.find(me, ns, name, time.time())
        await k.change(me, rec, body if isinstance(body, dict) else {})
        return _json(k.job_obj(rec, time.time()))

    @r.delete(BATCH + "/namespaces/{ns}/jobs/{name}", include_in_schema=False)
    @kube_errors
    async def jobs_delete(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        rec = k.find(me, ns, name, time.time())
        return _json(await k.delete(me, rec))

    @r.delete(BATCH + "/namespaces/{ns}/jobs", include_in_schema=False)
    @kube_errors
    async def jobs_delete_all(request: Request, ns: str) -> Response:
        me = who(request)
        now = time.time()
        objs = []
        for rec in k.vcjobs(me, ns, now):
            if not ko.is_vcjob(rec):
                continue  # submitted with sbatch/qsub: kubectl only reads it
            obj = k.job_obj(rec, now)
            if k.filter(request, [obj]):
                objs.append(await k.delete(me, rec))
        return _json({"kind": "JobList", "apiVersion": "batch.volcano.sh/v1alpha1",
                      "metadata": {}, "items": objs})

    # ---- read-only core objects --------------------------------------------------------------

    def pods_list(request: Request, ns: str | None) -> Response:
        me = who(request)

        def source() -> list[dict[str, Any]]:
            return k.all_pods(me, ns, time.time())

        if request.query_params.get("watch") in ("1", "true"):
            return k.watch(request, source, POD_COLUMNS)
        return k.respond(request, "Pod", source(), POD_COLUMNS, "v1")

    @r.get("/api/v1/pods", include_in_schema=False)
    @kube_errors
    async def pods_all(request: Request) -> Response:
        return pods_list(request, None)

    @r.get("/api/v1/namespaces/{ns}/pods", include_in_schema=False)
    @kube_errors
    async def pods_ns(request: Request, ns: str) -> Response:
        return pods_list(request, ns)

    def find_pod(me: Identity, ns: str, name: str) -> tuple[Any, dict[str, Any]]:
        now = time.time()
        for rec in k.vcjobs(me, ns, now):
            if not name.startswith(ko.job_name(rec) + "-"):
                continue
            parts = k.parts(rec)
            for p in ko.pods(rec, k.steps_of(rec), now, kube_late.waiting(parts), parts):
                if p["metadata"]["name"] == name:
                    return rec, p
        raise not_found("pods", "", name)

    @r.get("/api/v1/namespaces/{ns}/pods/{name}", include_in_schema=False)
    @kube_errors
    async def pod_get(request: Request, ns: str, name: str) -> Response:
        _rec, p = find_pod(who(request), ns, name)
        if "as=Table" in request.headers.get("accept", ""):
            from corral.controller.kube_http import table

            return _json(table(POD_COLUMNS, [p], p["metadata"]["resourceVersion"],
                               request.query_params.get("includeObject")))
        return _json(p)

    @r.get("/api/v1/namespaces/{ns}/pods/{name}/log", include_in_schema=False)
    @kube_errors
    async def pod_log(request: Request, ns: str, name: str) -> Response:
        me = who(request)
        rec, _p = find_pod(me, ns, name)
        from corral.frontends.volcano_run import log_dir

        if ko.is_vcjob(rec):
            path = log_dir(rec.sub.workdir, str(rec.id)) / f"{name}.log"
        else:  # sbatch/qsub job: its output file (the batch pod's; workers have none)
            from corral.controller import kube_foreign as kf

            got = kf.log_path(rec) if _p["metadata"]["labels"][
                "volcano.sh/task-spec"] == "batch" else None
            if got is None:
                raise KubeError(400, f"pod {name} of job {rec.id} has no log Corral can "
                                     "read here (a pattern in its output file name, or "
                                     "no batch script on this pod): see scontrol show "
                                     f"job {rec.id}")
            path = got
        tail = request.query_params.get("tailLines")
        follow = request.query_params.get("follow") in ("1", "true")

        def read(offset: int) -> bytes:
            try:  # no symbolic link, and never blocking on a FIFO put in its place
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                return b""
            try:
                st = os.fstat(fd)
                if st.st_uid != rec.uid or not stat.S_ISREG(st.st_mode):
                    return b""  # not the job's own log: never read it for the caller
                os.lseek(fd, offset, 0)
                chunks = []
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    chunks.append(b)
                return b"".join(chunks)
            finally:
                os.close(fd)

        data = read(0)
        if tail and tail.isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(tail):]) if int(tail) else b""
        if not follow:
            return Response(data, media_type="text/plain")

        async def stream() -> AsyncIterator[bytes]:
            sent = len(read(0)) if tail else 0
            if tail:
                yield data
            while True:
                more = read(sent)
                if more:
                    sent += len(more)
                    yield more
                _r, p = find_pod(me, ns, name)
                if p["status"]["phase"] in ("Succeeded", "Failed") and not more:
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.2)

        return StreamingResponse(stream(), media_type="text/plain")

    def simple(request: Request, kind: str, items: Callable[[], list[dict[str, Any]]],
               columns: Any, api_version: str = "v1") -> Response:
        who(request)
        if request.query_params.get("watch") in ("1", "true"):
            return k.watch(request, items, columns)
        return k.respond(request, kind, items(), columns, api_version)

    def nodes() -> list[dict[str, Any]]:
        now = time.time()
        return [ko.node(n, now) for _name, n in sorted(ctl.nodes.nodes.items())]

    @r.get("/api/v1/nodes", include_in_schema=False)
    @kube_errors
    async def nodes_list(request: Request) -> Response:
        return simple(request, "Node", nodes, NODE_COLUMNS)

    @r.get("/api/v1/nodes/{name}", include_in_schema=False)
    @kube_errors
    async def node_get(request: Request, name: str) -> Response:
        who(request)
        for n in nodes():
            if n["metadata"]["name"] == name:
                return _json(n)
        raise not_found("nodes", "", name)

    def namespaces(me: Identity) -> list[dict[str, Any]]:
        now = time.time()
        names = {"default"} | {a.name for a in ctl.cfg.accounts}
        names |= {ko.namespace_of(r) for r in k.vcjobs(me, None, now)}
        return [ko.namespace(n, ctl.started_at if hasattr(ctl, "started_at") else now)
                for n in sorted(names)]

    @r.get("/api/v1/namespaces", include_in_schema=False)
    @kube_errors
    async def ns_list(request: Request) -> Response:
        me = who(request)
        return simple(request, "Namespace", lambda: namespaces(me), NAME_AGE)

    @r.get("/api/v1/namespaces/{name}", include_in_schema=False)
    @kube_errors
    async def ns_get(request: Request, name: str) -> Response:
        for n in namespaces(who(request)):
            if n["metadata"]["name"] == name:
                return _json(n)
        raise not_found("namespaces", "", name)

    def events(me: Identity, ns: str | None) -> list[dict[str, Any]]:
        now = time.time()
        out: list[dict[str, Any]] = []
        for rec in k.vcjobs(me, ns, now):
            out.extend(ko.events(rec, now))
        return out

    @r.get("/api/v1/events", include_in_schema=False)
    @kube_errors
    async def events_all(request: Request) -> Response:
        me = who(request)
        return simple(request, "Event", lambda: events(me, None), EVENT_COLUMNS)

    @r.get("/api/v1/namespaces/{ns}/events", include_in_schema=False)
    @kube_errors
    async def events_ns(request: Request, ns: str) -> Response:
        me = who(request)
        return simple(request, "Event", lambda: events(me, ns), EVENT_COLUMNS)

    def queues() -> list[dict[str, Any]]:
        now = time.time()
        out = []
        for p in ctl.nodes.partitions:
            cpus = sum(ctl.nodes.nodes[n].spec.cpus for n in p.nodes if n in ctl.nodes.nodes)
            out.append(ko.queue(p, cpus, now))
        return out

    @r.get(SCHED + "/queues", include_in_schema=False)
    @kube_errors
    async def queues_list(request: Request) -> Response:
        return simple(request, "Queue", queues, NAME_AGE, "scheduling.volcano.sh/v1beta1")

    @r.get(SCHED + "/queues/{name}", include_in_schema=False)
    @kube_errors
    async def queue_get(request: Request, name: str) -> Response:
        who(request)
        for q in queues():
            if q["metadata"]["name"] == name:
                return _json(q)
        raise not_found("queues", "scheduling.volcano.sh", name)

    app.include_router(r)
    add_corral_routes(app, k)


def add_corral_routes(app: FastAPI, k: Kube) -> None:
    """``GET /api/v1/jobs/{id}/volcano`` (a job as a Volcano Job) and
    ``GET /api/v1/kubeconfig`` (a kubeconfig for the caller): Corral API errors."""
    ctl = k.ctl

    @app.get("/api/v1/jobs/{job_id}/volcano", summary="A job as a Volcano Job manifest")
    async def export_job(request: Request, job_id: str) -> Response:
        from corral.frontends.volcano_export import export

        me = k.identity(request)
        recs = await ctl.resolve(job_id)
        if not recs:
            raise ApiError("not_found", f"Invalid job id specified: {job_id}",
                           slurm="Invalid job id specified")
        rec = recs[0]
        ctl._check_owner(rec, me)  # the manifest carries the batch script
        return _json(export(rec.sub, rec.id, rec.partition))

    @app.post("/api/v1/volcano/jobs", summary="Submit a Volcano Job manifest (JSON)")
    async def submit_volcano(request: Request, manifest: VolcanoManifest) -> Response:
        me = k.identity(request)
        body = manifest.model_dump(exclude_unset=True)
        md = body.get("metadata")
        ns = str((md if isinstance(md, dict) else {}).get("namespace") or "default")
        try:
            obj = await k.create(me, ns, body, False)
        except KubeError as exc:
            raise ApiError("rejected" if exc.code == 422 else "conflict" if exc.code == 409
                           else "invalid", exc.message) from None
        return _json({"job_id": int(obj["metadata"]["annotations"]["corral.dev/job-id"]),
                      "name": obj["metadata"]["name"], "namespace": ns})

    @app.get("/api/v1/kubeconfig", summary="A kubeconfig for kubectl, for the caller")
    async def kubeconfig(request: Request, ttl_s: int | None = None) -> Response:
        from corral.controller.auth import token_ttl
        from corral.controller.kube_config import kubeconfig_for

        me = k.identity(request)
        ttl = token_ttl(ttl_s, ctl.cfg.controller.token_ttl_s,
                        ctl.cfg.controller.max_token_ttl_s)
        return _json(kubeconfig_for(ctl, me, ttl, PREFIX))
