"""The stored archive: island epochs, one elite per (island, cell), sampling, migration, resets, and
the best cost seen per test case.

Sampling reads the elites table (bounded by islands x cells) and then only the chosen programs, so
its cost does not grow with the population. "Replace the elite if strictly better" is one
conditional upsert guarded by the island's epoch: concurrent writers cannot lose the better
program, and a child of a parent drawn before a reset cannot land in the reset island.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import (
    Executable,
    Float,
    Integer,
    String,
    bindparam,
    delete,
    exists,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import CaseResult, CellKey, IslandId, JobId, Program, ProgramId
from codevolve.core.prompt import BestCase
from codevolve.program_db import archive
from codevolve.program_db.archive import (
    WRITTEN,
    AddOutcome,
    EliteRef,
    by_rank,
    cell_from_text,
    cell_to_text,
)
from codevolve.program_db.errors import ProgramDbError
from codevolve.program_db.models import BestCaseRow, EliteRow, IslandRow
from codevolve.program_db.programs import get_programs
from codevolve.program_db.sql import dialect_insert, dialect_table_insert, table_of


@dataclass(frozen=True, slots=True)
class Sample:
    """A parent and its inspirations from one island, and the island's epoch when drawn."""

    parent: Program
    inspirations: tuple[Program, ...]
    epoch: int


# ---------------------------------------------------------------------------------------- elites


async def add_elite(
    session: AsyncSession,
    *,
    job_id: JobId,
    island: IslandId,
    cell: CellKey,
    program_id: ProgramId,
    score: float,
    epoch: int,
) -> AddOutcome:
    """Offer a program to a cell of an island, in one statement.

    ``INSERT .. SELECT .. WHERE <the island is at epoch> ON CONFLICT DO UPDATE .. WHERE
    elites.score < excluded.score``: inserts into an empty cell, replaces only a strictly worse
    elite, and writes nothing when the island was reset since ``epoch``. On Postgres the epoch
    check share-locks the island row, so it waits for a concurrent reset and then sees its epoch.
    The statement returns the cell's replacement counter (0 for a fresh insert), which tells new
    from improved without a racy read beforehand; only when nothing was written does a second read
    tell stale from not added.
    """
    if math.isnan(score):  # NaN beats nothing; only say whether it was stale
        return await _unwritten(session, job_id=job_id, island=island, epoch=epoch)
    statement = _add_elite_statement(session.get_bind().dialect.name)
    values = {
        "a_job": job_id,
        "a_island": island,
        "a_cell": cell_to_text(cell),
        "a_program": program_id,
        "a_score": score,
        "a_epoch": epoch,
    }
    improvements = (await session.execute(statement, values)).scalar_one_or_none()
    if improvements is None:
        return await _unwritten(session, job_id=job_id, island=island, epoch=epoch)
    return AddOutcome.NEW if improvements == 0 else AddOutcome.IMPROVED


@functools.cache
def _add_elite_statement(dialect: str) -> Executable:
    """The statement of :func:`add_elite` for a backend, built once: the values are bound
    parameters (``a_job``, ``a_island``, ...), so each offer only binds them."""
    elites = table_of(EliteRow)
    islands = table_of(IslandRow)
    island_at_epoch = exists(
        select(islands.c.island)
        .where(
            islands.c.job_id == bindparam("a_job", type_=String()),
            islands.c.island == bindparam("a_island", type_=Integer()),
            islands.c.epoch == bindparam("a_epoch", type_=Integer()),
        )
        .with_for_update(read=True)  # FOR SHARE on Postgres; SQLite has one writer anyway
    )
    candidate = select(
        bindparam("a_job", type_=String()),
        bindparam("a_island", type_=Integer()),
        bindparam("a_cell", type_=String()),
        bindparam("a_program", type_=String()),
        bindparam("a_score", type_=Float()),
        bindparam("a_epoch", type_=Integer()),
        literal(0, Integer()),
    ).where(island_at_epoch)
    insert = dialect_table_insert(dialect, elites).from_select(
        ["job_id", "island", "cell", "program_id", "score", "epoch", "improvements"], candidate
    )
    return insert.on_conflict_do_update(
        index_elements=["job_id", "island", "cell"],
        set_={
            "program_id": insert.excluded.program_id,
            "score": insert.excluded.score,
            "epoch": insert.excluded.epoch,
            "improvements": elites.c.improvements + 1,
        },
        where=elites.c.score < insert.excluded.score,
    ).returning(elites.c.improvements)


