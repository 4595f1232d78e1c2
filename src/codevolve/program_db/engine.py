"""The async engine, sessions, and migrations run from inside the package.

One engine per process, created by a composition root (``services``); one session per task or
request. The same code serves SQLite (aiosqlite, the embedded default) and Postgres (asyncpg).
Migrations are Alembic's, configured here without an ini file so that an installed codevolve can
upgrade any database it is pointed at.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

log = logging.getLogger(__name__)
T = TypeVar("T")

MIGRATIONS = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for SQLite's single write lock
PING_IDLE_S = 1.0  # seconds; a pooled Postgres connection idle this long is pinged before use
_IDLE_SINCE = "codevolve_idle_since"  # the pool entry's info key: when it was checked in
ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
}


def database_url(url: str) -> str:
    """The async form of a URL: plain ``postgresql://`` and ``sqlite://`` get their async driver."""
    parsed = make_url(url)
    driver = ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        return url
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def sqlite_url(path: str | Path) -> str:
    """The URL of an SQLite file (made absolute, so the working directory does not matter)."""
    return f"sqlite+aiosqlite:///{Path(path).expanduser().resolve()}"


@dataclass(frozen=True, slots=True)
class PoolSize:
    """How many connections an engine keeps and how long a checkout waits for one.

    Connections are opened on demand, up to ``size`` kept open plus ``overflow`` opened for a
    burst and closed when returned. A checkout that finds all of them in use waits up to
    ``timeout_s`` and then raises SQLAlchemy's ``TimeoutError``. (SQLAlchemy's default is 5 + 10,
    30 s: a server that runs many jobs sizes its pools by role, see docs/deploy.md.)"""

    size: int = 5
    overflow: int = 10
    timeout_s: float = 30.0  # seconds

    def engine_options(self) -> dict[str, Any]:
        return {
            "pool_size": self.size,
            "max_overflow": self.overflow,
            "pool_timeout": self.timeout_s,
        }


def create_engine(
    url: str, *, echo: bool = False, read_only: bool = False, pool: PoolSize | None = None
) -> AsyncEngine:
    """The process's engine. SQLite connections get WAL (readers do not block the writer), foreign
    keys (off by default there) and a busy timeout (writers queue instead of failing at once).

    ``read_only`` SQLite connections leave the journal mode as the file has it and refuse writes
    (``query_only``): a command that only reads changes no byte of the file. ``pool`` sizes the
    connection pool (None: SQLAlchemy's default); an in-memory SQLite database has one connection
    and ignores it."""
    url = database_url(url)
    parsed = make_url(url)
    options: dict[str, Any] = {} if pool is None else pool.engine_options()
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            options = {}
        engine = _create_async_engine(url, echo=echo, **options)
        configure = _configure_sqlite_reader if read_only else _configure_sqlite
        event.listen(engine.sync_engine, "connect", configure)
        event.listen(engine.sync_engine, "handle_error", _keep_cancelled_sqlite_connection)
        return engine
    engine = _create_async_engine(url, echo=echo, **options)
    _ping_when_idle(engine)
    return engine


async def when_free(checkout: Callable[[], Awaitable[T]], *, waiter: str) -> T:
    """``await checkout()``, waiting on while the pool has no free connection.

    A pool timeout is a wait that ran long (every connection in use, or the database slow to
    open new ones), not a failure of the work that asked: each timeout is logged, naming
    ``waiter``, and the checkout is tried again. Errors of the database itself still raise."""
    waits = 0
    while True:
        try:
            return await checkout()
        except PoolTimeout as exc:
            waits += 1
            reason = str(exc).split(" (Background", 1)[0]
            log.warning("%s waits for a database connection (%d): %s", waiter, waits, reason)
            await asyncio.sleep(0)  # let whoever holds a connection run before trying again


def _ping_when_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection before use when it sat idle for ``PING_IDLE_S`` or longer.

    A connection that has been idle may have been closed by a Postgres restart or an idle timeout;
    the ping finds out and the pool connects afresh, so the transaction never sees it. A
    connection in steady use is not pinged (SQLAlchemy's ``pool_pre_ping`` pings every checkout:
    three round trips added to every transaction of a busy controller). A restart that lands while
    connections are busy fails the transactions on them; SQLAlchemy then retires every connection
    of the pool opened before, so the next transactions connect afresh."""
    dialect = engine.sync_engine.dialect

    @event.listens_for(engine.sync_engine.pool, "checkin")
    def _idle_from(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine.pool, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < PING_IDLE_S:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except (OSError, dialect.loaded_dbapi.Error) as exc:
            raise DisconnectionError("a pooled connection went away while idle") from exc


def _keep_cancelled_sqlite_connection(context: ExceptionContext) -> None:
    """A cancelled statement on SQLite leaves its connection usable: it is rolled back and pooled.

    SQLAlchemy treats a cancellation during a statement as a lost connection and closes it. With
    aiosqlite that is wrong and harmful: the connection's thread runs every call to its end, in
    order, whatever happens to the task that awaited it, so the statement still runs (and takes
    the write lock), and the close comes while its cursor has rows unread (``UPDATE ...
    RETURNING``). SQLite then keeps the closed connection as a zombie, in its write transaction,
    until the garbage collector frees that cursor (it sits in the cancellation's traceback); every
    other writer waits out the busy timeout and fails with "database is locked" (the paused
    state and wall time written after Ctrl-C). Kept, the connection's cursor is closed and the
    caller's rollback, queued behind the statement, ends the transaction."""
    if isinstance(context.original_exception, asyncio.CancelledError):
        context.is_disconnect = False


def _configure_sqlite(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; safe with WAL
    finally:
        cursor.close()


def _configure_sqlite_reader(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA query_only=ON")
    finally:
        cursor.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions whose values stay readable after commit (the repository returns core values, but a
    caller may still hold a row's attributes in a log line)."""
    return async_sessionmaker(engine, expire_on_commit=False)


# ------------------------------------------------------------------------------------ migrations


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built in code; ``env.py`` migrates the connection passed here."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def upgrade(target: AsyncEngine | str, revision: str = "head") -> None:
    """``alembic upgrade head``: create or update the schema. Safe to run at every start."""
    async with _engine(target) as engine, engine.begin() as connection:
        await connection.run_sync(_upgrade, revision)


async def downgrade_base(target: AsyncEngine | str) -> None:
    """``alembic downgrade base``: drop everything the migrations created (tests use it)."""
    async with _engine(target) as engine, engine.begin() as connection:
        await connection.run_sync(_downgrade, "base")


def _upgrade(connection: Connection, revision: str) -> None:
    command.upgrade(alembic_config(connection), revision)


def _downgrade(connection: Connection, revision: str) -> None:
    command.downgrade(alembic_config(connection), revision)


@asynccontextmanager
async def _engine(target: AsyncEngine | str) -> AsyncIterator[AsyncEngine]:
    """The engine given, or a short-lived one for a URL (disposed afterwards)."""
    if isinstance(target, AsyncEngine):
        yield target
        return
    engine = create_engine(target)
    try:
        yield engine
    finally:
        await engine.dispose()
