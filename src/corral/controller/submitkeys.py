"""Idempotency keys of submissions: a submit retried (after a failover, a lost answer)
never makes a second job.

A client that may repeat a submit (several controllers) sends a fresh random key with
each one (``Idempotency-Key`` header, for ``POST /api/v1/jobs`` and the shim endpoint;
``REQUEST_KEY`` carries it to ``Controller.submit``). The leader records ``<uid>:<key>`` with the
submit's answer in the same transaction as the jobs (``submit_keys`` table), so the key
exists exactly when the jobs do. A later submit with the same key gets the first answer;
one arriving while the first is still being committed waits for it. At takeover the new
leader loads the keys of the last ``ttl_s`` from the database (older rows are deleted):
lookups stay in memory, the submit path reads nothing. A key is scoped to the user who
sent it, so one user's key cannot reveal another user's job ids.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from corral.controller.errors import ApiError

MAX_KEY_LEN = 128
TTL_S = 3600.0
# the key of the request being served: set from its ``Idempotency-Key`` header by the
# controller's ASGI entry (``corral.controller.roles.Gate``) for ``POST /api/v1/jobs`` and
# the shim endpoint; ``Controller.submit`` uses it when its caller passed none
REQUEST_KEY: ContextVar[str | None] = ContextVar("corral_submit_key", default=None)


def check_key(key: Any) -> str | None:
    """The key as sent, validated at the edge (None: no key)."""
    if key is None or key == "":
        return None
    if not isinstance(key, str) or len(key) > MAX_KEY_LEN or not key.isprintable() \
            or not key.isascii():
        raise ApiError("invalid", f"bad idempotency key: at most {MAX_KEY_LEN} printable "
                                  "ASCII characters")
    return key


class SubmitKeys:
    def __init__(self, ttl_s: float = TTL_S) -> None:
        self.ttl_s = ttl_s
        self.answers: dict[str, dict[str, Any]] = {}
        self._order: deque[tuple[float, str]] = deque()
        self.inflight: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.replays = 0  # submits answered from a key (retries)

    def load(self, rows: Iterable[Any]) -> None:
        """Rows of ``Store.load_keys`` (``key``, ``time``, ``answer``), oldest first."""
        for row in rows:
            try:
                self.answers[str(row.key)] = json.loads(row.answer)
            except ValueError:
                continue
            self._order.append((float(row.time), str(row.key)))

    def recorded(self, key: str, answer: dict[str, Any], now: float) -> None:
        self.answers[key] = answer
        self._order.append((now, key))

    def prune(self, now: float) -> None:
        while self._order and now - self._order[0][0] > self.ttl_s:
            _t, key = self._order.popleft()
            self.answers.pop(key, None)

    @staticmethod
    def row(key: str, answer: dict[str, Any], now: float) -> dict[str, Any]:
        return {"key": key, "time": now, "answer": json.dumps(answer, separators=(",", ":"))}
