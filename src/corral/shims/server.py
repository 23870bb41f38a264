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
    if not isinstance(cmd, str) or cmd not in SERVER_COMMANDS:
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
        cmd, ctx = parse_request(body, uid)
    except (BadRequest, ValueError, TypeError) as exc:
        return encode_frame(2, "", f"corral: bad shim request: {exc}\n")
    try:
        rc = dispatch(cmd, ctx, client)
    except NeedInput as exc:
        return encode_frame(0, "", "", exc.paths)
    except Exception as exc:  # a bug must not take the controller's request down with it
        log.exception("shim %s %r failed", cmd, ctx.argv)
        ctx.error(f"{cmd}: error: internal error in Corral: {type(exc).__name__}: {exc}")
        rc = 1
    return encode_frame(rc, ctx.stdout_text, ctx.stderr_text)
