"""A problem's results page from the database: each job's records read for the plug-in's row
builder (core/results.py), one row per owner and case (the newest job's), and the figures.

The page is the plug-in's; this module only reads. The command line's set command (KernelBench's),
the API (``/api/v1/<segment>``) and the dashboard (``/<segment>``) build their rows here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.errors import ConfigError
from codevolve.core.job import Job
from codevolve.core.plugin import BUNDLE_PREFIX, ProblemPlugin
from codevolve.core.program import Program
from codevolve.core.results import ResultsPage, Row
from codevolve.problems import registry
from codevolve.program_db import repository


class StoredResults:
    """One job's records (core/results.py: JobResults), read in ``session`` when asked for."""

    def __init__(self, session: AsyncSession, job: Job) -> None:
        self._session = session
        self._job = job

    @property
    def job(self) -> Job:
        return self._job

    async def bundle_files(self) -> Mapping[str, bytes] | None:
        problem = self._job.config.problem
        if not problem.startswith(BUNDLE_PREFIX):
            return None
        bundle = await repository.get_bundle(self._session, problem)
        return None if bundle is None else bundle.files

    async def best_program(self) -> Program | None:
        if self._job.best_program_id is None:
            return None
        return await repository.get_program(self._session, self._job.best_program_id)

    async def proposals(self) -> int:
        return sum((await repository.proposal_counts(self._session, self._job.id)).values())


@dataclass(frozen=True, slots=True)
class ResultsTable:
    """A results page's rows, in the order of their jobs, and its figures over them."""

    rows: list[Row]
    summary: Mapping[str, Any]


async def job_row(session: AsyncSession, page: ResultsPage, job: Job) -> Row | None:
    """The page's row of ``job``; None for a job the page does not list, or one whose records
    the plug-in cannot read (a stored upload's broken settings): that job is left out rather
    than failing the whole page."""
    try:
        return await page.row(StoredResults(session, job))
    except ConfigError:
        return None


async def result_rows(
    session: AsyncSession, plugin: ProblemPlugin, jobs: Iterable[Job], *, newest: bool = False
) -> list[Row]:
    """The rows of the jobs of ``plugin``'s problems among ``jobs``, in their order; with
    ``newest`` (jobs newest first) one row per owner and case, its newest job's: the page's
    figures count cases, not runs."""
    page = plugin.results
    assert page is not None  # callers pass a plug-in with a results page
    rows: list[Row] = []
    shown: set[tuple[str, Any]] = set()  # (owner, the row's case) already a row
    for job in jobs:
        if plugin not in registry.serving(job.config.problem):
            continue  # a job of another problem: its records are not read
        row = await job_row(session, page, job)
        if row is None:
            continue
        if newest:
            case = (job.owner, row.get(page.key))
            if case in shown:
                continue
            shown.add(case)
        rows.append(row)
    return rows


async def results_table(
    session: AsyncSession, plugin: ProblemPlugin, *, owner: str | None
) -> ResultsTable:
    """``plugin``'s page over the jobs ``owner`` (None: anyone) may see, newest first: a case
    run more than once is one row, its newest job's (per owner)."""
    page = plugin.results
    assert page is not None
    jobs = await repository.list_jobs(session, owner=owner)  # newest first
    rows = await result_rows(session, plugin, jobs, newest=True)
    return ResultsTable(rows=rows, summary=page.summary(rows, 0))
