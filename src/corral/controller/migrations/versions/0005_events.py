"""Job events: every job state change in commit order, the cursor of ``GET /events``.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("array_job_id", sa.Integer, nullable=True),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_events_user", "events", ["user", "id"])
    op.create_index("ix_events_job", "events", ["job_id"])
    op.create_index("ix_events_array", "events", ["array_job_id"])
    op.create_index("ix_events_time", "events", ["time"])
    # status queries by job name (squeue/sacct --name) and the array's tasks in order
    op.create_index("ix_jobs_name", "jobs", ["name", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_name", "jobs")
    op.drop_table("events")
