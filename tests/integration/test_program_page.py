"""Pages of a job's programs, whole (``list_programs``) and as headers with the job's owner in
one statement (``owner_and_page``): the programs a plain sort of the whole job gives, in its
order, on SQLite and Postgres."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.program import Program, ProgramStatus
from codevolve.program_db import repository
from codevolve.program_db.models import ProgramRow
from codevolve.program_db.program_page import Page, ProgramOrder
from tests.integration.conftest import evaluation_of, new_program, run_config

# Scores with ties (the proposal index breaks them), unscored pending and failed programs.
SCORES: list[float | None] = [0.5, 0.9, None, 0.5, 0.7, None, 0.9, 0.1, None, 0.3]


async def _job(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(), owner="alice")
        for index, score in enumerate(SCORES):
            program = new_program(job.id, island=index % 2, proposal_index=index)
            await repository.insert_program(session, program)
            if score is not None:
                await repository.apply_evaluation(session, evaluation_of(program, score), cell=None)
            elif index == 5:
                failed = evaluation_of(program, None, status=ProgramStatus.FAILED)
                await repository.apply_evaluation(session, failed, cell=None)
    return job.id


def _expected(programs: list[Program], page: Page) -> list[Program]:
    """The page by the documented order, sorted here from every program of the job."""
    kept = [
        p
        for p in programs
        if (page.status is None or p.status is page.status)
        and (page.island is None or p.island == page.island)
    ]
    if page.order == "score":
        scored = sorted(
            (p for p in kept if p.score is not None), key=lambda p: (-p.score, p.proposal_index)
        )
        unscored = sorted((p for p in kept if p.score is None), key=lambda p: p.proposal_index)
        ordered = scored + unscored
    elif page.order == "index":
        ordered = sorted(kept, key=lambda p: p.proposal_index)
    else:
        ordered = sorted(kept, key=lambda p: (p.created_at, p.proposal_index), reverse=True)
    return ordered[page.offset : page.offset + page.limit]


def _count_statements(engine: AsyncEngine) -> list[str]:
    sent: list[str] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _sent(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    return sent


@pytest.mark.parametrize("order", ["score", "index", "newest"])
async def test_every_page_is_the_sorted_job_sliced_in_one_statement(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], order: ProgramOrder
) -> None:
    job_id = await _job(sessions)
    async with sessions() as session:
        everything = [await repository.get_program(session, p) for p in await _ids(session, job_id)]
    programs = [p for p in everything if p is not None]
    sent = _count_statements(engine)
    filters: list[dict[str, Any]] = [{}, {"island": 1}, {"status": ProgramStatus.PENDING}]
    for shape in filters:
        for limit, offset in [(50, 0), (3, 0), (3, 3), (3, 6), (4, 8), (5, 20)]:
            page = Page(job_id, limit=limit, offset=offset, order=order, **shape)
            expected = [p.id for p in _expected(programs, page)]
            async with sessions() as session:
                sent.clear()
                whole = await repository.list_programs(
                    session, job_id, limit=limit, offset=offset, order=order, **shape
                )
                assert len(sent) == 1
                sent.clear()
                found = await repository.owner_and_page(session, page)
                assert len(sent) == 1
            assert [p.id for p in whole] == expected, (shape, limit, offset)
            assert found is not None
            owner, headers = found
            assert owner == "alice"
            assert [h.id for h in headers] == expected, (shape, limit, offset)
            assert [(h.score, h.status, h.created_at) for h in headers] == [
                (p.score, p.status, p.created_at) for p in whole
            ]


async def _ids(session: AsyncSession, job_id: str) -> list[str]:
    rows = await session.execute(select(ProgramRow.id).where(ProgramRow.job_id == job_id))
    return [str(row_id) for (row_id,) in rows]


async def test_a_job_without_programs_has_an_owner_and_an_empty_page(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(), owner="bob")
    async with sessions() as session:
        assert await repository.owner_and_page(session, Page(job.id)) == ("bob", [])
        assert await repository.owner_and_page(session, Page("0" * 32)) is None
