"""Job mail outbox: every mail owed, sent or given up, by its dedup key.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mail_outbox",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_try", sa.Float, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_mail_outbox_state", "mail_outbox", ["state"])
    op.create_index("ix_mail_outbox_time", "mail_outbox", ["time"])


def downgrade() -> None:
    op.drop_table("mail_outbox")
