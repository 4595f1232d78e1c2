"""Alembic's entry point: migrate the connection that ``engine.upgrade()`` hands over.

There is no ini file and no URL here: the engine (SQLite or Postgres, async) is the caller's, and
the migration runs on one of its connections through ``run_sync``.
"""

from __future__ import annotations

from alembic import context

from codevolve.program_db.errors import ProgramDbError
from codevolve.program_db.models import Base


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise ProgramDbError(
            "migrations run through codevolve.program_db.engine.upgrade(), which passes a "
            "connection"
        )
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters tables by copying them; batch mode does that
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
