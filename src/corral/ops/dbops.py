"""Database operations: copy a cluster's store to another database, take online backups.

``copy_database(src, dst)``: every row of the durable tables (jobs, steps, nodes, audit,
meta, submission keys) from ``src`` into an empty ``dst`` (typically SQLite ->
PostgreSQL, to move a cluster to high availability). The source is read inside one
transaction, a consistent snapshot even while its controller runs (SQLite WAL readers
see one state); the target is written in one transaction, so a failed copy leaves it
empty. The job id counter continues after the highest id copied; the audit id sequence
too. The leader lease and the controllers' presence rows are not copied.

``backup(url, path)``: SQLite through its online backup API (a consistent copy while the
controller writes); PostgreSQL with ``pg_dump --format=custom`` (restore with
``pg_restore --clean --if-exists -d URL FILE``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

COPY_TABLES = ("nodes", "jobs", "steps", "audit", "meta", "submit_keys")
CHUNK_ROWS = 2000


class DbOpError(Exception):
    """A precise reason the operation was refused or failed."""


def copy_database(src_url: str, dst_url: str,
                  progress: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Copy ``src_url``'s cluster into the empty ``dst_url``; returns rows per table."""
    from corral.controller.migrate import upgrade
    from corral.controller.store import _make_engine, counters, jobs, metadata

    if src_url == dst_url:
        raise DbOpError("the source and the target are the same database")
    src = _make_engine(src_url)
    dst = _make_engine(dst_url)
    counts: dict[str, int] = {}
    try:
        upgrade(src)  # an older source: read it in today's shape
        upgrade(dst)
        with dst.connect() as probe:
            have = probe.execute(sa.select(sa.func.count()).select_from(jobs)).scalar()
        if have:
            raise DbOpError(f"the target database already holds {have} jobs: copy into an "
                            "empty database")
        with src.connect() as s, dst.begin() as d:
            if src.dialect.name == "sqlite":
                s.exec_driver_sql("BEGIN")  # one snapshot for every table
            for name in COPY_TABLES:
                table = metadata.tables[name]
                q = sa.select(table)
                keep: set[str] = set()
                if name == "meta":  # the target's own keys win (shared cluster keys)
                    q = q.where(~table.c.key.like("ctl:%"))
                    keep = {str(k) for k in d.execute(sa.select(table.c.key)).scalars()}
                n = 0
                result = s.execute(q)
                while True:
                    chunk = result.fetchmany(CHUNK_ROWS)
                    if not chunk:
                        break
                    rows = [dict(r._mapping) for r in chunk]
                    rows = [r for r in rows if r["key"] not in keep] if keep else rows
                    if not rows:
                        continue
                    d.execute(table.insert(), rows)
                    n += len(rows)
                    if progress is not None:
                        progress(name, n)
                counts[name] = n
            top = d.execute(sa.select(sa.func.max(jobs.c.id))).scalar()
            src_next = s.execute(sa.select(counters.c.value)
                                 .where(counters.c.name == "job_id")).scalar()
            value = max(int(top or 0) + 1, int(src_next or 1))
            d.execute(counters.update().where(counters.c.name == "job_id").values(value=value))
            if dst.dialect.name == "postgresql":  # the audit ids continue after the copied
                d.exec_driver_sql("SELECT setval(pg_get_serial_sequence('audit', 'id'), "
                                  "COALESCE((SELECT MAX(id) FROM audit), 0) + 1, false)")
    except sa.exc.SQLAlchemyError as exc:
        raise DbOpError(f"copy failed (nothing was committed to the target): {exc}") from None
    finally:
        src.dispose()
        dst.dispose()
    return counts


def backup(url: str, path: Path) -> str:
    """A consistent online backup of ``url`` into ``path``; returns how it was taken."""
    if path.exists():
        raise DbOpError(f"{path} exists: give a new file name")
    if url.startswith("sqlite"):
        import sqlite3

        db = url.split("///", 1)[-1].split("?", 1)[0]
        if not os.path.exists(db):
            raise DbOpError(f"no database at {db}")
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        old = os.umask(0o077)  # the copy holds every job's script and environment
        try:
            out = sqlite3.connect(path)
            try:
                src.backup(out)
            finally:
                out.close()
        finally:
            os.umask(old)
            src.close()
        return "SQLite online backup"
    if url.startswith("postgresql"):
        pg_dump = find_pg_tool("pg_dump")
        if pg_dump is None:
            raise DbOpError("pg_dump not found (install PostgreSQL's client tools, e.g. "
                            "Debian's postgresql-client)")
        old = os.umask(0o077)
        try:
            r = subprocess.run([pg_dump, "--format=custom", "--no-owner", "--file", str(path),
                                "--dbname", libpq_url(url)], capture_output=True, text=True,
                               timeout=3600)
        finally:
            os.umask(old)
        if r.returncode != 0:
            raise DbOpError(f"pg_dump failed: {r.stderr.strip()}")
        return "pg_dump (custom format; restore with pg_restore --clean --if-exists -d URL)"
    raise DbOpError(f"cannot back up {url.split(':', 1)[0]} databases")


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://u@h:p/db`` as libpq takes it (``postgresql://...``)."""
    scheme, sep, rest = url.partition("://")
    return "postgresql" + sep + rest if scheme.startswith("postgresql") else url


def find_pg_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


def describe(counts: dict[str, Any]) -> str:
    return ", ".join(f"{n} {t}" for t, n in counts.items())
