"""The dashboard's routes: the page itself and the JSON the REST API does not already give.

Page (no authentication needed to load it; every call it makes is authenticated):

- ``GET /ui/`` the single page; ``GET /ui/static/<file>`` its script and style.

JSON, under the API prefix so the Python client reaches them too
(``Client().request("GET", "/ops/why/12")``), each authenticated like the rest of the API
(Unix socket peer, or ``Authorization: Bearer <token>``):

- ``GET  /api/v1/ops/why/{job}``  ``{"job", "lines", "factors", "pending_total"}``: the
  record, ``explain_pending`` lines, the priority factors of a pending job;
- ``GET  /api/v1/ops/fairshare``  ``{"rows": [...]}`` (``corral.ops.fairshare``);
- ``GET  /api/v1/ops/utilization?hours=24&bins=48``  ``{"summary", "series", "users",
  "accounts", "total_cpus", "total_gpus"}`` from the accounting history;
- ``GET  /api/v1/ops/checks``  ``{"runs": [...]}``: the cluster check runs kept under the
  controller's ``<state dir>/checks/reports`` (``corral check history``'s rows with ``ok``,
  ``trigger``, ``files``), newest first, at most 200;
- ``GET  /api/v1/ops/checks/{run}/{file}``  one run's ``report.md``, ``heatmap.png``,
  ``nodes.png`` or ``result.json``;
- ``POST /api/v1/ops/submit``  the portal's form (``corral.web.submit``), submitted as the
  caller: ``{"job_ids", "display_id"}``.

Everything runs on the controller's event loop (it owns the state); only the history query
goes to a worker thread, through the controller's own ``history``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from corral.controller.requests import WebSubmit, body_of, parse

PREFIX = "/api/v1/ops"
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def _json(data: Any, status: int = 200) -> Response:
    return Response(content=json.dumps(data, separators=(",", ":")), status_code=status,
                    media_type="application/json")


def _asset(name: str) -> bytes:
    return resources.files("corral.web").joinpath("static", name).read_bytes()


def _cluster_totals(ctl: Any) -> tuple[int, int, int]:
    nodes = ctl.nodes.nodes.values()
    return (len(ctl.nodes.nodes), sum(int(n.spec.cpus) for n in nodes),
            sum(len(n.spec.gpus) for n in nodes))


CHECK_FILES = {"report.md": "text/markdown; charset=utf-8", "heatmap.png": "image/png",
               "nodes.png": "image/png", "result.json": "application/json"}
_RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,80}")


def check_runs(reports: Path, limit: int = 200) -> list[dict[str, Any]]:
    """The kept check runs, newest first: history rows plus ok, trigger and files."""
    from corral.checks.report import history, history_row

    out = []
    for rec in reversed(history(reports)[-limit:]):
        row = history_row(rec)
        row.update(ok=bool(rec.get("ok")), trigger=(rec.get("plan") or {}).get("trigger"),
                   verdicts=[v.get("message") for v in rec.get("verdicts", [])][:20],
                   files=sorted(n for n in CHECK_FILES
                                if (reports / str(rec["run_id"]) / n).exists()))
        out.append(row)
    return out


def priority_factors(ctl: Any, rec: Any, now: float) -> Any:
    """``corral.core.priority.explain`` of a pending record over the controller's state."""
    from corral.core.priority import explain
    from corral.core.snapshot import ClusterSnapshot

    snap = ClusterSnapshot(
        nodes=tuple(n.to_core() for n in ctl.nodes.nodes.values()),
        partitions=ctl.nodes.partitions, qos=ctl.cfg.qos_models(),
        accounts=ctl.cfg.account_tree(),
        pending=tuple(r.to_core() for r in ctl.pending.values()),
        running=tuple(r.to_core() for r in ctl.running.values()),
        usage=dict(ctl.usage))
    return explain(rec.to_core(), snap, ctl.sched.sched_cfg, now)


