"""A controller process's roles over time: standby, leader, deposed, and back to standby.

``Gate`` is the ASGI entry the HTTP server runs: while this controller leads it hands
every request to the leader's app; otherwise it answers itself. A standby (or a leader
that was just deposed) answers

- ``GET /api/v1/ping``: ``{"status": "ok", "role": "standby", "leader": {holder, url,
  epoch, ...}}`` (``scontrol ping`` shows both controllers);
- any other request: HTTP 503 ``{"error": {"code": "not_leader", "message": "...",
  "leader": url}}``; clients with a list of controllers try the leader named there;
- the agent WebSocket: accepted and closed with code 4409 and the reason
  ``not_leader <url>``, so the agent moves to the leader;
- the web dashboard (``GET /ui...``): a 307 redirect to the same page on the leader.

While leading it reads the ``Idempotency-Key`` of submits (``submitkeys.REQUEST_KEY``)
and answers ``/api/v1/ping`` with the role fields in front of the leader's own.

``serve_seats`` is the loop of roles: build a fresh ``Controller`` and app, wait as a
standby until the database makes this controller the leader (``leadership.py``; a SQLite
store leads at once), load the state and lead until the lease is lost or a write is
fenced; then stop acting at once (scheduler stopped, agents dropped, requests refused)
and start over as a standby with empty memory: nothing of the deposed term survives but
what the database holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral import __version__
from corral.controller.errors import ApiError
from corral.controller.leadership import LeaderInfo, Leadership, fence_op
from corral.controller.submitkeys import REQUEST_KEY, TTL_S, check_key
from corral.controller.warm import WarmState

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.roles")

NOT_LEADER_CLOSE = 4409  # WebSocket close code a standby sends agents
KEYED_PATHS = frozenset({"/api/v1/jobs", "/api/v1/shim/exec"})  # Idempotency-Key read here


class Gate:
    def __init__(self, holder: str, advertise: str, cluster: str) -> None:
        self.holder = holder
        self.advertise = advertise
        self.cluster = cluster
        self.app: Any = None
        self.leading = False
        self.role = "standby"
        self.info: LeaderInfo | None = None
        self.takeovers = 0
        self.seat: Leadership | None = None  # the current term's (None: SQLite)
        self.epoch = 0
        self.ctl: Controller | None = None  # the leading term's
        self.warm: WarmState | None = None  # the standby's copy of the state (warm.py)

    def leader_json(self) -> dict[str, Any] | None:
        if self.leading:
            return {"holder": self.holder, "url": self.advertise}
        return self.info.to_json() if self.info is not None and self.info.alive else None

    def role_json(self) -> dict[str, Any]:
        """What ``/ping`` says about the controllers (``scontrol ping``, ``corral nodes``)."""
        out: dict[str, Any] = {"role": self.role, "controller": self.holder,
                               "url": self.advertise, "leader": self.leader_json()}
        if self.seat is not None:
            out["ha"] = True
            out["epoch"] = self.epoch if self.leading else (
                self.info.epoch if self.info is not None else 0)
            if not self.leading and self.warm is not None:
                out["warm"] = {"ready": self.warm.ready, "refreshes": self.warm.refreshes,
                               "active_jobs": self.warm.last["rows"],
                               "last_refresh_s": self.warm.last["seconds"]}
            out["controllers"] = [
                {"name": p["holder"], "url": p.get("url", ""),
                 "role": "leader" if (p["holder"] == (out["leader"] or {}).get("holder"))
                 else "standby"} for p in self.seat.peers]
        return out

    def not_leader_message(self) -> tuple[str, str]:
        leader = self.leader_json()
        if leader is None:
            return (f"this controller ({self.holder}) is a standby and no controller leads "
                    "right now (a failover is under way): retry in a moment"), ""
        return (f"this controller ({self.holder}) is a standby, not the leader; the leader "
                f"is {leader['holder']} at {leader['url']}"), str(leader["url"])

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.leading:
            path = scope.get("path")
            if path in KEYED_PATHS and scope["type"] == "http":
                for k, v in scope.get("headers", ()):
                    if k == b"idempotency-key":
                        try:
                            REQUEST_KEY.set(check_key(v.decode("latin-1")))
                        except ApiError as exc:
                            await _answer(send, exc.status, json.dumps(exc.to_json()).encode())
                            return
            elif path == "/api/v1/ping" and self.ctl is not None:
                from corral.controller.api import ping_body

                role = json.dumps(self.role_json()).encode()
                own = ping_body(self.ctl)
                await _answer(send, 200, role[:-1] + b"," + own[1:] if len(own) > 2 else role)
                return
            await self.app(scope, receive, send)
            return
        kind = scope["type"]
        if kind == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            _msg, url = self.not_leader_message()
            await send({"type": "websocket.close", "code": NOT_LEADER_CLOSE,
                        "reason": f"not_leader {url}"[:120]})
            return
        if kind != "http":
            return
        path = scope.get("path", "")
        if path == "/api/v1/ping":
            pong = dict(self.role_json(), status="ok", cluster=self.cluster,
                        version=__version__, time=time.time())
            await _answer(send, 200, json.dumps(pong).encode())
        elif path == "/metrics":
            text = (f"corral_controller_leader 0\ncorral_leader_takeovers {self.takeovers}\n")
            await _answer(send, 200, text.encode(), b"text/plain; version=0.0.4")
        elif path.startswith("/ui") and scope.get("method") == "GET" and \
                self.not_leader_message()[1].startswith(("http://", "https://")):
            # a browser on a standby's dashboard is sent to the leader's
            where = self.not_leader_message()[1].rstrip("/") + path
            if scope.get("query_string"):
                where += "?" + scope["query_string"].decode("latin-1")
            await send({"type": "http.response.start", "status": 307,
                        "headers": [(b"location", where.encode("latin-1")),
                                    (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
        else:
            message, url = self.not_leader_message()
            err = {"error": {"code": "not_leader", "message": message, "leader": url,
                             "slurm": "Unable to contact slurm controller (connect failure)"}}
            await _answer(send, 503, json.dumps(err).encode())


async def _answer(send: Any, status: int, body: bytes,
                  ctype: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def serve_seats(gate: Gate, make: Callable[[], tuple[Controller, Any]],
                      seat_factory: Callable[[], Leadership] | None, stop: asyncio.Event,
                      on_lead: Callable[[], None]) -> None:
    """Standby -> leader -> deposed -> standby ... until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        ctl, app = make()
        seat = seat_factory() if seat_factory is not None else None
        gate.seat = seat
        epoch = 0
        lost = asyncio.Event()
        warm: WarmState | None = None
        if seat is not None:
            gate.role = "standby"
            refresh_s = ctl.cfg.controller.standby_refresh_s
            if refresh_s > 0:  # keep a copy of the state warm while standing by
                warm = WarmState(ctl.store.engine, refresh_s, TTL_S)
                gate.warm = warm
            warming = asyncio.create_task(warm.run()) if warm is not None else None
            try:
                epoch_or_none = await _standby(gate, seat, stop)
            finally:
                if warming is not None:
                    warming.cancel()
            if epoch_or_none is None:  # stopped while standing by
                await seat.close()
                return
            epoch = epoch_or_none
            ctl.store.fence = fence_op(epoch)
            ctl.store.on_fenced = _notifier(loop, lost)
        # the lease is renewed from the takeover on, while the state loads too (a load
        # longer than the lease must not let a standby take over meanwhile)
        either = asyncio.Event()

        async def watch(ev: asyncio.Event, done: asyncio.Event = either) -> None:
            await ev.wait()
            done.set()

        watchers = [asyncio.create_task(watch(stop)), asyncio.create_task(watch(lost))]
        holding = asyncio.create_task(seat.hold(epoch, either)) if seat is not None else None
        starting = asyncio.create_task(ctl.start(warm))
        await asyncio.wait({starting} | ({holding} if holding else set()),
                           return_when=asyncio.FIRST_COMPLETED)
        failed = not starting.done() or starting.cancelled() or \
            starting.exception() is not None
        if failed:
            if not starting.done():  # the lease was lost while loading
                starting.cancel()
                try:
                    await starting
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
                log.error("leadership lost while taking over (%s); standing by again",
                          holding.result() if holding and holding.done() else "?")
            else:
                if seat is None:  # one controller (SQLite): a start that fails is fatal
                    for w in watchers:
                        w.cancel()
                    starting.result()
                log.error("taking over failed; standing by again",
                          exc_info=starting.exception())
            either.set()
            for t in [*watchers, *([holding] if holding else [])]:
                t.cancel()
            await _step_down(ctl, seat, release=True)
            await asyncio.sleep(1.0)  # not a tight loop on a database that keeps failing
            continue
        gate.takeovers += 1
        ctl.metrics.leader.set(1)
        ctl.metrics.leader_epoch.set(epoch)
        ctl.metrics.takeovers.set(gate.takeovers)
        ctl.metrics.failovers.set(max(epoch - 1, 0))
        gate.epoch = epoch
        ctl.ha_view = gate.role_json
        gate.ctl = ctl
        gate.app = app
        gate.role = "leader"
        gate.leading = True
        on_lead()
        if holding is None:
            await stop.wait()
            why = "stopped"
        else:
            why = await holding
            if lost.is_set() and not stop.is_set():
                why = "a write was fenced: another controller leads"
        for w in watchers:
            w.cancel()
        gate.leading = False
        ctl.metrics.leader.set(0)
        if why != "stopped":
            gate.role = "deposed"
            log.error("leadership lost (%s): this controller stops acting and stands by",
                      why)
        await _step_down(ctl, seat, release=why == "stopped")


def _notifier(loop: asyncio.AbstractEventLoop, ev: asyncio.Event) -> Callable[[Any], None]:
    """A callback for any thread that sets ``ev`` on ``loop``."""
    def notify(_exc: Any) -> None:
        loop.call_soon_threadsafe(ev.set)
    return notify


async def _standby(gate: Gate, seat: Leadership, stop: asyncio.Event) -> int | None:
    acquire = asyncio.ensure_future(seat.acquire())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            gate.info = seat.info
            done, _ = await asyncio.wait({acquire, stopped}, timeout=seat.poll_s)
            if acquire in done:
                return int(acquire.result())
            if stopped in done:
                return None
    finally:
        for t in (acquire, stopped):
            if not t.done():
                t.cancel()
        gate.info = seat.info


async def _step_down(ctl: Controller, seat: Leadership | None, *, release: bool) -> None:
    try:
        await ctl.stop()
    except Exception:  # noqa: BLE001 - a fenced store fails its last writes
        log.exception("stopping the controller's term")
    if seat is not None:
        if release:
            await seat.release()
        await seat.close()
