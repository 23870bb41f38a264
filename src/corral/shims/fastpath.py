"""The shim endpoint on the controller's fast path: ``POST /api/v1/shim/exec`` without
FastAPI's routing and middleware, and submissions without a worker thread.

``with_shim_fast_path(asgi, ctl, auth)`` wraps the controller's ASGI app (the one
``corral.controller.api.with_fast_paths`` returns): a shim request is answered here, the
rest passes through. The route itself stays declared in FastAPI (``corral.shims.inproc
.mount``, for the OpenAPI spec); both run the command the same way.

How a command runs (``run_exec``): ``sbatch`` and ``qsub`` on the event loop itself
(``submit_inline``): their parsing is pure (``prepare``), the one controller call
(``Controller.submit``) is awaited there and the answer printed (``report``): four thread
switches less than a command in a worker thread makes, which is what a shell loop of
``sbatch`` calls waits on. Everything else (and ``sbatch --wait``, which polls afterwards)
runs in a worker thread (``corral.shims.inproc``). The caller is known by the Unix
socket's SO_PEERCRED or the bearer token, as on every other route.

A step's end (``POST /api/v1/jobs/<id>/steps/<n>/end``, the last call of every ``srun``)
is answered here too, with the route's own checks: FastAPI's routing and middleware cost
more than recording it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from corral.shims.inproc import ROUTE, SHIM_MEDIA_TYPE, InProcessClient, T, _executor
from corral.shims.server import handle_exec

if TYPE_CHECKING:
    from corral.controller.auth import Authenticator, Identity
    from corral.controller.service import Controller

log = logging.getLogger(__name__)
_STEP_END = re.compile(r"^/api/v1/jobs/([^/]{1,64})/steps/([0-9]{1,10})/end$")


def submit_host(body: Mapping[str, Any]) -> str:
    extra = body.get("extra")
    return str(extra.get("submit_host", "")) if isinstance(extra, dict) else ""


async def submit_inline(ctl: Controller, who: Identity, raw: bytes) -> bytes | None:
    """``sbatch``/``qsub`` on the event loop; ``None``: not one of those (or one that
    talks to the controller again afterwards), run it in a thread."""
    from corral.client import CorralError
    from corral.controller.errors import ApiError
    from corral.shims import qsub, sbatch
    from corral.shims.context import NeedInput, ShimExit
    from corral.shims.lean import encode_frame
    from corral.shims.server import parse_request, step_io_of

    try:
        data = json.loads(raw)
        cmd, ctx = parse_request(data, who.uid)
        if cmd == "srun":
            return await srun_inline(ctl, who, ctx, step_io_of(data))
    except (ValueError, TypeError):
        return None  # handle_exec words the error
    mod: Any = {"sbatch": sbatch, "qsub": qsub}.get(cmd)
    if mod is None:
        return None
    try:
        req = mod.prepare(ctx)
        if req is not None:
            if mod.needs_client(req):
                return None
            body = req.submission.to_json()
            try:
                result = await ctl.submit(body, who, submit_host(body))
            except ApiError as exc:
                raise mod.refused(ctx, CorralError(exc.code, exc.message, exc.status,
                                                   slurm=exc.slurm)) from None
            mod.report(ctx, req, result)
    except NeedInput as exc:
        return encode_frame(0, "", "", exc.paths)
    except ShimExit as exc:
        return encode_frame(exc.rc, ctx.stdout_text, ctx.stderr_text)
    except Exception as exc:  # a bug must not take the controller's request down with it
        log.exception("shim %s %r failed", cmd, ctx.argv)
        ctx.error(f"{cmd}: error: internal error in Corral: {type(exc).__name__}: {exc}")
        return encode_frame(1, ctx.stdout_text, ctx.stderr_text)
    return encode_frame(0, ctx.stdout_text, ctx.stderr_text)


async def srun_inline(ctl: Controller, who: Identity, ctx: Any,
                      io: tuple[str, str, int | None]) -> bytes | None:
    """The compiled srun's step (``corral.shims.srun_fast``) on the event loop: parsing is
    pure, the step's start (record, send to the agents) is awaited here. ``None``: the
    command asks for input files first; a worker thread words that."""
    from corral.controller.errors import ApiError
    from corral.controller.steps import start_step
    from corral.shims import srun_fast
    from corral.shims.context import NeedInput

    try:
        step = srun_fast.prepare(ctx, io[0], io[1])
    except NeedInput:
        return None
    except Exception:  # a bug: handle_exec reports it in srun's words
        log.exception("shim srun %r failed", ctx.argv)
        return None
    if isinstance(step, bytes):
        return step
    step.body["pid"] = io[2]
    try:
        res = await start_step(ctl, step.job_id, step.body, who)
    except ApiError as exc:
        return srun_fast.refused(step, exc.message)
    return srun_fast.reply(step, int(res["step_id"]))


class _Client(InProcessClient):
    """``ping`` with the controllers' roles (``scontrol ping``: primary and backups), and
    the request's idempotency key for its one submit (the worker-thread path: ``sbatch
    --wait``; the key's context variable does not follow the request into the thread)."""

    key: str | None = None

    def _check_term(self) -> None:
        if self.ctl.term_over.is_set():  # a deposed term: its waits end here
            from corral.client import CorralError

            raise CorralError("not_leader", "this controller stopped leading", 503)

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        self._check_term()
        return super()._run(make)

    def _sync(self, fn: Callable[[], T]) -> T:
        self._check_term()
        return super()._sync(fn)

    def submit_result(self, sub: Mapping[str, Any]) -> dict[str, Any]:
        key, self.key = self.key, None  # one submit per request carries it
        if key is None:
            return super().submit_result(sub)
        body = dict(sub)
        host = submit_host(body)
        return self._wrap(lambda: self.ctl.submit(body, self.who, host, key))

    def ping(self) -> dict[str, Any]:
        out = super().ping()
        view = self.ctl.ha_view
        if view is not None:
            out.update(self._sync(view))
        return out


