"""Database fixtures: SQLite files and real Postgres databases, isolated per test.

SQLite: each test copies a migrated template file into its own ``tmp_path``. Postgres: a migrated
template database is built once per session; each test module gets a database cloned from it
(dropped at the end of the module) and each test starts from emptied tables. Migration tests get
an empty database of their own, cloned from ``template0``. The server is
``CODEVOLVE_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``); its database is
created when the server lacks it. When the server cannot be reached the Postgres cases are skipped,
except under CI, where they fail.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.program import CaseResult, Evaluation, Program, ProgramStatus, StageResult
from codevolve.program_db.engine import create_engine, session_factory, sqlite_url, upgrade
from codevolve.program_db.models import Base
from tests.integration.redis_support import (  # noqa: F401  (Redis fixtures for every module)
    keys,
    private_redis,
    redis,
    redis_url,
)

POSTGRES_ADMIN = os.environ.get(
    "CODEVOLVE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
CONNECT_TIMEOUT_S = 3.0  # seconds

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a private event loop (sync fixtures, the state machine); the test's own
    loop is neither touched nor replaced."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


@asynccontextmanager
async def running(task: Callable[[asyncio.Event], Awaitable[None]]) -> AsyncIterator[None]:
    """Run ``task(stop)`` in the background for the block; then set ``stop`` and await it."""
    stop = asyncio.Event()
    background = asyncio.create_task(task(stop))
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await background


# -------------------------------------------------------------------------------------- Postgres


def _dsn(database: str) -> str:
    """A plain libpq URL for asyncpg's own connections."""
    return make_url(POSTGRES_ADMIN).set(database=database).render_as_string(hide_password=False)


def postgres_url(database: str) -> str:
    url = make_url(POSTGRES_ADMIN).set(drivername="postgresql+asyncpg", database=database)
    return url.render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN, timeout=CONNECT_TIMEOUT_S)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


