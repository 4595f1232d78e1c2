"""A scratch Postgres database for a benchmark: created on entry, dropped on exit."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
from sqlalchemy.engine import make_url


@dataclass(frozen=True, slots=True)
class Scratch:
    name: str  # the database's name
    url: str  # its SQLAlchemy URL (postgresql+asyncpg)
    admin: asyncpg.Connection  # a connection to the server's own database, e.g. for statistics


@contextlib.asynccontextmanager
async def scratch_database(pg: str) -> AsyncIterator[Scratch]:
    """A new database on the server of ``pg`` (a libpq or SQLAlchemy URL of any database there)."""
    admin_url = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"cv_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(pg).set(drivername="postgresql+asyncpg", database=name)
        try:
            yield Scratch(name=name, url=url.render_as_string(hide_password=False), admin=admin)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
