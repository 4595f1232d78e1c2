"""A database for one command: upgraded to head, one session, one transaction, then closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.program_db.engine import create_engine, session_factory, upgrade


@asynccontextmanager
async def database_session(url: str) -> AsyncIterator[AsyncSession]:
    """``async with database_session(url) as session``: migrations run first; the transaction
    is committed when the block ends without an error, rolled back otherwise; the engine is
    disposed."""
    engine = create_engine(url)
    try:
        await upgrade(engine)
        async with session_factory(engine).begin() as session:
            yield session
    finally:
        await engine.dispose()
