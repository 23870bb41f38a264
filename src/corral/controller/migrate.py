"""Database schema migrations (Alembic), applied at controller start.

The revisions live in ``migrations/versions``; ``upgrade(engine)`` brings any database
(new or older) to the newest revision inside one transaction. To add a revision after a
schema change in ``store.py``: ``alembic -c <(echo) -x ... revision`` is not needed; copy
the newest file in ``versions/``, give it a new ``revision`` id and ``down_revision`` =
the previous one, and write the ``op.*`` calls by hand.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
