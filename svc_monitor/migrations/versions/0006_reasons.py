"""Why each sample scored what it did, per group: {reason: samples} (ScoredSample.reason, e.g. the swe
kind's did_not_apply, pass_to_pass_regression), for counts per source. Groups stored before: null.

Revision ID: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("reasons", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("reasons")
