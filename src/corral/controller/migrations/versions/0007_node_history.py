"""Node state and reservation history (sreport cluster utilization: Down, Reserved).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_node_history_time", "node_history", ["time"])
    op.create_index("ix_node_history_name", "node_history", ["kind", "name"])


def downgrade() -> None:
    op.drop_table("node_history")
