"""The check an SQLite --db passes before SQLite opens it: a file cut short is refused, unless
its write-ahead log still holds the pages (a process killed while checkpointing leaves that)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from codevolve.services.database import DatabaseUnusable, check_sqlite_file

ROWS = 2000


def _killed_mid_checkpoint(folder: Path) -> Path:
    """A WAL database as a kill in the middle of a checkpoint leaves it: the file holds the
    checkpoint's first pages (the header, with the new page count, among them), the log all of
    them. Copied while the writer is still open, as a killed process would leave them."""
    live = folder / "live.sqlite"
    conn = sqlite3.connect(live)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO t (body) VALUES (?)", [("x" * 200,) for _ in range(ROWS)])
    conn.commit()
    wal = live.with_name(live.name + "-wal").read_bytes()  # every page, before the checkpoint
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    killed = folder / "killed.sqlite"
    whole = live.read_bytes()
    killed.write_bytes(whole[: len(whole) // 3])
    killed.with_name(killed.name + "-wal").write_bytes(wal)
    conn.close()
    return killed


def test_a_file_cut_short_with_its_pages_in_the_log_is_opened_whole(tmp_path: Path) -> None:
    path = _killed_mid_checkpoint(tmp_path)
    header = path.read_bytes()[:100]
    pages, page_size = int.from_bytes(header[28:32], "big"), int.from_bytes(header[16:18], "big")
    assert path.stat().st_size < pages * page_size  # shorter than its header says
    check_sqlite_file(path, write=True)  # not refused
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (ROWS,)


def test_a_file_cut_short_with_no_log_is_refused(tmp_path: Path) -> None:
    path = _killed_mid_checkpoint(tmp_path)
    path.with_name(path.name + "-wal").unlink()
    with pytest.raises(DatabaseUnusable, match=r"is damaged: \d+ bytes where its header says"):
        check_sqlite_file(path, write=True)
    empty_log = path.with_name(path.name + "-wal")
    empty_log.write_bytes(b"")
    with pytest.raises(DatabaseUnusable, match="is damaged"):
        check_sqlite_file(path, write=False)
