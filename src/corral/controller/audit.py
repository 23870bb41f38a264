"""The audit trail (issue 11): operator actions, stored in the ``audit`` table.

What is recorded, one row per action and target, with who (user, uid, via), what
(action, target, details), when (epoch seconds) and the outcome (``ok`` or
``<code>: <message>``, so refused attempts are recorded too):

- node actions: drain, resume, down (``corral.controller.nodes``; always operators);
- job updates by an operator (``scontrol update job``, ``PATCH /jobs/{id}``);
- cancel / signal / hold / release / requeue of a job that is not the caller's own
  (an owner acting on their own jobs is not recorded: that is ordinary use, and in the
  job's accounting record anyway);
- tokens minted for another user (``POST /tokens`` with ``user``).

Rows are queued on the store like every other write (same commit order, no extra round
trip on the caller's path). Read with ``GET /api/v1/audit`` (operators only) or
``corral audit``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.controller.store import Store, audit

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

log = logging.getLogger("corral.audit")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_MAX_TEXT = 512  # a target or outcome longer than this is cut (bounded rows)


def outcome_of(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, ApiError):
        return f"{exc.code}: {exc.message}"[:_MAX_TEXT]
    return f"error: {exc!r}"[:_MAX_TEXT]


def record(store: Store, who: Identity, action: str, target: str,
           details: dict[str, Any] | None = None, outcome: str = "ok") -> None:
    """Queue one audit row (committed with the store's next batch)."""
    row = {
        "time": time.time(), "user": who.user, "uid": who.uid, "via": who.via,
        "action": action, "target": str(target)[:_MAX_TEXT],
        "details": json.dumps(details or {}, separators=(",", ":"), default=str)[:4096],
        "outcome": outcome[:_MAX_TEXT],
    }
    log.info("audit: %s (uid %d, %s) %s %s: %s", who.user, who.uid, who.via, action,
             row["target"], row["outcome"])

    def run(conn: Connection) -> None:
        conn.execute(audit.insert().values(**row))

    store.submit(run)


def read(store: Store, since: float | None = None,
         limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """The newest ``limit`` rows at or after ``since``, oldest first."""
    q = sa.select(audit)
    if since is not None:
        q = q.where(audit.c.time >= since)
    q = q.order_by(audit.c.id.desc()).limit(max(0, min(limit, MAX_LIMIT)))
    with store.engine.connect() as conn:
        rows = list(conn.execute(q))
    out = []
    for r in reversed(rows):
        try:
            details = json.loads(r.details)
        except ValueError:
            details = {"raw": r.details}
        out.append({"id": int(r.id), "time": float(r.time), "user": r.user, "uid": int(r.uid),
                    "via": r.via, "action": r.action, "target": r.target,
                    "details": details, "outcome": r.outcome})
    return out
