"""The curriculum: the mixture a set_mixture decision set (weights, levels, stage), and the arrival
order of scored groups (`seq`), which the curriculum cuts its windows by.

Groups stored before this revision are numbered in the order they were stored (time, then id).

Revision ID: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("weights", sa.JSON, nullable=True))
        batch.add_column(sa.Column("levels", sa.JSON, nullable=True))
        batch.add_column(sa.Column("stage", sa.String, nullable=False, server_default=""))
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("seq", sa.BigInteger, nullable=False, server_default="0"))
    bind = op.get_bind()
    ids = bind.execute(sa.text("SELECT group_id FROM groups ORDER BY ts_ms, group_id")).scalars().all()
    if ids:
        bind.execute(sa.text("UPDATE groups SET seq = :seq WHERE group_id = :gid"),
                     [{"seq": i, "gid": gid} for i, gid in enumerate(ids, start=1)])
    with op.batch_alter_table("groups") as batch:
        batch.create_index("ix_groups_seq", ["seq"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_index("ix_groups_seq")
        batch.drop_column("seq")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("stage")
        batch.drop_column("levels")
        batch.drop_column("weights")
