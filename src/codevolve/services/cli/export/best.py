"""A job's records as an exporter reads them (core/export.py: ExportRecords), from the database."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.export import BestProgram, ExportRefused
from codevolve.core.job import Job
from codevolve.core.program import Program
from codevolve.program_db import repository
from codevolve.program_db.errors import UnknownJobError
from codevolve.services.read_models.results import StoredResults

PAGE = 200  # programs read per query


async def get_job(session: AsyncSession, job_id: str) -> Job:
    job = await repository.get_job(session, job_id)
    if job is None:
        raise UnknownJobError(f"no job {job_id!r} in this database; check the id and --db")
    return job


class JobRecords(StoredResults):
    """One job's records, read in ``session`` when an exporter asks for them (a results page's
    records, read_models/results.py, and the programs)."""

    async def best(self) -> BestProgram:
        """The job's confirmed best (``job.best_program_id``); ExportRefused when it has none."""
        job = self._job
        if job.best_program_id is None or job.best_score is None:
            raise ExportRefused(
                f"job {job.id} has no best program yet (none was confirmed; state "
                f"{job.state.value}); `codevolve status {job.id}` shows its progress"
            )
        program = await repository.get_program(self._session, job.best_program_id)
        if program is None:
            raise ExportRefused(f"job {job.id}'s best program {job.best_program_id} is not stored")
        return BestProgram(job=job, program=program, score=job.best_score)

    async def programs(self) -> AsyncIterator[Program]:
        offset = 0
        while True:
            page = await repository.list_programs(
                self._session, self._job.id, order="index", limit=PAGE, offset=offset
            )
            for program in page:
                yield program
            if len(page) < PAGE:
                return
            offset += PAGE
