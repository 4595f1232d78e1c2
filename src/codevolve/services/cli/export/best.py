"""The job an export reads and its confirmed best program, or the error that says why not."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.job import Job
from codevolve.core.program import Program
from codevolve.core.pysource import parse_python
from codevolve.program_db import repository
from codevolve.program_db.errors import UnknownJobError
from codevolve.services.cli.export.errors import ExportRefused


@dataclass(frozen=True, slots=True)
class Best:
    """A job's best program with the figure its job reports for it."""

    job: Job
    program: Program
    score: float  # the job's best score: confirmed on independent samples

    @property
    def device(self) -> str:
        """The device the program was measured on, as its evaluation recorded it."""
        return self.program.artifacts.get("device_name") or "not recorded"

    @property
    def where(self) -> str:
        """The program as a refusal names it."""
        return f"job {self.job.id}'s best program {self.program.id}"

    def tree(self) -> ast.Module:
        """The program's source parsed; ExportRefused when it does not parse."""
        try:
            return parse_python(self.program.source)
        except (SyntaxError, ValueError) as exc:
            raise ExportRefused(f"{self.where} does not parse: {exc}") from exc


async def get_job(session: AsyncSession, job_id: str) -> Job:
    job = await repository.get_job(session, job_id)
    if job is None:
        raise UnknownJobError(f"no job {job_id!r} in this database; check the id and --db")
    return job


async def get_best(session: AsyncSession, job: Job) -> Best:
    """The job's confirmed best (``job.best_program_id``); ExportRefused when it has none."""
    if job.best_program_id is None or job.best_score is None:
        raise ExportRefused(
            f"job {job.id} has no best program yet (none was confirmed; state {job.state.value}); "
            f"`codevolve status {job.id}` shows its progress"
        )
    program = await repository.get_program(session, job.best_program_id)
    if program is None:
        raise ExportRefused(f"job {job.id}'s best program {job.best_program_id} is not stored")
    return Best(job=job, program=program, score=job.best_score)
