"""Read models shared by the CLI (and the API): JSON-ready summaries of jobs and programs."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import Program
from codevolve.program_db import repository


def program_summary(program: Program) -> dict[str, Any]:
    return {
        "id": program.id,
        "job_id": program.job_id,
        "status": program.status.value,
        "score": program.score,
        "island": program.island,
        "generation": program.generation,
        "proposal_index": program.proposal_index,
        "parent_id": program.parent_id,
        "proposer": program.proposer,
        "attempts": program.attempts,
        "stage_scores": dict(program.stage_scores),
        "metrics": dict(program.metrics),
        "heldout": dict(program.heldout),
        "features": dict(program.features),
        "cell": list(program.cell) if program.cell is not None else None,
        "error": program.error,
        "feedback": program.feedback,
        "created_at": program.created_at.isoformat() if program.created_at else None,
        "evaluated_at": program.evaluated_at.isoformat() if program.evaluated_at else None,
    }


async def job_status(session: AsyncSession, job_id: str) -> dict[str, Any]:
    job = await repository.get_job(session, job_id)
    if job is None:
        raise LookupError(f"no job {job_id!r}")
    counts = await repository.program_counts(session, job_id)
    proposals = await repository.proposal_counts(session, job_id)
    return {
        "job_id": job.id,
        "problem": job.config.problem,
        "state": job.state.value,
        "error": job.error,
        "proposals": sum(proposals.values()),
        "max_proposals": job.config.max_proposals,
        "proposals_by_status": {status.value: n for status, n in proposals.items()},
        "programs": {
            "pending": counts.pending,
            "evaluated": counts.evaluated,
            "failed": counts.failed,
            "rejected": counts.rejected,
        },
        "wall_s": job.wall_s,
        "best_program_id": job.best_program_id,
        "best_score": job.best_score,
        "config": job.config.model_dump(),
    }
