"""Jobs and their proposal log.

Every function takes the caller's session and never commits; rows become ``core.Job`` values.

Jobs are read as Core rows by statements built once, and a job's config (stored once, never
changed) is read as its JSON text and parsed once per process for each distinct text: the API
lists every job on each poll, and parsing each job's ``RunConfig`` again, through ORM entities,
was most of that request's CPU (docs/deploy.md, "Under load").
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Executable,
    Row,
    Select,
    Text,
    bindparam,
    cast,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.config import RunConfig
from codevolve.core.job import Job, JobState
from codevolve.core.program import JobId, ProgramId
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db.errors import UnknownJobError
from codevolve.program_db.models import IslandRow, JobRow, ProposalRow, utcnow
from codevolve.program_db.programs import best_program
from codevolve.program_db.sql import as_utc, dialect_table_insert, table_of

_NO_SYNC = {"synchronize_session": False}


CONFIGS_KEPT = 1024  # distinct config texts parsed and kept per process (a few KiB each)


def to_job(row: Row[Any]) -> Job:
    """A job from a row of :func:`job_columns` (its config as JSON text)."""
    return Job(
        id=row.id,
        config=config_of(row.config),
        state=JobState(row.state),
        created_at=as_utc(row.created_at),
        owner=row.owner,
        proposals=row.proposals,
        wall_s=row.wall_s,
        best_program_id=row.best_program_id,
        best_score=row.best_score,
        error=row.error,
    )


async def create_job(session: AsyncSession, config: RunConfig, *, owner: str = "") -> Job:
    """A queued job, and its islands at epoch 0."""
    job = Job(
        id=uuid.uuid4().hex, config=config, state=JobState.QUEUED, created_at=utcnow(), owner=owner
    )
    await session.execute(
        insert(JobRow).values(
            id=job.id,
            owner=owner,
            problem=config.problem,
            config=config.model_dump(mode="json"),
            state=job.state.value,
            created_at=job.created_at,
            updated_at=job.created_at,
        )
    )
    await session.execute(
        insert(IslandRow),
        [{"job_id": job.id, "island": island, "epoch": 0} for island in range(config.islands)],
    )
    return job


@functools.lru_cache(maxsize=CONFIGS_KEPT)
def config_of(text: str) -> RunConfig:
    """The RunConfig stored as ``text``, parsed once per distinct text (RunConfig is frozen, so
    jobs may share one value); keyed by the text itself, a changed config can never be served
    from an older parse."""
    return RunConfig.model_validate_json(text)


def job_columns() -> Select[Any]:
    """The jobs table's columns a Job is made of, the config as its JSON text."""
    jobs = table_of(JobRow)
    columns = [column for column in jobs.c if column.name not in ("config", "updated_at")]
    return select(*columns, cast(jobs.c.config, Text).label("config"))


@functools.cache
def _get_job_statement() -> Executable:
    return job_columns().where(table_of(JobRow).c.id == bindparam("job_id"))


@functools.cache
def _list_jobs_statement(by_owner: bool) -> Executable:
    jobs = table_of(JobRow)
    query = job_columns().order_by(jobs.c.created_at.desc(), jobs.c.id)
    return query.where(jobs.c.owner == bindparam("owner")) if by_owner else query


async def get_job(session: AsyncSession, job_id: JobId) -> Job | None:
    row = (await session.execute(_get_job_statement(), {"job_id": job_id})).first()
    return None if row is None else to_job(row)


async def list_jobs(session: AsyncSession, *, owner: str | None = None) -> list[Job]:
    """Newest first; only ``owner``'s jobs when given."""
    statement = _list_jobs_statement(owner is not None)
    rows = await session.execute(statement, {} if owner is None else {"owner": owner})
    return [to_job(row) for row in rows]


async def set_job_state(
    session: AsyncSession, job_id: JobId, state: JobState, *, error: str | None = None
) -> None:
    """Move a job to ``state``; ``error`` replaces the stored one (None clears it)."""
    await _update_job(session, job_id, state=state.value, error=error)


async def add_job_wall(session: AsyncSession, job_id: JobId, seconds: float) -> None:
    """Add ``seconds`` of running time (the wall budget spans resumes)."""
    await _update_job(session, job_id, wall_s=JobRow.wall_s + seconds)


async def update_job_best(session: AsyncSession, job_id: JobId) -> None:
    """Set the job's cached best to the best program as picked (:func:`best_program`). A
    reference form for tests' fixtures: a run sets the confirmed best (:func:`set_job_best`)."""
    best = await best_program(session, job_id)
    await _update_job(
        session,
        job_id,
        best_program_id=None if best is None else best.id,
        best_score=None if best is None else best.score,
    )


