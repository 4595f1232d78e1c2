"""Read models shared by the CLI (and the API): JSON-ready summaries of jobs and programs."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.job import Job
from codevolve.core.measurement import Remeasure, Spread
from codevolve.core.problem import legality_summary
from codevolve.core.program import Program
from codevolve.program_db import repository
from codevolve.program_db.repository import JobFigures


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
        "remeasure": None if program.remeasure is None else remeasure_summary(program.remeasure),
        "legality": legality_summary(program),
    }


def spread_summary(spread: Spread) -> dict[str, Any]:
    return {
        "geomean": spread.geomean,
        "gsd": spread.gsd,
        "low": spread.low,
        "median": spread.median,
        "high": spread.high,
        "count": spread.count,
        "text": str(spread),
    }


def remeasure_summary(remeasure: Remeasure) -> dict[str, Any]:
    """A program's re-measure: the verdict, the figure it was picked on and the confirmed one,
    the note (winner's curse, or why it was refuted) and the spread."""
    return {
        "verdict": remeasure.verdict.value,
        "picked": remeasure.picked,
        "confirmed": remeasure.confirmed,
        "samples": list(remeasure.samples),
        "note": remeasure.note,
        "spread": None if remeasure.spread is None else spread_summary(remeasure.spread),
        "spread_over": None if remeasure.spread_over is None else remeasure.spread_over.value,
    }


async def job_best(session: AsyncSession, job: Job) -> dict[str, Any]:
    """The job's best as confirmed on independent samples (``best_*`` keys), and how many
    would-be bests were re-measured (:func:`best_view` of the job's figures)."""
    return best_view(job, await repository.job_figures(session, job.id, job.best_program_id))


def best_view(job: Job, figures: JobFigures) -> dict[str, Any]:
    """``best_score`` is the confirmed figure, ``best_picked_score`` the one the program was
    picked on."""
    remeasure = figures.best_remeasure
    return {
        "best_program_id": job.best_program_id,
        "best_score": job.best_score,
        "best_picked_score": figures.best_picked_score,
        # None for a best never re-measured (a job from before re-measures)
        "best_verdict": None if remeasure is None else remeasure.verdict.value,
        "best_note": None if remeasure is None else remeasure.note,
        "best_spread": None
        if remeasure is None or remeasure.spread is None
        else spread_summary(remeasure.spread),
        "best_spread_over": None
        if remeasure is None or remeasure.spread_over is None
        else remeasure.spread_over.value,
        "remeasured": {verdict.value: n for verdict, n in figures.remeasured.items()},
        "remeasure_samples": job.config.remeasure_samples,
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
        "label": job.config.label,  # the folder or file the user named; None for a built-in
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
        **await job_best(session, job),  # best_program_id, best_score (confirmed), best_spread...
        "config": job.config.model_dump(),
    }
