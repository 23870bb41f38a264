"""Initial schema: jobs, nodes, meta.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ACTIVE = "state IN ('PENDING','RUNNING','SUSPENDED','COMPLETING')"


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("array_job_id", sa.Integer, nullable=True),
        sa.Column("array_task_id", sa.Integer, nullable=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("account", sa.Text, nullable=True),
        sa.Column("partition", sa.Text, nullable=True),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("submit_time", sa.Float, nullable=False),
        sa.Column("start_time", sa.Float, nullable=True),
        sa.Column("end_time", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("submission", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_jobs_active", "jobs", ["state"], sqlite_where=sa.text(ACTIVE),
                    postgresql_where=sa.text(ACTIVE))
    op.create_index("ix_jobs_user_end", "jobs", ["user", "end_time"])
    op.create_index("ix_jobs_end", "jobs", ["end_time"])
    op.create_index("ix_jobs_array", "jobs", ["array_job_id"])
    op.create_table(
        "nodes",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("admin_state", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_table(
        "meta",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("meta")
    op.drop_table("nodes")
    op.drop_table("jobs")
