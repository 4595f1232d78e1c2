"""The database of one command, opened for reading or for writing, with errors a user can read.

Reading (``status``, ``best``, ``show``, ``export``, ``token list``) never creates a file and never
migrates: a missing SQLite file, a file that is not a codevolve database and a database at another
schema are refused before anything is written. Writing (``run``, ``submit``, ``token create``,
``db upgrade``) upgrades the schema to head first. Either way, an SQLite file is checked before it
is opened (a file that is not SQLite, or shorter than its header says, is damaged and is left as it
is), and a database that cannot be reached raises :class:`DatabaseUnusable` naming the ``--db``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from codevolve.core.errors import ConfigError
from codevolve.program_db.engine import alembic_config, create_engine, session_factory, upgrade

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100  # SQLite's file header


def _is_trouble(exc: SQLAlchemyError) -> bool:
    """A database that cannot be reached or read (not a statement the code got wrong)."""
    return isinstance(exc, OperationalError | InterfaceError) or type(exc) is DatabaseError


class DatabaseUnusable(ConfigError):
    """The ``--db`` names no database, a damaged one, one at another schema, or one that cannot be
    reached; the message names it and says what to do."""


def shown(url: str) -> str:
    """The database as the user typed it: an SQLite path, or the URL without its password."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    return make_url(url).render_as_string(hide_password=True).replace("+asyncpg", "")


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None for other databases and for ``:memory:``)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


@asynccontextmanager
async def database_session(url: str) -> AsyncIterator[AsyncSession]:
    """``async with database_session(url) as session``: migrations run first; the transaction
    is committed when the block ends without an error, rolled back otherwise; the engine is
    disposed."""
    async with open_database(url, write=True) as engine:
        try:
            async with session_factory(engine).begin() as session:
                yield session
        except SQLAlchemyError as exc:
            if not _is_trouble(exc):
                raise
            raise DatabaseUnusable(_unusable(url, exc)) from exc


@asynccontextmanager
async def reading_session(url: str) -> AsyncIterator[AsyncSession]:
    """A session on an existing database at the current schema; nothing is created, migrated or
    committed (the transaction is rolled back)."""
    async with open_database(url, write=False) as engine:
        try:
            async with session_factory(engine)() as session:
                yield session
                await session.rollback()
        except SQLAlchemyError as exc:
            if not _is_trouble(exc):
                raise
            raise DatabaseUnusable(_unusable(url, exc)) from exc


@asynccontextmanager
async def open_database(url: str, *, write: bool) -> AsyncIterator[AsyncEngine]:
    """The engine of ``url``, checked (and, to write, upgraded to head), disposed afterwards."""
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_file(path, write=write)
    engine = create_engine(url, read_only=not write)
    try:
        try:
            if write:
                await upgrade(engine)
            else:
                await check_schema(engine, url)
        except (OSError, SQLAlchemyError) as exc:
            raise DatabaseUnusable(_unusable(url, exc)) from exc
        yield engine
    finally:
        await engine.dispose()


def check_sqlite_file(path: Path, *, write: bool) -> None:
    """Refuse a path that holds no SQLite database (or, to write, cannot hold a new one), before
    SQLite opens it: SQLite would create a missing file and write a header into an empty one."""
    if not path.exists():
        if not write:
            raise DatabaseUnusable(
                f"no database at {path}; run `codevolve run PROBLEM --db {path}` first "
                "or pass --db with an existing database"
            )
        if not path.parent.is_dir():
            raise DatabaseUnusable(
                f"--db {path}: no folder {path.parent}; create it or pass another --db"
            )
        _probe_creation(path)
        return
    if path.is_dir():
        raise DatabaseUnusable(f"--db {path} is a folder; pass a database file")
    with path.open("rb") as file:
        header = file.read(HEADER_BYTES)
    size = path.stat().st_size
    if size == 0:  # SQLite's own new database: one to write is created in it
        if write:
            return
        raise DatabaseUnusable(f"--db {path} is an empty file, not a codevolve database")
    if not header.startswith(SQLITE_MAGIC):
        raise DatabaseUnusable(
            f"--db {path} is not an SQLite database (another kind of file); pass the right --db"
        )
    expected = _size_in_header(header)
    if expected is not None and size < expected and not _wal_holds_pages(path):
        raise DatabaseUnusable(
            f"--db {path} is damaged: {size} bytes where its header says {expected}; "
            "restore it from a copy"
        )


def _wal_holds_pages(path: Path) -> bool:
    """Whether the database's write-ahead log holds pages. A checkpoint copies them from the
    log into the file in page order, page 1 (the header) first, and a process killed in the
    middle leaves the file shorter than its header says; the log still holds every page, and
    SQLite reads them from it on the next open."""
    wal = path.with_name(path.name + "-wal")
    return wal.is_file() and wal.stat().st_size > 0


def _probe_creation(path: Path) -> None:
    """Create and remove the file, so that a folder where no file can be made is one clear
    error here (the SQLite driver's thread fails noisily when its connection cannot open)."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as exc:
        raise DatabaseUnusable(
            f"--db {path}: cannot create a database there ({exc.strerror}); pass another --db"
        ) from None
    os.close(descriptor)
    path.unlink()


def _size_in_header(header: bytes) -> int | None:
    """Bytes the database spans by its header (None when the header's page count is stale)."""
    if len(header) < HEADER_BYTES:
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    valid_for = header[92:96]
    pages = int.from_bytes(header[28:32], "big")
    if pages == 0 or change_counter != valid_for:
        return None
    return pages * page_size


async def check_schema(engine: AsyncEngine, url: str) -> None:
    """Refuse a database without codevolve's schema, or at a revision other than head."""
    async with engine.connect() as connection:
        try:
            revision = await connection.scalar(text("SELECT version_num FROM alembic_version"))
        except SQLAlchemyError as exc:
            if "alembic_version" not in str(exc):
                raise
            revision = None
        await connection.rollback()
    if revision is None:
        raise DatabaseUnusable(
            f"--db {shown(url)} holds no codevolve database (no schema version); "
            "pass the right --db"
        )
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    if revision == head:
        return
    known = {rev.revision for rev in script.walk_revisions()}
    if revision in known:
        raise DatabaseUnusable(
            f"--db {shown(url)} is at an older schema ({revision}, current {head}); "
            f"run `codevolve db upgrade --db {shown(url)}` first"
        )
    raise DatabaseUnusable(
        f"--db {shown(url)} has schema {revision}, newer than this codevolve knows; "
        "upgrade codevolve"
    )


def _unusable(url: str, exc: BaseException) -> str:
    """One line for a database that failed to open, connect or answer."""
    reason = _reason(exc)
    if sqlite_path(url) is not None:
        return f"--db {shown(url)}: cannot use this SQLite database ({reason})"
    return (
        f"--db {shown(url)}: cannot use this database ({reason}); "
        "check that the server runs and the URL is right"
    )


def _reason(exc: BaseException) -> str:
    """The innermost driver message, first line only (no SQLAlchemy background link)."""
    inner: BaseException = exc
    original = getattr(exc, "orig", None)
    if isinstance(original, BaseException):
        inner = original
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    lines = str(inner).strip().splitlines()
    return lines[0] if lines else type(inner).__name__
