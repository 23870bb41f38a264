"""``GET /api/v1/events``: job events as Server-Sent Events or a JSON long poll.

Query parameters (all optional):

- ``since``     the id of the last event seen (events after it come); absent: only new
                ones. SSE's ``Last-Event-ID`` header takes its place on a reconnect.
- ``user``      whose jobs (operators and root only, for other users; a user always sees
                only their own jobs' events)
- ``jobs``      comma list of job ids; an array's id also matches its tasks
- ``name``      comma list of job names; ``tag``: comment or wckey values; ``state``: new
                states
- ``limit``     events per answer (1 to 1000, default 1000)
- ``wait_s``    JSON mode: wait up to this long (at most 60 s) for a first event
- ``format``    ``sse`` or ``json`` (default: ``sse`` when ``Accept`` names
                ``text/event-stream``, else ``json``)

SSE frames are ``id: N``, ``event: job`` and one ``data:`` line of the event's JSON; a
comment line with the cursor (``id:`` without data) every 15 s keeps proxies and the
reader's resume point current. JSON answers are ``{"events": [...], "next": N,
"last_id": M}``; ask again with ``since=next``. Each user may hold
``[controller] max_event_streams_per_user`` streams and waiting polls at once (429 past
it), so the cost of readers is bounded; one read looks at a bounded number of rows.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from corral.controller.errors import ApiError, is_number
from corral.controller.events import MAX_PAGE, MAX_WAIT_S, EventFilter, EventLog

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.service import Controller

HEARTBEAT_S = 15.0
MAX_JOB_IDS = 1000


def _words(params: dict[str, list[str]], key: str) -> list[str]:
    return [w.strip() for v in params.get(key, ()) for w in v.split(",") if w.strip()]


def _int(params: dict[str, list[str]], key: str, lo: int, hi: int) -> int | None:
    vals = params.get(key)
    if not vals:
        return None
    text = vals[-1].strip()
    if not is_number(text) or not lo <= int(text) <= hi:
        raise ApiError("invalid", f"bad parameter {key}: expected a whole number from "
                                  f"{lo} to {hi}, got {text!r}")
    return int(text)


def parse_request(ctl: Controller, who: Identity, scope: Any) -> dict[str, Any]:
    """The stream's settings from the query string and headers, checked."""
    params = parse_qs(scope.get("query_string", b"").decode("latin-1"),
                      keep_blank_values=False)
    headers = {k.lower(): v for k, v in scope.get("headers", ())}
    user = params.get("user", [None])[-1]
    if not who.is_admin:
        if user is not None and user != who.user:
            raise ApiError("forbidden", f"user {who.user} may follow only their own jobs' "
                                        "events", slurm="Access/permission denied")
        user = who.user
    job_ids: set[int] = set()
    for word in _words(params, "jobs"):
        base, sep, task = word.partition("_")
        if not is_number(base) or (sep and not is_number(task)):
            raise ApiError("invalid", f"bad parameter jobs: {word!r} is not a job id")
        if sep:  # A_T: that task's own id, when it is known
            found = ctl.resolve_memory(word) or []
            job_ids.update(r.id for r in found)
            if not found:
                job_ids.add(int(base))
        else:
            job_ids.add(int(base))
    if len(job_ids) > MAX_JOB_IDS:
        raise ApiError("invalid", f"bad parameter jobs: at most {MAX_JOB_IDS} ids")
    flt = EventFilter(user=user, job_ids=frozenset(job_ids),
                      names=frozenset(_words(params, "name")),
                      tags=frozenset(_words(params, "tag")),
                      states=frozenset(s.upper() for s in _words(params, "state")))
    last = headers.get(b"last-event-id", b"").decode("latin-1").strip()
    since = _int(params, "since", 0, 2 ** 63 - 1)
    if last:
        if not is_number(last):
            raise ApiError("invalid", f"bad Last-Event-ID header: {last!r}")
        since = int(last)
    fmt = params.get("format", [""])[-1]
    if fmt not in ("", "sse", "json"):
        raise ApiError("invalid", f"bad parameter format: sse or json, not {fmt!r}")
    if not fmt:
        fmt = "sse" if b"text/event-stream" in headers.get(b"accept", b"") else "json"
    wait = params.get("wait_s", ["0"])[-1]
    try:
        wait_s = float(wait)
    except ValueError:
        wait_s = -1.0
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise ApiError("invalid", f"bad parameter wait_s: 0 to {MAX_WAIT_S:g} seconds")
    return {"filter": flt, "since": since, "format": fmt, "wait_s": wait_s,
            "limit": _int(params, "limit", 1, MAX_PAGE) or MAX_PAGE}


