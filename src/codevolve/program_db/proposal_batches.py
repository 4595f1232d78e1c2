"""The controller's most frequent write: a batch of settled proposals, their children and the
job's proposal counter, together.

:func:`write_proposals` inserts the children (skipping code already in the job, or earlier in the
batch), logs every proposal (a proposal whose child was skipped is logged as a duplicate) and adds
the new log entries to ``jobs.proposals``. On Postgres that is one statement: it is atomic by
itself, so the caller may run it on a connection in autocommit, one round trip in all, where a
transaction would cost a ``BEGIN`` and a ``COMMIT`` more; it passes the columns as arrays, so its
cost barely grows with the batch. Elsewhere (SQLite) it is the three statements of
:func:`~.programs.insert_programs` and :func:`~.jobs.record_proposals` in the caller's transaction.
Both give the same rows (an integration test compares them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from codevolve.core.program import JobId, Program, ProgramId, ProgramStatus
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db.errors import ProgramDbError
from codevolve.program_db.jobs import ProposalEntry, record_proposals
from codevolve.program_db.models import utcnow
from codevolve.program_db.programs import insert_programs

DUPLICATE_REASON = "already in the job"

# The children as arrays ($2-$12), the proposals as arrays ($13-$25), $1 the job. A child's
# results columns start empty, as a pending program's do (write_proposals checks that they are).
_POSTGRES = """
WITH given AS (
    SELECT * FROM unnest(
        $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::int[], $8::int[],
        $9::int[], $10::int[], $11::text[], $12::text[], $26::timestamptz[]
    ) AS g(id, source, content_hash, parent_id, island, epoch, generation, proposal_index,
           attempts, diff, proposer, created_at)
), inserted AS (
    INSERT INTO programs (
        id, job_id, source, content_hash, parent_id, island, epoch, generation, proposal_index,
        status, attempts, diff, proposer, stage_scores, metrics, heldout, features, cases,
        feedback, artifacts, created_at
    )
    SELECT id, $1, source, content_hash, parent_id, island, epoch, generation, proposal_index,
        'pending', attempts, diff, proposer, '{}', '{}', '{}', '{}', '[]', '', '{}', created_at
    FROM given
    ON CONFLICT (job_id, content_hash) DO NOTHING
    RETURNING id
), entries AS (
    SELECT e.*, e.program_id IS NULL OR e.program_id IN (SELECT id FROM inserted) AS kept
    FROM unnest(
        $13::int[], $14::text[], $15::int[], $16::text[], $17::text[], $18::text[], $19::text[],
        $20::int[], $21::int[], $22::float8[], $23::text[], $24::text[], $25::text[]
    ) AS e(proposal_index, parent_id, island, proposer, status, reason, program_id, tokens_in,
           tokens_out, cost_usd, prompt, answer, prompt_variant)
), logged AS (
    INSERT INTO proposals (
        job_id, proposal_index, parent_id, island, proposer, status, reason, program_id,
        tokens_in, tokens_out, cost_usd, prompt, answer, prompt_variant, created_at
    )
    SELECT $1, proposal_index, parent_id, island, proposer,
        CASE WHEN kept THEN status ELSE 'duplicate' END,
        CASE WHEN kept THEN reason ELSE $27 END,
        CASE WHEN kept THEN program_id END,
        tokens_in, tokens_out, cost_usd, prompt, answer, prompt_variant, $28::timestamptz
    FROM entries
    ON CONFLICT (job_id, proposal_index) DO NOTHING
    RETURNING 1
), counted AS (
    UPDATE jobs SET proposals = proposals + (SELECT count(*) FROM logged), updated_at = $28
    WHERE id = $1 AND EXISTS (SELECT 1 FROM logged)
)
SELECT id FROM inserted
"""


async def write_proposals(
    target: AsyncSession | AsyncConnection,
    job_id: JobId,
    children: Sequence[Program],
    entries: Sequence[ProposalEntry],
) -> set[ProgramId]:
    """Insert ``children`` (new pending programs), log ``entries`` and count them; returns the
    ids of the children inserted. An entry naming a child that was not inserted (its code is
    already in the job) is logged as a duplicate, with no program. An index already logged is
    left as it is and not counted again.

    ``target``: a session (its transaction), or on Postgres also a connection, which may be in
    autocommit: the write is one statement there."""
    for child in children:
        if not _is_new(child):
            raise ProgramDbError(f"program {child.id} is not a new pending program")
    if isinstance(target, AsyncSession):
        dialect = target.get_bind().dialect.name
    else:
        dialect = target.dialect.name
    if dialect == "postgresql":
        connection = target if isinstance(target, AsyncConnection) else await target.connection()
        rows = await connection.exec_driver_sql(
            _POSTGRES, _postgres_parameters(job_id, children, entries)
        )
        return {str(program_id) for (program_id,) in rows}
    if not isinstance(target, AsyncSession):
        raise ProgramDbError(f"a {dialect} proposal batch needs a session (a transaction)")
    return await write_with_statements(target, job_id, children, entries)


async def write_with_statements(
    session: AsyncSession,
    job_id: JobId,
    children: Sequence[Program],
    entries: Sequence[ProposalEntry],
) -> set[ProgramId]:
    """The same write as three statements, which every backend runs."""
    inserted = await insert_programs(session, children)
    await record_proposals(session, job_id, [_as_written(entry, inserted) for entry in entries])
    return inserted


def _is_new(program: Program) -> bool:
    """Pending with no results: what the Postgres statement writes for every child."""
    return (
        program.status is ProgramStatus.PENDING
        and program.score is None
        and not (program.stage_scores or program.metrics or program.heldout or program.features)
        and program.cell is None
        and not program.cases
        and not program.feedback
        and program.error is None
        and not program.artifacts
        and program.evaluated_at is None
    )


def _as_written(entry: ProposalEntry, inserted: set[ProgramId]) -> ProposalEntry:
    if entry.program_id is None or entry.program_id in inserted:
        return entry
    return dataclasses.replace(
        entry, status=ProposalStatus.DUPLICATE, reason=DUPLICATE_REASON, program_id=None
    )


def _postgres_parameters(
    job_id: JobId, children: Sequence[Program], entries: Sequence[ProposalEntry]
) -> tuple[Any, ...]:
    now = utcnow()
    return (
        job_id,
        [child.id for child in children],
        [child.source for child in children],
        [child.content_hash for child in children],
        [child.parent_id for child in children],
        [child.island for child in children],
        [child.epoch for child in children],
        [child.generation for child in children],
        [child.proposal_index for child in children],
        [child.attempts for child in children],
        [child.diff for child in children],
        [child.proposer for child in children],
        [entry.index for entry in entries],
        [entry.parent_id for entry in entries],
        [entry.island for entry in entries],
        [entry.proposer for entry in entries],
        [entry.status.value for entry in entries],
        [entry.reason for entry in entries],
        [entry.program_id for entry in entries],
        [entry.tokens_in for entry in entries],
        [entry.tokens_out for entry in entries],
        [entry.cost_usd for entry in entries],
        [entry.prompt for entry in entries],
        [entry.answer for entry in entries],
        [entry.prompt_variant for entry in entries],
        [child.created_at or now for child in children],
        DUPLICATE_REASON,
        now,
    )
