"""The controller side of the shim launcher: run a shim command in-process.

The controller mounts ``POST /api/v1/shim/exec`` and calls ``handle_exec`` with the raw
request body, the caller's uid (from SO_PEERCRED or the token, never from the body) and a
``Client`` bound to that caller. Parsing options, submitting and rendering all happen
here, where the model is already imported and the records are in memory; the launcher
only starts an interpreter and moves bytes (see ``corral.shims.lean`` for the wire format).

``handle_exec`` never raises for bad input: every problem becomes the command's own error
text and exit status in the reply, like the real command would print.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from corral.shims.context import Client, Context, NeedInput
from corral.shims.lean import encode_frame
from corral.shims.local import COMMANDS, dispatch

SERVER_COMMANDS = frozenset(COMMANDS) - {"srun", "salloc"}
log = logging.getLogger(__name__)


class BadRequest(ValueError):
    pass


def parse_request(body: bytes | str | dict[str, Any], uid: int) -> tuple[str, Context]:
    data: Any = json.loads(body) if isinstance(body, (bytes, str)) else body
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    cmd = data.get("cmd")
    argv = data.get("argv")
    if not isinstance(cmd, str) or (cmd not in SERVER_COMMANDS and not (
            cmd == "srun" and data.get("step_io") is not None)):
        raise BadRequest(f"unknown shim command {cmd!r}")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise BadRequest("argv must be a list of strings")
    from pydantic import ValidationError

    from corral.controller.requests import ShimExec, describe

    try:
        ShimExec.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(describe(exc)) from None
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise BadRequest("env must be an object")
    files: dict[str, tuple[bool, str]] = {}
    for path, entry in (data.get("files") or {}).items():
        if isinstance(entry, list) and len(entry) == 2:
            files[str(path)] = (bool(entry[0]), str(entry[1]))
    stdin = data.get("stdin")
    ctx = Context(
        prog=cmd, argv=list(argv), cwd=str(data.get("cwd") or "/"),
        env={str(k): str(v) for k, v in env.items()}, uid=int(uid), now=time.time(),
        local=False, files=files, stdin_text=stdin if isinstance(stdin, str) else None,
    )
    return cmd, ctx


def handle_exec(body: bytes | str | dict[str, Any], uid: int, client: Client) -> bytes:
    """Run one shim command for ``uid``; returns the framed reply body."""
    try:
        data: Any = json.loads(body) if isinstance(body, (bytes, str)) else body
        cmd, ctx = parse_request(data, uid)
        io = step_io_of(data) if cmd == "srun" else None
    except (BadRequest, ValueError, TypeError) as exc:
        return encode_frame(2, "", f"corral: bad shim request: {exc}\n")
    if io is not None:
        return _fast_srun(ctx, io, client)
    try:
        rc = dispatch(cmd, ctx, client)
    except NeedInput as exc:
        return encode_frame(0, "", "", exc.paths)
    except Exception as exc:  # a bug must not take the controller's request down with it
        log.exception("shim %s %r failed", cmd, ctx.argv)
        ctx.error(f"{cmd}: error: internal error in Corral: {type(exc).__name__}: {exc}")
        rc = 1
    return encode_frame(rc, ctx.stdout_text, ctx.stderr_text)


def step_io_of(data: dict[str, Any]) -> tuple[str, str, int | None]:
    """``(addr, key, pid)`` of the compiled srun's request (``corral.shims.srun_fast``)."""
    from corral.shims.srun_fast import step_io

    raw = data.get("step_io")
    addr, key = step_io(raw)
    pid = raw.get("pid") if isinstance(raw, dict) else None
    return addr, key, pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _fast_srun(ctx: Context, io: tuple[str, str, int | None], client: Client) -> bytes:
    """A step through the agents, started from a worker thread (``start_step`` hops to
    the controller's loop)."""
    from corral.client import CorralError
    from corral.shims import srun_fast

    try:
        step = srun_fast.prepare(ctx, io[0], io[1])
        if isinstance(step, bytes):
            return step
        step.body["pid"] = io[2]
        start = getattr(client, "start_step")  # noqa: B009 - InProcessClient only
        try:
            res = start(step.job_id, step.body)
        except CorralError as exc:
            return srun_fast.refused(step, exc.message)
        return srun_fast.reply(step, int(res["step_id"]))
    except NeedInput as exc:
        return encode_frame(0, "", "", exc.paths)
    except Exception as exc:  # a bug must not take the controller's request down with it
        log.exception("shim srun %r failed", ctx.argv)
        return encode_frame(1, "", f"srun: error: internal error in Corral: "
                                   f"{type(exc).__name__}: {exc}\n")
