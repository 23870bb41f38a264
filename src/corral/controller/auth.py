"""Who is calling: SO_PEERCRED on the Unix socket, signed tokens over HTTP, a cluster key
for agents.

- Unix socket: the kernel gives the peer's uid/gid (``SO_PEERCRED``) when the connection
  is accepted (``PeerCredProtocol``); no password, like munge on one host.
- HTTP: ``Authorization: Bearer <JWT>`` signed HS256 with ``<state_dir>/jwt.key``; the
  claims carry the user name, uid and gid. ``corral token`` mints one (root may mint for
  any user, a user only for themself).
- Agents: ``Authorization: Bearer <cluster key>`` (``<state_dir>/cluster.key``, 0600).
Root (uid 0) and configured operators are admins on every job and node.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pwd
import secrets
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.controller.errors import ApiError


def token_ttl(value: Any, default: int, maximum: int) -> int:
    """The lifetime of a token asked for with ``ttl_s`` = ``value`` (None: ``default``):
    a positive whole number of seconds, at most ``maximum`` (``[controller]
    max_token_ttl_s``); anything else is an ``invalid`` error naming the field."""
    if value is None:
        return min(default, maximum)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError("invalid", f"ttl_s: expected a whole number of seconds, got {value!r}")
    if value <= 0:
        raise ApiError("invalid", f"ttl_s: must be positive, got {value}")
    if value > maximum:
        raise ApiError("invalid", f"ttl_s: {value} exceeds the longest token lifetime, "
                                  f"{maximum} s ([controller] max_token_ttl_s)")
    return value


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    uid: int
    gid: int
    operator: bool = False
    via: str = "socket"  # socket | token

    @property
    def is_admin(self) -> bool:
        return self.uid == 0 or self.operator

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "uid": self.uid, "gid": self.gid,
                "operator": self.is_admin, "via": self.via}


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def peer_credentials(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process on the other end of a Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def read_or_create_key(path: Path) -> str:
    """A random secret kept in a 0600 file (created on first use)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
        return key


def _b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


_JWT_HEADER = _b64url(b'{"alg":"HS256","typ":"JWT"}')


class Authenticator:
    def __init__(self, jwt_key: str, cluster_key: str, operators: frozenset[str]) -> None:
        self.jwt_key = jwt_key
        self.cluster_key = cluster_key
        self.operators = operators
        self._cache: dict[tuple[int, int], Identity] = {}
        self._mac: Any = None  # HMAC-SHA256 keyed with jwt_key, copied per token

    def from_peer(self, uid: int, gid: int) -> Identity:
        key = (uid, gid)
        who = self._cache.get(key)
        if who is None:
            name = user_name(uid)
            who = Identity(name, uid, gid, operator=name in self.operators, via="socket")
            self._cache[key] = who
        return who

    def from_scope(self, scope: Any) -> Identity:
        """The caller of an ASGI request: the Unix socket's peer credentials (put in the
        scope as ``corral.peer`` by the server), else its bearer token."""
        peer = scope.get("corral.peer")
        if peer is not None:
            return self.from_peer(peer[1], peer[2])
        for k, v in scope.get("headers", ()):
            if k == b"authorization" and v[:7].lower() == b"bearer ":
                return self.from_token(v[7:].decode().strip())
        raise ApiError("unauthorized", "authentication required: use the Unix socket or "
                                       "send Authorization: Bearer <token> (corral token)")

    def from_token(self, token: str) -> Identity:
        import jwt

        try:
            claims = jwt.decode(token, self.jwt_key, algorithms=["HS256"],
                                options={"require": ["exp", "sub"]})
        except jwt.ExpiredSignatureError:
            raise ApiError("unauthorized", "the token has expired") from None
        except jwt.PyJWTError as exc:
            raise ApiError("unauthorized", f"invalid token: {exc}") from None
        user = str(claims["sub"])
        return Identity(user, int(claims.get("uid", -1)), int(claims.get("gid", -1)),
                        operator=user in self.operators, via="token")

    def mint(self, who: Identity, ttl_s: int) -> str:
        """An HS256 JSON Web Token (RFC 7519) for ``who``, valid ``ttl_s`` seconds. Signed
        here with ``hmac`` rather than through PyJWT: every job started gets one (its
        ``CORRAL_TOKEN``), and PyJWT's key checks and header assembly per call were a
        sixth of the scheduler's time to launch a job. ``from_token`` (PyJWT) reads it."""
        now = int(time.time())
        claims = json.dumps({"sub": who.user, "uid": who.uid, "gid": who.gid, "iat": now,
                             "exp": now + ttl_s}, separators=(",", ":"))
        signing = _JWT_HEADER + b"." + _b64url(claims.encode())
        mac = self._mac
        if mac is None:
            mac = self._mac = hmac.new(self.jwt_key.encode(), digestmod=hashlib.sha256)
        sig = mac.copy()
        sig.update(signing)
        return (signing + b"." + _b64url(sig.digest())).decode()

    def is_cluster_key(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.cluster_key.encode())
