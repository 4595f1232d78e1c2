"""The controller's batched writes: proposals on both backends, and on Postgres the one-statement
forms (proposals, results) against the statements every backend runs."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.program import CaseResult, CellKey, Evaluation, Program, ProgramStatus
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db import repository
from codevolve.program_db.errors import ProgramDbError
from codevolve.program_db.models import ProgramRow, ProposalRow
from codevolve.program_db.programs import apply_with_statements
from codevolve.program_db.proposal_batches import DUPLICATE_REASON, write_with_statements
from tests.integration.conftest import evaluation_of, new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


def _entry(index: int, child: Program | None = None, **fields: Any) -> repository.ProposalEntry:
    return repository.ProposalEntry(
        index=index,
        parent_id="parent" if child is None else child.parent_id,
        island=index % 2,
        proposer="test",
        status=ProposalStatus.CHILD if child is not None else ProposalStatus.APPLY_FAILED,
        reason="" if child is not None else "no match: SEARCH text not found",
        program_id=None if child is None else child.id,
        tokens_in=10 * index,
        tokens_out=index,
        cost_usd=0.25 * index,
        prompt=f"prompt {index}",
        answer=f"answer {index}",
        prompt_variant="plain",
        **fields,
    )


async def _batch(
    session: AsyncSession,
) -> tuple[str, list[Program], list[repository.ProposalEntry]]:
    """A job holding one program (first in the list), and a batch of: its code again, two new
    children, a twin of one of them, and a proposal with no child; index 0 is logged already."""
    job = await repository.create_job(session, run_config())
    held = new_program(job.id, name="held", proposal_index=0)
    await repository.insert_program(session, held)
    await repository.record_proposals(session, job.id, [_entry(0, held)])
    again = dataclasses.replace(held, id="a" * 32, proposal_index=1)
    fresh = [
        new_program(job.id, name=name, proposal_index=i, parent_id=held.id)
        for i, name in ((2, "b"), (3, "c"))
    ]
    fresh = [
        dataclasses.replace(child, attempts=1, epoch=2, diff=f"diff {i}")
        for i, child in enumerate(fresh)
    ]
    twin = new_program(job.id, name="b", proposal_index=4)
    children = [again, *fresh, twin]
    entries = [
        _entry(0, held),
        _entry(1, again),
        _entry(2, fresh[0]),
        _entry(3, fresh[1]),
        _entry(4, twin),
        _entry(5),
    ]
    return job.id, [held, *children], entries


async def test_a_batch_inserts_new_code_once_and_logs_the_rest_as_duplicates(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job_id, (_held, *children), entries = await _batch(session)
    async with sessions.begin() as session:
        inserted = await repository.write_proposals(session, job_id, children, entries)
    async with sessions() as session:
        job = await repository.get_job(session, job_id)
        counts = await repository.proposal_counts(session, job_id)
        logged = {
            row.proposal_index: (row.status, row.reason, row.program_id)
            for row in (
                await session.scalars(select(ProposalRow).where(ProposalRow.job_id == job_id))
            )
        }
        stored = await repository.get_program(session, children[1].id)
    assert inserted == {children[1].id, children[2].id}
    assert job is not None and job.proposals == 6  # index 0 was counted before, once
    assert counts == {
        ProposalStatus.CHILD: 3,
        ProposalStatus.DUPLICATE: 2,
        ProposalStatus.APPLY_FAILED: 1,
    }
    assert logged[1] == ("duplicate", DUPLICATE_REASON, None)
    assert logged[4] == ("duplicate", DUPLICATE_REASON, None)
    assert logged[2] == ("child", "", children[1].id)
    assert logged[5] == ("apply_failed", "no match: SEARCH text not found", None)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.epoch, stored.diff, stored.generation) == (
        ProgramStatus.PENDING, 1, 2, "diff 0", 1,
    )  # fmt: skip
    assert stored.created_at is not None and stored.evaluated_at is None


async def test_an_empty_batch_changes_nothing(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    async with sessions.begin() as session:
        assert await repository.write_proposals(session, job.id, [], []) == set()
        stored = await repository.get_job(session, job.id)
    assert stored is not None and stored.proposals == 0


async def test_a_child_with_results_is_refused(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    child = dataclasses.replace(new_program(job.id), score=1.0)
    async with sessions.begin() as session:
        with pytest.raises(ProgramDbError, match="not a new pending program"):
            await repository.write_proposals(session, job.id, [child], [_entry(0, child)])


def _rows(
    rows: Any, *, ids: dict[str, str], skipped: frozenset[str] = frozenset()
) -> list[tuple[tuple[str, Any], ...]]:
    """Rows as (column, value) pairs, without the job and its creation time (they differ between
    two jobs by construction) or ``skipped``; strings in ``ids`` stand for what they map to."""
    left_out = {"job_id", "created_at"} | skipped
    return sorted(
        (
            tuple(
                (key, ids.get(value, value) if isinstance(value, str) else value)
                for key, value in sorted(vars(row).items())
                if not key.startswith("_") and key not in left_out
            )
            for row in rows
        ),
        key=repr,
    )


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_the_postgres_statement_writes_what_the_three_statements_write(
    engine: AsyncEngine, sessions: Sessions
) -> None:
    """The same batch in two jobs: one through the single statement, on a connection in
    autocommit as the controller runs it, one through the statements SQLite runs."""
    async with sessions.begin() as session:
        first_job, first_children, first_entries = await _batch(session)
        second_job, second_children, second_entries = await _batch(session)
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit.connect() as connection:
        first = await repository.write_proposals(
            connection, first_job, first_children[1:], first_entries
        )
    async with sessions.begin() as session:
        second = await write_with_statements(
            session, second_job, second_children[1:], second_entries
        )
    # The second batch's ids stand for the first's where they are the same program.
    ids = {b.id: a.id for a, b in zip(first_children, second_children, strict=True)}
    async with sessions() as session:
        for table in (ProgramRow, ProposalRow):
            rows = {
                job: _rows(await session.scalars(select(table).where(table.job_id == job)), ids=ids)
                for job in (first_job, second_job)
            }
            assert rows[first_job] == rows[second_job]
        jobs = [await repository.get_job(session, job) for job in (first_job, second_job)]
    assert first == {ids[program_id] for program_id in second}
    assert [job.proposals for job in jobs if job] == [6, 6]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_the_postgres_result_update_writes_what_the_two_statements_write(
    sessions: Sessions,
) -> None:
    """The same results in two jobs (scored, failed, non-finite numbers, cases, a program no
    longer pending, a duplicate delivery): one through the single UPDATE, one through the
    locking read and executemany every backend runs."""
    jobs: list[tuple[str, list[Program]]] = []
    async with sessions.begin() as session:
        for _ in range(2):
            job = await repository.create_job(session, run_config())
            programs = [
                new_program(job.id, name=f"{job.id}-{i}", proposal_index=i) for i in range(5)
            ]
            for program in programs:
                await repository.insert_program(session, program)
            await repository.apply_evaluation(session, evaluation_of(programs[4], 9.0), cell=(9,))
            jobs.append((job.id, programs))

    def results(programs: list[Program]) -> list[tuple[Evaluation, CellKey | None]]:
        cases = (CaseResult("a", 1.5, "fast"), CaseResult("b", math.inf))
        return [
            (evaluation_of(programs[0], 2.5, cases=cases), (1, 2)),
            (evaluation_of(programs[1], None, status=ProgramStatus.FAILED), None),
            (evaluation_of(programs[2], math.nan, metrics={"x": -math.inf}), (0,)),
            (evaluation_of(programs[3], 1.0, status=ProgramStatus.REJECTED), None),
            (evaluation_of(programs[0], 7.0), (3, 3)),  # a second delivery in the batch
            (evaluation_of(programs[4], 1.0), (4, 4)),  # no longer pending
        ]

    (first_job, first_programs), (second_job, second_programs) = jobs
    async with sessions.begin() as session:
        first = await repository.apply_evaluations(session, results(first_programs))
    async with sessions.begin() as session:
        batch = {ev.program_id: (ev, cell) for ev, cell in reversed(results(second_programs))}
        second = await apply_with_statements(session, batch)
    ids = {b.id: a.id for a, b in zip(first_programs, second_programs, strict=True)}
    ids |= {b.source: a.source for a, b in zip(first_programs, second_programs, strict=True)}
    ids |= {
        b.content_hash: a.content_hash for a, b in zip(first_programs, second_programs, strict=True)
    }
    async with sessions() as session:
        rows = {
            job: _rows(
                await session.scalars(select(ProgramRow).where(ProgramRow.job_id == job)),
                ids=ids,
                skipped=frozenset({"evaluated_at"}),
            )
            for job in (first_job, second_job)
        }
    assert first == {ids[program_id] for program_id in second} and len(first) == 4
    assert repr(rows[first_job]) == repr(rows[second_job])  # repr: NaN equals itself there