async def _unwritten(
    session: AsyncSession, *, job_id: JobId, island: IslandId, epoch: int
) -> AddOutcome:
    """Why nothing was written: a newer epoch (stale) or a better elite (not added)."""
    current = (await island_epochs(session, job_id)).get(island)
    if current is None:
        raise ProgramDbError(f"job {job_id} has no island {island}")
    return AddOutcome.NOT_ADDED if current == epoch else AddOutcome.STALE


async def island_epochs(session: AsyncSession, job_id: JobId) -> dict[IslandId, int]:
    rows = await session.execute(
        select(IslandRow.island, IslandRow.epoch).where(IslandRow.job_id == job_id)
    )
    return {int(island): int(epoch) for island, epoch in rows}


async def island_elites(session: AsyncSession, job_id: JobId, island: IslandId) -> list[EliteRef]:
    """The island's elites, best first (reads the elites table only, never the population)."""
    rows = await session.execute(
        select(EliteRow.cell, EliteRow.program_id, EliteRow.score)
        .where(EliteRow.job_id == job_id, EliteRow.island == island)
        .order_by(EliteRow.score.desc(), EliteRow.cell)
    )
    return [_elite(cell, program_id, score) for cell, program_id, score in rows]


async def job_elites(session: AsyncSession, job_id: JobId) -> dict[IslandId, list[EliteRef]]:
    """Every island's elites (islands without elites map to an empty list)."""
    per_island: dict[IslandId, list[EliteRef]] = {
        island: [] for island in await island_epochs(session, job_id)
    }
    rows = await session.execute(
        select(EliteRow.island, EliteRow.cell, EliteRow.program_id, EliteRow.score).where(
            EliteRow.job_id == job_id
        )
    )
    for island, cell, program_id, score in rows:
        per_island.setdefault(int(island), []).append(_elite(cell, program_id, score))
    return per_island


def _elite(cell: str, program_id: str, score: float) -> EliteRef:
    return EliteRef(cell=cell_from_text(cell), program_id=program_id, score=float(score))


async def sample(
    session: AsyncSession,
    job_id: JobId,
    island: IslandId,
    rng: np.random.Generator,
    *,
    exploit_ratio: float,
    temperature: float,
    top: int,
    diverse: int,
) -> Sample | None:
    """A parent and inspirations from the island's elites; None while the island has none.

    Two small queries: the island's epoch with its elites (one join), the chosen programs.
    """
    rows = (
        await session.execute(
            select(IslandRow.epoch, EliteRow.cell, EliteRow.program_id, EliteRow.score)
            .select_from(IslandRow)
            .outerjoin(
                EliteRow,
                (EliteRow.job_id == IslandRow.job_id) & (EliteRow.island == IslandRow.island),
            )
            .where(IslandRow.job_id == job_id, IslandRow.island == island)
        )
    ).all()
    if not rows:
        raise ProgramDbError(f"job {job_id} has no island {island}")
    epoch = int(rows[0].epoch)
    elites = [
        _elite(row.cell, row.program_id, row.score) for row in rows if row.program_id is not None
    ]
    if not elites:
        return None
    parent = archive.choose_parent(
        elites, rng, exploit_ratio=exploit_ratio, temperature=temperature
    )
    inspirations = archive.choose_inspirations(elites, parent, rng, top=top, diverse=diverse)
    programs = await get_programs(
        session, [parent.program_id, *(elite.program_id for elite in inspirations)]
    )
    if not programs or programs[0].id != parent.program_id:
        raise ProgramDbError(f"elite program {parent.program_id} of job {job_id} is missing")
    return Sample(parent=programs[0], inspirations=tuple(programs[1:]), epoch=epoch)


# -------------------------------------------------------------------------- migration and resets


