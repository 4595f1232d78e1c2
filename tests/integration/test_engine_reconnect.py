"""The Postgres engine after its connections are dropped (a restart, an idle timeout): a pooled
connection idle for a while is pinged before use; one in steady use is not pinged at all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from codevolve.program_db import engine as engine_module
from codevolve.program_db.engine import create_engine


async def _drop_connections(url: str) -> int:
    """Terminate every backend of the database, as a Postgres restart would."""
    admin = make_url(url).set(drivername="postgresql", database="postgres")
    connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        return int(
            await connection.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                make_url(url).database,
            )
        )
    finally:
        await connection.close()


async def _one(engine: AsyncEngine) -> int:
    async with engine.begin() as connection:
        return int((await connection.execute(text("SELECT 1"))).scalar_one())


@dataclass
class Pinged:
    """An engine whose pool pings after ``idle_s``, and the pings it made."""

    engine: AsyncEngine
    pings: list[int]


@asynccontextmanager
async def _engine(
    url: str, monkeypatch: pytest.MonkeyPatch, *, idle_s: float
) -> AsyncIterator[Pinged]:
    monkeypatch.setattr(engine_module, "PING_IDLE_S", idle_s)
    engine = create_engine(url)
    try:
        yield Pinged(engine=engine, pings=_count_pings(engine, monkeypatch))
    finally:
        await engine.dispose()


async def test_an_idle_connection_dropped_by_postgres_is_replaced_unseen(
    migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _engine(migrated_postgres_url, monkeypatch, idle_s=0.05) as pinged:
        assert await _one(pinged.engine) == 1
        assert await _drop_connections(migrated_postgres_url) >= 1
        await asyncio.sleep(0.1)  # idle past the threshold: the next checkout pings
        assert await _one(pinged.engine) == 1
        assert pinged.pings  # the dead connection was found by the ping, not the transaction


async def test_a_connection_in_steady_use_is_not_pinged(
    migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _engine(migrated_postgres_url, monkeypatch, idle_s=60.0) as pinged:
        for _ in range(20):
            assert await _one(pinged.engine) == 1
        assert pinged.pings == []


async def test_a_drop_while_busy_fails_one_transaction_and_the_pool_connects_afresh(
    migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _engine(migrated_postgres_url, monkeypatch, idle_s=60.0) as pinged:
        assert await _one(pinged.engine) == 1
        assert await _drop_connections(migrated_postgres_url) >= 1
        with pytest.raises(DBAPIError) as raised:
            await _one(pinged.engine)
        assert raised.value.connection_invalidated
        assert await _one(pinged.engine) == 1


def _count_pings(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    dialect = engine.sync_engine.dialect
    do_ping = dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        pings.append(1)
        return do_ping(dbapi_connection)

    monkeypatch.setattr(dialect, "do_ping", counted)
    return pings
