"""Request bodies within a bound (issue 11, item 5): ``read_bounded`` reads an ASGI
request's body and raises a 413 ``ApiError`` as soon as it is known to exceed
``max_body`` bytes — from its declared ``Content-Length``, or while it streams — so one
request never makes the controller hold more than that. Every HTTP entry point
(``api.with_fast_paths``, ``corral.shims.fastpath``) reads bodies through it."""

from __future__ import annotations

from typing import Any

from corral.controller.errors import ApiError


def max_body_bytes(max_request_mb: int) -> int:
    """``[controller] max_request_mb`` in bytes (at least 1 MiB)."""
    return max(1, max_request_mb) * 1024 * 1024


def too_large(max_body: int) -> ApiError:
    return ApiError("too_large", f"the request body is larger than {max_body >> 20} MiB "
                                 "([controller] max_request_mb)")


async def read_bounded(scope: Any, receive: Any, max_body: int) -> bytes:
    """The whole body of the request ``scope``, or ``too_large`` raised."""
    for k, v in scope.get("headers", ()):
        if k == b"content-length" and (not v.isdigit() or int(v) > max_body):
            raise too_large(max_body)
    chunks = []
    size = 0
    while True:
        msg = await receive()
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > max_body:
            raise too_large(max_body)
        chunks.append(chunk)
        if not msg.get("more_body"):
            return b"".join(chunks)
