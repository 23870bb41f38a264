"""REST API (FastAPI) of the controller: jobs, nodes, partitions, history, agents, metrics.

Routes (all JSON, prefix ``/api/v1``; errors are ``{"error": {"code", "message",
"slurm"?}}`` with a matching HTTP status):

- ``POST /jobs``                 submit (JobSubmission JSON) -> ``{job_ids, array_job_id,
                                 display_id}``
- ``GET  /jobs``                 active jobs (query: user, state, partition, id, all)
- ``POST /jobs/query``           same with a JSON filter body (ids, states, fields, ...)
- ``GET  /jobs/{id}``            one job in detail (``12`` or ``12_3``)
- ``PATCH /jobs/{id}``           update fields (time limit, priority, name, ...)
- ``POST /jobs/cancel|hold|release|requeue``  ``{ids, signal?, admin?, hold?}`` -> per-id results
- ``POST /jobs/{id}/steps``      record a job step (srun) -> ``{job_id, step_id}``
- ``POST /jobs/{id}/steps/{n}/end``  its end ``{state, exit_code, signal, end_time}``
- ``POST /history``              accounting records from the database
- ``GET  /events``               job state changes (SSE or JSON long poll; resumable with
                                 ``since``/``Last-Event-ID``; ``corral.controller.event_routes``)
- list routes (``/jobs``, ``/jobs/query``, ``/history``) return one page: ``limit`` rows
  (default 10,000, at most 100,000) after id ``after``, and ``next_after`` (null on the
  last page; ``corral.controller.paging``)
- ``GET /jobs/{id}`` shows ``submission.script``/``env``/``argv`` to the job's owner and
  operators only
- ``GET  /nodes``, ``GET /nodes/{name}``, ``POST /nodes/{name}/drain|resume|down``
- ``POST /images/pull``: pre-pull an image into the node image caches
- ``GET  /partitions``, ``GET /config``, ``GET /whoami``, ``GET /ping``
- ``POST /tokens``               a signed token for HTTP use
- ``GET  /audit``                the audit trail (operators; query: since, limit <= 1000)
- ``WS   /agent``                agent connection (cluster key)
- ``GET  /metrics``              Prometheus text format (no prefix)
- ``GET  /ui/``, ``/api/v1/ops/*`` the web dashboard and its JSON (``corral.web``)

Every body is checked at the edge against its typed model (``corral.controller.requests``,
published in ``/openapi.json``): a wrong type, range or size is a 400 naming the field.
Handlers take the raw body and return pre-encoded JSON: the submit and queue paths are
hot (thousands of calls per second), so a submission is checked by ``corral.wirecheck``
(compiled from the same type hints) and decoded into the real types
(``JobSubmission.from_json``). No request body may exceed ``[controller] max_request_mb``
(413, on every route, however the body is sent).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response

from corral import __version__
from corral.config.load import config_to_json
from corral.controller.auth import Authenticator, Identity, token_ttl
from corral.controller.errors import ApiError
from corral.controller.images import pull_images
from corral.controller.paging import page, page_limit

if TYPE_CHECKING:
    from corral.controller.service import Controller

PREFIX = "/api/v1"
log = logging.getLogger("corral.api")


def _json(data: Any, status: int = 200) -> Response:
    return Response(content=json.dumps(data, separators=(",", ":")), status_code=status,
                    media_type="application/json")


def _error(exc: ApiError) -> Response:
    return _json(exc.to_json(), exc.status)


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError("invalid", f"the request body is not valid JSON: {exc}") from None


def create_app(ctl: Controller, auth: Authenticator) -> FastAPI:
    from corral.controller import requests as rq

    app = FastAPI(title="Corral controller API", version=__version__,
                  description="Submit and manage jobs, nodes and partitions of a Corral "
                              "cluster. Local callers use the Unix socket (identity from "
                              "SO_PEERCRED); remote callers send `Authorization: Bearer "
                              "<token>`.")

    def identity(request: Request) -> Identity:
        peer = request.scope.get("corral.peer")
        if peer is not None:
            return auth.from_peer(peer[1], peer[2])
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return auth.from_token(header[7:].strip())
        raise ApiError("unauthorized", "authentication required: use the Unix socket or "
                                       "send Authorization: Bearer <token> (corral token)")

    app.state.identity = identity

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> Response:
        return _error(exc)

    # ---- jobs ---------------------------------------------------------------------------

    @app.post(PREFIX + "/jobs", summary="Submit a job or array (JobSubmission JSON)",
              openapi_extra=rq.body_of("JobSubmission"))
    async def submit(request: Request) -> Response:
        who = identity(request)
        body = await _body(request)
        host = ""
        if isinstance(body, dict):
            host = str((body.get("extra") or {}).get("submit_host", "")) if isinstance(
                body.get("extra"), dict) else ""
        return _json(await ctl.submit(body, who, host))

    def _list(flt: dict[str, Any]) -> Response:
        return Response(content=list_body(ctl, flt), media_type="application/json")

    @app.get(PREFIX + "/jobs", summary="List active jobs")
    async def list_jobs(request: Request, user: str | None = None, state: str | None = None,
                        partition: str | None = None, id: str | None = None,
                        all: bool = False, limit: int | None = None,
                        after: int | None = None) -> Response:
        identity(request)
        flt: dict[str, Any] = {"user": user, "partition": partition,
                               "include_finished": all, "limit": limit, "after": after}
        if state:
            flt["states"] = [s.strip().upper() for s in state.split(",") if s.strip()]
        if id:
            flt["ids"] = [s.strip() for s in id.split(",") if s.strip()]
        return _list(flt)

    @app.post(PREFIX + "/jobs/query", summary="List jobs with a filter body",
              openapi_extra=rq.body_of("JobQuery", required=False))
    async def query_jobs(request: Request) -> Response:
        identity(request)
        return _list(rq.parse(rq.JobQuery, await _body(request), "the filter"))

    @app.get(PREFIX + "/jobs/{job_id}", summary="One job in detail")
    async def get_job(request: Request, job_id: str) -> Response:
        return _json(await ctl.get_job(job_id, identity(request)))

    @app.patch(PREFIX + "/jobs/{job_id}", summary="Update a job",
               openapi_extra=rq.body_of("JobUpdate"))
    async def update_job(request: Request, job_id: str) -> Response:
        who = identity(request)
        fields = rq.parse(rq.JobUpdate, await _body(request), "the update")
        return _json(await ctl.update_job(job_id, fields, who))

    @app.post(PREFIX + "/jobs/{job_id}/steps", summary="Record a job step (srun)",
              openapi_extra=rq.body_of("StepStart"))
    async def start_step(request: Request, job_id: str) -> Response:
        from corral.controller.steps import start_step as start

        who = identity(request)
        body = rq.parse(rq.StepStart, await _body(request), "a step")
        return _json(await start(ctl, job_id, body, who))

    @app.post(PREFIX + "/jobs/{job_id}/steps/{step_id}/end", summary="Record a step's end",
              openapi_extra=rq.body_of("StepEnd"))
    async def end_step(request: Request, job_id: str, step_id: str) -> Response:
        from corral.controller.steps import end_step as end

        who = identity(request)
        body = rq.parse(rq.StepEnd, await _body(request), "a step's end")
        return _json(await end(ctl, job_id, step_id, body, who))

    @app.get(PREFIX + "/jobs/{job_id}/environment",
             summary="An allocation's job variables (salloc)")
    async def job_environment_route(request: Request, job_id: str) -> Response:
        from corral.controller.allocations import environment

        return _json(await environment(ctl, job_id, identity(request)))

    @app.post(PREFIX + "/jobs/{job_id}/allocation/keepalive",
              summary="The caller holding an allocation is alive")
    async def alloc_keepalive(request: Request, job_id: str) -> Response:
        from corral.controller.allocations import keepalive

        return _json(await keepalive(ctl, job_id, identity(request)))

    @app.post(PREFIX + "/jobs/{job_id}/allocation/release",
              summary="End an allocation with its command's exit code",
              openapi_extra=rq.body_of("AllocationRelease", required=False))
    async def alloc_release(request: Request, job_id: str) -> Response:
        from corral.controller.allocations import release

        who = identity(request)
        body = rq.parse(rq.AllocationRelease, await _body(request))
        return _json(await release(ctl, job_id, body, who))

    async def _action(request: Request, action: str) -> Response:
        who = identity(request)
        body = rq.parse(rq.JobAction, await _body(request), "an action ({\"ids\": [...]})")
        refs = [str(i) for i in body["ids"]]
        return _json({"results": await ctl.act(action, refs, who, body)})

    @app.post(PREFIX + "/jobs/cancel", summary="Cancel jobs or send them a signal",
              openapi_extra=rq.body_of("JobAction"))
    async def cancel(request: Request) -> Response:
        return await _action(request, "cancel")

    @app.post(PREFIX + "/jobs/hold", summary="Hold pending jobs",
              openapi_extra=rq.body_of("JobAction"))
    async def hold(request: Request) -> Response:
        return await _action(request, "hold")

    @app.post(PREFIX + "/jobs/release", summary="Release held jobs",
              openapi_extra=rq.body_of("JobAction"))
    async def release(request: Request) -> Response:
        return await _action(request, "release")

    @app.post(PREFIX + "/jobs/requeue", summary="Requeue running or finished jobs",
              openapi_extra=rq.body_of("JobAction"))
    async def requeue(request: Request) -> Response:
        return await _action(request, "requeue")

    @app.post(PREFIX + "/history", summary="Accounting records from the database",
              openapi_extra=rq.body_of("HistoryQuery", required=False))
    async def history(request: Request) -> Response:
        who = identity(request)
        flt = rq.parse(rq.HistoryQuery, await _body(request), "the filter")
        flt["limit"] = page_limit(flt)  # one page: at most MAX_ROWS rows
        rows = await ctl.history(flt, who)
        more = len(rows) == flt["limit"]
        return _json({"jobs": rows, "next_after": rows[-1]["id"] if more else None})

    # ---- nodes, partitions, cluster -------------------------------------------------------

    @app.get(PREFIX + "/nodes", summary="All nodes")
    async def nodes(request: Request) -> Response:
        identity(request)
        return _json({"nodes": [n.to_api() for _, n in sorted(ctl.nodes.nodes.items())]})

    @app.get(PREFIX + "/nodes/{name}", summary="One node")
    async def node(request: Request, name: str) -> Response:
        identity(request)
        return _json(ctl.nodes.get(name).to_api())

    def _operator(request: Request) -> Identity:
        who = identity(request)
        if not who.is_admin:
            raise ApiError("forbidden", f"user {who.user} is not an operator",
                           slurm="Access/permission denied")
        return who

    @app.post(PREFIX + "/nodes/{name}/drain", summary="Drain a node (operators)",
              openapi_extra=rq.body_of("NodeReason", required=False))
    async def drain(request: Request, name: str) -> Response:
        who = _operator(request)
        body = rq.parse(rq.NodeReason, await _body(request))
        rec = ctl.nodes.drain(name, str(body.get("reason") or ""), who)
        ctl.sched.trigger()
        return _json(rec.to_api())

    @app.post(PREFIX + "/nodes/{name}/resume", summary="Resume a drained/down node (operators)")
    async def resume(request: Request, name: str) -> Response:
        who = _operator(request)
        rec = ctl.nodes.resume(name, who)
        ctl.sched.trigger()
        return _json(rec.to_api())

    @app.post(PREFIX + "/nodes/{name}/down", summary="Set a node down (operators)",
              openapi_extra=rq.body_of("NodeReason", required=False))
    async def down(request: Request, name: str) -> Response:
        who = _operator(request)
        body = rq.parse(rq.NodeReason, await _body(request))
        rec = ctl.nodes.set_down(name, str(body.get("reason") or ""), who)
        return _json(rec.to_api())

    @app.post(PREFIX + "/images/pull", summary="Pre-pull a container image on nodes",
              openapi_extra=rq.body_of("ImagePull"))
    async def image_pull(request: Request) -> Response:
        who = identity(request)
        body = rq.parse(rq.ImagePull, await _body(request))
        return _json(pull_images(ctl.hub.conns, set(ctl.nodes.nodes), ctl.cfg, who,
                                 str(body["ref"]), body.get("nodes")))

    @app.get(PREFIX + "/partitions", summary="Partitions")
    async def partitions(request: Request) -> Response:
        identity(request)
        from corral.core.parse.hostlist import compress

        out = []
        for p in ctl.nodes.partitions:
            cpus = sum(ctl.nodes.nodes[n].spec.cpus for n in p.nodes if n in ctl.nodes.nodes)
            out.append({
                "name": p.name, "nodes": list(p.nodes), "nodelist": compress(p.nodes),
                "default": p.is_default, "state": p.state.value, "max_time_s": p.max_time_s,
                "default_time_s": p.default_time_s, "max_nodes": p.max_nodes,
                "min_nodes": p.min_nodes, "priority_tier": p.priority_tier,
                "priority_job_factor": p.priority_job_factor,
                "preempt_mode": p.preempt_mode.value, "grace_time_s": p.grace_time_s,
                "exclusive": p.exclusive,
                "allow_accounts": sorted(p.allow_accounts) if p.allow_accounts else None,
                "allow_qos": sorted(p.allow_qos) if p.allow_qos else None,
                "total_cpus": cpus, "total_nodes": len(p.nodes),
            })
        return _json({"partitions": out})

    @app.get(PREFIX + "/config", summary="The running configuration")
    async def config(request: Request) -> Response:
        identity(request)
        data = config_to_json(ctl.cfg)
        data["state_dir"] = str(ctl.state_dir)
        return _json(data)

    @app.get(PREFIX + "/whoami", summary="The caller's identity")
    async def whoami(request: Request) -> Response:
        return _json(identity(request).to_json())

    @app.get(PREFIX + "/ping", summary="Liveness and a cluster summary")
    async def ping(request: Request) -> Response:
        return Response(content=ping_body(ctl), media_type="application/json")

    @app.post(PREFIX + "/tokens", summary="Mint a token for HTTP use",
              openapi_extra=rq.body_of("TokenRequest", required=False))
    async def tokens(request: Request) -> Response:
        who = identity(request)
        body = rq.parse(rq.TokenRequest, await _body(request), "a token request")
        user = body.get("user") or who.user
        ttl = token_ttl(body.get("ttl_s"), ctl.cfg.controller.token_ttl_s,
                        ctl.cfg.controller.max_token_ttl_s)
        if user != who.user:
            from corral.controller.audit import outcome_of, record

            details = {"ttl_s": ttl}
            try:
                if who.uid != 0:
                    raise ApiError("forbidden", "only root may mint tokens for other users")
                import pwd

                try:
                    pw = pwd.getpwnam(user)
                except KeyError:
                    raise ApiError("invalid", f"unknown user {user!r}") from None
            except ApiError as exc:
                record(ctl.store, who, "token", f"user {user}", details, outcome_of(exc))
                raise
            target = Identity(user, pw.pw_uid, pw.pw_gid)
            record(ctl.store, who, "token", f"user {user}", details)
        else:
            target = who
        return _json({"token": auth.mint(target, ttl), "user": target.user, "ttl_s": ttl})

    @app.get(PREFIX + "/audit", summary="The audit trail of operator actions (operators)")
    async def audit_trail(request: Request, since: float | None = None,
                          limit: int = 100) -> Response:
        import asyncio

        from corral.controller.audit import MAX_LIMIT, read

        _operator(request)
        if not 1 <= limit <= MAX_LIMIT:
            raise ApiError("invalid", f"bad field limit: must be 1 to {MAX_LIMIT}")
        rows = await asyncio.to_thread(read, ctl.store, since, limit)
        return _json({"entries": rows})

    @app.get(PREFIX + "/events", summary="Job events: Server-Sent Events or a JSON long poll "
             "(query: since, user, jobs, name, tag, state, limit, wait_s, format)")
    async def events(request: Request) -> Response:
        return _EventsResponse(ctl, identity(request))

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        ctl.metrics.set_rate_limits(ctl.limiter)
        return Response(content=ctl.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.websocket(PREFIX + "/agent")
    async def agent(ws: WebSocket) -> None:
        await serve_agent(ctl, auth, ws)

    from corral.controller.reservation_routes import mount as mount_reservations

    mount_reservations(app, ctl, identity, _operator, _body, _json, PREFIX)
    from corral.controller.admin_routes import mount as mount_admin

    mount_admin(app, ctl, _operator, _body, _json, PREFIX)

    # Slurm/PBS shim endpoint POST /api/v1/shim/exec (owned by corral.shims; docs/shims.md)
    from corral.shims.inproc import mount as mount_shims

    mount_shims(app, ctl, identity)
    # operations (issue 6): the web dashboard (/ui/, /api/v1/ops/*) and the Prometheus
    # collector of the controller's state (corral.ops.collector; docs/operations.md)
    from corral.ops.collector import register as register_collector
    from corral.web import mount as mount_web

    mount_web(app, ctl, identity)
    register_collector(ctl)
    rq.publish(app)
    return app


class _EventsResponse(Response):
    """Streams ``GET /events`` itself (``corral.controller.event_routes``)."""

    def __init__(self, ctl: Controller, who: Identity) -> None:
        super().__init__()
        self.ctl, self.who = ctl, who

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from corral.controller.event_routes import serve

        await serve(self.ctl, self.who, scope, receive, send)


async def serve_agent(ctl: Controller, auth: Authenticator, ws: WebSocket) -> None:
    """The agent WebSocket (``WS /agent``): cluster key, then the hub runs it."""
    header = ws.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else ""
    if not token or not auth.is_cluster_key(token):
        await ws.close(code=4401, reason="bad or missing cluster key")
        return
    await ws.accept()
    await ctl.hub.serve(ws)


def list_body(ctl: Controller, flt: dict[str, Any]) -> bytes:
    recs, next_after = page(ctl.query(flt), lambda r: r.id, flt)
    now = time.time()
    tail = b',"next_after":%s}' % json.dumps(next_after).encode()
    fields = flt.get("fields")
    if fields:
        keep = [str(f) for f in fields]
        rows = []
        for r in recs:
            full = r.to_api(now)
            rows.append({k: full.get(k) for k in keep})
        return json.dumps({"now": now, "jobs": rows}, separators=(",", ":")).encode()[:-1] + tail
    return b'{"now":%s,"jobs":[%s]%s' % (repr(now).encode(),
                                         b",".join(r.api_json(now) for r in recs), tail)


def ping_body(ctl: Controller) -> bytes:
    return json.dumps({
        "status": "ok", "cluster": ctl.cfg.cluster_name, "version": __version__,
        "time": time.time(), "nodes_up": ctl.nodes.up_count(), "agents": len(ctl.hub.conns),
        "jobs_active": len(ctl.pending) + len(ctl.running), "pending": len(ctl.pending),
        "running": len(ctl.running), "cycles": ctl.sched.cycles,
        "last_cycle_s": ctl.sched.last_cycle_s, "commits": ctl.store.commits,
        "agent_frames_in": ctl.hub.frames_in,
        "agent_frames_out": sum(c.frames_out for c in ctl.hub.conns.values()),
    }).encode()


def with_fast_paths(app: FastAPI, ctl: Controller, auth: Authenticator) -> Any:
    """An ASGI app that serves the hot routes (submit, query, ping, the agent WebSocket)
    directly and hands
    everything else to FastAPI. The routes stay declared in FastAPI (OpenAPI spec); this
    only skips its middleware and routing layers (about half the controller's CPU per
    submit under load, measured with py-spy)."""
    submit_path = PREFIX + "/jobs"
    query_path = PREFIX + "/jobs/query"
    ping_path = PREFIX + "/ping"
    events_path = PREFIX + "/events"
    agent_path = PREFIX + "/agent"

    async def send_json(scope: Any, send: Any, status: int, body: bytes) -> None:
        corked = scope.get("corral.cork")  # one write for status line, headers and body
        if corked is not None:
            corked.cork()
        try:
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        finally:
            if corked is not None:
                corked.uncork()

    from corral.controller.bodies import max_body_bytes, read_bounded

    max_body = max_body_bytes(ctl.cfg.controller.max_request_mb)

    async def bounded(scope: Any, receive: Any, send: Any) -> None:
        """Hand ``scope`` to FastAPI with its body read first, within ``max_body``."""
        try:
            body = await read_bounded(scope, receive, max_body)
        except ApiError as exc:
            await send_json(scope, send, exc.status, json.dumps(exc.to_json()).encode())
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    who = auth.from_scope

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and scope["path"] == agent_path:
            # every agent frame in and out would cross FastAPI's middleware wrappers
            await serve_agent(ctl, auth, WebSocket(scope, receive, send))
            return
        if scope["type"] == "http" and scope["path"] == ping_path:
            await send_json(scope, send, 200, ping_body(ctl))
            return
        if scope["type"] == "http" and scope["path"] == events_path \
                and scope["method"] == "GET":
            from corral.controller.event_routes import serve

            try:
                caller = who(scope)
            except ApiError as exc:
                await send_json(scope, send, exc.status, json.dumps(exc.to_json()).encode())
                return
            await serve(ctl, caller, scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST" and \
                scope["path"] in (submit_path, query_path):
            try:
                caller = who(scope)
                raw = await read_bounded(scope, receive, max_body)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError as exc:
                    raise ApiError("invalid", f"the request body is not valid JSON: {exc}") \
                        from None
                if scope["path"] == submit_path:
                    extra = body.get("extra") if isinstance(body, dict) else None
                    host = str(extra.get("submit_host", "")) if isinstance(extra, dict) else ""
                    out = json.dumps(await ctl.submit(body, caller, host)).encode()
                else:
                    from corral.controller.requests import JobQuery, parse

                    out = list_body(ctl, parse(JobQuery, body, "the filter"))
            except ApiError as exc:
                await send_json(scope, send, exc.status, json.dumps(exc.to_json()).encode())
                return
            except Exception as exc:
                log.exception("internal error on %s", scope["path"])
                err = ApiError("internal", f"internal error: {exc!r}")
                await send_json(scope, send, 500, json.dumps(err.to_json()).encode())
                return
            await send_json(scope, send, 200, out)
            return
        if scope["type"] == "http":
            await bounded(scope, receive, send)
            return
        await app(scope, receive, send)

    return asgi
