"""One job's unit of work: how the controller's reads and writes reach the database.

The controller says what to write; this module says how. It owns:

- the locks: archive transactions (results, islands, the job's state) run one at a time, and so
  do proposal writes; on Postgres the two kinds overlap, SQLite has one writer, so one lock
  serves both there;
- transactions: :meth:`JobStore.transaction` is one session and one transaction, committed on
  success and rolled back on an error (that end runs to completion even when the task is
  cancelled meanwhile), handed out as a :class:`JobTransaction` whose methods are the
  repository's functions for this job;
- the batched proposal write (:meth:`JobStore.write_proposals`, which returns the children it
  inserted): on Postgres one statement on a held autocommit connection (one round trip: a
  transaction would cost a ``BEGIN`` and a ``COMMIT`` more), elsewhere a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.job import Job, JobState
from codevolve.core.launch_store import LaunchKey, StoredTiming
from codevolve.core.measurement import Remeasure
from codevolve.core.program import CellKey, Evaluation, IslandId, JobId, Program, ProgramId
from codevolve.core.prompt import BestCase
from codevolve.program_db import repository
from codevolve.program_db.archive import AddOutcome
from codevolve.program_db.engine import when_free
from codevolve.program_db.mirror import ArchiveMirror
from codevolve.program_db.usage import UsageRow

log = logging.getLogger(__name__)

Sessions = async_sessionmaker[AsyncSession]  # the process's session factory (engine.py)


class JobStore:
    """The database as one job's controller uses it: one archive transaction at a time, one
    proposal write at a time. :meth:`close` returns the held connection."""

    def __init__(self, sessions: Sessions, job_id: JobId) -> None:
        self._sessions = sessions
        self._job_id = job_id
        bind = sessions.kw.get("bind")
        dialect = str(bind.dialect.name) if bind is not None else "sqlite"
        self._archive_lock = asyncio.Lock()
        self._proposal_lock = self._archive_lock if dialect == "sqlite" else asyncio.Lock()
        self._autocommit: AsyncEngine | None = (  # proposal batches: one statement each
            bind.execution_options(isolation_level="AUTOCOMMIT")
            if isinstance(bind, AsyncEngine) and dialect == "postgresql"
            else None
        )
        self._held: AsyncConnection | None = None  # the autocommit connection, while held

    @property
    def job_id(self) -> JobId:
        return self._job_id

    def transaction(self) -> _Transaction:
        """An archive transaction: results, islands, the job's state and its counters."""
        return _Transaction(self._sessions, self._archive_lock, self._job_id)

    def reading(self) -> _Transaction:
        """A transaction that only reads, which may overlap archive transactions where the
        database allows (it waits for proposal writes instead)."""
        return _Transaction(self._sessions, self._proposal_lock, self._job_id)

    async def write_proposals(
        self, children: Sequence[Program], entries: Sequence[repository.ProposalEntry]
    ) -> set[ProgramId]:
        """Insert ``children`` (new pending programs), log ``entries`` and count them, as
        :func:`~.proposal_batches.write_proposals` does; returns the ids of the children
        inserted (a child whose code is already in the job is logged as a duplicate)."""
        if self._autocommit is None:
            async with self.reading() as unit:
                return await repository.write_proposals(
                    unit._session, self._job_id, children, entries
                )
        async with self._autocommit_connection(self._autocommit) as connection:
            return await repository.write_proposals(connection, self._job_id, children, entries)

    async def close(self) -> None:
        """Return the held autocommit connection (after the write that holds it, if any)."""
        async with self._proposal_lock:
            await self._release_held()

    @contextlib.asynccontextmanager
    async def _autocommit_connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """The run's one autocommit connection, checked out once rather than per batch (a
        checkout and its return cost as much CPU as the statement). A write that raises drops
        it: the next one connects afresh, so a database restart costs one failed batch."""
        async with self._proposal_lock:
            if self._held is None:
                self._held = await when_free(engine.connect, waiter=f"job {self._job_id}")
            try:
                yield self._held
            except BaseException:
                await self._release_held()
                raise

    async def _release_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            try:
                await held.close()
            except Exception:  # noqa: BLE001  (a broken connection: the pool discards it)
                log.debug("job %s: the proposal connection closed uncleanly", self._job_id)


class _Transaction:
    """``async with``: one session, one transaction, committed on success; one at a time."""

    def __init__(self, sessions: Sessions, lock: asyncio.Lock, job_id: JobId) -> None:
        self._sessions = sessions
        self._lock = lock
        self._job_id = job_id
        self._session: AsyncSession | None = None

    async def __aenter__(self) -> JobTransaction:
        await self._lock.acquire()
        try:
            self._session = await when_free(self._open, waiter=f"job {self._job_id}")
        except BaseException:
            self._lock.release()
            raise
        return JobTransaction(self._session, self._job_id)

    async def _open(self) -> AsyncSession:
        """A session in a transaction that holds its connection (checked out here, where a
        pool timeout is a wait: see :func:`~.engine.when_free`)."""
        session = self._sessions()
        try:
            await session.begin()
            await session.connection()
        except BaseException:
            await session.close()
            raise
        return session

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._session is not None
        try:
            await _to_completion(_end(self._session, commit=exc_type is None))
        finally:
            self._lock.release()


