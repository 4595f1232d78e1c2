"""A job's figures in one statement: its programs per status, its re-measures per verdict, the
tokens and cost of its proposals, and its best program's picked score and re-measure.

The API's job detail shows all of them and is read on every poll of every job: as five
statements (each one's send, and SQLAlchemy's work around it) they were most of that request's
CPU (docs/deploy.md, "Under load"). Here they are conditional aggregates and scalar subqueries
of one statement, built once per process; :func:`job_with_figures` reads the job in the same
statement.

Every function takes the caller's session and never commits; it returns plain frozen values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Executable, Row, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.codec import remeasure_from_dict
from codevolve.core.job import Job, ProgramCounts
from codevolve.core.measurement import Remeasure, Verdict
from codevolve.core.program import JobId, ProgramId, ProgramStatus
from codevolve.program_db.jobs import job_columns, to_job
from codevolve.program_db.models import JobRow, ProgramRow, ProposalRow
from codevolve.program_db.sql import table_of
from codevolve.program_db.usage import UsageTotals


@dataclass(frozen=True, slots=True)
class JobFigures:
    """What a job's programs and proposals add up to, read at one moment."""

    programs: ProgramCounts
    remeasured: dict[Verdict, int]  # programs re-measured per verdict; absent: none
    usage: UsageTotals
    best_picked_score: float | None  # the best program's score as picked; None: no best
    best_remeasure: Remeasure | None  # None: no best, or a best never re-measured


async def job_figures(
    session: AsyncSession, job_id: JobId, best_program_id: ProgramId | None
) -> JobFigures:
    """The figures of ``job_id``, whose best program (the job's cached best) is
    ``best_program_id``."""
    row = (
        await session.execute(_figures_statement(), {"f_job": job_id, "f_best": best_program_id})
    ).one()
    return _figures(row)


async def job_with_figures(session: AsyncSession, job_id: JobId) -> tuple[Job, JobFigures] | None:
    """The job and its figures in one round trip (the API's job detail); None: no such job."""
    row = (await session.execute(_job_with_figures_statement(), {"f_job": job_id})).first()
    return None if row is None else (to_job(row), _figures(row))


def _figures(row: Row[Any]) -> JobFigures:
    """The figures of a row of :func:`_figure_columns`, read by their labels."""
    values = row._mapping
    remeasure = values["f_best_remeasure"]
    return JobFigures(
        programs=ProgramCounts(**{s.value: int(values[f"f_{s.value}"]) for s in ProgramStatus}),
        remeasured={v: int(n) for v in Verdict if (n := values[f"f_verdict_{v.value}"])},
        usage=UsageTotals(
            tokens_in=int(values["f_tokens_in"]),
            tokens_out=int(values["f_tokens_out"]),
            cost_usd=float(values["f_cost_usd"]),
        ),
        best_picked_score=values["f_best_score"],
        best_remeasure=None if remeasure is None else remeasure_from_dict(remeasure),
    )


def _figure_columns(best_program_id: ColumnElement[Any]) -> list[ColumnElement[Any]]:
    """Aggregates over the job's programs (a count per status and per verdict), and scalar
    subqueries: the proposals' tokens in and out and cost, the score and re-measure of the
    program ``best_program_id`` names (NULL without one). Labelled ``f_*``."""
    programs = table_of(ProgramRow)
    proposals = table_of(ProposalRow)
    best = table_of(ProgramRow).alias("best")

    def spent(column: str, zero: float) -> ColumnElement[Any]:
        total = select(func.coalesce(func.sum(proposals.c[column]), zero))
        return total.where(proposals.c.job_id == bindparam("f_job")).scalar_subquery()

    def of_best(column: str) -> ColumnElement[Any]:
        picked = select(best.c[column]).where(best.c.id == best_program_id)
        return picked.scalar_subquery()

    return [
        *(
            func.count(programs.c.id).filter(programs.c.status == s.value).label(f"f_{s.value}")
            for s in ProgramStatus
        ),
        *(
            func.count(programs.c.id)
            .filter(programs.c.verdict == v.value)
            .label(f"f_verdict_{v.value}")
            for v in Verdict
        ),
        spent("tokens_in", 0).label("f_tokens_in"),
        spent("tokens_out", 0).label("f_tokens_out"),
        spent("cost_usd", 0.0).label("f_cost_usd"),
        of_best("score").label("f_best_score"),
        of_best("remeasure").label("f_best_remeasure"),
    ]


@functools.cache
def _figures_statement() -> Executable:
    """One row of :func:`_figure_columns` for job ``f_job`` and best program ``f_best``."""
    programs = table_of(ProgramRow)
    return select(*_figure_columns(bindparam("f_best"))).where(
        programs.c.job_id == bindparam("f_job")
    )


@functools.cache
def _job_with_figures_statement() -> Executable:
    """Job ``f_job`` (:func:`job_columns`) beside its figures: its programs joined to it and
    grouped by its primary key, its cached best read through ``jobs.best_program_id``."""
    jobs = table_of(JobRow)
    programs = table_of(ProgramRow)
    return (
        job_columns()
        .add_columns(*_figure_columns(jobs.c.best_program_id))
        .select_from(jobs.outerjoin(programs, programs.c.job_id == jobs.c.id))
        .where(jobs.c.id == bindparam("f_job"))
        .group_by(jobs.c.id)
    )