async def migrate(session: AsyncSession, job_id: JobId, *, migrants: int) -> int:
    """Copy each island's ``migrants`` best elites to the next island of the ring (into the same
    cells, at the destination's current epoch); returns how many elites were written."""
    epochs = await island_epochs(session, job_id)
    per_island = await job_elites(session, job_id)
    written = 0
    for _source, destination, elite in archive.migration_plan(per_island, migrants=migrants):
        outcome = await add_elite(
            session,
            job_id=job_id,
            island=destination,
            cell=elite.cell,
            program_id=elite.program_id,
            score=elite.score,
            epoch=epochs[destination],
        )
        written += outcome in WRITTEN
    return written


async def reset_islands(
    session: AsyncSession, job_id: JobId, rng: np.random.Generator
) -> list[IslandId]:
    """Restart the worse half of the islands: bump each one's epoch (children of earlier parents
    become stale), drop its elites and seed it with the best elite of a surviving island."""
    epochs = await island_epochs(session, job_id)
    rows = await session.execute(
        select(EliteRow.island, func.max(EliteRow.score))
        .where(EliteRow.job_id == job_id)
        .group_by(EliteRow.island)
    )
    best_scores: dict[IslandId, float | None] = dict.fromkeys(epochs)
    best_scores.update({int(island): float(score) for island, score in rows})
    reset, donors = archive.islands_to_reset(best_scores, rng)
    seeds = {donor: by_rank(await island_elites(session, job_id, donor))[0] for donor in donors}
    for island, donor in zip(reset, donors, strict=True):
        epoch = await session.scalar(
            update(IslandRow)
            .where(IslandRow.job_id == job_id, IslandRow.island == island)
            .values(epoch=IslandRow.epoch + 1)
            .returning(IslandRow.epoch)
            .execution_options(synchronize_session=False)
        )
        await session.execute(
            delete(EliteRow).where(EliteRow.job_id == job_id, EliteRow.island == island)
        )
        if epoch is None:
            raise ProgramDbError(f"job {job_id} has no island {island}")
        seed = seeds[donor]
        await add_elite(
            session,
            job_id=job_id,
            island=island,
            cell=seed.cell,
            program_id=seed.program_id,
            score=seed.score,
            epoch=int(epoch),
        )
    return reset


# ------------------------------------------------------------------------------------ best cases


async def upsert_best_cases(
    session: AsyncSession, job_id: JobId, program_id: ProgramId, cases: Sequence[CaseResult]
) -> None:
    """Keep, per case key, the lowest cost seen and the program that achieved it (one upsert).
    A reference form of :func:`record_best_cases` for one program, used by tests."""
    await record_best_cases(
        session,
        job_id,
        [BestCase(key=c.key, cost=c.cost, detail=c.detail, program_id=program_id) for c in cases],
    )


async def record_best_cases(
    session: AsyncSession, job_id: JobId, cases: Sequence[BestCase]
) -> None:
    """Offer many programs' case costs at once: per key, the lowest wins, in one upsert that
    only ever lowers a stored cost. NaN costs are ignored."""
    lowest: dict[str, BestCase] = {}
    for case in cases:
        if not math.isnan(case.cost) and (
            case.key not in lowest or case.cost < lowest[case.key].cost
        ):
            lowest[case.key] = case
    if not lowest:
        return
    best = table_of(BestCaseRow)
    insert = dialect_insert(session, BestCaseRow).values(
        [
            {
                "job_id": job_id,
                "case_key": c.key,
                "cost": c.cost,
                "detail": c.detail,
                "program_id": c.program_id,
            }
            for c in lowest.values()
        ]
    )
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=["job_id", "case_key"],
            set_={
                "cost": insert.excluded.cost,
                "detail": insert.excluded.detail,
                "program_id": insert.excluded.program_id,
            },
            where=best.c.cost > insert.excluded.cost,
        )
    )


async def best_cases(session: AsyncSession, job_id: JobId) -> dict[str, BestCase]:
    rows = await session.execute(
        select(BestCaseRow.case_key, BestCaseRow.cost, BestCaseRow.detail, BestCaseRow.program_id)
        .where(BestCaseRow.job_id == job_id)
        .order_by(BestCaseRow.case_key)
    )
    return {
        key: BestCase(key=key, cost=float(cost), detail=detail, program_id=program_id)
        for key, cost, detail, program_id in rows
    }
