"""A job's figures in one statement: its programs per status, its re-measures per verdict, the
tokens and cost of its proposals, and its best program's picked score and re-measure.

The API's job detail shows all of them and is read on every poll of every job: as five
statements (each one's send, and SQLAlchemy's work around it) they were most of that request's
CPU (docs/deploy.md, "Under load"). Here they are conditional aggregates and scalar subqueries
of one statement, built once per process.

Every function takes the caller's session and never commits; it returns plain frozen values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import Executable, ScalarSelect, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.codec import remeasure_from_dict
from codevolve.core.job import ProgramCounts
from codevolve.core.measurement import Remeasure, Verdict
from codevolve.core.program import JobId, ProgramId, ProgramStatus
from codevolve.program_db.models import ProgramRow, ProposalRow
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
    statuses = list(ProgramStatus)
    counts = dict(zip(statuses, row[: len(statuses)], strict=True))
    verdicts = dict(zip(Verdict, row[len(statuses) : len(statuses) + len(Verdict)], strict=True))
    tokens_in, tokens_out, cost, picked, remeasure = row[len(statuses) + len(Verdict) :]
    return JobFigures(
        programs=ProgramCounts(**{status.value: int(n) for status, n in counts.items()}),
        remeasured={verdict: int(n) for verdict, n in verdicts.items() if n},
        usage=UsageTotals(
            tokens_in=int(tokens_in), tokens_out=int(tokens_out), cost_usd=float(cost)
        ),
        best_picked_score=picked,
        best_remeasure=None if remeasure is None else remeasure_from_dict(remeasure),
    )


@functools.cache
def _figures_statement() -> Executable:
    """One row: a count per program status, a count per verdict, the proposals' tokens in and
    out and cost, and the best program's score and re-measure (NULL without one)."""
    programs = table_of(ProgramRow)
    proposals = table_of(ProposalRow)

    def spent(column: str, zero: float) -> ScalarSelect[float]:
        return (
            select(func.coalesce(func.sum(proposals.c[column]), zero))
            .where(proposals.c.job_id == bindparam("f_job"))
            .scalar_subquery()
        )

    def of_best(column: str) -> ScalarSelect[object]:
        return (
            select(programs.c[column]).where(programs.c.id == bindparam("f_best")).scalar_subquery()
        )

    return select(
        *(func.count().filter(programs.c.status == status.value) for status in ProgramStatus),
        *(func.count().filter(programs.c.verdict == verdict.value) for verdict in Verdict),
        spent("tokens_in", 0),
        spent("tokens_out", 0),
        spent("cost_usd", 0.0),
        of_best("score"),
        of_best("remeasure"),
    ).where(programs.c.job_id == bindparam("f_job"))
