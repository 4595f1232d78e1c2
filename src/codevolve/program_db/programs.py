"""Programs: insert (pending), the guarded ``pending -> evaluated|failed|rejected`` transition,
and the reads listings and reports need.

Every function takes the caller's session and never commits. Rows are turned into ``core.Program``
values before they leave this module.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import (
    CursorResult,
    Executable,
    Row,
    Select,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.codec import case_from_list, remeasure_from_dict, remeasure_to_dict
from codevolve.core.job import ProgramCounts
from codevolve.core.measurement import Remeasure, Verdict
from codevolve.core.program import (
    CaseResult,
    CellKey,
    Evaluation,
    JobId,
    Program,
    ProgramId,
    ProgramStatus,
)
from codevolve.program_db.archive import cell_from_text, cell_to_text
from codevolve.program_db.errors import ProgramDbError, UnknownProgramError
from codevolve.program_db.models import ProgramRow, utcnow
from codevolve.program_db.sql import (
    as_utc,
    dialect_table_insert,
    finite_or_none,
    json_number,
    json_numbers,
    numbers_from_json,
    table_of,
)

_FRESH = {"populate_existing": True}  # a row read twice in one session shows the database's values
_NO_SYNC = {"synchronize_session": False}  # updates go to the database; reads re-read it


# ------------------------------------------------------------------------------------ conversion


def to_program(row: ProgramRow | Row[Any] | SimpleNamespace) -> Program:
    """A program from its ORM row or a Core row of the programs table (same attribute names)."""
    return Program(
        id=row.id,
        job_id=row.job_id,
        source=row.source,
        content_hash=row.content_hash,
        parent_id=row.parent_id,
        island=row.island,
        generation=row.generation,
        proposal_index=row.proposal_index,
        status=ProgramStatus(row.status),
        epoch=row.epoch,
        attempts=row.attempts,
        diff=row.diff,
        proposer=row.proposer,
        score=row.score,
        stage_scores=numbers_from_json(row.stage_scores),
        metrics=numbers_from_json(row.metrics),
        heldout=numbers_from_json(row.heldout),
        features=numbers_from_json(row.features),
        cell=None if row.cell is None else cell_from_text(row.cell),
        cases=tuple(case_from_list(case) for case in row.cases),
        feedback=row.feedback,
        error=row.error,
        artifacts={str(key): str(value) for key, value in row.artifacts.items()},
        created_at=as_utc(row.created_at),
        evaluated_at=None if row.evaluated_at is None else as_utc(row.evaluated_at),
        remeasure=None if row.remeasure is None else remeasure_from_dict(row.remeasure),
    )


def _cases_json(cases: Sequence[CaseResult]) -> list[list[Any]]:
    return [
        [case.key, json_number(case.cost), case.detail] for case in cases
    ]  # case_to_list's form


def _row_values(program: Program) -> dict[str, Any]:
    return {
        "id": program.id,
        "job_id": program.job_id,
        "source": program.source,
        "content_hash": program.content_hash,
        "parent_id": program.parent_id,
        "island": program.island,
        "epoch": program.epoch,
        "generation": program.generation,
        "proposal_index": program.proposal_index,
        "status": program.status.value,
        "attempts": program.attempts,
        "diff": program.diff,
        "proposer": program.proposer,
        "score": finite_or_none(program.score),
        "stage_scores": json_numbers(program.stage_scores),
        "metrics": json_numbers(program.metrics),
        "heldout": json_numbers(program.heldout),
        "features": json_numbers(program.features),
        "cell": None if program.cell is None else cell_to_text(program.cell),
        "cases": _cases_json(program.cases),
        "feedback": program.feedback,
        "error": program.error,
        "artifacts": dict(program.artifacts),
        "created_at": program.created_at or utcnow(),
        "evaluated_at": program.evaluated_at,
    }


def _rowcount(result: object) -> int:
    return cast(CursorResult[Any], result).rowcount


# ---------------------------------------------------------------------------------------- writes


async def insert_program(session: AsyncSession, program: Program) -> None:
    """Insert a program (normally pending, before its task is enqueued). A second program with the
    same content hash in the job violates a unique constraint: check ``find_program_by_hash``."""
    await session.execute(insert(ProgramRow).values(**_row_values(program)))


async def insert_programs(session: AsyncSession, programs: Sequence[Program]) -> set[ProgramId]:
    """Insert many programs in one statement; returns the ids inserted. A program whose content
    is already in its job (or earlier in ``programs``) is skipped: the dedupe and the insert are
    one statement, so concurrent proposals of the same code cannot both land."""
    if not programs:
        return set()
    statement = _insert_programs_statement(session.get_bind().dialect.name)
    rows = await session.execute(statement, [_row_values(program) for program in programs])
    return {str(program_id) for (program_id,) in rows}


@functools.cache
def _insert_programs_statement(dialect: str) -> Executable:
    """Built once per backend; executed with many parameter sets, which SQLAlchemy batches into
    multi-row VALUES."""
    table = table_of(ProgramRow)
    return (
        dialect_table_insert(dialect, table)
        .on_conflict_do_nothing(index_elements=["job_id", "content_hash"])
        .returning(table.c.id)
    )


async def mark_enqueued(session: AsyncSession, program_id: ProgramId) -> int:
    """Count one more task enqueued for the program; returns the new count (the task's attempt)."""
    attempts = await session.scalar(
        update(ProgramRow)
        .where(ProgramRow.id == program_id)
        .values(attempts=ProgramRow.attempts + 1)
        .returning(ProgramRow.attempts)
        .execution_options(**_NO_SYNC)
    )
    if attempts is None:
        raise UnknownProgramError(f"no program {program_id}")
    return int(attempts)


async def apply_evaluation(
    session: AsyncSession, evaluation: Evaluation, *, cell: CellKey | None
) -> bool:
    """Record a worker's result, once (:func:`apply_evaluations` with one result). A reference
    form: the run applies results in batches; tests use it to state one result's semantics.

    Returns False when the program is not pending any more (a duplicate delivery, or a program
    already failed by the dead-letter path); nothing is changed then.
    """
    return evaluation.program_id in await apply_evaluations(session, [(evaluation, cell)])


_RESULT_COLUMNS = (
    "status", "score", "stage_scores", "metrics", "heldout", "features", "cell", "cases",
    "feedback", "error", "artifacts", "evaluated_at",
)  # fmt: skip


async def apply_evaluations(
    session: AsyncSession, results: Sequence[tuple[Evaluation, CellKey | None]]
) -> set[ProgramId]:
    """Record workers' results, each once; returns the ids applied.

    On Postgres one UPDATE of all of them, its rows given as arrays and guarded by ``status =
    'pending'`` (a concurrent writer's row lock makes it check the guard again). Elsewhere two
    statements: the pending rows are read and locked first (``FOR UPDATE``; SQLite has one writer
    anyway), then one UPDATE runs for each, still guarded. A program that appears twice in
    ``results`` (a duplicate delivery in the same batch) is applied once, from its first result.
    """
    first: dict[ProgramId, tuple[Evaluation, CellKey | None]] = {}
    for evaluation, cell in results:
        if evaluation.status is ProgramStatus.PENDING:
            raise ProgramDbError(
                f"an evaluation cannot leave program {evaluation.program_id} pending"
            )
        first.setdefault(evaluation.program_id, (evaluation, cell))
    if not first:
        return set()
    if session.get_bind().dialect.name == "postgresql":
        connection = await session.connection()
        updated = await connection.exec_driver_sql(_APPLY_POSTGRES, _apply_parameters(first))
        return {str(program_id) for (program_id,) in updated}
    return await apply_with_statements(session, first)


async def apply_with_statements(
    session: AsyncSession, first: Mapping[ProgramId, tuple[Evaluation, CellKey | None]]
) -> set[ProgramId]:
    """The same write as a locking read and an executemany UPDATE, which every backend runs."""
    lock, record = _apply_statements()
    locked = await session.execute(lock, {"ids": list(first)})
    pending = {(str(program_id), str(job_id)) for program_id, job_id in locked}
    rows = [
        {"b_id": program_id, "b_job": evaluation.job_id}
        | {f"b_{key}": value for key, value in _result_values(evaluation, cell).items()}
        for program_id, (evaluation, cell) in first.items()
        if (program_id, evaluation.job_id) in pending
    ]
    if rows:
        await session.execute(record, rows)
    return {row["b_id"] for row in rows}


# The results as arrays: $1 ids, $2 jobs, then the columns of _RESULT_COLUMNS in order.
_APPLY_POSTGRES = """
UPDATE programs AS p SET
    status = r.status, score = r.score, stage_scores = r.stage_scores::json,
    metrics = r.metrics::json, heldout = r.heldout::json, features = r.features::json,
    cell = r.cell, cases = r.cases::json, feedback = r.feedback, error = r.error,
    artifacts = r.artifacts::json, evaluated_at = r.evaluated_at
FROM unnest(
    $1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::text[], $7::text[],
    $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[]
) AS r(id, job_id, status, score, stage_scores, metrics, heldout, features, cell, cases,
       feedback, error, artifacts, evaluated_at)
WHERE p.id = r.id AND p.job_id = r.job_id AND p.status = 'pending'
RETURNING p.id
"""
_JSON_COLUMNS = frozenset({"stage_scores", "metrics", "heldout", "features", "cases", "artifacts"})


def _apply_parameters(
    first: Mapping[ProgramId, tuple[Evaluation, CellKey | None]],
) -> tuple[list[Any], ...]:
    ordered = sorted(first.items())  # rows locked in one order by every writer: no deadlock
    values = [_result_values(evaluation, cell) for _id, (evaluation, cell) in ordered]
    columns: list[list[Any]] = [
        [program_id for program_id, _ in ordered],
        [evaluation.job_id for _id, (evaluation, _cell) in ordered],
    ]
    for column in _RESULT_COLUMNS:
        if column in _JSON_COLUMNS:
            columns.append([json.dumps(row[column]) for row in values])
        else:
            columns.append([row[column] for row in values])
    return tuple(columns)


@functools.cache
def _apply_statements() -> tuple[Executable, Executable]:
    """The two statements of :func:`apply_evaluations`, built once: lock the pending rows of
    ``ids``, then record each result (``b_id``, ``b_job``, ``b_<column>``), still guarded."""
    table = table_of(ProgramRow)
    pending = table.c.status == ProgramStatus.PENDING.value
    lock = (
        select(table.c.id, table.c.job_id)
        .where(table.c.id.in_(bindparam("ids", expanding=True)), pending)
        .with_for_update()
    )
    record = (
        update(table)
        .where(table.c.id == bindparam("b_id"), table.c.job_id == bindparam("b_job"), pending)
        .values({column: bindparam(f"b_{column}") for column in _RESULT_COLUMNS})
    )
    return lock, record


def evaluated_program(program: Program, evaluation: Evaluation, cell: CellKey | None) -> Program:
    """The program as :func:`apply_evaluations` leaves its row, read back, without the read:
    the same values through the same conversions (the creation time is this moment's when the
    program has none)."""
    remeasure = None if program.remeasure is None else remeasure_to_dict(program.remeasure)
    values = _row_values(program) | _result_values(evaluation, cell) | {"remeasure": remeasure}
    return to_program(SimpleNamespace(**values))


def _result_values(evaluation: Evaluation, cell: CellKey | None) -> dict[str, Any]:
    artifacts: dict[str, str] = {}
    for stage in evaluation.stages:
        artifacts.update(stage.artifacts)  # later stages win, as in Evaluation.metrics
    return {
        "status": evaluation.status.value,
        "score": finite_or_none(evaluation.score),
        "stage_scores": json_numbers(evaluation.stage_scores),
        "metrics": json_numbers(evaluation.metrics),
        "heldout": json_numbers(evaluation.heldout),
        "features": json_numbers(evaluation.features),
        "cell": None if cell is None else cell_to_text(cell),
        "cases": _cases_json(evaluation.cases),
        "feedback": evaluation.feedback,
        "error": evaluation.error,
        "artifacts": artifacts,
        "evaluated_at": utcnow(),
    }


async def mark_failed(session: AsyncSession, program_id: ProgramId, reason: str) -> bool:
    """Fail a pending program (e.g. its task was dead-lettered); False if it was not pending.
    A reference form of the batched failure the run applies with its results."""
    result = await session.execute(
        update(ProgramRow)
        .where(ProgramRow.id == program_id, ProgramRow.status == ProgramStatus.PENDING.value)
        .values(status=ProgramStatus.FAILED.value, error=reason, evaluated_at=utcnow())
        .execution_options(**_NO_SYNC)
    )
    return _rowcount(result) == 1


async def record_remeasure(
    session: AsyncSession,
    program_id: ProgramId,
    remeasure: Remeasure,
    *,
    heldout: Mapping[str, float] | None = None,
) -> bool:
    """Record the re-measure of an evaluated program, once; False if it already has one (or is
    not evaluated). Its own status and figures stay as they are, but for ``heldout``: the
    held-out figures a sample measured, given where the program's own evaluation measured none
    (a problem that times its held-out cases only to confirm a would-be best)."""
    extra = {} if not heldout else {"heldout": json_numbers(heldout)}
    result = await session.execute(
        update(ProgramRow)
        .where(
            ProgramRow.id == program_id,
            ProgramRow.status == ProgramStatus.EVALUATED.value,
            ProgramRow.verdict.is_(None),
        )
        .values(
            verdict=remeasure.verdict.value,
            confirmed_score=finite_or_none(remeasure.confirmed),
            remeasure=remeasure_to_dict(remeasure),
            **extra,
        )
        .execution_options(**_NO_SYNC)
    )
    return _rowcount(result) == 1


# ----------------------------------------------------------------------------------------- reads


async def find_program_by_hash(
    session: AsyncSession, job_id: JobId, content_hash: str
) -> ProgramId | None:
    return await session.scalar(
        select(ProgramRow.id).where(
            ProgramRow.job_id == job_id, ProgramRow.content_hash == content_hash
        )
    )


async def get_program(session: AsyncSession, program_id: ProgramId) -> Program | None:
    row = await session.scalar(
        select(ProgramRow).where(ProgramRow.id == program_id).execution_options(**_FRESH)
    )
    return None if row is None else to_program(row)


async def get_programs(session: AsyncSession, ids: Sequence[ProgramId]) -> list[Program]:
    """The programs of ``ids`` in the same order, in one query; unknown ids are left out."""
    if not ids:
        return []
    table = table_of(ProgramRow)  # Core rows: no identity map to keep (hot on sampling paths)
    rows = await session.execute(select(table).where(table.c.id.in_(list(set(ids)))))
    by_id = {row.id: to_program(row) for row in rows}
    return [by_id[i] for i in ids if i in by_id]


async def pending_programs(session: AsyncSession, job_id: JobId) -> list[Program]:
    """Programs whose result has not landed (to re-enqueue on resume), oldest proposal first."""
    return await _programs(
        session,
        select(ProgramRow)
        .where(ProgramRow.job_id == job_id, ProgramRow.status == ProgramStatus.PENDING.value)
        .order_by(ProgramRow.proposal_index, ProgramRow.id),
    )


async def program_counts(session: AsyncSession, job_id: JobId) -> ProgramCounts:
    rows = await session.execute(
        select(ProgramRow.status, func.count())
        .where(ProgramRow.job_id == job_id)
        .group_by(ProgramRow.status)
    )
    counts: Mapping[str, int] = {str(status): int(count) for status, count in rows}
    return ProgramCounts(**{status.value: counts.get(status.value, 0) for status in ProgramStatus})


async def best_program(session: AsyncSession, job_id: JobId) -> Program | None:
    """The evaluated program with the highest score as picked; the earliest proposal wins a
    tie. A reference form for tests: the job's best is :func:`confirmed_best`."""
    programs = await _programs(
        session,
        select(ProgramRow)
        .where(
            ProgramRow.job_id == job_id,
            ProgramRow.status == ProgramStatus.EVALUATED.value,
            ProgramRow.score.is_not(None),
        )
        .order_by(ProgramRow.score.desc(), ProgramRow.proposal_index)
        .limit(1),
    )
    return programs[0] if programs else None


async def remeasure_candidates(
    session: AsyncSession,
    job_id: JobId,
    *,
    above: float | None,
    exclude: Sequence[ProgramId] = (),
    limit: int,
) -> list[Program]:
    """Would-be bests waiting for their re-measure: evaluated programs never re-measured whose
    score beats ``above`` (the job's confirmed best; None: any score), best first, at most
    ``limit``. Programs of ``exclude`` (re-measures in flight) are left out. One walk down the
    (job, status, score) index."""
    query = select(ProgramRow).where(
        ProgramRow.job_id == job_id,
        ProgramRow.status == ProgramStatus.EVALUATED.value,
        ProgramRow.score.is_not(None),
        ProgramRow.verdict.is_(None),
    )
    if above is not None:
        query = query.where(ProgramRow.score > above)
    if exclude:
        query = query.where(ProgramRow.id.not_in(list(exclude)))
    order = query.order_by(ProgramRow.score.desc(), ProgramRow.proposal_index)
    return await _programs(session, order.limit(max(limit, 0)))


async def confirmed_best(session: AsyncSession, job_id: JobId) -> Program | None:
    """The program with the best confirmed figure (the job's best); the earliest proposal wins
    a tie. None while no re-measure confirmed one."""
    programs = await _programs(
        session,
        select(ProgramRow)
        .where(
            ProgramRow.job_id == job_id,
            ProgramRow.verdict == Verdict.CONFIRMED.value,
            ProgramRow.confirmed_score.is_not(None),
        )
        .order_by(ProgramRow.confirmed_score.desc(), ProgramRow.proposal_index)
        .limit(1),
    )
    return programs[0] if programs else None


async def score_history(session: AsyncSession, job_id: JobId) -> list[tuple[int, float]]:
    """``(proposal_index, score)`` of every evaluated program, by proposal index. A reference
    form: the dashboard's chart reads its own query (api/queries.py)."""
    rows = await session.execute(
        select(ProgramRow.proposal_index, ProgramRow.score)
        .where(
            ProgramRow.job_id == job_id,
            ProgramRow.status == ProgramStatus.EVALUATED.value,
            ProgramRow.score.is_not(None),
        )
        .order_by(ProgramRow.proposal_index, ProgramRow.id)
    )
    return [(int(index), score) for index, score in rows if score is not None]


async def _programs(session: AsyncSession, query: Select[ProgramRow]) -> list[Program]:
    rows = await session.scalars(query.execution_options(**_FRESH))
    return [to_program(row) for row in rows]