class _Slot:
    """One of the user's stream slots, held while a stream or a waiting poll is open."""

    def __init__(self, log: EventLog, user: str, most: int) -> None:
        if log.streams.get(user, 0) >= most:
            raise ApiError("rate_limited", f"user {user} already holds {most} event "
                                           "streams ([controller] max_event_streams_per_user)")
        log.streams[user] = log.streams.get(user, 0) + 1
        self.log, self.user = log, user

    def close(self) -> None:
        n = self.log.streams.get(self.user, 0) - 1
        if n > 0:
            self.log.streams[self.user] = n
        else:
            self.log.streams.pop(self.user, None)


async def _start(send: Any, status: int, ctype: bytes, body: bytes | None = None) -> None:
    headers = [(b"content-type", ctype), (b"cache-control", b"no-cache")]
    if body is not None:
        headers.append((b"content-length", str(len(body)).encode()))
    else:
        headers.append((b"x-accel-buffering", b"no"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if body is not None:
        await send({"type": "http.response.body", "body": body})


async def serve(ctl: Controller, who: Identity, scope: Any, receive: Any, send: Any) -> None:
    """Answer one ``GET /events`` request (errors as the API's JSON errors)."""
    try:
        req = parse_request(ctl, who, scope)
        log = ctl.events
        slot = None
        if req["format"] == "sse" or req["wait_s"] > 0:
            slot = _Slot(log, who.user, ctl.cfg.controller.max_event_streams_per_user)
    except ApiError as exc:
        await _start(send, exc.status, b"application/json",
                     json.dumps(exc.to_json()).encode())
        return
    assert slot is not None or req["format"] == "json"
    since = req["since"] if req["since"] is not None else log.last_id
    gone = asyncio.get_running_loop().create_future()

    async def watch() -> None:
        while True:
            msg = await receive()
            if msg.get("type") == "http.disconnect":
                if not gone.done():
                    gone.set_result(None)
                return

    watcher = asyncio.ensure_future(watch()) if slot is not None else None
    try:
        if req["format"] == "json":
            await _poll(log, req, since, gone, send)
        else:
            await _stream(log, req, since, gone, send)
    finally:
        if watcher is not None:
            watcher.cancel()
        if slot is not None:
            slot.close()


async def _wait(log: EventLog, cursor: int, timeout_s: float,
                gone: asyncio.Future[None]) -> bool:
    """Until an event after ``cursor`` (True), the timeout or the client left (False)."""
    waiter: asyncio.Future[Any] = asyncio.ensure_future(log.wait(cursor, timeout_s))
    both: set[asyncio.Future[Any]] = {waiter, gone}
    done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        waiter.cancel()
        return False
    return bool(waiter.result())


async def _poll(log: EventLog, req: dict[str, Any], since: int,
                gone: asyncio.Future[None], send: Any) -> None:
    flt, limit = req["filter"], req["limit"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req["wait_s"]
    cursor = since
    while True:
        evs, cursor = await log.read(cursor, flt, limit)
        if evs or gone.done():
            break
        if cursor < log.last_id:
            continue  # more rows to look at before waiting
        left = deadline - loop.time()
        if left <= 0:
            break
        await _wait(log, cursor, left, gone)
    body = b'{"events":[%s],"next":%d,"last_id":%d}' % (
        b",".join(ev.data for ev in evs), cursor, log.last_id)
    await _start(send, 200, b"application/json", body)


async def _stream(log: EventLog, req: dict[str, Any], since: int,
                  gone: asyncio.Future[None], send: Any) -> None:
    flt, limit = req["filter"], req["limit"]
    await _start(send, 200, b"text/event-stream")
    await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
    cursor = since
    while not gone.done():
        evs, cursor = await log.read(cursor, flt, limit)
        if evs:
            frames = b"".join(b"id: %d\nevent: job\ndata: %s\n\n" % (ev.id, ev.data)
                              for ev in evs)
            await send({"type": "http.response.body", "body": frames, "more_body": True})
            continue
        if cursor < log.last_id:
            continue
        if not await _wait(log, cursor, HEARTBEAT_S, gone) and not gone.done():
            # no event for a while: a comment and the cursor (an id without data moves
            # the reader's Last-Event-ID past events its filter skipped)
            await send({"type": "http.response.body", "body": b": keepalive\nid: %d\n\n"
                        % cursor, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
