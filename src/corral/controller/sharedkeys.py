"""The cluster's secrets shared through the database, for controllers of one HA cluster.

Every controller of a high-availability cluster must accept the same agents (cluster
key) and the same user tokens (JWT key). The first controller to start on a PostgreSQL
database stores its keys in the ``meta`` table (``INSERT ... ON CONFLICT DO NOTHING``:
the first one wins, however many start at once); every other controller adopts them and
rewrites its own ``cluster.key``/``jwt.key`` (0600) so the local tools (``corral token``)
sign with the shared keys. The database already holds every job's script and
environment: it is the cluster's most private store either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa

from corral.controller.auth import read_or_create_key

KEYS = (("cluster_key", "cluster.key"), ("jwt_key", "jwt.key"))


def share_keys(url: str, state_dir: Path) -> tuple[str, str]:
    """Migrate the schema, then (cluster key, JWT key) as the database holds them."""
    from corral.controller.migrate import upgrade
    from corral.controller.store import _make_engine

    engine = _make_engine(url)
    out: list[str] = []
    try:
        upgrade(engine)
        with engine.begin() as conn:
            for meta_key, filename in KEYS:
                local = read_or_create_key(state_dir / filename)
                conn.execute(sa.text("INSERT INTO meta (key, value) VALUES (:k, :v) "
                                     "ON CONFLICT (key) DO NOTHING"),
                             {"k": meta_key, "v": local})
                shared = str(conn.execute(sa.text("SELECT value FROM meta WHERE key = :k"),
                                          {"k": meta_key}).scalar())
                if shared != local:
                    _write_private(state_dir / filename, shared)
                out.append(shared)
    finally:
        engine.dispose()
    return out[0], out[1]


def _write_private(path: Path, value: str) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    os.replace(tmp, path)
