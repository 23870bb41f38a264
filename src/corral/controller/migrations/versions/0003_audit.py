"""Audit trail: one row per operator action (who, what, when, outcome).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("via", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
    )
    op.create_index("ix_audit_time", "audit", ["time"])


def downgrade() -> None:
    op.drop_index("ix_audit_time", table_name="audit")
    op.drop_table("audit")
