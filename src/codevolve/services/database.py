"""The database of one command, opened for reading or for writing, with errors a user can read.

Reading (``status``, ``best``, ``show``, ``export``, ``token list``) never creates a file and never
migrates: a missing SQLite file, a file that is not a codevolve database and a database at another
schema are refused before anything is written. Writing (``run``, ``submit``, ``token create``,
``db upgrade``) upgrades the schema to head first. Either way, an SQLite file is checked before it
is opened (a file that is not SQLite, or shorter than its header says, is damaged and is left as it
is), and a database that cannot be reached raises :class:`DatabaseUnusable` naming the ``--db``
(or the environment variable the URL came from: :meth:`DatabaseUnusable.named_by`). An SQLite file
that cannot be written is refused before a command that writes opens it, and read where it is
without SQLite making its ``-wal`` and ``-shm`` files beside it.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import AsyncIterator, Callable
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


DB_OPTION = "--db"  # how a database is named when the user did not name it otherwise


def typed(option: str, value: str) -> str:
    """``--db x.sqlite`` for an option, ``CODEVOLVE_DB=x.sqlite`` for an environment variable."""
    return f"{option} {value}" if option.startswith("--") else f"{option}={value}"


class DatabaseUnusable(ConfigError):
    """The ``--db`` names no database, a damaged one, one at another schema, or one that cannot be
    reached; the message names it and says what to do.

    The message is written for the option that named the database: ``str()`` says ``--db``, and
    :meth:`named_by` says ``CODEVOLVE_DB`` where the URL came from that variable (only the command
    line's ``main()`` knows which)."""

    def __init__(self, say: Callable[[str], str]) -> None:
        self._say = say
        super().__init__(say(DB_OPTION))

    def named_by(self, option: str) -> str:
        return self._say(option)


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
            raise _unusable(url, exc) from exc


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
            raise _unusable(url, exc) from exc


@asynccontextmanager
async def open_database(url: str, *, write: bool) -> AsyncIterator[AsyncEngine]:
    """The engine of ``url``, checked (and, to write, upgraded to head), disposed afterwards."""
    path = sqlite_path(url)
    opened = url
    if path is not None:
        check_sqlite_file(path, write=write)
        if not write and not _sqlite_writable(path):
            opened = _immutable_url(path)
    engine = create_engine(opened, read_only=not write)
    try:
        try:
            if write:
                await upgrade(engine)
            else:
                await check_schema(engine, url)
        except (OSError, SQLAlchemyError) as exc:
            raise _unusable(url, exc) from exc
        yield engine
    finally:
        await engine.dispose()


def check_sqlite_file(path: Path, *, write: bool) -> None:
    """Refuse a path that holds no SQLite database (or, to write, cannot hold a new one or cannot
    be written), before SQLite opens it: SQLite would create a missing file, write a header into
    an empty one, and leave ``-wal`` and ``-shm`` files beside one it then fails to write."""
    if not path.exists():
        if not write:
            raise DatabaseUnusable(
                lambda option: (
                    f"no database at {path}{_from_environment(option)}; run "
                    f"`codevolve run PROBLEM --db {path}` first or {_pass_existing(option)}"
                )
            )
        if not path.parent.is_dir():
            raise DatabaseUnusable(
                lambda option: (
                    f"{typed(option, str(path))}: no folder {path.parent}; "
                    f"create it or {_pass_another(option)}"
                )
            )
        _probe_creation(path)
        return
    if path.is_dir():
        raise DatabaseUnusable(
            lambda option: f"{typed(option, str(path))} is a folder; pass a database file"
        )
    with path.open("rb") as file:
        header = file.read(HEADER_BYTES)
    size = path.stat().st_size
    if size == 0:  # SQLite's own new database: one to write is created in it
        if write:
            _check_writable(path)
            return
        raise DatabaseUnusable(
            lambda option: f"{typed(option, str(path))} is an empty file, not a codevolve database"
        )
    if not header.startswith(SQLITE_MAGIC):
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, str(path))} is not an SQLite database (another kind "
                f"of file); {_pass_another(option, 'the right')}"
            )
        )
    expected = _size_in_header(header)
    if expected is not None and size < expected and not _wal_holds_pages(path):
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, str(path))} is damaged: {size} bytes where its "
                f"header says {expected}; restore it from a copy"
            )
        )
    if write:
        _check_writable(path)


