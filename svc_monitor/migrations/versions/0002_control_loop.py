"""The control loop: rollouts, GenRM samples, signals, decisions, alerts, dead letters, policies,
the rules' state; task type and time on groups, labels and time on metrics.

Revision ID: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id() -> sa.Column:
    return sa.Column("id", Id, primary_key=True, autoincrement=True)


def _ts(index: bool = False) -> sa.Column:
    return sa.Column("ts_ms", sa.BigInteger, nullable=False, index=index)


def upgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("kind", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("ts_ms", sa.BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("labels", sa.JSON, nullable=True))
        batch.add_column(sa.Column("ts_ms", sa.BigInteger, nullable=False, server_default="0"))
        batch.create_index("ix_metrics_ts_ms", ["ts_ms"])
    op.create_table(
        "rollouts", _id(),
        sa.Column("rollout_id", sa.String, nullable=False, unique=True),
        sa.Column("group_id", sa.String, nullable=False),
        sa.Column("policy_version", sa.BigInteger, nullable=False, index=True),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("window", sa.Integer, nullable=False),
        sa.Column("finish", sa.Integer, nullable=False),
        sa.Column("nll_sum", sa.Float, nullable=False),
        sa.Column("repetition", sa.Float, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        _ts(index=True))
    op.create_table(
        "genrm_samples", _id(),
        sa.Column("group_id", sa.String, nullable=False, index=True),
        sa.Column("policy_version", sa.BigInteger, nullable=False, index=True),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("correct", sa.Boolean, nullable=True),
        _ts())
    op.create_table(
        "signals", _id(), _ts(index=True),
        sa.Column("name", sa.String, nullable=False, index=True),
        sa.Column("subject", sa.String, nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("version_from", sa.BigInteger, nullable=True),
        sa.Column("version_to", sa.BigInteger, nullable=True))
    op.create_table(
        "decisions", _id(),
        sa.Column("message_id", sa.String, nullable=False, unique=True),
        _ts(index=True),
        sa.Column("command", sa.String, nullable=False),
        sa.Column("max_new_tokens", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False))
    op.create_table(
        "alerts", _id(),
        sa.Column("kind", sa.String, nullable=False, index=True),
        sa.Column("subject", sa.String, nullable=False),
        sa.Column("severity", sa.String, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("raised_ms", sa.BigInteger, nullable=False),
        sa.Column("resolved_ms", sa.BigInteger, nullable=True))
    op.create_table(
        "dead_letters", _id(), _ts(index=True),
        sa.Column("consumer_group", sa.String, nullable=False),
        sa.Column("source_topic", sa.String, nullable=False),
        sa.Column("service", sa.String, nullable=False),
        sa.Column("error", sa.Text, nullable=False))
    op.create_table(
        "policies",
        sa.Column("version", sa.BigInteger, primary_key=True, autoincrement=False),
        _ts())
    op.create_table(
        "controller_state",
        sa.Column("key", sa.String, primary_key=True),
        sa.Column("value", sa.JSON, nullable=False))


def downgrade() -> None:
    for table in ("controller_state", "policies", "dead_letters", "alerts", "decisions", "signals",
                  "genrm_samples", "rollouts"):
        op.drop_table(table)
    with op.batch_alter_table("metrics") as batch:
        batch.drop_index("ix_metrics_ts_ms")
        batch.drop_column("ts_ms")
        batch.drop_column("labels")
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("ts_ms")
        batch.drop_column("kind")
