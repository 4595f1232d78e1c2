"""The job store on SQLite when its task is cancelled mid-transaction (Ctrl-C mid-run): the file
stays writable, so the controller's shutdown writes (the wall time, then the paused state) go
through at once instead of waiting out the busy timeout and failing with "database is locked";
and the transaction's end runs to completion before the cancellation goes on."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from codevolve.program_db import engine as engine_module
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.program_db.job_store import JobStore
from tests.integration.conftest import run_config

BUSY_TIMEOUT_MS = 2_000  # a lock left behind fails a test in 2 s rather than 30


@dataclass(frozen=True, slots=True)
class Opened:
    engine: AsyncEngine
    store: JobStore


@pytest.fixture
async def opened(
    migrated_sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Opened]:
    """A job's store in a migrated SQLite file, its writers waiting 2 s for the lock."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", BUSY_TIMEOUT_MS)
    engine = create_engine(migrated_sqlite_url)
    sessions = session_factory(engine)
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    store = JobStore(sessions, job.id)
    try:
        yield Opened(engine, store)
    finally:
        await store.close()
        await engine.dispose()


@pytest.fixture
def no_collection() -> Iterator[None]:
    """No garbage collection during the test. A cancelled statement's cursor lives on in the
    cancellation's traceback (a reference cycle) until a collection runs, and a process that
    waits on a lock allocates nothing, so none runs: a collection here would hide the lock."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _wall(store: JobStore) -> float:
    async with store.reading() as unit:
        job = await unit.job()
    assert job is not None
    return job.wall_s


async def _add_wall(store: JobStore, seconds: float) -> None:
    async with store.transaction() as unit:
        await unit.add_wall(seconds)


@pytest.mark.usefixtures("no_collection")
async def test_a_write_cancelled_mid_statement_is_rolled_back_and_frees_the_file(
    opened: Opened, migrated_sqlite_url: str
) -> None:
    sent = asyncio.Event()

    @event.listens_for(opened.engine.sync_engine, "before_cursor_execute")
    def _note_wall_update(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("UPDATE jobs SET"):
            sent.set()  # the statement is in the connection's thread when the task next yields

    # Another connection holds the write lock, so the store's UPDATE ... RETURNING is surely in
    # flight (waiting in SQLite) when the cancellation lands; it runs once the lock is free.
    blocker = sqlite3.connect(str(make_url(migrated_sqlite_url).database), timeout=0)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        writing = asyncio.create_task(_add_wall(opened.store, 5.0))
        await sent.wait()
        writing.cancel()
        await asyncio.sleep(0)  # the task takes its cancellation
        blocker.rollback()
        with pytest.raises(asyncio.CancelledError):
            await writing
    finally:
        blocker.close()

    async with asyncio.timeout(BUSY_TIMEOUT_MS / 1000 * 3):
        await _add_wall(opened.store, 1.0)  # what Controller.run's `finally` does
        assert await _wall(opened.store) == pytest.approx(1.0)  # the cancelled 5 s: none


async def test_a_transaction_cancelled_while_it_ends_still_ends_and_is_cancelled(
    opened: Opened, caplog: pytest.LogCaptureFixture
) -> None:
    watching = False
    returning = asyncio.Event()

    @event.listens_for(opened.engine.sync_engine.pool, "reset")
    def _note_return(_dbapi: Any, _record: Any, _state: Any) -> None:
        if watching:
            returning.set()  # the connection's reset is in flight when the task next yields

    watching = True
    writing = asyncio.create_task(_add_wall(opened.store, 5.0))
    await returning.wait()
    watching = False
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing

    # An end cut short makes the pool log the interrupted reset, with a traceback, at ERROR (on
    # the command line's stderr, after Ctrl-C) and close the connection.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert opened.engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert await _wall(opened.store) == pytest.approx(5.0)  # committed before the cancel