def _check_writable(path: Path) -> None:
    """Refuse a database file this process cannot write, or one whose folder cannot take the
    ``-wal`` and ``-shm`` files SQLite keeps beside it (unless they are there already)."""
    if not os.access(path, os.W_OK):
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, str(path))}: the file is not writable here "
                f"(permission denied or a read-only file system); make it writable or "
                f"{_pass_another(option)}"
            )
        )
    folder = path.parent
    if not os.access(folder, os.W_OK | os.X_OK) and not all(
        side.exists() for side in _side_files(path)
    ):
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, str(path))}: its folder {folder} is not writable, "
                f"and SQLite keeps {path.name}-wal and {path.name}-shm there; "
                f"make the folder writable or {_pass_another(option)}"
            )
        )


def _sqlite_writable(path: Path) -> bool:
    """Whether SQLite can open the file to write and make its side files beside it."""
    folder_ok = os.access(path.parent, os.W_OK | os.X_OK)
    return os.access(path, os.W_OK) and (folder_ok or all(p.exists() for p in _side_files(path)))


def _side_files(path: Path) -> tuple[Path, Path]:
    """The write-ahead log and the shared-memory index SQLite keeps beside a WAL database."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _immutable_url(path: Path) -> str:
    """An SQLite URL that reads the file as it is, creating nothing beside it: for a file this
    process cannot write, which SQLite would otherwise open with a ``-wal`` and ``-shm`` it
    cannot remove. A file with a write-ahead log is opened as usual (its pages are in the log)."""
    if _wal_holds_pages(path):
        return f"sqlite+aiosqlite:///{path}"
    quoted = urllib.parse.quote(str(path.resolve()))
    return f"sqlite+aiosqlite:///file:{quoted}?mode=ro&immutable=1&uri=true"


def _from_environment(option: str) -> str:
    return "" if option.startswith("--") else f" ({option})"


def _pass_another(option: str, which: str = "another") -> str:
    """The fix: another ``--db``, or another value of the variable the URL came from."""
    if option.startswith("--"):
        return f"pass {which} {option}"
    return f"set {option} to {which} database (or pass --db)"


def _pass_existing(option: str) -> str:
    if option.startswith("--"):
        return f"pass {option} with an existing database"
    return f"set {option} to an existing database (or pass --db)"


def _wal_holds_pages(path: Path) -> bool:
    """Whether the database's write-ahead log holds pages. A checkpoint copies them from the
    log into the file in page order, page 1 (the header) first, and a process killed in the
    middle leaves the file shorter than its header says; the log still holds every page, and
    SQLite reads them from it on the next open."""
    wal, _shm = _side_files(path)
    return wal.is_file() and wal.stat().st_size > 0


def _probe_creation(path: Path) -> None:
    """Create and remove the file, so that a folder where no file can be made is one clear
    error here (the SQLite driver's thread fails noisily when its connection cannot open)."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as exc:
        reason = exc.strerror
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, str(path))}: cannot create a database there "
                f"({reason}); {_pass_another(option)}"
            )
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
            # The table is missing (SQLite's words, then Postgres'), not the file unreadable.
            missing = ("no such table: alembic_version", '"alembic_version" does not exist')
            if not any(words in str(exc) for words in missing):
                raise
            revision = None
        await connection.rollback()
    db = shown(url)
    if revision is None:
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, db)} holds no codevolve database (no schema "
                f"version); {_pass_another(option, 'the right')}"
            )
        )
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    if revision == head:
        return
    known = {rev.revision for rev in script.walk_revisions()}
    if revision in known:
        raise DatabaseUnusable(
            lambda option: (
                f"{typed(option, db)} is at an older schema ({revision}, current "
                f"{head}); run `codevolve db upgrade --db {db}` first"
            )
        )
    raise DatabaseUnusable(
        lambda option: (
            f"{typed(option, db)} has schema {revision}, newer than this codevolve "
            "knows; upgrade codevolve"
        )
    )


def _unusable(url: str, exc: BaseException) -> DatabaseUnusable:
    """One line for a database that failed to open, connect or answer."""
    reason = _reason(exc)
    db = shown(url)
    if sqlite_path(url) is not None:
        return DatabaseUnusable(
            lambda option: f"{typed(option, db)}: cannot use this SQLite database ({reason})"
        )
    return DatabaseUnusable(
        lambda option: (
            f"{typed(option, db)}: cannot use this database ({reason}); "
            "check that the server runs and the URL is right"
        )
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
