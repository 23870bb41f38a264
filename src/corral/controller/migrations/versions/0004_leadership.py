"""High availability: the leader lease (fencing epoch), id counters, submission keys.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_table(
        "counters",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    # one B-tree ordered by time (SQLite: WITHOUT ROWID): inserts append at its end,
    # loading the last hour and pruning are range scans; lookups happen in memory
    op.create_table(
        "submit_keys",
        sa.Column("time", sa.Float, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("answer", sa.Text, nullable=False),
        sqlite_with_rowid=False,
    )
    conn = op.get_bind()
    conn.execute(sa.text("INSERT INTO leader (id, epoch, holder, url, since, expires) "
                         "VALUES (1, 0, '', '', 0, 0)"))
    top = conn.execute(sa.text("SELECT MAX(id) FROM jobs")).scalar()
    conn.execute(sa.text("INSERT INTO counters (name, value) VALUES ('job_id', :v)"),
                 {"v": int(top or 0) + 1})


def downgrade() -> None:
    op.drop_table("submit_keys")
    op.drop_table("counters")
    op.drop_table("leader")
