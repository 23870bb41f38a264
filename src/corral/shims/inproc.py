"""Run shim commands inside the controller: the ``/api/v1/shim/exec`` route.

``mount(app, ctl, identity)`` adds the route to the controller's FastAPI app. A request
runs the command in a worker thread (``handle_exec``); its ``Client`` calls hop back onto
the controller's event loop (``run_coroutine_threadsafe``), which owns all controller
state, so nothing here touches that state from another thread. Records come straight from
memory (``JobRecord.to_api``): no JSON round trip, which is what keeps ``squeue`` over
thousands of jobs within tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import Response

from corral.shims.server import handle_exec

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.service import Controller

T = TypeVar("T")
ROUTE = "/api/v1/shim/exec"
# Shim commands get their own threads: a long `sbatch --wait` must never take a thread
# from the loop's default executor, which the controller uses for database reads.
_EXECUTOR: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=32, thread_name_prefix="corral-shim")
    return _EXECUTOR
SHIM_MEDIA_TYPE = "application/x-corral-shim"


class InProcessClient:
    """The ``corral.shims.context.Client`` methods over a live ``Controller``."""

    def __init__(self, ctl: Controller, who: Identity, loop: asyncio.AbstractEventLoop) -> None:
        self.ctl = ctl
        self.who = who
        self.loop = loop

    # ---- plumbing -----------------------------------------------------------------------
    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def _sync(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def _wrap(self, fn: Callable[[], Awaitable[T]]) -> T:
        from corral.client import CorralError
        from corral.controller.errors import ApiError

        try:
            return self._run(fn)
        except ApiError as exc:
            raise CorralError(exc.code, exc.message, exc.status, slurm=exc.slurm) from None

    # ---- jobs ---------------------------------------------------------------------------
    def submit_result(self, sub: Mapping[str, Any]) -> dict[str, Any]:
        body = dict(sub)
        extra = body.get("extra")
        host = str(extra.get("submit_host", "")) if isinstance(extra, dict) else ""
        return self._wrap(lambda: self.ctl.submit(body, self.who, host))

    def jobs(
        self,
        user: str | None = None,
        states: Iterable[str] | None = None,
        partition: str | None = None,
        ids: Iterable[int | str] | None = None,
        *,
        account: str | None = None,
        name: str | None = None,
        include_finished: bool = False,
        fields: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        flt: dict[str, Any] = {"include_finished": include_finished, "user": user,
                               "partition": partition, "account": account, "name": name}
        if states is not None:
            flt["states"] = list(states)
        if ids is not None:
            flt["ids"] = [str(i) for i in ids]

        def query() -> list[dict[str, Any]]:
            now = time.time()
            return [r.to_api(now) for r in self.ctl.query(flt)]

        from corral.client import CorralError
        from corral.controller.errors import ApiError

        try:
            return self._sync(query)
        except ApiError as exc:
            raise CorralError(exc.code, exc.message, exc.status, slurm=exc.slurm) from None

    def job(self, job_id: int | str) -> dict[str, Any]:
        return self._wrap(lambda: self.ctl.get_job(str(job_id), self.who))

    def start_step(self, job_id: int | str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /jobs/<id>/steps`` (the compiled srun's step, ``corral.shims.srun_fast``)."""
        from corral.controller.steps import start_step

        return self._wrap(lambda: start_step(self.ctl, str(job_id), body, self.who))

    def _act(self, action: str, ids: Iterable[int | str], **opts: Any) -> list[dict[str, Any]]:
        refs = [str(i) for i in ids]
        body = {k: v for k, v in opts.items() if v is not None}
        return self._wrap(lambda: self.ctl.act(action, refs, self.who, body))

    def cancel(self, ids: Iterable[int | str], signal: str | int | None = None, *,
               batch_only: bool = False, scope: str | None = None) -> list[dict[str, Any]]:
        return self._act("cancel", ids, signal=None if signal is None else str(signal),
                         batch_only=batch_only or None, scope=scope)

    def hold(self, ids: Iterable[int | str], *, admin: bool = False) -> list[dict[str, Any]]:
        return self._act("hold", ids, admin=admin or None)

    def release(self, ids: Iterable[int | str]) -> list[dict[str, Any]]:
        return self._act("release", ids)

    def requeue(self, ids: Iterable[int | str], *, hold: bool = False) -> list[dict[str, Any]]:
        return self._act("requeue", ids, hold=hold or None)

    def update_job(self, job_id: int | str, **fields: Any) -> dict[str, Any]:
        return self._wrap(lambda: self.ctl.update_job(str(job_id), dict(fields), self.who))

    def history(self, user: str | None = None, *, since: float | None = None,
                until: float | None = None, states: Iterable[str] | None = None,
                ids: Iterable[int | str] | None = None, account: str | None = None,
                partition: str | None = None, limit: int | None = None,
                all_users: bool = False,
                names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        flt: dict[str, Any] = {"all_users": all_users, "user": user, "since": since,
                               "until": until, "account": account, "partition": partition,
                               "limit": limit}
        if names is not None:
            flt["names"] = list(names)
        if states is not None:
            flt["states"] = list(states)
        if ids is not None:
            flt["ids"] = [str(i) for i in ids]
        return self._wrap(lambda: self.ctl.history(flt, self.who))

    # ---- nodes, partitions, cluster -----------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        return self._sync(lambda: [n.to_api() for _, n in sorted(self.ctl.nodes.nodes.items())])

    def partitions(self) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            from corral.core.parse.hostlist import compress

            nodes = self.ctl.nodes.nodes
            out = []
            for p in self.ctl.nodes.partitions:
                present = [nodes[n] for n in p.nodes if n in nodes]
                out.append({
                    "name": p.name, "nodes": list(p.nodes), "nodelist": compress(p.nodes),
                    "default": p.is_default, "state": p.state.value,
                    "max_time_s": p.max_time_s, "default_time_s": p.default_time_s,
                    "max_nodes": p.max_nodes, "min_nodes": p.min_nodes,
                    "priority_tier": p.priority_tier,
                    "priority_job_factor": p.priority_job_factor,
                    "preempt_mode": p.preempt_mode.value, "grace_time_s": p.grace_time_s,
                    "exclusive": p.exclusive,
                    "allow_accounts": sorted(p.allow_accounts) if p.allow_accounts else None,
                    "allow_qos": sorted(p.allow_qos) if p.allow_qos else None,
                    "total_cpus": sum(n.spec.cpus for n in present),
                    "total_mem_mb": sum(n.spec.mem_mb for n in present),
                    "total_nodes": len(p.nodes),
                })
            return out

        return self._sync(collect)

    def cluster_config(self) -> dict[str, Any]:
        def collect() -> dict[str, Any]:
            from corral.config.load import config_to_json

            data: dict[str, Any] = config_to_json(self.ctl.cfg)
            data["state_dir"] = str(self.ctl.state_dir)
            return data

        return self._sync(collect)

    def _node_op(self, fn: Callable[[], Any]) -> dict[str, Any]:
        from corral.client import CorralError
        from corral.controller.errors import ApiError

        if not self.who.is_admin:
            raise CorralError("forbidden", f"user {self.who.user} is not an operator", 403)

        def op() -> dict[str, Any]:
            rec = fn()
            self.ctl.sched.trigger()
            out: dict[str, Any] = rec.to_api()
            return out

        try:
            return self._sync(op)
        except ApiError as exc:
            raise CorralError(exc.code, exc.message, exc.status, slurm=exc.slurm) from None

    def drain(self, node: str, reason: str) -> dict[str, Any]:
        return self._node_op(lambda: self.ctl.nodes.drain(node, reason, self.who))

    def resume(self, node: str) -> dict[str, Any]:
        return self._node_op(lambda: self.ctl.nodes.resume(node, self.who))

    def set_node_down(self, node: str, reason: str) -> dict[str, Any]:
        return self._node_op(lambda: self.ctl.nodes.set_down(node, reason, self.who))

    # ---- advance reservations (``corral.controller.reservations``) ------------------------
    def reservations(self) -> list[dict[str, Any]]:
        return self._sync(lambda: self.ctl.reservations.api(time.time()))

    def _resv_op(self, fn: Callable[[], Any]) -> Any:
        from corral.client import CorralError
        from corral.controller.errors import ApiError

        if not self.who.is_admin:
            raise CorralError("forbidden", f"user {self.who.user} is not an operator", 403,
                              slurm="Access/permission denied")
        try:
            return self._sync(fn)
        except ApiError as exc:
            raise CorralError(exc.code, exc.message, exc.status, slurm=exc.slurm) from None

    def create_reservation(self, **fields: Any) -> dict[str, Any]:
        from corral.controller.reservation_routes import parse_body

        table = self.ctl.reservations
        out: dict[str, Any] = self._resv_op(lambda: table.to_api(
            table.create(parse_body(fields), self.who), time.time()))
        return out

    def update_reservation(self, name: str, **fields: Any) -> dict[str, Any]:
        from corral.controller.reservation_routes import parse_body

        table = self.ctl.reservations
        out: dict[str, Any] = self._resv_op(lambda: table.to_api(
            table.update(name, parse_body(fields), self.who), time.time()))
        return out

    def delete_reservation(self, name: str) -> None:
        self._resv_op(lambda: self.ctl.reservations.delete(name, self.who))

    # ---- run-time administration (``corral.controller.livecfg``) -------------------------
    def admin_change(self, kind: str, name: str, fields: dict[str, Any] | None,
                     mode: str) -> dict[str, Any] | None:
        from corral.controller.admin_routes import admin_change

        out: dict[str, Any] | None = self._resv_op(
            lambda: admin_change(self.ctl, self.who, kind, name, fields, mode))
        return out

    def set_partition_state(self, name: str, state: str) -> None:
        self._resv_op(lambda: self.ctl.livecfg.set_partition_state(name, state, self.who))

    def config_reload(self) -> dict[str, Any]:
        from corral.controller.reload import reload

        out: dict[str, Any] = self._resv_op(lambda: reload(self.ctl, self.who))
        return out

    def node_power(self, node: str, action: str) -> dict[str, Any]:
        out: dict[str, Any] = self._resv_op(
            lambda: self.ctl.power.operator(node, action).to_api())
        return out

    def fairshare(self) -> dict[str, Any]:
        from corral.ops.schedview import fairshare_payload

        return self._sync(lambda: fairshare_payload(self.ctl))

    def node_history(self, since: float, until: float) -> dict[str, Any]:
        return self._wrap(lambda: self.ctl.node_history(since, until))

    def job_usage(self, job_id: int | str) -> dict[str, Any]:
        from corral.controller.liveusage import job_usage

        async def get() -> dict[str, Any]:
            job = await self.ctl.get_job(str(job_id), self.who)
            return job_usage(self.ctl, int(job["id"]))

        return self._wrap(get)

    def priorities(self) -> dict[str, Any]:
        from corral.ops.schedview import priorities_payload

        return self._sync(lambda: priorities_payload(self.ctl, time.time()))

    def whoami(self) -> dict[str, Any]:
        out: dict[str, Any] = self.who.to_json()
        return out

    def ping(self) -> dict[str, Any]:
        from corral import __version__

        return {"status": "ok", "cluster": self.ctl.cfg.cluster_name, "version": __version__,
                "time": time.time(), "host": self.ctl.host}


def mount(app: FastAPI, ctl: Controller, identity: Callable[[Request], Identity]) -> None:
    """Add ``POST /api/v1/shim/exec`` to the controller's app."""

    from corral.controller.requests import body_of

    @app.post(ROUTE, summary="Run a Slurm/PBS shim command (used by `corral shims`)",
              include_in_schema=True, openapi_extra=body_of("ShimExec"))
    async def shim_exec(request: Request) -> Response:
        who = identity(request)
        raw = await request.body()
        loop = asyncio.get_running_loop()
        client = InProcessClient(ctl, who, loop)
        frame = await loop.run_in_executor(_executor(), handle_exec, raw, who.uid, client)
        return Response(content=frame, media_type=SHIM_MEDIA_TYPE)
