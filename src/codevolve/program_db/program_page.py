"""Pages of a job's programs, in one statement each.

A page is by score (the scored programs best first, then the unscored ones by proposal index),
by proposal index, or newest first, filtered by status and island. By score, each side is cut at
``offset + limit`` rows on its own index before the two are merged: ``ORDER BY score DESC NULLS
LAST`` cannot walk the (job_id, score) index on Postgres, and SQLite indexes have no NULLS LAST,
so a page would sort the whole job. A first page reads at most ``2 * limit`` rows; a deep page up
to ``offset + limit`` rows of each side.

:func:`list_programs` reads whole programs. :func:`owner_and_page` is the API's programs page:
it must check that the caller may see the job, then read the page, and under a burst each round
trip holds one of the pool's connections and waits on a Postgres that shares the cores; so the
job's owner and the page's headers come back together, the job left-joined to its page (a job
without programs still answers, one row of NULL programs; an unknown job answers no row).

The statements are built once per shape (columns, order, filters), with bound parameters.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Integer, Select, bindparam, literal_column, select, true, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import JobId, Program, ProgramHeader, ProgramStatus
from codevolve.program_db.archive import cell_from_text
from codevolve.program_db.models import JobRow, ProgramRow
from codevolve.program_db.programs import to_program
from codevolve.program_db.sql import as_utc

ProgramOrder = Literal["score", "index", "newest"]

_HEADER_FIELDS = tuple(field.name for field in dataclasses.fields(ProgramHeader))
_ALL_FIELDS = tuple(column.key for column in ProgramRow.__table__.columns)
_RANK = "scored_last"  # 0 for a scored program, 1 for an unscored one


@dataclass(frozen=True, slots=True)
class Page:
    """Which of a job's programs a listing shows, in which order."""

    job_id: JobId
    status: ProgramStatus | None = None
    island: int | None = None
    limit: int = 50
    offset: int = 0
    order: ProgramOrder = "score"


async def list_programs(
    session: AsyncSession,
    job_id: JobId,
    *,
    status: ProgramStatus | None = None,
    island: int | None = None,
    limit: int = 50,
    offset: int = 0,
    order: ProgramOrder = "score",
) -> list[Program]:
    """A page of a job's programs, whole: by score (best first, unscored last), by proposal
    index, or newest first."""
    page = Page(job_id, status=status, island=island, limit=limit, offset=offset, order=order)
    paged = _paged(_ALL_FIELDS, page.order, page.status is not None, page.island is not None)
    statement = select(paged).order_by(*_ordered(paged.c, page.order))
    rows = await session.execute(statement, _parameters(page))
    return [to_program(row) for row in rows]


async def owner_and_page(
    session: AsyncSession, page: Page
) -> tuple[str, list[ProgramHeader]] | None:
    """The job's owner and the page of its programs; None when there is no such job."""
    statement = _statement(page.order, page.status is not None, page.island is not None)
    rows = (await session.execute(statement, _parameters(page))).all()
    if not rows:
        return None
    return rows[0].owner, [_header(row) for row in rows if row.id is not None]


def _parameters(page: Page) -> dict[str, Any]:
    limit, offset = max(page.limit, 0), max(page.offset, 0)
    parameters: dict[str, Any] = {
        "job_id": page.job_id,
        "limit": limit,
        "offset": offset,
        "ends": limit + offset,
    }
    if page.status is not None:
        parameters["status"] = page.status.value
    if page.island is not None:
        parameters["island"] = page.island
    return parameters


def _header(row: Any) -> ProgramHeader:
    return ProgramHeader(
        id=row.id,
        job_id=row.job_id,
        status=ProgramStatus(row.status),
        score=row.score,
        island=row.island,
        generation=row.generation,
        proposal_index=row.proposal_index,
        parent_id=row.parent_id,
        proposer=row.proposer,
        cell=None if row.cell is None else cell_from_text(row.cell),
        created_at=None if row.created_at is None else as_utc(row.created_at),
    )


def _filtered(
    fields: tuple[str, ...], rank: int, *, by_status: bool, by_island: bool
) -> Select[Any]:
    query = select(
        *(getattr(ProgramRow, name) for name in fields),
        literal_column(str(rank)).label(_RANK),
    ).where(ProgramRow.job_id == bindparam("job_id"))
    if by_status:
        query = query.where(ProgramRow.status == bindparam("status"))
    if by_island:
        query = query.where(ProgramRow.island == bindparam("island"))
    return query


# Each order's keys, as (column, descending): a tie on score falls to the proposal index.
_ORDERS: dict[str, tuple[tuple[str, bool], ...]] = {
    "score": ((_RANK, False), ("score", True), ("proposal_index", False), ("id", False)),
    "index": (("proposal_index", False), ("id", False)),
    "newest": (("created_at", True), ("proposal_index", True)),
}


def _ordered(columns: Any, order: str) -> list[Any]:
    return [columns[name].desc() if desc else columns[name] for name, desc in _ORDERS[order]]


@functools.cache
def _paged(fields: tuple[str, ...], order: str, by_status: bool, by_island: bool) -> Any:
    """The page's rows (``fields`` of each), as a subquery; built once for each shape."""
    shape = {"by_status": by_status, "by_island": by_island}
    if order == "score":
        ends = bindparam("ends", type_=Integer)
        scored = _filtered(fields, 0, **shape).where(ProgramRow.score.is_not(None))
        unscored = _filtered(fields, 1, **shape).where(ProgramRow.score.is_(None))
        rows = union_all(
            select(
                scored.order_by(ProgramRow.score.desc(), ProgramRow.proposal_index)
                .limit(ends)
                .subquery()
            ),
            select(
                unscored.order_by(ProgramRow.proposal_index, ProgramRow.id).limit(ends).subquery()
            ),
        ).subquery()
    else:
        rows = _filtered(fields, 0, **shape).subquery()
    return (
        select(rows)
        .order_by(*_ordered(rows.c, order))
        .limit(bindparam("limit", type_=Integer))
        .offset(bindparam("offset", type_=Integer))
        .subquery()
    )


@functools.cache
def _statement(order: str, by_status: bool, by_island: bool) -> Select[Any]:
    """The job's owner joined to the page's headers; built once for each order and filters."""
    paged = _paged(_HEADER_FIELDS, order, by_status, by_island)
    return (
        select(JobRow.owner, *(paged.c[name] for name in _HEADER_FIELDS))
        .select_from(JobRow)
        .outerjoin(paged, true())
        .where(JobRow.id == bindparam("job_id"))
        .order_by(*_ordered(paged.c, order))
    )
