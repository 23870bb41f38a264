"""Job steps: one row per ``srun`` step of one run of a job.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the primary key (job_id, restarts, step_id) is the index by job id
    op.create_table(
        "steps",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("restarts", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("step_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=True),
        sa.Column("data", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("steps")
