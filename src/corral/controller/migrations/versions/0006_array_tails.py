"""Large arrays: the remainder of an array not yet split into job rows.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "array_tails",
        sa.Column("array_job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("submission", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_array_tails_user", "array_tails", ["user"])


def downgrade() -> None:
    op.drop_table("array_tails")
