"""Alembic migrations of the program database; run through ``codevolve.program_db.engine``."""
