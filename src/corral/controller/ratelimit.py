"""Per-user fair rate limiting of API requests: a token bucket per user.

Algorithm (Slurm 23.02's ``rl_*`` SlurmctldParameters): each user has a bucket of at most
``bucket_size`` tokens, full at first; ``refill_rate`` tokens are added every
``refill_period_s`` seconds (whole periods, computed lazily when the user next calls).
A request takes one token; a user with none is answered 429 ``rate_limited`` (Slurm's
``SLURMCTLD_COMMUNICATIONS_BACKOFF``, "Rate limit exceeded, please retry momentarily")
with ``Retry-After``, and Corral's launchers and Python client wait and retry, as Slurm's
commands do. One request counts once whatever it carries: a whole array, a bulk submit of
many jobs, a query of 100 ids, an event stream for as long as it stays open.

Fairness: the buckets are independent, so one user's loop empties only their own bucket;
every other user keeps their full rate. Root (uid 0) and the agents (cluster key) are not
limited, as Slurm exempts root and SlurmUser. The table holds at most ``table_size``
users; past it, full buckets (users idle for a whole refill) are dropped first, and a
bucket dropped is simply full again when its user returns (never less than they had).

Invariant: tokens in [0, bucket_size]; a user is refused only with fewer than one token.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.config.schema import RateLimitConfig

if TYPE_CHECKING:
    from corral.controller.auth import Authenticator

SLURM_MESSAGE = "Rate limit exceeded, please retry momentarily"
# routes never limited: liveness, the agents, Prometheus
EXEMPT_PATHS = frozenset({"/api/v1/ping", "/api/v1/agent", "/metrics"})


@dataclass
class Bucket:
    tokens: float
    stamp: float  # the start of the current refill period


@dataclass
class RateLimiter:
    cfg: RateLimitConfig
    clock: Callable[[], float] = time.monotonic
    buckets: dict[str, Bucket] = field(default_factory=dict)
    limited: int = 0  # requests refused so far
    allowed: int = 0

    def take(self, user: str, cost: float = 1.0) -> float:
        """Take ``cost`` tokens from ``user``'s bucket: 0.0 when allowed, else the seconds
        until the bucket will hold enough (the ``Retry-After``)."""
        cfg = self.cfg
        now = self.clock()
        b = self.buckets.get(user)
        if b is None:
            if len(self.buckets) >= cfg.table_size:
                self._evict(now)
            b = self.buckets[user] = Bucket(float(cfg.bucket_size), now)
        else:
            periods = math.floor((now - b.stamp) / cfg.refill_period_s)
            if periods > 0:
                b.tokens = min(float(cfg.bucket_size), b.tokens + periods * cfg.refill_rate)
                b.stamp += periods * cfg.refill_period_s
        if b.tokens >= cost:
            b.tokens -= cost
            self.allowed += 1
            return 0.0
        self.limited += 1
        need = math.ceil((cost - b.tokens) / cfg.refill_rate)
        return max(b.stamp + need * cfg.refill_period_s - now, 0.001)

    def _evict(self, now: float) -> None:
        """Drop the buckets that are full by now (their users would find them full)."""
        cfg = self.cfg
        full = [u for u, b in self.buckets.items()
                if b.tokens + math.floor((now - b.stamp) / cfg.refill_period_s)
                * cfg.refill_rate >= cfg.bucket_size]
        for u in full or list(self.buckets)[: max(1, len(self.buckets) // 8)]:
            del self.buckets[u]


def caller_key(scope: Any, auth: Authenticator) -> str | None:
    """Whose bucket a request takes from (``None``: not limited): the Unix socket
    peer's uid, or the token's user; root and unauthenticated requests (refused by the
    route itself) are not limited."""
    peer = scope.get("corral.peer")
    if peer is not None:
        uid = int(peer[1])
        return None if uid == 0 else f"uid:{uid}"
    for k, v in scope.get("headers", ()):
        if k == b"authorization" and v[:7].lower() == b"bearer ":
            token = v[7:].decode("latin-1").strip()
            if auth.is_cluster_key(token):
                return None
            try:
                who = auth.from_token(token)
            except Exception:  # noqa: BLE001 - a bad token: the route answers 401
                return None
            return None if who.uid == 0 else f"uid:{who.uid}"
    return None


def with_rate_limit(app: Any, limiter: RateLimiter, auth: Authenticator) -> Any:
    """``app`` behind the limiter (HTTP requests only; WebSockets pass)."""
    if not limiter.cfg.enabled:
        return app

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT_PATHS:
            await app(scope, receive, send)
            return
        key = caller_key(scope, auth)
        wait_s = limiter.take(key) if key is not None else 0.0
        if not wait_s:
            await app(scope, receive, send)
            return
        await _drain(receive)
        retry = max(1, math.ceil(wait_s))
        body = json.dumps({"error": {
            "code": "rate_limited", "slurm": SLURM_MESSAGE,
            "message": f"too many requests from this user: retry in {wait_s:.2f} s "
                       f"([rate_limit] {limiter.cfg.refill_rate:g} per "
                       f"{limiter.cfg.refill_period_s:g} s, bursts of "
                       f"{limiter.cfg.bucket_size})",
            "retry_after_s": round(wait_s, 3)}}).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(retry).encode())]})
        await send({"type": "http.response.body", "body": body})

    return asgi


async def _drain(receive: Any, most_bytes: int = 1 << 20) -> None:
    """Read (and drop) the refused request's body, so the connection stays usable."""
    seen = 0
    while seen <= most_bytes:
        msg = await receive()
        if msg.get("type") != "http.request":
            return
        seen += len(msg.get("body", b""))
        if not msg.get("more_body"):
            return
