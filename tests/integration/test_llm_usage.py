"""Tokens, cost and success per model and prompt variant, and the proposal behind a program, on
SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.prompt import ProposalStatus
from codevolve.program_db import repository
from codevolve.program_db.usage import UsageRow, UsageTotals
from tests.integration.conftest import evaluation_of, new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


async def test_usage_sums_cost_and_counts_children_that_beat_their_parent(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        parent = new_program(job.id, proposal_index=-1)
        better = new_program(job.id, parent_id=parent.id, proposal_index=0)
        worse = new_program(job.id, parent_id=parent.id, proposal_index=1)
        for program in (parent, better, worse):
            await repository.insert_program(session, program)
        for program, score in ((parent, 1.0), (better, 1.5), (worse, 0.5)):
            await repository.apply_evaluation(session, evaluation_of(program, score), cell=None)
        logged = [  # (index, proposer, variant, status, child, tokens in, tokens out, cost)
            (0, "llm:fast", "focused:task0", ProposalStatus.CHILD, better.id, 1000, 100, 0.25),
            (1, "llm:fast", "diff:task1", ProposalStatus.CHILD, worse.id, 2000, 200, 0.5),
            (2, "llm:strong", "diff:task1", ProposalStatus.APPLY_FAILED, None, 3000, 0, 1.0),
            (3, "llm:strong", "diff:task1", ProposalStatus.PROPOSER_FAILED, None, 0, 0, 0.0),
        ]
        for index, proposer, variant, status, child, tokens_in, tokens_out, cost in logged:
            await repository.record_proposal(
                session, job_id=job.id, index=index, parent_id=parent.id, island=0,
                proposer=proposer, status=status, program_id=child, tokens_in=tokens_in,
                tokens_out=tokens_out, cost_usd=cost, prompt=f"prompt {index}",
                answer=f"answer {index}", prompt_variant=variant,
            )  # fmt: skip
    async with sessions.begin() as session:
        total = await repository.job_cost(session, job.id)
        usage = await repository.proposal_usage(session, job.id)
        record = await repository.proposal_of_program(session, job.id, 0)
        seed = await repository.proposal_of_program(session, job.id, -1)
    assert total == pytest.approx(1.75)
    assert usage == [
        UsageRow("llm:fast", "diff:task1", 1, 1, 0, 0.0, 2000, 200, 0.5),
        UsageRow("llm:fast", "focused:task0", 1, 1, 1, 0.5, 1000, 100, 0.25),
        UsageRow("llm:strong", "diff:task1", 2, 0, 0, 0.0, 3000, 0, 1.0),
    ]
    assert record is not None and seed is None
    assert (record.proposer, record.prompt, record.answer) == ("llm:fast", "prompt 0", "answer 0")
    assert (record.tokens_in, record.cost_usd, record.prompt_variant) == (
        1000,
        0.25,
        "focused:task0",
    )


async def test_a_job_without_proposals_has_cost_nothing(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        assert await repository.job_cost(session, job.id) == 0.0
        assert await repository.proposal_usage(session, job.id) == []
        figures = await repository.job_figures(session, job.id, None)
        assert figures.usage == UsageTotals(0, 0, 0.0)


async def test_each_jobs_usage_counts_its_own_proposals_only(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        jobs = [await repository.create_job(session, run_config()) for _ in range(2)]
        for number, job in enumerate(jobs, start=1):
            parent = new_program(job.id, proposal_index=-1)
            await repository.insert_program(session, parent)
            for index in range(number):
                await repository.record_proposal(
                    session, job_id=job.id, index=index, parent_id=parent.id, island=0,
                    proposer="llm:fast", status=ProposalStatus.APPLY_FAILED, program_id=None,
                    tokens_in=100 * number, tokens_out=10 * number, cost_usd=0.5 * number,
                    prompt="", answer="",
                )  # fmt: skip
    async with sessions() as session:
        totals = [(await repository.job_figures(session, job.id, None)).usage for job in jobs]
        usage = [await repository.proposal_usage(session, job.id) for job in jobs]
    assert totals == [UsageTotals(100, 10, 0.5), UsageTotals(400, 40, 2.0)]
    assert [[(row.proposals, row.tokens_in, row.cost_usd) for row in rows] for rows in usage] == [
        [(1, 100, 0.5)],
        [(2, 400, 2.0)],
    ]
