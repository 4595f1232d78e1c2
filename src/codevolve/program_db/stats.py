"""Aggregate reads for dashboards and metrics: per-island score history, counts across jobs.

Every function takes the caller's session and never commits; it returns plain data.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import IslandId, JobId, ProgramStatus
from codevolve.program_db.models import JobRow, ProgramRow

HistoryPoint = tuple[int, IslandId, float]  # (proposal index, island, score)


async def island_score_history(
    session: AsyncSession, job_id: JobId, *, limit: int = 20000
) -> list[HistoryPoint]:
    """Scores of evaluated programs by proposal index, with their island; the first ``limit``
    points (a chart has no use for more than a few thousand)."""
    rows = await session.execute(
        select(ProgramRow.proposal_index, ProgramRow.island, ProgramRow.score)
        .where(
            ProgramRow.job_id == job_id,
            ProgramRow.status == ProgramStatus.EVALUATED.value,
            ProgramRow.score.is_not(None),
        )
        .order_by(ProgramRow.proposal_index, ProgramRow.id)
        .limit(limit)
    )
    return [
        (int(index), int(island), float(score))
        for index, island, score in rows
        if score is not None
    ]


async def jobs_by_state(session: AsyncSession) -> dict[str, int]:
    rows = await session.execute(select(JobRow.state, func.count()).group_by(JobRow.state))
    return {str(state): int(count) for state, count in rows}


async def programs_by_status(session: AsyncSession) -> dict[str, int]:
    rows = await session.execute(
        select(ProgramRow.status, func.count()).group_by(ProgramRow.status)
    )
    return {str(status): int(count) for status, count in rows}


async def lineage(
    session: AsyncSession, program_id: str, *, limit: int = 200
) -> list[tuple[str, int, str, float | None]]:
    """``(id, generation, status, score)`` from the program up to its root (or ``limit`` steps):
    one indexed lookup per ancestor, so the cost is the depth, never the population."""
    chain: list[tuple[str, int, str, float | None]] = []
    current: str | None = program_id
    while current is not None and len(chain) < limit:
        row = (
            await session.execute(
                select(
                    ProgramRow.id,
                    ProgramRow.generation,
                    ProgramRow.status,
                    ProgramRow.score,
                    ProgramRow.parent_id,
                ).where(ProgramRow.id == current)
            )
        ).first()
        if row is None:
            break
        identity, generation, status, score, current = row
        chain.append((str(identity), int(generation), str(status), score))
    return chain
