"""What proposals cost and what they achieved: per job, per proposer (model) and prompt variant,
and the proposal that made one program (its prompt, answer, tokens and cost).

Every function takes the caller's session and never commits; it returns plain frozen values.
The statements are built once: building the per-proposer one (two aliases of the programs
table) cost about 4 ms of CPU, more than running it. A job's totals, which the API's job detail
reads on every request, come with its other figures (job_figures.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import Executable, bindparam, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from codevolve.core.program import JobId, ProgramStatus
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db.models import ProgramRow, ProposalRow


@dataclass(frozen=True, slots=True)
class ProposalRecord:
    """One logged proposal, as ``codevolve show`` and the API present it."""

    job_id: JobId
    index: int
    proposer: str
    status: str
    reason: str
    tokens_in: int
    tokens_out: int
    cost_usd: float  # US dollars
    prompt_variant: str
    prompt: str  # empty unless the job logs prompts
    answer: str


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Proposals of one (proposer, prompt variant) pair of a job and what came of them."""

    proposer: str
    prompt_variant: str
    proposals: int
    children: int  # applied and inserted
    improved: int  # children that evaluated to a higher score than their parent
    gain: float  # summed score gains of those children over their parents
    tokens_in: int
    tokens_out: int
    cost_usd: float  # US dollars


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Tokens and cost of all of a job's proposals."""

    tokens_in: int
    tokens_out: int
    cost_usd: float  # US dollars


async def job_cost(session: AsyncSession, job_id: JobId) -> float:
    """USD spent on the job's proposals so far. A reference form: the run's budget counts the
    same sum as proposals are logged (the proposal ledger)."""
    total = await session.scalar(
        select(func.coalesce(func.sum(ProposalRow.cost_usd), 0.0)).where(
            ProposalRow.job_id == job_id
        )
    )
    return float(total or 0.0)


async def proposal_usage(session: AsyncSession, job_id: JobId) -> list[UsageRow]:
    """Per (proposer, prompt variant): counts, children that beat their parent, tokens, cost."""
    rows = await session.execute(_usage_statement(), {"u_job": job_id})
    usage = []
    for proposer, variant, count, children, improved, gained, tokens_in, tokens_out, cost in rows:
        usage.append(
            UsageRow(
                proposer=str(proposer),
                prompt_variant=str(variant),
                proposals=int(count),
                children=int(children or 0),
                improved=int(improved or 0),
                gain=float(gained or 0.0),
                tokens_in=int(tokens_in or 0),
                tokens_out=int(tokens_out or 0),
                cost_usd=float(cost or 0.0),
            )
        )
    return usage


@functools.cache
def _usage_statement() -> Executable:
    child = aliased(ProgramRow)
    parent = aliased(ProgramRow)
    beat_parent = case(
        (
            (child.status == ProgramStatus.EVALUATED.value) & (child.score > parent.score),
            1,
        ),
        else_=0,
    )
    gain = case(
        (
            (child.status == ProgramStatus.EVALUATED.value) & (child.score > parent.score),
            child.score - parent.score,
        ),
        else_=0.0,
    )
    is_child = case((ProposalRow.status == ProposalStatus.CHILD.value, 1), else_=0)
    return (
        select(
            ProposalRow.proposer,
            ProposalRow.prompt_variant,
            func.count(),
            func.sum(is_child),
            func.sum(beat_parent),
            func.sum(gain),
            func.sum(ProposalRow.tokens_in),
            func.sum(ProposalRow.tokens_out),
            func.sum(ProposalRow.cost_usd),
        )
        .select_from(ProposalRow)
        .outerjoin(child, child.id == ProposalRow.program_id)
        .outerjoin(parent, parent.id == ProposalRow.parent_id)
        .where(ProposalRow.job_id == bindparam("u_job"))
        .group_by(ProposalRow.proposer, ProposalRow.prompt_variant)
        .order_by(ProposalRow.proposer, ProposalRow.prompt_variant)
    )


async def proposal_of_program(
    session: AsyncSession, job_id: JobId, proposal_index: int
) -> ProposalRecord | None:
    """The proposal that made the program with ``proposal_index`` (its primary key: no scan);
    None for the initial program, which answers no proposal."""
    row = await session.get(ProposalRow, (job_id, proposal_index))
    if row is None:
        return None
    return ProposalRecord(
        job_id=row.job_id,
        index=row.proposal_index,
        proposer=row.proposer,
        status=row.status,
        reason=row.reason,
        tokens_in=row.tokens_in,
        tokens_out=row.tokens_out,
        cost_usd=row.cost_usd,
        prompt_variant=row.prompt_variant,
        prompt=row.prompt,
        answer=row.answer,
    )
