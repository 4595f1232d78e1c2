"""A job in an SQLite file of the test's own, and the store of it: what the controller's
collaborators work with, without a sandbox or a worker."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from codevolve.core.config import RunConfig
from codevolve.core.job import Job
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, sqlite_url, upgrade
from codevolve.program_db.job_store import JobStore, Sessions
from tests.integration.conftest import run_sync


@dataclass(frozen=True, slots=True)
class Stored:
    job: Job
    sessions: Sessions
    store: JobStore


@pytest.fixture(scope="session")
def migrated_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("controller-template") / "codevolve.sqlite"
    run_sync(upgrade(sqlite_url(path)))
    return path


@pytest.fixture
async def stored(migrated_file: Path, tmp_path: Path) -> AsyncIterator[Stored]:
    """A job of the example problem on two islands, in a migrated SQLite file."""
    path = tmp_path / "job.sqlite"
    shutil.copyfile(migrated_file, path)
    engine = create_engine(sqlite_url(path))
    sessions = session_factory(engine)
    async with sessions.begin() as session:
        job = await repository.create_job(
            session, RunConfig(problem="example", islands=2, migration_interval=5, migrants=1)
        )
    store = JobStore(sessions, job.id)
    try:
        yield Stored(job=job, sessions=sessions, store=store)
    finally:
        await store.close()
        await engine.dispose()