async def _update_job(session: AsyncSession, job_id: JobId, **values: Any) -> None:
    result = await session.execute(
        update(JobRow)
        .where(JobRow.id == job_id)
        .values(updated_at=utcnow(), **values)
        .returning(JobRow.id)
        .execution_options(**_NO_SYNC)
    )
    if result.first() is None:
        raise UnknownJobError(f"no job {job_id}")


# ------------------------------------------------------------------------------------ proposals


@dataclass(frozen=True, slots=True)
class ProposalEntry:
    """What became of one proposal, as the proposal log stores it.

    ``prompt`` and ``answer`` are the texts sent and received (empty when not logged);
    ``prompt_variant`` names the template variant that made the prompt.
    """

    index: int
    parent_id: ProgramId | None
    island: int
    proposer: str
    status: ProposalStatus
    reason: str = ""
    program_id: ProgramId | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    prompt: str = ""
    answer: str = ""
    prompt_variant: str = ""


async def record_proposals(
    session: AsyncSession, job_id: JobId, entries: Sequence[ProposalEntry]
) -> int:
    """Log many proposals in one statement and count them in ``jobs.proposals``; returns how many
    were new. An index is recorded once: a second record of the same index (an error path
    reporting a proposal that was already logged) changes nothing."""
    if not entries:
        return 0
    now = utcnow()
    statement = _record_proposals_statement(session.get_bind().dialect.name)
    rows = [
        {
            "job_id": job_id,
            "proposal_index": entry.index,
            "parent_id": entry.parent_id,
            "island": entry.island,
            "proposer": entry.proposer,
            "status": entry.status.value,
            "reason": entry.reason,
            "program_id": entry.program_id,
            "tokens_in": entry.tokens_in,
            "tokens_out": entry.tokens_out,
            "cost_usd": entry.cost_usd,
            "prompt": entry.prompt,
            "answer": entry.answer,
            "prompt_variant": entry.prompt_variant,
            "created_at": now,
        }
        for entry in entries
    ]
    recorded = len((await session.execute(statement, rows)).all())
    if recorded:
        counted = await session.execute(
            _count_proposals_statement(), {"c_job": job_id, "c_count": recorded, "c_now": now}
        )
        if counted.first() is None:
            raise UnknownJobError(f"no job {job_id}")
    return recorded


@functools.cache
def _record_proposals_statement(dialect: str) -> Executable:
    """Built once per backend; executed with many parameter sets, which SQLAlchemy batches into
    multi-row VALUES. A proposal batch is the controller's most frequent write."""
    table = table_of(ProposalRow)
    return (
        dialect_table_insert(dialect, table)
        .on_conflict_do_nothing(index_elements=["job_id", "proposal_index"])
        .returning(table.c.proposal_index)
    )


@functools.cache
def _count_proposals_statement() -> Executable:
    """``jobs.proposals += c_count`` for job ``c_job``, built once (it follows every batch)."""
    jobs = table_of(JobRow)
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("c_job"))
        .values(proposals=jobs.c.proposals + bindparam("c_count"), updated_at=bindparam("c_now"))
        .returning(jobs.c.id)
    )


async def record_proposal(session: AsyncSession, *, job_id: JobId, **entry: Any) -> bool:
    """Log one proposal (the fields of :class:`ProposalEntry`); False if its index was logged."""
    return await record_proposals(session, job_id, [ProposalEntry(**entry)]) == 1


async def set_job_best(
    session: AsyncSession, job_id: JobId, program_id: ProgramId, score: float
) -> None:
    """Cache a program the caller knows is the job's best (the controller tracks it as results
    land), without the query of :func:`update_job_best`."""
    await _update_job(session, job_id, best_program_id=program_id, best_score=score)


async def proposal_stats(session: AsyncSession, job_id: JobId) -> tuple[int, int]:
    """``(proposals recorded, next free index)``; the next index is 0 for a new job."""
    count, highest = (
        await session.execute(
            select(func.count(), func.max(ProposalRow.proposal_index)).where(
                ProposalRow.job_id == job_id
            )
        )
    ).one()
    return int(count), 0 if highest is None else int(highest) + 1


async def proposal_counts(session: AsyncSession, job_id: JobId) -> dict[ProposalStatus, int]:
    """Proposals per outcome; outcomes that never happened are absent."""
    rows = await session.execute(
        select(ProposalRow.status, func.count())
        .where(ProposalRow.job_id == job_id)
        .group_by(ProposalRow.status)
    )
    return {ProposalStatus(status): int(count) for status, count in rows}
