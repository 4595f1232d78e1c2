"""Read models of tokens, cost and success per proposer and prompt variant (report, CLI, API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import Program
from codevolve.program_db import repository
from codevolve.program_db.usage import ProposalRecord, UsageRow

COST_DIGITS = 6  # USD rounded to a millionth of a dollar


def proposal_view(record: ProposalRecord) -> dict[str, Any]:
    return {
        "index": record.index,
        "proposer": record.proposer,
        "status": record.status,
        "reason": record.reason,
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cost_usd": round(record.cost_usd, COST_DIGITS),
        "prompt_variant": record.prompt_variant,
        "prompt": record.prompt,
        "answer": record.answer,
    }


async def program_proposal(session: AsyncSession, program: Program) -> dict[str, Any] | None:
    """The proposal that made ``program`` (None for a job's initial program)."""
    record = await repository.proposal_of_program(session, program.job_id, program.proposal_index)
    return None if record is None else proposal_view(record)


def _totals(rows: Sequence[UsageRow]) -> dict[str, Any]:
    proposals = sum(row.proposals for row in rows)
    improved = sum(row.improved for row in rows)
    return {
        "proposals": proposals,
        "children": sum(row.children for row in rows),
        "improved": improved,
        "success_rate": improved / proposals if proposals else None,
        "gain": round(sum(row.gain for row in rows), COST_DIGITS),  # summed score gains
        "tokens_in": sum(row.tokens_in for row in rows),
        "tokens_out": sum(row.tokens_out for row in rows),
        "cost_usd": round(sum(row.cost_usd for row in rows), COST_DIGITS),
    }


def _grouped(rows: Sequence[UsageRow], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[UsageRow]] = {}
    for row in rows:
        groups.setdefault(getattr(row, key), []).append(row)
    return {name: _totals(members) for name, members in sorted(groups.items())}


async def job_usage(session: AsyncSession, job_id: str) -> dict[str, Any]:
    """Tokens and cost of a job, in all and per proposer (model) and per prompt variant; a
    success is a child that beat its parent."""
    rows = await repository.proposal_usage(session, job_id)
    totals = _totals(rows)
    return {
        "tokens_in": totals["tokens_in"],
        "tokens_out": totals["tokens_out"],
        "cost_usd": totals["cost_usd"],
        "by_proposer": _grouped(rows, "proposer"),
        "by_prompt_variant": _grouped(rows, "prompt_variant"),
    }
