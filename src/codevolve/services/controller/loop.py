"""The evolution controller: one asyncio loop per job.

It samples a parent and inspirations, builds a prompt, asks the proposer for a diff, applies it,
inserts the child (pending) and only then enqueues its task; results are applied with a guarded
transition, so a duplicate delivery changes nothing. Every state change that matters is committed
before the next step, so the process can be killed at any point and the job resumed: pending
programs are re-enqueued, evaluated ones are never evaluated again.

Many proposals are in flight at once (``RunConfig.max_in_flight``), and the database work is
batched so that it does not grow with them:

- the job's archive (island epochs, elites) is mirrored in memory (:class:`ArchiveMirror`): the
  controller is its only writer, so parents are drawn without a query, and the parent and
  inspiration programs come from a small cache of elite programs;
- proposals that finish while a write is in progress are written together: the children
  (deduplicated by the database in the same statement), the proposal log and the job's counter
  in one statement on Postgres (in autocommit: one round trip), then one round trip to the queue;
- results are read and applied in batches: one guarded UPDATE for all of them, and the archive
  statements only for the programs that change it.

The job's best is confirmed before it is reported: a program that beats the confirmed best is
re-measured on fresh seeds (:mod:`.remeasures`), and only its confirmed figure can make it the
job's best; the archive and the prompts go on using the scores programs were picked on.

The database is touched by one transaction at a time (SQLite allows one writer).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.diff import ApplyFailure
from codevolve.core.job import Job, JobState
from codevolve.core.measurement import RemeasurePolicy, Verdict, judge
from codevolve.core.problem import Problem
from codevolve.core.program import CellKey, Evaluation, Program, ProgramId, ProgramStatus
from codevolve.core.prompt import BestCase, ProgramView, Prompt, ProposalStatus
from codevolve.core.task import Task
from codevolve.evaluator_workers.queue import TaskQueue
from codevolve.program_db import archive, repository
from codevolve.program_db.archive import WRITTEN
from codevolve.program_db.mirror import ArchiveMirror
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.proposers.base import Proposer
from codevolve.services.controller.proposal_ledger import ProposalLedger
from codevolve.services.controller.proposal_pool import ProposalPool, Settled, content_hash
from codevolve.services.controller.remeasures import AT_ONCE, Remeasures

log = logging.getLogger(__name__)

INITIAL_PROPOSAL_INDEX = -1  # the seed program is not the answer to any proposal
RESULT_POLL_S = 0.2  # seconds; how often the result loop checks for the end of the run
RESULT_BATCH = 256  # results applied per transaction, at most
CACHED_PROGRAMS = 4096  # elite programs kept in memory for prompts (parents, inspirations)
CONTROL_POLL_S = 2.0  # seconds; how often the job's state is re-read (pause/cancel from outside)


@dataclass(slots=True)
class Progress:
    """Live counters of a run, for progress bars and logs."""

    proposals: int = 0  # proposals recorded, this run and earlier ones
    max_proposals: int = 0
    evaluated: int = 0  # results applied in this process
    failed: int = 0
    rejected: int = 0
    apply_failed: int = 0
    duplicates: int = 0
    remeasured: int = 0  # re-measure samples applied in this process (not proposals)
    best_score: float | None = None  # the job's best as confirmed on independent samples
    started: float = field(default_factory=time.monotonic)

    @property
    def evaluated_per_s(self) -> float:
        elapsed = time.monotonic() - self.started
        done = self.evaluated + self.failed + self.rejected
        return done / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True, slots=True)
class _InFlight:
    program: Program
    holds_slot: bool  # a proposal slot is released when its result lands
    task: Task | None = None  # as enqueued; continued when a worker hands the program on


class _Written(StrEnum):
    """What became of a proposal once its write committed."""

    CHILD = "child"  # the child was inserted and enqueued; it holds the proposal's slot
    DUPLICATE = "duplicate"  # the child's code was already in the job
    RECORDED = "recorded"  # no child (the proposer failed or the answer did not apply)


@dataclass(slots=True)
class _Write:
    """A settled proposal waiting for the next batched write."""

    entry: repository.ProposalEntry
    child: Program | None
    parent_scores: dict[str, float]
    seed: int
    done: asyncio.Future[_Written]


class Controller:
    """Runs one job until its budget is spent, it is paused or cancelled, or it fails."""

    def __init__(
        self,
        job: Job,
        *,
        sessions: async_sessionmaker[AsyncSession],
        queue: TaskQueue,
        problem: Problem,
        proposer: Proposer,
        on_progress: Callable[[Progress], None] | None = None,
        proposal_processes: int = 0,
    ) -> None:
        """``proposal_processes``: child processes that make the proposals of a ``cpu_bound``
        proposer (the simulated one), so that this process's core goes to the database, the
        queue and the archive; 0 makes them here. Other proposers always run here."""
        self._job = job
        self._config = job.config
        self._sessions = sessions
        self._queue = queue
        self._problem = problem
        self._proposer = proposer
        self._ledger = ProposalLedger(job.config, proposer)  # cost budget, prompt logs, learning
        # The prompt's text is rendered only for whoever reads it: the proposer or the log.
        self._renders_prompts = proposer.reads_prompt_text or self._ledger.logs_prompts
        self._on_progress = on_progress or (lambda _p: None)
        self._pool = ProposalPool(  # its processes start and stop with run()
            proposer,
            processes=proposal_processes if proposer.cpu_bound else 0,
            max_code_length=self._config.max_code_length,
        )
        # Archive transactions (results, islands, the job's state) run one at a time, and so do
        # proposal writes. On Postgres the two kinds overlap; SQLite has one writer: one lock.
        bind = sessions.kw.get("bind")
        dialect = str(bind.dialect.name) if bind is not None else "sqlite"
        self._db_lock = asyncio.Lock()
        self._write_lock = self._db_lock if dialect == "sqlite" else asyncio.Lock()
        self._autocommit: AsyncEngine | None = (  # proposal batches: one statement each
            bind.execution_options(isolation_level="AUTOCOMMIT")
            if isinstance(bind, AsyncEngine) and dialect == "postgresql"
            else None
        )
        self._held: AsyncConnection | None = None  # the autocommit connection, while a run holds it
        self._slots = asyncio.Semaphore(self._config.max_in_flight)
        self._in_flight: dict[ProgramId, _InFlight] = {}
        # The best cost seen per case, mirrored from the database: read per proposal, written
        # (improvements only) per result, so neither costs a query of all cases each time.
        self._best_cases: dict[str, BestCase] = {}
        self._mirror: ArchiveMirror | None = None  # None: (re)load from the database
        self._programs: OrderedDict[ProgramId, Program] = OrderedDict()  # elites, for prompts
        self._views: dict[ProgramId, tuple[Program, ProgramView]] = {}  # of cached programs
        self._writes: list[_Write] = []  # settled proposals waiting for the writer
        self._writing = False  # a proposal is writing batches now; others join its next one
        self._result_read: asyncio.Future[list[Evaluation]] | None = None  # the one waiting
        self._archive_changed = asyncio.Event()
        self._stop_proposing = asyncio.Event()
        self._final_state = JobState.DONE
        self._error: str | None = None
        self.progress = Progress(max_proposals=self._config.max_proposals)
        policy = RemeasurePolicy(top_k=AT_ONCE, samples=self._config.remeasure_samples)
        self._remeasures = Remeasures(job.id, self._config, policy)
        self._baseline_cases: dict[str, float] | None = None  # the initial program's, per case

    @property
    def job(self) -> Job:
        return self._job

    # ------------------------------------------------------------------ run

    async def run(self) -> JobState:
        """Run (or resume) the job; returns the state it ends in."""
        started = time.monotonic()
        proposals_done, next_index = await self._start()
        self.progress.proposals = proposals_done
        try:
            async with self._pool, asyncio.TaskGroup() as tg:
                tg.create_task(self._consume_results())
                tg.create_task(self._watch_control(started))
                await self._produce(tg, proposals_done=proposals_done, next_index=next_index)
                self._stop_proposing.set()
                self._end_result_wait()
        finally:
            async with self._write_lock:
                await self._release_held()
            async with self._transaction() as session:
                await repository.add_job_wall(session, self._job.id, time.monotonic() - started)
        async with self._transaction() as session:
            await repository.set_job_state(
                session, self._job.id, self._final_state, error=self._error
            )
        return self._final_state

    async def _start(self) -> tuple[int, int]:
        """Mark the job running, seed it or re-enqueue what a crash left pending."""
        async with self._transaction() as session:
            await repository.set_job_state(session, self._job.id, JobState.RUNNING)
            count, next_index = await repository.proposal_stats(session, self._job.id)
            pending = await repository.pending_programs(session, self._job.id)
            seeded = await repository.find_program_by_hash(
                session, self._job.id, content_hash(self._problem.initial_program)
            )
            if seeded is None:
                pending = [await self._insert_initial(session)]
            best = await repository.confirmed_best(session, self._job.id)
            confirmed = None if best is None or best.remeasure is None else best.remeasure.confirmed
            self.progress.best_score = confirmed
            self._best_cases = await repository.best_cases(session, self._job.id)
            self._ledger.warm_start(await repository.proposal_usage(session, self._job.id))
            self._mirror = await self._load_archive(session)
        for program in pending:
            await self._enqueue(program)
        if pending:
            log.info("job %s: %d pending program(s) enqueued", self._job.id, len(pending))
        await self._remeasure_more()  # those a crash interrupted
        return count, next_index

    async def _enqueue_stranded(self) -> None:
        async with self._transaction() as session:
            pending = await repository.pending_programs(session, self._job.id)
        for program in pending:
            if program.id not in self._in_flight:
                log.warning("job %s: program %s had no task; enqueued", self._job.id, program.id)
                await self._enqueue(program)

    async def requeue_pending(self) -> int:
        """Enqueue every pending program and every re-measure sample not landed again, e.g.
        after the queue lost its tasks (Redis restarted empty); returns how many tasks. A
        result that also arrives is applied once."""
        async with self._transaction() as session:
            pending = await repository.pending_programs(session, self._job.id)
        for program in pending:
            flight = self._in_flight.get(program.id)
            await self._enqueue(program, holds_slot=flight is not None and flight.holds_slot)
        outstanding = self._remeasures.outstanding()
        await self._queue.submit_many(outstanding)
        return len(pending) + len(outstanding)

    async def _insert_initial(self, session: AsyncSession) -> Program:
        source = self._problem.initial_program
        program = Program(
            id=uuid.uuid4().hex,
            job_id=self._job.id,
            source=source,
            content_hash=content_hash(source),
            parent_id=None,
            island=0,
            generation=0,
            proposal_index=INITIAL_PROPOSAL_INDEX,
            status=ProgramStatus.PENDING,
            proposer="initial",
        )
        await repository.insert_program(session, program)
        return program

    async def _produce(
        self, tg: asyncio.TaskGroup, *, proposals_done: int, next_index: int
    ) -> None:
        """Start proposals while the budget lasts; each holds a slot until its result lands."""
        remaining = self._config.max_proposals - proposals_done
        index = next_index
        while remaining > 0 and not self._stop_proposing.is_set():
            await self._slots.acquire()
            if self._ledger.over_budget():
                log.info("job %s: cost budget reached", self._job.id)
                self._stop_proposing.set()
            if self._stop_proposing.is_set():
                self._slots.release()
                break
            tg.create_task(self._propose(index))
            index += 1
            remaining -= 1
        # Wait for every slot to come back: all proposals resolved, all results applied.
        for _ in range(self._config.max_in_flight):
            await self._slots.acquire()

    # ------------------------------------------------------------ proposals

    async def _propose(self, index: int) -> None:
        """One proposal, start to enqueue. The controller's per-iteration error boundary."""
        released = False
        try:
            released = await self._propose_once(index)
        except asyncio.CancelledError:
            raise
        except Exception:  # the iteration boundary: record, log with ids, go on
            log.exception("job %s proposal %d failed in the controller", self._job.id, index)
            async with self._transaction() as session:
                recorded = await repository.record_proposal(
                    session,
                    job_id=self._job.id,
                    index=index,
                    parent_id=None,
                    island=0,
                    proposer=self._proposer.name,
                    status=ProposalStatus.PROPOSER_FAILED,
                    reason="internal error (see the controller log)",
                )
            self.progress.proposals += recorded
        finally:
            if not released:
                self._slots.release()
            self._on_progress(self.progress)

    async def _propose_once(self, index: int) -> bool:
        """Returns True when the slot now belongs to an enqueued child (released on its result)."""
        config = self._config
        island = index % config.islands
        rng = np.random.default_rng([config.seed, index])
        await self._maintain_islands(index, rng)
        sample = None
        while sample is None:
            sample = await self.sample(island, rng)
            best_cases = dict(self._best_cases)
            if sample is None:  # nothing evaluated yet: wait for the seed to land
                if self._stop_proposing.is_set():
                    return False
                self._archive_changed.clear()
                await self._archive_changed.wait()
        prompt = build_prompt(
            job_id=self._job.id,
            problem=self._problem.name,
            context=self._problem.description,
            proposal_index=index,
            island=island,
            parent=self._view(sample.parent),
            inspirations=[self._view(p) for p in sample.inspirations],
            best_cases=best_cases,
            rng=rng,
            styles=self._ledger.styles,
            render=self._renders_prompts,
        )
        settled = await self._pool.settle(prompt, rng)
        return await self._accept(
            index,
            island=island,
            sample_epoch=sample.epoch,
            parent=sample.parent,
            settled=settled,
            prompt=prompt,
        )

    async def sample(self, island: int, rng: np.random.Generator) -> repository.Sample | None:
        """A parent and inspirations drawn from the in-memory archive; their programs come from
        the cache, or from one query for those it lacks."""
        config = self._config
        mirror = await self._archive()
        drawn = mirror.sample(
            island,
            rng,
            exploit_ratio=config.exploit_ratio,
            temperature=config.rank_temperature,
            top=config.top_inspirations,
            diverse=config.diverse_inspirations,
        )
        if drawn is None:
            return None
        ids = [drawn.parent.program_id, *(elite.program_id for elite in drawn.inspirations)]
        programs = await self._cached_programs(ids)
        if not programs or programs[0].id != drawn.parent.program_id:
            raise RuntimeError(f"elite program {drawn.parent.program_id} is missing")
        return repository.Sample(
            parent=programs[0], inspirations=tuple(programs[1:]), epoch=drawn.epoch
        )

    async def _archive(self) -> ArchiveMirror:
        if self._mirror is None:
            async with self._transaction() as session:
                mirror = await self._load_archive(session)
            self._mirror = self._mirror or mirror
        return self._mirror

    async def _load_archive(self, session: AsyncSession) -> ArchiveMirror:
        """The archive from the database, and every elite program into the cache (one query of
        at most islands x cells rows), so that drawing a parent never waits for the database."""
        mirror = await ArchiveMirror.load(session, self._job.id)
        missing = [pid for pid in mirror.program_ids() if pid not in self._programs]
        self._cache(await repository.get_programs(session, missing))
        return mirror

    async def _cached_programs(self, ids: Sequence[ProgramId]) -> list[Program]:
        missing = [program_id for program_id in ids if program_id not in self._programs]
        if missing:
            async with self._transaction(proposals=True) as session:
                self._cache(await repository.get_programs(session, missing))
        found = []
        for program_id in ids:
            program = self._programs.get(program_id)
            if program is not None:
                self._programs.move_to_end(program_id)
                found.append(program)
        return found

    def _cache(self, programs: Sequence[Program]) -> None:
        for program in programs:
            self._programs[program.id] = program
            self._programs.move_to_end(program.id)
        while len(self._programs) > CACHED_PROGRAMS:
            evicted, _program = self._programs.popitem(last=False)
            self._views.pop(evicted, None)

    def _view(self, program: Program) -> ProgramView:
        """The prompt's view of a cached program, made once per program as cached (parents and
        inspirations recur in proposal after proposal)."""
        made = self._views.get(program.id)
        if made is not None and made[0] is program:
            return made[1]
        view = _make_view(program)
        self._views[program.id] = (program, view)
        return view

    async def _accept(
        self,
        index: int,
        *,
        island: int,
        sample_epoch: int,
        parent: Program,
        settled: Settled,
        prompt: Prompt,
    ) -> bool:
        """Record the proposal, and insert and enqueue its child if there is one, in the next
        batched write."""
        proposal, outcome = settled.proposal, settled.outcome
        prompt_text, answer_text = self._ledger.texts(prompt, proposal)
        entry = repository.ProposalEntry(
            index=index,
            parent_id=parent.id,
            island=island,
            proposer=proposal.proposer,
            status=ProposalStatus.CHILD,
            tokens_in=proposal.tokens_in,
            tokens_out=proposal.tokens_out,
            cost_usd=proposal.cost_usd,
            prompt=prompt_text,
            answer=answer_text,
            prompt_variant=prompt.variant,
        )
        child: Program | None = None
        if outcome is None:
            entry = dataclasses.replace(
                entry, status=ProposalStatus.PROPOSER_FAILED, reason=proposal.error or ""
            )
        elif isinstance(outcome, ApplyFailure):
            entry = dataclasses.replace(
                entry,
                status=ProposalStatus.APPLY_FAILED,
                reason=f"{outcome.kind}: {outcome.message}",
            )
        else:
            child = Program(
                id=uuid.uuid4().hex,
                job_id=self._job.id,
                source=outcome.source,
                content_hash=settled.content_hash,
                parent_id=parent.id,
                island=island,
                epoch=sample_epoch,
                generation=parent.generation + 1,
                proposal_index=index,
                status=ProgramStatus.PENDING,
                attempts=1,  # its task is enqueued right after the insert commits
                diff=outcome.diff_text,
                proposer=proposal.proposer,
            )
            entry = dataclasses.replace(entry, program_id=child.id)
        written = await self._write(
            _Write(
                entry=entry,
                child=child,
                parent_scores=dict(parent.stage_scores),
                seed=settled.seed,
                done=asyncio.get_running_loop().create_future(),
            )
        )
        self.progress.proposals += 1
        if written is _Written.RECORDED:
            self.progress.apply_failed += 1
        elif written is _Written.DUPLICATE:
            self.progress.duplicates += 1
        self._ledger.settled(
            prompt,
            proposal,
            child=child.id if child and written is _Written.CHILD else None,
            parent_score=parent.score,
        )
        return written is _Written.CHILD

    async def _write(self, write: _Write) -> _Written:
        """Queue a settled proposal for the next batched write and wait until it is written.

        The first proposal to arrive while no write runs does the writing, batch after batch,
        until nothing waits; the others join whatever batch comes next."""
        self._writes.append(write)
        if not self._writing:
            self._writing = True
            try:
                while self._writes:
                    batch, self._writes = self._writes, []
                    try:
                        await self._write_batch(batch)
                    except Exception as exc:  # noqa: BLE001  (each proposal of the batch meets it)
                        for pending in batch:
                            if not pending.done.done():
                                pending.done.set_exception(exc)
            finally:
                self._writing = False
        return await write.done

    async def _write_batch(self, batch: Sequence[_Write]) -> None:
        """One write of the batch's children and proposal log (one statement on Postgres, one
        transaction on SQLite), then one round trip to the queue for the children's tasks."""
        children = [write.child for write in batch if write.child is not None]
        entries = [write.entry for write in batch]
        async with self._proposal_write() as target:
            inserted = await repository.write_proposals(target, self._job.id, children, entries)
        tasks = []
        for write in batch:
            if write.child is not None and write.child.id in inserted:
                task = self._task(write.child, parent_scores=write.parent_scores, seed=write.seed)
                self._in_flight[write.child.id] = _InFlight(
                    program=write.child, holds_slot=True, task=task
                )
                tasks.append(task)
        try:
            await self._queue.submit_many(tasks)
        except BaseException:  # not queued: nothing is in flight, and the end of the run sends it
            for task in tasks:
                self._in_flight.pop(task.program_id, None)
            raise
        for write in batch:
            if write.child is None:
                write.done.set_result(_Written.RECORDED)
            elif write.child.id in inserted:
                write.done.set_result(_Written.CHILD)
            else:
                write.done.set_result(_Written.DUPLICATE)

    def _task(self, program: Program, *, parent_scores: dict[str, float], seed: int | None) -> Task:
        return Task(
            program_id=program.id,
            job_id=self._job.id,
            problem=self._job.config.problem,  # what workers resolve, e.g. bundle:<sha>
            source=program.source,
            seed=seed if seed is not None else _derived_seed(self._config.seed, program),
            parent_scores=parent_scores,
            limits=self._config.sandbox,
            attempt=program.attempts,
        )

    async def _enqueue(self, program: Program, *, holds_slot: bool = False) -> None:
        """Send a program already in the database again (a resume, a lost queue)."""
        async with self._transaction() as session:
            attempts = await repository.mark_enqueued(session, program.id)
            parent_scores = await self._parent_scores(session, program)
        program = dataclasses.replace(program, attempts=attempts)
        task = self._task(program, parent_scores=parent_scores, seed=None)
        self._in_flight[program.id] = _InFlight(program=program, holds_slot=holds_slot, task=task)
        try:
            await self._queue.submit(task)
        except BaseException:  # not queued: nothing is in flight, and the end of the run sends it
            self._in_flight.pop(program.id, None)
            raise

    async def _hand_on(self, evaluation: Evaluation) -> None:
        """Enqueue the rest of a cascade that a worker could not run (a GPU stage) for a worker
        with the capability it needs; the stages already run travel with the task."""
        if evaluation.remeasure:
            handed = self._remeasures.hand_on(evaluation)
            if handed is not None:
                await self._queue.submit(handed)
            return
        flight = self._in_flight.get(evaluation.program_id)
        if flight is None or flight.task is None or evaluation.handoff is None:
            log.info("program %s: hand-off of a task no longer in flight", evaluation.program_id)
            return
        task = dataclasses.replace(
            flight.task,
            capability=evaluation.handoff,
            start_stage=len(evaluation.stages),
            prior_stages=evaluation.stages,
        )
        self._in_flight[evaluation.program_id] = dataclasses.replace(flight, task=task)
        await self._queue.submit(task)

    async def _parent_scores(self, session: AsyncSession, program: Program) -> dict[str, float]:
        if program.parent_id is None:
            return {}
        parent = await repository.get_program(session, program.parent_id)
        return dict(parent.stage_scores) if parent else {}

    async def _maintain_islands(self, index: int, rng: np.random.Generator) -> None:
        """Migration and island resets, on fixed proposal indices so a resumed run keeps pace.
        They go through the database's guarded statements; the mirror is then read back."""
        config = self._config
        migrating = bool(config.migration_interval) and index % config.migration_interval == 0
        resetting = bool(config.reset_interval) and index % config.reset_interval == 0
        if index == 0 or not (migrating or resetting):
            return
        try:
            async with self._transaction() as session:
                if migrating:
                    await repository.migrate(session, self._job.id, migrants=config.migrants)
                if resetting:
                    reset = await repository.reset_islands(session, self._job.id, rng)
                    log.info("job %s: islands %s reset at proposal %d", self._job.id, reset, index)
                mirror = await self._load_archive(session)
        except BaseException:
            self._mirror = None
            raise
        self._mirror = mirror

    # -------------------------------------------------------------- results

    async def _consume_results(self) -> None:
        """Apply results until every proposal is resolved and nothing is in flight."""
        while not self._nothing_awaited():
            evaluations = await self._next_results()
            if not evaluations and self._nothing_awaited():
                # A proposal broken between inserting its child and enqueueing it (a database
                # restart) leaves the child pending with no task: send it before ending.
                await self._enqueue_stranded()
            if not evaluations:
                continue
            await self._apply(evaluations)
            self._on_progress(self.progress)

    async def _next_results(self) -> list[Evaluation]:
        """The next batch of results, or [] when the run ended while the read waited for one."""
        self._result_read = asyncio.ensure_future(
            self._queue.next_results(RESULT_POLL_S, RESULT_BATCH)
        )
        try:
            return await self._result_read
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the run itself is cancelled
            return []  # _end_result_wait
        finally:
            self._result_read = None

    def _end_result_wait(self) -> None:
        """Stop a read that waits for results when none can come (the run is over and nothing
        is in flight), rather than let it wait out its poll. A result it had read anyway is
        for no program in flight, so applying it would change nothing."""
        if self._nothing_awaited() and self._result_read:
            self._result_read.cancel()

    def _nothing_awaited(self) -> bool:
        """The run is over and no result it waits for can come. A run that ends done waits for
        its re-measures (its report names a confirmed best); a paused, cancelled or failed one
        leaves them to the resume, which finds them in the database."""
        remeasuring = bool(self._remeasures) and self._final_state is JobState.DONE
        return self._stop_proposing.is_set() and not self._in_flight and not remeasuring

    async def _apply(self, evaluations: Sequence[Evaluation]) -> None:
        finals, samples = [], []
        for evaluation in evaluations:
            if evaluation.handoff is not None:  # unfinished: the next stage runs elsewhere
                await self._hand_on(evaluation)
            elif evaluation.remeasure:
                samples.append(evaluation)
            else:
                finals.append(evaluation)
        if samples:
            await self._apply_samples(samples)
        if finals:
            await self._apply_programs(finals)

    async def _apply_programs(self, finals: Sequence[Evaluation]) -> None:
        flights: dict[ProgramId, _InFlight | None] = {}
        for evaluation in finals:  # a program twice in the batch (a duplicate delivery): pop once
            if evaluation.program_id not in flights:
                flights[evaluation.program_id] = self._in_flight.pop(evaluation.program_id, None)
        results = [(ev, self._cell(ev)) for ev in finals]
        try:
            async with self._transaction() as session:
                applied_ids = await repository.apply_evaluations(session, results)
                applied: dict[ProgramId, tuple[Program, Evaluation, CellKey | None]] = {}
                known = {pid: flight.program for pid, flight in flights.items() if flight}
                missing = [pid for pid in applied_ids if pid not in known]
                known.update({p.id: p for p in await repository.get_programs(session, missing)})
                for evaluation, cell in results:
                    program = known.get(evaluation.program_id)
                    if evaluation.program_id in applied_ids and program is not None:
                        applied.setdefault(program.id, (program, evaluation, cell))
                await self._archive_results(session, list(applied.values()))
        except BaseException:
            self._mirror = None  # it may hold what the rolled-back transaction wrote
            raise
        for program, evaluation, _cell in applied.values():
            self._count(evaluation)
            self._ledger.evaluated(evaluation)
            if program.parent_id is None and evaluation.status is not ProgramStatus.EVALUATED:
                self._fail(f"the initial program did not pass: {evaluation.error or 'rejected'}")
        if any(self._beats_best(evaluation.score) for _p, evaluation, _c in applied.values()):
            await self._remeasure_more()  # before the slots go back: the run's end waits for it
        for flight in flights.values():
            if flight is not None and flight.holds_slot:
                self._slots.release()

    def _cell(self, evaluation: Evaluation) -> CellKey | None:
        if evaluation.status is not ProgramStatus.EVALUATED:
            return None
        return archive.cell_key(evaluation.features, self._problem.features)

    async def _archive_results(
        self,
        session: AsyncSession,
        applied: Sequence[tuple[Program, Evaluation, CellKey | None]],
    ) -> None:
        """Best cases, elites and the job's best for a batch of applied results: statements only
        for what changes, decided by the mirror and written through the guarded upserts."""
        mirror = self._mirror or await self._load_archive(session)
        self._mirror = mirror
        improved_cases: list[BestCase] = []
        elites: dict[ProgramId, Program] = {}  # as evaluated, for the prompts that show them
        for program, evaluation, cell in applied:
            for case in evaluation.cases:
                held = self._best_cases.get(case.key)
                if held is None or case.cost < held.cost:
                    best_case = BestCase(
                        key=case.key, cost=case.cost, detail=case.detail, program_id=program.id
                    )
                    self._best_cases[case.key] = best_case
                    improved_cases.append(best_case)
            score = evaluation.score
            if evaluation.status is not ProgramStatus.EVALUATED or score is None or cell is None:
                continue
            if program.parent_id is None:  # the seed enters every island at its current epoch
                targets = list(mirror.epochs.items())
            else:
                targets = [(program.island, program.epoch)]
            for island, epoch in targets:
                decided = mirror.offer(
                    island=island, cell=cell, program_id=program.id, score=score, epoch=epoch
                )
                if decided not in WRITTEN:
                    continue
                written = await repository.add_elite(
                    session,
                    job_id=self._job.id,
                    island=island,
                    cell=cell,
                    program_id=program.id,
                    score=score,
                    epoch=epoch,
                )
                if written is not decided:  # someone else wrote: read the archive again
                    log.warning("job %s: archive changed outside; reloading", self._job.id)
                    self._mirror = None
                elites[program.id] = repository.evaluated_program(program, evaluation, cell)
        if improved_cases:
            await repository.record_best_cases(session, self._job.id, improved_cases)
        if elites:
            self._cache(list(elites.values()))
            self._archive_changed.set()

    # ------------------------------------------------------------ re-measures

    def _beats_best(self, score: float | None) -> bool:
        best = self.progress.best_score
        return score is not None and (best is None or score > best)

    async def _remeasure_more(self) -> None:
        """Start the re-measures of the best would-be bests (programs never re-measured that
        beat the confirmed best), while fewer than the policy's ``top_k`` run."""
        free = self._remeasures.free
        if free == 0 or self._final_state is not JobState.DONE:
            return
        async with self._transaction() as session:
            candidates = await repository.remeasure_candidates(
                session,
                self._job.id,
                above=self.progress.best_score,
                exclude=self._remeasures.program_ids(),
                limit=free,
            )
        tasks = [task for program in candidates for task in self._remeasures.start(program)]
        try:
            await self._queue.submit_many(tasks)
        except BaseException:  # not sent: the next call finds them in the database again
            for program in candidates:
                self._remeasures.drop(program.id)
            raise

    async def _apply_samples(self, samples: Sequence[Evaluation]) -> None:
        """Record re-measure samples; judge each program whose samples are all in, and move the
        job's best to it if its confirmed figure is the best."""
        self.progress.remeasured += len(samples)
        landed = [done for sample in samples if (done := self._remeasures.land(sample))]
        for program, results in landed:
            picked = program.score if program.score is not None else 0.0
            verdict = judge(
                picked,
                results,
                baseline_cases=await self._baseline(),
                policy=self._remeasures.policy,
            )
            confirmed = verdict.confirmed if verdict.verdict is Verdict.CONFIRMED else None
            best = confirmed is not None and self._beats_best(confirmed)
            async with self._transaction() as session:
                recorded = await repository.record_remeasure(session, program.id, verdict)
                if recorded and best and confirmed is not None:
                    await repository.set_job_best(session, self._job.id, program.id, confirmed)
            if recorded and best:
                self.progress.best_score = confirmed
            if verdict.note:
                log.info("job %s program %s: %s", self._job.id, program.id, verdict.note)
        if landed:
            await self._remeasure_more()

    async def _baseline(self) -> dict[str, float]:
        """The initial program's cost per case: what per-case speedups are measured against."""
        if self._baseline_cases is None:
            async with self._transaction() as session:
                found = await repository.find_program_by_hash(
                    session, self._job.id, content_hash(self._problem.initial_program)
                )
                initial = None if found is None else await repository.get_program(session, found)
            if initial is None or initial.status is not ProgramStatus.EVALUATED:
                return {}
            self._baseline_cases = {case.key: case.cost for case in initial.cases}
        return self._baseline_cases

    def _count(self, evaluation: Evaluation) -> None:
        if evaluation.status is ProgramStatus.EVALUATED:
            self.progress.evaluated += 1
        elif evaluation.status is ProgramStatus.REJECTED:
            self.progress.rejected += 1
        else:
            self.progress.failed += 1
        if evaluation.status is ProgramStatus.FAILED:
            log.debug("program %s failed: %s", evaluation.program_id, evaluation.error)

    # -------------------------------------------------------------- control

    async def _watch_control(self, started: float) -> None:
        """Stop proposing on the wall budget, or when the job is paused or cancelled outside."""
        wall_budget = self._config.max_wall_s
        already = self._job.wall_s
        poll = CONTROL_POLL_S if wall_budget is None else min(CONTROL_POLL_S, 0.5)
        while not self._stop_proposing.is_set():
            try:
                async with asyncio.timeout(poll):
                    await self._stop_proposing.wait()
                break
            except TimeoutError:
                pass
            if wall_budget is not None and already + time.monotonic() - started >= wall_budget:
                log.info("job %s: wall budget of %.0f s reached", self._job.id, wall_budget)
                self._stop_proposing.set()
                break
            async with self._transaction() as session:
                job = await repository.get_job(session, self._job.id)
            if job is not None and job.state in (JobState.PAUSED, JobState.CANCELLED):
                self._final_state = job.state
                self._stop_proposing.set()
        self._archive_changed.set()  # wake proposals waiting for a first elite

    def _fail(self, error: str) -> None:
        log.error("job %s failed: %s", self._job.id, error)
        self._final_state = JobState.FAILED
        self._error = error
        self._stop_proposing.set()
        self._archive_changed.set()

    def _proposal_write(
        self,
    ) -> contextlib.AbstractAsyncContextManager[AsyncSession | AsyncConnection]:
        """Where a proposal batch is written: on Postgres a connection in autocommit (the write
        is one statement, atomic by itself), elsewhere a transaction."""
        if self._autocommit is None:
            return self._transaction(proposals=True)
        return self._autocommit_connection(self._autocommit)

    @contextlib.asynccontextmanager
    async def _autocommit_connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """The run's one autocommit connection, checked out once rather than per batch (a
        checkout and its return cost as much CPU as the statement). A write that raises drops
        it: the next one connects afresh, so a database restart costs one failed batch."""
        async with self._write_lock:
            if self._held is None:
                self._held = await engine.connect()
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
                log.debug("job %s: the proposal connection closed uncleanly", self._job.id)

    def _transaction(self, *, proposals: bool = False) -> _Transaction:
        """An archive transaction, or with ``proposals`` one that writes proposals and children
        (or only reads), which may overlap archive transactions where the database allows."""
        return _Transaction(self._sessions, self._write_lock if proposals else self._db_lock)


class _Transaction:
    """``async with``: one session, one transaction, committed on success; one at a time."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], lock: asyncio.Lock) -> None:
        self._sessions = sessions
        self._lock = lock
        self._session: AsyncSession | None = None

    async def __aenter__(self) -> AsyncSession:
        await self._lock.acquire()
        self._session = self._sessions()
        await self._session.begin()
        return self._session

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._session is not None
        try:
            if exc_type is None:
                await self._session.commit()
            else:
                await self._session.rollback()
        finally:
            await self._session.close()
            self._lock.release()


def _make_view(program: Program) -> ProgramView:
    return ProgramView(
        id=program.id,
        source=program.source,
        score=program.score,
        metrics=program.metrics,
        cases=program.cases,
        feedback=program.feedback,
        error=program.error,
        stderr=program.artifacts.get("stderr", ""),
    )


def _derived_seed(seed: int, program: Program) -> int:
    return int(np.random.default_rng([seed, program.proposal_index + 1]).integers(2**31))
