"""A run cancelled (Ctrl-C) while one of its writes is in flight on SQLite still records its wall
time in its ``finally`` and ends cancelled, not with "database is locked" after the busy
timeout."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from codevolve.core.config import RunConfig
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import engine as engine_module
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, sqlite_url, upgrade
from codevolve.services.controller.loop import Controller, Progress
from codevolve.services.runtime.embedded import make_proposer
from codevolve.services.runtime.problems import cached_problem

BUSY_TIMEOUT_MS = 2_000  # a lock left behind fails the test in 2 s rather than 30


@pytest.fixture
def no_collection() -> Iterator[None]:
    """No garbage collection during the run (as in a controller that waits on a lock and so
    allocates nothing): a collection would free a cancelled statement's cursor and hide the lock
    it holds."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Blocker:
    """Takes SQLite's write lock on a connection of its own just before a statement with
    ``RETURNING`` goes to the run's connection (when the lock is free then), so that statement
    is surely in flight, waiting for the lock, when the run is cancelled."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(path, timeout=0)
        self.armed = False
        self.holding = asyncio.Event()

    def before(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not self.armed or self.holding.is_set() or "RETURNING" not in statement:
            return
        try:
            self._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # the run's transaction holds the lock: the next one
            return
        self.holding.set()

    def release(self) -> None:
        self._connection.rollback()
        self._connection.close()


@pytest.mark.usefixtures("no_collection")
async def test_a_run_cancelled_mid_write_records_its_wall_time_and_ends_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", BUSY_TIMEOUT_MS)
    path = tmp_path / "run.sqlite"
    engine = create_engine(sqlite_url(path))
    await upgrade(engine)
    sessions = session_factory(engine)
    config = RunConfig(problem="gemm-tiling", seed=2, max_proposals=100_000, max_in_flight=4)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    blocker = Blocker(path)
    event.listen(engine.sync_engine, "before_cursor_execute", blocker.before)

    def arm(_progress: Progress) -> None:  # the run has started: its `finally` is ahead
        blocker.armed = True

    problem = cached_problem(config.problem)
    queue, stop = LocalQueue(), asyncio.Event()
    controller = Controller(
        job,
        sessions=sessions,
        queue=queue,
        problem=problem,
        proposer=make_proposer(config, problem),
        on_progress=arm,
    )
    try:
        with SandboxPool(size=1) as pool:
            worker = asyncio.create_task(
                run_worker(
                    queue,
                    resolve_problem=cached_problem,
                    pool=pool,
                    concurrency=1,
                    name="w",
                    stop=stop,
                )
            )
            run = asyncio.create_task(controller.run())
            try:
                async with asyncio.timeout(60):
                    await blocker.holding.wait()
            finally:
                run.cancel()  # Ctrl-C
                await asyncio.sleep(0)  # the run takes its cancellation
                blocker.release()
            with pytest.raises(asyncio.CancelledError):
                async with asyncio.timeout(BUSY_TIMEOUT_MS / 1000 * 3):
                    await run
            stop.set()
            await worker
        async with sessions.begin() as session:
            stored = await repository.get_job(session, job.id)
    finally:
        await engine.dispose()
    assert stored is not None and stored.wall_s > 0  # written by the run's `finally`