def router(ctl: Any, identity: Callable[[Request], Any]) -> APIRouter:
    """The dashboard's routes over a running ``Controller`` and the API's ``identity``."""
    from corral.controller.errors import ApiError

    r = APIRouter()

    @r.get("/ui", include_in_schema=False)
    async def ui_redirect() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @r.get("/ui/", include_in_schema=False)
    async def ui_index() -> Response:
        return Response(_asset("index.html"), media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": _CSP,
                                 "Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff"})

    @r.get("/ui/static/{name}", include_in_schema=False)
    async def ui_static(name: str) -> Response:
        media = STATIC.get(name)
        if media is None:
            raise ApiError("not_found", f"no such file: {name}")
        return Response(_asset(name), media_type=media,
                        headers={"Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff"})

    @r.get(PREFIX + "/why/{job_id}", summary="Why a job is pending, in plain words")
    async def why(request: Request, job_id: str) -> Response:
        from corral.ops.why import explain_pending, factors_to_json

        who = identity(request)
        job = await ctl.get_job(job_id, who)
        now = time.time()
        factors = None
        rec = ctl.pending.get(int(job["id"]))
        if rec is not None:
            try:
                factors = factors_to_json(priority_factors(ctl, rec, now))
            except Exception as exc:  # explain is advisory: never fail the page for it
                factors = None
                job.setdefault("warnings", []).append(f"priority factors unavailable: {exc}")
        total = len(ctl.pending)
        return _json({"job": job, "factors": factors, "pending_total": total,
                      "lines": explain_pending(job, factors, now, total)})

    @r.get(PREFIX + "/fairshare", summary="Fair share per account and user (sshare)")
    async def fairshare(request: Request) -> Response:
        from corral.ops.schedview import fairshare_payload

        identity(request)
        return _json(fairshare_payload(ctl))

    @r.get(PREFIX + "/usage/{job_id}", summary="Live usage of a running job (sstat)")
    async def live_usage(request: Request, job_id: str) -> Response:
        from corral.controller.liveusage import job_usage

        who = identity(request)
        job = await ctl.get_job(job_id, who)  # the caller may see it; 404 otherwise
        return _json(job_usage(ctl, int(job["id"])))

    @r.get(PREFIX + "/node-history", summary="Node down time and reservations (sreport)")
    async def node_history(request: Request, since: float, until: float) -> Response:
        identity(request)
        return _json(await ctl.node_history(since, until))

    @r.get(PREFIX + "/priorities", summary="Priority factors of pending jobs (sprio)")
    async def priorities(request: Request) -> Response:
        from corral.ops.schedview import priorities_payload

        identity(request)
        return _json(priorities_payload(ctl, time.time()))

    @r.get(PREFIX + "/utilization", summary="Cluster utilization over time (accounting)")
    async def utilization(request: Request, hours: float = 24.0, bins: int = 48) -> Response:
        from corral.ops.accounting import series, top_users, usage_by
        from corral.ops.accounting import utilization as util
        from corral.ops.jobs import acct_jobs

        who = identity(request)
        if not 0 < hours <= 24 * 366:
            raise ApiError("invalid", f"hours must be in (0, 8784], got {hours}")
        if not 1 <= bins <= 1000:
            raise ApiError("invalid", f"bins must be in [1, 1000], got {bins}")
        now = time.time()
        since = now - hours * 3600.0
        records = await ctl.history({"all_users": True, "since": since}, who)
        jobs = acct_jobs(records)
        _n, cpus, gpus = _cluster_totals(ctl)
        summary = util(jobs, cpus, gpus, since, now, now)
        return _json({
            "now": now, "since": since, "total_cpus": cpus, "total_gpus": gpus,
            "summary": summary.to_json(),
            "series": [p.to_json() for p in series(jobs, since, now, now, bins)],
            "users": [x.to_json() for x in top_users(jobs, since, now, now, 10)],
            "accounts": [x.to_json() for x in usage_by(jobs, "account", since, now, now)],
        })

    @r.get(PREFIX + "/checks", summary="Cluster check runs kept by the controller")
    async def checks(request: Request) -> Response:
        import asyncio

        identity(request)
        runs = await asyncio.get_running_loop().run_in_executor(
            None, check_runs, ctl.state_dir / "checks" / "reports")
        return _json({"runs": runs})

    @r.get(PREFIX + "/checks/{run_id}/{name}", summary="A file of a cluster check run")
    async def check_file(request: Request, run_id: str, name: str) -> Response:
        identity(request)
        media = CHECK_FILES.get(name)
        if media is None or not _RUN_ID.fullmatch(run_id):
            raise ApiError("not_found", f"no such check file: {run_id}/{name}")
        path = ctl.state_dir / "checks" / "reports" / run_id / name
        try:
            data = path.read_bytes()
        except OSError:
            raise ApiError("not_found", f"no such check file: {run_id}/{name}") from None
        return Response(data, media_type=media, headers={"X-Content-Type-Options": "nosniff",
                                                         "Cache-Control": "no-cache"})

    @r.post(PREFIX + "/submit", summary="Submit from the web portal's form, as the caller",
            openapi_extra=body_of("WebSubmit"))
    async def submit(request: Request) -> Response:
        from corral.frontends.errors import SubmitError
        from corral.web.submit import form_submission

        who = identity(request)
        try:
            form = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            raise ApiError("invalid", f"the form is not valid JSON: {exc}") from None
        parse(WebSubmit, form, "the form")
        try:
            sub = form_submission(form, who.user, who.uid, who.gid)
        except SubmitError as exc:
            raise ApiError("invalid", exc.message) from None
        return _json(await ctl.submit(sub.to_json(), who, "web"))

    return r


def mount(app: Any, ctl: Any, identity: Callable[[Request], Any]) -> None:
    """Add the dashboard's routes to the controller's FastAPI ``app``."""
    app.include_router(router(ctl, identity))
