"""Programs written straight to the store as a finished run leaves them: no worker, no judge."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import Evaluation, Program, ProgramStatus, StageResult
from codevolve.program_db import repository


async def evaluated_program(
    session: AsyncSession,
    job_id: str,
    source: str,
    stage: StageResult,
    *,
    generation: int,
    proposal_index: int,
) -> str:
    """A program of ``job_id`` inserted pending, then evaluated with the one ``stage``; its id."""
    program = Program(
        id=uuid.uuid4().hex,
        job_id=job_id,
        source=source,
        content_hash=uuid.uuid4().hex,
        parent_id=None,
        island=0,
        generation=generation,
        proposal_index=proposal_index,
        status=ProgramStatus.PENDING,
    )
    await repository.insert_program(session, program)
    evaluation = Evaluation(
        program_id=program.id, job_id=job_id, status=ProgramStatus.EVALUATED, stages=(stage,)
    )
    await repository.apply_evaluation(session, evaluation, cell=(0, 0))
    return program.id
