"""Migrations match the models and undo cleanly, on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Connection, Integer, MetaData, inspect

from codevolve.program_db.engine import (
    SQLITE_BUSY_TIMEOUT_MS,
    create_engine,
    database_url,
    downgrade_base,
    sqlite_url,
    upgrade,
)
from codevolve.program_db.models import Base

VERSION_TABLE = "alembic_version"


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "empty.sqlite")
    else:
        yield request.getfixturevalue("empty_postgres_url")


def _differences(connection: Connection, metadata: MetaData) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _drifted_models() -> MetaData:
    """The models plus one column no migration creates."""
    drifted = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(drifted)
    drifted.tables["jobs"].append_column(Column("priority", Integer, nullable=True))
    return drifted


async def test_migrations_build_the_models_schema_and_downgrade_to_nothing(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade(engine)
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences, Base.metadata) == []
            drift = await connection.run_sync(_differences, _drifted_models())
            assert [d[0] for d in drift] == ["add_column"]  # the comparison does see drift
        await upgrade(engine)  # idempotent: a server runs it at every start
        await downgrade_base(engine)
        async with engine.connect() as connection:
            assert await connection.run_sync(_tables) <= {VERSION_TABLE}
        await upgrade(engine)
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences, Base.metadata) == []
            assert await connection.run_sync(_tables) == {VERSION_TABLE} | set(Base.metadata.tables)
    finally:
        await engine.dispose()


async def test_upgrade_accepts_a_url_and_disposes_its_own_engine(tmp_path: Any) -> None:
    url = sqlite_url(tmp_path / "by-url.sqlite")
    await upgrade(url)
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            assert set(Base.metadata.tables) <= await connection.run_sync(_tables)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/cv", "postgresql+asyncpg://u:p@db:5432/cv"),
        ("postgres://u@db/cv", "postgresql+asyncpg://u@db/cv"),
        ("postgresql+asyncpg://u@db/cv", "postgresql+asyncpg://u@db/cv"),
        ("sqlite:////var/cv.sqlite", "sqlite+aiosqlite:////var/cv.sqlite"),
    ],
)
def test_plain_urls_get_their_async_driver(given: str, expected: str) -> None:
    assert database_url(given) == expected


async def test_sqlite_connections_use_wal_and_enforce_foreign_keys(tmp_path: Any) -> None:
    engine = create_engine(sqlite_url(tmp_path / "pragmas.sqlite"))
    try:
        async with engine.connect() as connection:
            pragmas = [
                (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout")
            ]
    finally:
        await engine.dispose()
    assert pragmas == ["wal", 1, SQLITE_BUSY_TIMEOUT_MS]
