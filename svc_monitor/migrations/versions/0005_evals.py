"""Held-out results of svc_eval: one row per (run, set, policy version), unique, so a result the
stage publishes again (after a crash, in a replay) replaces its row instead of counting twice.

Revision ID: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "evals",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("set_name", sa.String, nullable=False),
        sa.Column("policy_version", sa.BigInteger, nullable=False),
        sa.Column("prompts", sa.Integer, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("judged", sa.Integer, nullable=False),
        sa.Column("correct", sa.Integer, nullable=False),
        sa.Column("pass1", sa.Float, nullable=False),
        sa.Column("pass1_low", sa.Float, nullable=False),
        sa.Column("pass1_high", sa.Float, nullable=False),
        sa.Column("pass_at_k", sa.JSON, nullable=False),
        sa.Column("mean_length", sa.Float, nullable=False),
        sa.Column("mean_reward", sa.Float, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("message_id", sa.String, nullable=False, server_default=""),
        sa.Column("ts_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("run_id", "set_name", "policy_version", name="uq_evals_run_set_version"),
    )
    op.create_index("ix_evals_set_name", "evals", ["set_name"])
    op.create_index("ix_evals_policy_version", "evals", ["policy_version"])


def downgrade() -> None:
    op.drop_index("ix_evals_policy_version", "evals")
    op.drop_index("ix_evals_set_name", "evals")
    op.drop_table("evals")
