"""A ``--db`` that cannot be used ends in one line naming it, exit 2, no traceback, and the file
(if any) unchanged; read-only commands never create or migrate a database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codevolve.program_db.engine import create_engine, upgrade
from tests.cli.conftest import codevolve, job_rows, sha256

COMMANDS = (
    ("status", "JOB"),
    ("best", "JOB"),
    ("run", "gemm-tiling", "--proposals", "2", "--quiet"),
)
READ_ONLY = (
    ("status", "JOB"),
    ("status", "JOB", "--json"),
    ("best", "JOB"),
    ("show", "PROGRAM"),
    ("export", "JOB"),
    ("token", "list"),
)


def _damaged(kind: str, folder: Path, real: Path) -> Path:
    path = folder / f"{kind}.sqlite"
    if kind == "garbage":
        path.write_bytes(bytes(range(256)) * 40)
    elif kind == "truncated":
        path.write_bytes(real.read_bytes()[: real.stat().st_size // 2])
    else:
        path.write_text("these are my notes, not a database\n")
    return path


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", ["garbage", "truncated", "text"])
def test_a_damaged_sqlite_file_is_refused_and_left_as_it_is(
    command: tuple[str, ...], kind: str, run_db: tuple[Path, str], tmp_path: Path
) -> None:
    path = _damaged(kind, tmp_path, run_db[0])
    before = sha256(path)
    outcome = codevolve(*command, "--db", str(path))
    assert outcome.returncode == 2
    assert str(path) in outcome.error_line
    assert "not an SQLite database" in outcome.error_line or "damaged" in outcome.error_line
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.sqlite", path.name])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("db", "says"),
    [
        ("/proc/x.sqlite", "/proc/x.sqlite"),
        ("/nonexistent_dir/x.sqlite", "/nonexistent_dir"),
        ("postgresql://nobody@127.0.0.1:1/x", "connection refused"),
        ("mysql://x/y", "postgresql://USER@HOST/DB"),
    ],
)
def test_a_database_that_cannot_be_opened_is_one_line(
    command: tuple[str, ...], db: str, says: str
) -> None:
    outcome = codevolve(*command, "--db", db)
    assert outcome.returncode == 2
    assert db.split("://")[0] in outcome.error_line and says in outcome.error_line
    assert not Path("/nonexistent_dir").exists()


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_a_read_only_command_on_a_missing_database_creates_nothing(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    outcome = codevolve(*command, "--db", "never.sqlite", cwd=tmp_path)
    assert outcome.returncode == 2
    assert outcome.error_line.startswith("error: no database at never.sqlite; run `codevolve run")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_a_read_only_command_leaves_the_database_file_unchanged(
    command: tuple[str, ...], run_db: tuple[Path, str]
) -> None:
    db, job_id = run_db
    before = sha256(db)
    args = [job_id if word == "JOB" else word for word in command]
    codevolve(*args, "--db", str(db))
    assert sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["run.sqlite"]


def test_a_database_at_an_older_schema_is_not_migrated_by_a_read(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"

    async def migrate_to_first() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{db}")
        await upgrade(engine, "0001")
        await engine.dispose()

    asyncio.run(migrate_to_first())
    before = sha256(db)
    outcome = codevolve("status", "abc", "--db", str(db))
    assert outcome.returncode == 2
    assert f"run `codevolve db upgrade --db {db}`" in outcome.error_line
    assert sha256(db) == before

    assert codevolve("db", "upgrade", "--db", str(db)).returncode == 0
    after = codevolve("status", "abc", "--db", str(db))
    assert after.error_line == f"error: no job 'abc' in {db}; check the id and --db"


@pytest.mark.parametrize("command", READ_ONLY[:2], ids=" ".join)
def test_a_read_only_command_on_an_empty_file_leaves_it_empty(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    db = tmp_path / "empty.sqlite"
    db.touch()
    outcome = codevolve(*command, "--db", str(db))
    assert outcome.error_line == f"error: --db {db} is an empty file, not a codevolve database"
    assert db.stat().st_size == 0


def test_a_file_of_another_application_is_not_a_codevolve_database(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
    before = sha256(db)
    outcome = codevolve("status", "abc", "--db", str(db))
    assert outcome.returncode == 2
    assert "holds no codevolve database" in outcome.error_line
    assert sha256(db) == before


def test_status_of_an_unknown_job_names_it(run_db: tuple[Path, str]) -> None:
    db, _ = run_db
    outcome = codevolve("status", "nope", "--db", str(db))
    assert outcome.returncode == 2
    assert outcome.error_line == f"error: no job 'nope' in {db}; check the id and --db"
    assert len(job_rows(db)) == 1


WRITING = (
    ("run", "gemm-tiling", "--proposals", "2", "--quiet"),
    ("db", "upgrade"),
    ("token", "create", "--owner", "someone"),
)


@pytest.mark.parametrize("command", WRITING, ids=" ".join)
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_database_that_cannot_be_written_is_refused_before_sqlite_opens_it(
    command: tuple[str, ...], what: str, run_db: tuple[Path, str]
) -> None:
    db, _ = run_db
    before = sha256(db)
    locked = db if what == "file" else db.parent
    locked.chmod(0o444 if what == "file" else 0o555)
    try:
        outcome = codevolve(*command, "--db", str(db), without_override=True)
    finally:
        locked.chmod(0o644 if what == "file" else 0o755)
    assert outcome.returncode == 2
    says = "the file is not writable" if what == "file" else f"its folder {db.parent} is not"
    assert outcome.error_line.startswith(f"error: --db {db}: {says}"), outcome.error_line
    assert sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["run.sqlite"]  # no -wal, no -shm


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_database_that_cannot_be_written_is_read_without_files_beside_it(
    command: tuple[str, ...], what: str, run_db: tuple[Path, str]
) -> None:
    db, job_id = run_db
    locked = db if what == "file" else db.parent
    locked.chmod(0o444 if what == "file" else 0o555)
    args = [job_id if word == "JOB" else word for word in command]
    try:
        outcome = codevolve(*args, "--db", str(db), without_override=True)
    finally:
        locked.chmod(0o644 if what == "file" else 0o755)
    assert sorted(p.name for p in db.parent.iterdir()) == ["run.sqlite"]  # no -wal, no -shm
    if "PROGRAM" not in command:  # (no such program: that one ends in its own error line)
        assert outcome.returncode == 0, outcome.stderr
