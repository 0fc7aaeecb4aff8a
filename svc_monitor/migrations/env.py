"""Alembic environment: the Store hands over its open connection (no alembic.ini, no logging setup)."""
from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)  # batch: SQLite alters by copy
with context.begin_transaction():
    context.run_migrations()
