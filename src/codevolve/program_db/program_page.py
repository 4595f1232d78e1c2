"""A page of a job's programs read with the job's owner, in one statement.

The API's programs page must check that the caller may see the job, then read the page: two
round trips, three when the page holds unscored programs (``programs._by_score``). Under a
burst each round trip holds one of the pool's connections and waits on a Postgres that shares
the cores, so here the owner and the page's rows come back together: the job left-joined to
its page, so a job without programs still answers (one row of NULL programs) and an unknown
job answers no row. The statements are built once per filter shape, with bound parameters.

By score, the page is the scored programs (best first) then the unscored ones (by proposal
index), as ``programs.list_programs`` orders it: each side is cut at ``offset + limit``
rows on its own index before the two are merged, so a first page reads at most ``2 * limit``
rows; a deep page reads up to ``offset + limit`` rows of each side.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from sqlalchemy import Integer, Select, bindparam, literal_column, select, true, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import ProgramHeader, ProgramStatus
from codevolve.program_db.archive import cell_from_text
from codevolve.program_db.models import JobRow, ProgramRow
from codevolve.program_db.programs import Page
from codevolve.program_db.sql import as_utc

_HEADER_FIELDS = tuple(field.name for field in dataclasses.fields(ProgramHeader))
_RANK = "scored_last"  # 0 for a scored program, 1 for an unscored one


async def owner_and_page(
    session: AsyncSession, page: Page
) -> tuple[str, list[ProgramHeader]] | None:
    """The job's owner and the page of its programs; None when there is no such job."""
    statement = _statement(page.order, page.status is not None, page.island is not None)
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
    rows = (await session.execute(statement, parameters)).all()
    if not rows:
        return None
    return rows[0].owner, [_header(row) for row in rows if row.id is not None]


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


def _filtered(rank: int, *, by_status: bool, by_island: bool) -> Select[Any]:
    query = select(
        *(getattr(ProgramRow, name) for name in _HEADER_FIELDS),
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
def _statement(order: str, by_status: bool, by_island: bool) -> Select[Any]:
    """The job's owner joined to the page; built once for each order and filter shape."""
    shape = {"by_status": by_status, "by_island": by_island}
    if order == "score":
        ends = bindparam("ends", type_=Integer)
        scored = _filtered(0, **shape).where(ProgramRow.score.is_not(None))
        unscored = _filtered(1, **shape).where(ProgramRow.score.is_(None))
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
        rows = _filtered(0, **shape).subquery()
    paged = (
        select(rows)
        .order_by(*_ordered(rows.c, order))
        .limit(bindparam("limit", type_=Integer))
        .offset(bindparam("offset", type_=Integer))
        .subquery()
    )
    return (
        select(JobRow.owner, *(paged.c[name] for name in _HEADER_FIELDS))
        .select_from(JobRow)
        .outerjoin(paged, true())
        .where(JobRow.id == bindparam("job_id"))
        .order_by(*_ordered(paged.c, order))
    )
