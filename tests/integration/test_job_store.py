"""The job store: transactions, and the batched proposal write on both backends (on Postgres
one statement on a held autocommit connection, dropped when a write fails)."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.job import JobState
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.program_db.job_store import JobStore
from codevolve.program_db.jobs import ProposalEntry
from tests.integration.conftest import new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


def _entry(index: int, program_id: str | None) -> ProposalEntry:
    status = ProposalStatus.CHILD if program_id else ProposalStatus.APPLY_FAILED
    return ProposalEntry(index, None, 0, "test", status, program_id=program_id)


async def test_a_transaction_commits_on_success_and_rolls_back_on_error(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    store = JobStore(sessions, job.id)
    async with store.transaction() as unit:
        await unit.set_state(JobState.RUNNING)
    with pytest.raises(RuntimeError):
        async with store.transaction() as unit:
            await unit.set_state(JobState.FAILED, error="boom")
            raise RuntimeError("after the write")
    async with store.reading() as unit:
        stored = await unit.job()
    assert stored is not None and stored.state is JobState.RUNNING


async def test_proposal_batches_return_what_they_inserted(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    store = JobStore(sessions, job.id)
    first = new_program(job.id, name="a", proposal_index=0)
    twin = new_program(job.id, name="a", proposal_index=1)  # the same code
    try:
        inserted = await store.write_proposals([first], [_entry(0, first.id)])
        again = await store.write_proposals([twin], [_entry(1, twin.id), _entry(2, None)])
    finally:
        await store.close()
    assert (inserted, again) == ({first.id}, set())
    async with store.reading() as unit:
        assert await unit.proposal_stats() == (3, 3)


async def test_a_failed_batch_drops_the_held_connection_and_the_next_connects_afresh(
    migrated_postgres_url: str,
) -> None:
    engine = create_engine(migrated_postgres_url)
    sessions = session_factory(engine)
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    store = JobStore(sessions, job.id)
    try:
        await store.write_proposals([], [_entry(0, None)])
        held = store._held
        assert held is not None  # one connection, kept across batches
        await store.write_proposals([], [_entry(1, None)])
        assert store._held is held
        unstorable = dataclasses.replace(new_program(job.id), source="a NUL \x00 byte")
        with pytest.raises(DBAPIError):  # Postgres text holds no NUL
            await store.write_proposals([unstorable], [_entry(2, unstorable.id)])
        assert store._held is None
        assert await store.write_proposals([], [_entry(3, None)]) == set()
        assert store._held is not None and store._held is not held
    finally:
        await store.close()
        assert store._held is None
        await engine.dispose()
