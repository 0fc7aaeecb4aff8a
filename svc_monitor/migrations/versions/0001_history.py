"""The first store: group totals and metrics (svc_monitor before the control loop).

Revision ID: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("group_id", sa.String, primary_key=True),
        sa.Column("policy_version", sa.Integer, nullable=False, index=True),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("reward_sum", sa.Float, nullable=False),
        sa.Column("correct", sa.Integer, nullable=False),
        sa.Column("judged", sa.Integer, nullable=False),
        sa.Column("length_sum", sa.Integer, nullable=False),
        sa.Column("dropped", sa.Integer, nullable=False),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("service", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False, index=True),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("value", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_table("groups")
