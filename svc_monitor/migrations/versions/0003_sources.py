"""Per-source accounting: the source (dataset or generator) and domain of each scored group.

Groups stored before this revision get their verifier kind as the source (the nearest the old rows
know to the task type, which is the source of a record without one) and an empty domain.

Revision ID: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("source", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("domain", sa.String, nullable=False, server_default=""))
    op.execute(sa.text("UPDATE groups SET source = kind WHERE source = ''"))


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("domain")
        batch.drop_column("source")