def create_database(*, template: str) -> str:
    name = f"cv_test_{uuid.uuid4().hex[:12]}"
    run_sync(_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    return name


def drop_database(name: str) -> None:
    run_sync(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


MAINTENANCE_DATABASE = "postgres"  # exists on every server; used to create the test database


async def _select_one(admin_url: str) -> None:
    connection = await asyncpg.connect(admin_url, timeout=CONNECT_TIMEOUT_S)
    await connection.close()


async def _create_database_of(admin_url: str) -> None:
    """Create the database ``admin_url`` names through the server's maintenance database: a
    fresh server has only ``postgres`` and the templates."""
    url = make_url(admin_url)
    maintenance = url.set(database=MAINTENANCE_DATABASE).render_as_string(hide_password=False)
    connection = await asyncpg.connect(maintenance, timeout=CONNECT_TIMEOUT_S)
    try:
        await connection.execute(f'CREATE DATABASE "{url.database}"')
    except asyncpg.DuplicateDatabaseError:
        pass  # another test run created it first
    finally:
        await connection.close()


def postgres_error(admin_url: str) -> str | None:
    """Why the Postgres tests cannot run against ``admin_url``, or None. A missing database is
    created, not skipped over."""
    try:
        run_sync(_select_one(admin_url))
    except asyncpg.InvalidCatalogNameError:
        try:
            run_sync(_create_database_of(admin_url))
            run_sync(_select_one(admin_url))
        except (OSError, asyncpg.PostgresError, TimeoutError) as error:
            return f"its database is missing and could not be created: {error}"
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        return f"{type(error).__name__}: {error}"
    return None


@functools.cache
def _postgres_error() -> str | None:
    return postgres_error(POSTGRES_ADMIN)


@pytest.fixture(scope="session")
def postgres_available() -> None:
    error = _postgres_error()
    if error is None:
        return
    message = f"Postgres at {POSTGRES_ADMIN} cannot be used ({error})"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_template(postgres_available: None) -> Iterator[str]:
    """A database migrated to head, cloned by the Postgres tests (no one connects to it)."""
    name = create_database(template="template0")
    try:
        run_sync(upgrade(postgres_url(name)))
        yield name
    finally:
        drop_database(name)


@pytest.fixture(scope="module")
def postgres_module_database(postgres_template: str) -> Iterator[str]:
    """One database per test module: creating a database costs about half a second (fsync)."""
    name = create_database(template=postgres_template)
    try:
        yield name
    finally:
        drop_database(name)


async def _empty_tables(database: str) -> None:
    # DELETE, not TRUNCATE: on tables this small it is one cheap transaction, where TRUNCATE
    # creates new files (and fsyncs them) for every table.
    statements = "; ".join(
        f'DELETE FROM "{table.name}"' for table in reversed(Base.metadata.sorted_tables)
    )
    connection = await asyncpg.connect(_dsn(database), timeout=CONNECT_TIMEOUT_S)
    try:
        async with connection.transaction():
            await connection.execute(statements)
    finally:
        await connection.close()


@pytest.fixture
def migrated_postgres_url(postgres_module_database: str) -> str:
    """The module's database, emptied for this test."""
    run_sync(_empty_tables(postgres_module_database))
    return postgres_url(postgres_module_database)


@pytest.fixture
def empty_postgres_url(postgres_available: None) -> Iterator[str]:
    """A database of its own with no tables at all (for migration tests)."""
    name = create_database(template="template0")
    try:
        yield postgres_url(name)
    finally:
        drop_database(name)


# ---------------------------------------------------------------------------------------- SQLite


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "codevolve.sqlite"
    run_sync(upgrade(sqlite_url(path)))
    return path


@pytest.fixture
def migrated_sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A copy of the migrated template: a file of the test's own."""
    path = tmp_path / "codevolve.sqlite"
    shutil.copyfile(sqlite_template, path)
    return sqlite_url(path)


# ------------------------------------------------------------------------------ either backend


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty database of each backend."""
    fixture = "migrated_sqlite_url" if request.param == "sqlite" else "migrated_postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(db_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return session_factory(engine)


# ------------------------------------------------------------------------------- value builders


def run_config(**overrides: Any) -> RunConfig:
    return RunConfig(problem="example", **{"islands": 2, **overrides})


def new_program(
    job_id: str,
    *,
    name: str | None = None,
    parent_id: str | None = None,
    island: int = 0,
    epoch: int = 0,
    proposal_index: int = 0,
) -> Program:
    """A pending program with a unique source (so a unique content hash)."""
    tag = name or uuid.uuid4().hex
    return Program(
        id=uuid.uuid4().hex,
        job_id=job_id,
        source=f"def f():\n    return {tag!r}\n",
        content_hash=f"hash-{tag}",
        parent_id=parent_id,
        island=island,
        epoch=epoch,
        generation=0 if parent_id is None else 1,
        proposal_index=proposal_index,
        status=ProgramStatus.PENDING,
        diff="",
        proposer="test",
    )


def evaluation_of(
    program: Program,
    score: float | None,
    *,
    status: ProgramStatus = ProgramStatus.EVALUATED,
    cases: tuple[CaseResult, ...] = (),
    metrics: dict[str, float] | None = None,
) -> Evaluation:
    """A two-stage evaluation whose last stage scores ``score``."""
    passed = status is ProgramStatus.EVALUATED
    return Evaluation(
        program_id=program.id,
        job_id=program.job_id,
        status=status,
        stages=(
            StageResult(stage="check", passed=True, score=1.0, metrics={"valid": 1.0}),
            StageResult(
                stage="score",
                passed=passed,
                score=score,
                metrics=metrics if metrics is not None else {"speedup": score or 0.0},
                heldout={"score": (score or 0.0) / 2},
                features={"size": 0.25, "speed": 0.75},
                cases=cases,
                feedback="ok" if passed else "below threshold",
                error=None if status is not ProgramStatus.FAILED else "crashed",
                artifacts={"stderr": "warning: x"},
            ),
        ),
        worker="w1",
        duration_s=0.5,
    )