async def run_exec(ctl: Controller, who: Identity, raw: bytes) -> bytes:
    """One shim command for ``who``: the framed reply (``corral.shims.lean``)."""
    frame = await submit_inline(ctl, who, raw)
    if frame is not None:
        return frame
    loop = asyncio.get_running_loop()
    client = _Client(ctl, who, loop)
    from corral.controller.submitkeys import REQUEST_KEY

    client.key = REQUEST_KEY.get()  # set by roles.Gate from the Idempotency-Key header
    REQUEST_KEY.set(None)
    return await loop.run_in_executor(_executor(), handle_exec, raw, who.uid, client)


async def first_of(a: asyncio.Future[Any], b: asyncio.Future[Any]) -> None:
    """Until ``a`` or ``b`` is done (``asyncio.wait(..., FIRST_COMPLETED)`` without its
    set, its checks and its callbacks on each: this runs once per shim request)."""
    if a.done() or b.done():
        return
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_f: Any) -> None:
        if not waiter.done():
            waiter.set_result(None)
    a.add_done_callback(wake)
    b.add_done_callback(wake)
    try:
        await waiter
    finally:
        a.remove_done_callback(wake)
        b.remove_done_callback(wake)


def with_shim_fast_path(asgi: Any, ctl: Controller, auth: Authenticator) -> Any:
    """``asgi`` with ``POST /api/v1/shim/exec`` served here."""
    from corral.controller.errors import ApiError

    media = SHIM_MEDIA_TYPE.encode()
    # the bound every route has ([controller] max_request_mb, 8 MiB by default)
    from corral.controller.bodies import max_body_bytes, read_bounded

    max_body = max_body_bytes(ctl.cfg.controller.max_request_mb)

    who = auth.from_scope

    async def send(scope: Any, send_: Any, status: int, body: bytes, ctype: bytes) -> None:
        corked = scope.get("corral.cork")  # one write for status line, headers and body
        if corked is not None:
            corked.cork()
        try:
            await send_({"type": "http.response.start", "status": status,
                         "headers": [(b"content-type", ctype),
                                     (b"content-length", str(len(body)).encode())]})
            await send_({"type": "http.response.body", "body": body})
        finally:
            if corked is not None:
                corked.uncork()

    async def step_end(scope: Any, receive: Any, send_: Any, job: str, step: str) -> None:
        """``POST /jobs/<id>/steps/<n>/end`` (every srun's last call) without FastAPI's
        routing and middleware; the same checks as the route (``requests.StepEnd``)."""
        from corral.controller import requests as rq
        from corral.controller.steps import end_step

        try:
            caller = who(scope)
            raw = await read_bounded(scope, receive, max_body)
            try:
                data = json.loads(raw) if raw else {}
            except ValueError as exc:
                raise ApiError("invalid", f"the request body is not valid JSON: {exc}"
                               ) from None
            body = rq.parse(rq.StepEnd, data, "a step's end")
            out = await end_step(ctl, job, step, body, caller)
        except ApiError as exc:
            await send(scope, send_, exc.status, json.dumps(exc.to_json()).encode(),
                       b"application/json")
            return
        await send(scope, send_, 200, json.dumps(out, separators=(",", ":")).encode(),
                   b"application/json")

    async def app(scope: Any, receive: Any, send_: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != ROUTE:
            end = (_STEP_END.match(scope["path"])
                   if scope["type"] == "http" and scope["method"] == "POST" else None)
            if end is not None:
                await step_end(scope, receive, send_, end.group(1), end.group(2))
                return
            await asgi(scope, receive, send_)
            return
        try:
            caller = who(scope)
            raw = await read_bounded(scope, receive, max_body)
        except ApiError as exc:
            await send(scope, send_, exc.status, json.dumps(exc.to_json()).encode(),
                       b"application/json")
            return
        work = asyncio.ensure_future(run_exec(ctl, caller, raw))
        await first_of(work, ctl.term_end())
        if not work.done():
            # this controller stopped leading while the command ran (``sbatch --wait``):
            # answer as a standby does, so the launcher asks the leader (with its key)
            work.add_done_callback(lambda t: t.cancelled() or t.exception())
            err = ApiError("not_leader", "this controller stopped leading while the "
                                         "command ran: ask the leader")
            await send(scope, send_, 503, json.dumps(err.to_json()).encode(),
                       b"application/json")
            return
        await send(scope, send_, 200, work.result(), media)

    return app
