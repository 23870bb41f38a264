"""Database schema migrations (Alembic), applied at controller start.

The revisions live in ``migrations/versions``; ``upgrade(engine)`` brings any database
(new or older) to the newest revision inside one transaction. To add a revision after a
schema change in ``store.py``: ``alembic -c <(echo) -x ... revision`` is not needed; copy
the newest file in ``versions/``, give it a new ``revision`` id and ``down_revision`` =
the previous one, and write the ``op.*`` calls by hand.

On PostgreSQL several controllers may start at once on one database: the upgrade holds a
transaction-level advisory lock, so one migrates and the others then find it done.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK = 0x636F7201  # advisory lock key of schema upgrades ("cor" 1)


def upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