async def _end(session: AsyncSession, *, commit: bool) -> None:
    """Commit or roll back, then return the connection to the pool."""
    try:
        if commit:
            await session.commit()
        else:
            await session.rollback()
    finally:
        await session.close()


async def _to_completion(end: Coroutine[Any, Any, None]) -> None:
    """Await a transaction's ``end`` to its last step, even when the task is cancelled meanwhile
    (Ctrl-C stops the controller's tasks wherever they are); the cancellation is raised once the
    end is done, never dropped.

    An end cut short leaves the connection half-returned: the pool logs the interrupted reset
    (with a traceback, on the command line's stderr) and closes the connection, and the task is
    over before its connection is. Run to its end, the transaction is committed or rolled back
    and the connection is back in the pool before the cancelled task finishes, so whoever writes
    next (the shutdown writes of :meth:`Controller.run`) finds the database free."""
    task = asyncio.create_task(end)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is None:
        task.result()  # the end's own error, if any
        return
    error = None if task.cancelled() else task.exception()
    if error is not None:
        raise cancelled from error
    raise cancelled


class JobTransaction:
    """The repository's functions for one job, in one open transaction (its caller commits)."""

    def __init__(self, session: AsyncSession, job_id: JobId) -> None:
        self._session = session
        self._job_id = job_id

    # ---------------------------------------------------------------------- the job

    async def job(self) -> Job | None:
        return await repository.get_job(self._session, self._job_id)

    async def set_state(self, state: JobState, *, error: str | None = None) -> None:
        await repository.set_job_state(self._session, self._job_id, state, error=error)

    async def add_wall(self, seconds: float) -> None:
        await repository.add_job_wall(self._session, self._job_id, seconds)

    async def proposal_stats(self) -> tuple[int, int]:
        """(proposals logged, the next proposal index)."""
        return await repository.proposal_stats(self._session, self._job_id)

    async def proposal_usage(self) -> list[UsageRow]:
        return await repository.proposal_usage(self._session, self._job_id)

    async def record_proposal(self, entry: repository.ProposalEntry) -> bool:
        """Log one proposal; False when its index was logged already."""
        return await repository.record_proposals(self._session, self._job_id, [entry]) == 1

    # ------------------------------------------------------------------ programs

    async def insert_program(self, program: Program) -> None:
        await repository.insert_program(self._session, program)

    async def program(self, program_id: ProgramId) -> Program | None:
        return await repository.get_program(self._session, program_id)

    async def programs(self, ids: Sequence[ProgramId]) -> list[Program]:
        return await repository.get_programs(self._session, ids)

    async def find_by_hash(self, content_hash: str) -> ProgramId | None:
        return await repository.find_program_by_hash(self._session, self._job_id, content_hash)

    async def pending_programs(self) -> list[Program]:
        return await repository.pending_programs(self._session, self._job_id)

    async def mark_enqueued(self, program_id: ProgramId) -> int:
        """Count one more attempt; returns the program's attempts."""
        return await repository.mark_enqueued(self._session, program_id)

    async def apply_evaluations(
        self, results: Sequence[tuple[Evaluation, CellKey | None]]
    ) -> set[ProgramId]:
        """The guarded ``pending -> evaluated`` transition; the ids it applied."""
        return await repository.apply_evaluations(self._session, results)

    # ------------------------------------------------------------------ the archive

    async def archive(self) -> ArchiveMirror:
        return await ArchiveMirror.load(self._session, self._job_id)

    async def add_elite(
        self, *, island: IslandId, cell: CellKey, program_id: ProgramId, score: float, epoch: int
    ) -> AddOutcome:
        return await repository.add_elite(
            self._session,
            job_id=self._job_id,
            island=island,
            cell=cell,
            program_id=program_id,
            score=score,
            epoch=epoch,
        )

    async def best_cases(self) -> dict[str, BestCase]:
        return await repository.best_cases(self._session, self._job_id)

    async def record_best_cases(self, cases: Sequence[BestCase]) -> None:
        await repository.record_best_cases(self._session, self._job_id, cases)

    async def stored_timings(self, keys: Sequence[LaunchKey]) -> list[StoredTiming]:
        """The launch store's timings for ``keys`` (every GPU model and harness version)."""
        return await repository.stored_timings(self._session, keys)

    async def record_timings(self, timings: Sequence[StoredTiming]) -> None:
        await repository.record_timings(self._session, timings)

    async def migrate(self, *, migrants: int) -> int:
        return await repository.migrate(self._session, self._job_id, migrants=migrants)

    async def reset_islands(self, rng: np.random.Generator) -> list[IslandId]:
        return await repository.reset_islands(self._session, self._job_id, rng)

    # -------------------------------------------------------------- re-measures

    async def confirmed_best(self) -> Program | None:
        return await repository.confirmed_best(self._session, self._job_id)

    async def remeasure_candidates(
        self, *, above: float | None, exclude: Sequence[ProgramId], limit: int
    ) -> list[Program]:
        return await repository.remeasure_candidates(
            self._session, self._job_id, above=above, exclude=exclude, limit=limit
        )

    async def record_remeasure(
        self,
        program_id: ProgramId,
        verdict: Remeasure,
        *,
        heldout: Mapping[str, float] | None = None,
    ) -> bool:
        return await repository.record_remeasure(
            self._session, program_id, verdict, heldout=heldout
        )

    async def set_best(self, program_id: ProgramId, score: float) -> None:
        await repository.set_job_best(self._session, self._job_id, program_id, score)
