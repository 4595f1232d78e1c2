"""The evolution loop: one asyncio loop per job.

It samples a parent and inspirations, builds a prompt, asks the proposer for a diff, applies it,
inserts the child (pending) and only then enqueues its task; results are applied with a guarded
transition, so a duplicate delivery changes nothing. Every state change that matters is committed
before the next step, so the process can be killed at any point and the job resumed: pending
programs are re-enqueued, evaluated ones are never evaluated again.

Many proposals are in flight at once (``RunConfig.max_in_flight``). The loop says what happens;
its collaborators say how:

- :class:`~codevolve.program_db.job_store.JobStore`: transactions, locks, the batched writes;
- :class:`.parents.ParentCache`: the archive mirrored in memory and the elite programs, so that
  parents are drawn without a query; :func:`.islands.maintain`: migration and resets;
- :class:`.proposal_writes.ProposalWrites`: settled proposals written in batches, then their
  children's tasks sent in one round trip; :class:`.flights.Flights`: what is in flight;
- :class:`.results.ResultApplier`: results applied in batches (one guarded UPDATE);
- :class:`.confirmation.BestConfirmation`: a would-be best is re-measured on fresh seeds and
  only its confirmed figure can make it the job's best.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from codevolve.core.job import Job, JobState
from codevolve.core.measurement import RemeasurePolicy
from codevolve.core.problem import Problem
from codevolve.core.program import Evaluation, ProgramId, ProgramStatus
from codevolve.evaluator_workers.queue import TaskQueue
from codevolve.program_db.elites import Sample
from codevolve.program_db.job_store import JobStore, Sessions
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.proposers.base import Proposer
from codevolve.services.controller import islands
from codevolve.services.controller.confirmation import BestConfirmation
from codevolve.services.controller.flights import Flights, InFlight
from codevolve.services.controller.launch_reuse import keys_of
from codevolve.services.controller.parents import ParentCache
from codevolve.services.controller.progress import Progress
from codevolve.services.controller.proposal_ledger import ProposalLedger
from codevolve.services.controller.proposal_pool import ProposalPool, content_hash
from codevolve.services.controller.proposal_writes import (
    KnownSources,
    ProposalWrites,
    Written,
    answered,
    failed_entry,
    initial_program,
)
from codevolve.services.controller.remeasures import AT_ONCE, Remeasures
from codevolve.services.controller.results import ResultApplier, ResultReads
from codevolve.services.controller.slots import Slot, Slots

log = logging.getLogger(__name__)

CONTROL_POLL_S = 2.0  # seconds; how often the job's state is re-read (pause/cancel from outside)
# seconds; how often a running job's wall time is stored (readers show a running job's time
# without knowing when its run began; a crash loses at most this much of the wall budget)
WALL_SAVE_S = 2.0
# Draws a cpu_bound proposer (the simulated one) gets again, without spending a proposal, when
# its child is a copy of a program the job holds; past them the copy is logged as a duplicate.
DUPLICATE_RETRIES = 8

__all__ = ["Controller", "Progress", "content_hash"]


class Controller:
    """Runs one job until its budget is spent, it is paused or cancelled, or it fails."""

    def __init__(
        self,
        job: Job,
        *,
        sessions: Sessions,
        queue: TaskQueue,
        problem: Problem,
        proposer: Proposer,
        on_progress: Callable[[Progress], None] | None = None,
        proposal_processes: int = 0,
    ) -> None:
        """``proposal_processes``: child processes that make the proposals of a ``cpu_bound``
        proposer (the simulated one), so that this process's core goes to the database, the
        queue and the archive; 0 makes them here. Other proposers always run here."""
        self._job, self._config = job, job.config
        self._queue, self._problem, self._proposer = queue, problem, proposer
        self._store = JobStore(sessions, job.id)
        self._ledger = ProposalLedger(job.config, proposer)  # cost budget, prompt logs, learning
        # The prompt's text is rendered only for whoever reads it: the proposer or the log.
        self._renders_prompts = proposer.reads_prompt_text or self._ledger.logs_prompts
        self._on_progress = on_progress or (lambda _p: None)
        self._pool = ProposalPool(  # its processes start and stop with run()
            proposer,
            processes=proposal_processes if proposer.cpu_bound else 0,
            max_code_length=self._config.max_code_length,
        )
        self._slots = Slots(self._config.max_in_flight)
        self._flights = Flights(job, queue, self._store, launch_keys=keys_of(problem))
        known = KnownSources(content_hash(problem.initial_program))
        self._writes = ProposalWrites(self._store, self._flights, self._slots, known=known)
        self._parents = ParentCache(self._store, self._config)
        self._results = ResultApplier(self._store, self._parents, problem.features)
        self._reads = ResultReads(queue)
        self._stop_proposing = asyncio.Event()
        self._landed = asyncio.Event()  # set when results land (or proposing stops)
        self._final_state = JobState.DONE
        self._error: str | None = None
        self._wall_saved = 0.0  # time.monotonic() up to which the run's wall time is stored
        self.progress = Progress(max_proposals=self._config.max_proposals)
        policy = RemeasurePolicy(top_k=AT_ONCE, samples=self._config.remeasure_samples)
        self._confirmation = BestConfirmation(
            self._store,
            queue,
            Remeasures(job.id, self._config, policy),
            tally=self.progress,
            initial_hash=content_hash(problem.initial_program),
        )

    @property
    def job(self) -> Job:
        return self._job

    # ------------------------------------------------------------------ run

    async def run(self) -> JobState:
        """Run (or resume) the job; returns the state it ends in."""
        started = self._wall_saved = time.monotonic()
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
            await self._store.close()
            async with self._store.transaction() as unit:
                await unit.add_wall(time.monotonic() - self._wall_saved)
        async with self._store.transaction() as unit:
            await unit.set_state(self._final_state, error=self._error)
        return self._final_state

    async def _start(self) -> tuple[int, int]:
        """Mark the job running, seed it or re-enqueue what a crash left pending."""
        async with self._store.transaction() as unit:
            await unit.set_state(JobState.RUNNING)
            count, next_index = await unit.proposal_stats()
            pending = await unit.pending_programs()
            if await unit.find_by_hash(content_hash(self._problem.initial_program)) is None:
                pending = [initial_program(self._job, self._problem.initial_program)]
                await unit.insert_program(pending[0])
            best = await unit.confirmed_best()
            confirmed = None if best is None or best.remeasure is None else best.remeasure.confirmed
            self.progress.best_score = confirmed
            self._results.best_cases = await unit.best_cases()
            self._ledger.warm_start(await unit.proposal_usage())
            self._parents.mirror = await self._parents.load(unit)
        for program in pending:
            await self._flights.resend(program)
        if pending:
            log.info("job %s: %d pending program(s) enqueued", self._job.id, len(pending))
        await self._remeasure_more()  # those a crash interrupted
        return count, next_index

    async def requeue_pending(self) -> int:
        """Enqueue every pending program and every re-measure sample not landed again, e.g.
        after the queue lost its tasks (Redis restarted empty); returns how many tasks. A
        result that also arrives is applied once."""
        resent = await self._flights.resend_pending()
        outstanding = self._confirmation.outstanding()
        await self._queue.submit_many(outstanding)
        return resent + len(outstanding)

    async def _produce(
        self, tg: asyncio.TaskGroup, *, proposals_done: int, next_index: int
    ) -> None:
        """Start proposals while the budget lasts; each holds a slot until its result lands."""
        remaining = self._config.max_proposals - proposals_done
        index = next_index
        while remaining > 0 and not self._stop_proposing.is_set():
            slot = await self._slots.take()
            if self._ledger.over_budget():
                log.info("job %s: cost budget reached", self._job.id)
                self._stop_proposing.set()
            if self._stop_proposing.is_set():
                slot.release()
                break
            tg.create_task(self._propose(index, slot))
            index += 1
            remaining -= 1
        await self._slots.drain()  # all proposals resolved, all their results applied

    # ------------------------------------------------------------ proposals

    async def _propose(self, index: int, slot: Slot) -> None:
        """One proposal, start to enqueue. The controller's per-iteration error boundary. The
        slot goes back at its end unless its child was enqueued (then when the result lands)."""
        try:
            await self._propose_once(index, slot)
        except asyncio.CancelledError:
            raise
        except Exception:  # the iteration boundary: record, log with ids, go on
            log.exception("job %s proposal %d failed in the controller", self._job.id, index)
            async with self._store.transaction() as unit:
                failed = failed_entry(index, self._proposer)
                self.progress.proposals += await unit.record_proposal(failed)
        finally:
            slot.release()
            self._on_progress(self.progress)

    async def _propose_once(self, index: int, slot: Slot) -> None:
        """Sample, prompt, propose, write; an enqueued child takes ``slot`` over."""
        island = index % self._config.islands
        rng = np.random.default_rng([self._config.seed, index])
        await islands.maintain(self._store, self._parents, self._config, index=index, rng=rng)
        sample = None
        while sample is None:
            sample = await self.sample(island, rng)
            best_cases = dict(self._results.best_cases)
            if sample is None:  # nothing evaluated yet: wait for the seed to land
                if self._stop_proposing.is_set():
                    return
                self._parents.changed.clear()
                await self._parents.changed.wait()
        parent_view = self._parents.view(sample.parent)
        inspirations = [self._parents.view(p) for p in sample.inspirations]
        notes = ""
        if self._renders_prompts:  # a problem's notes may read every program shown: off the loop
            notes = await asyncio.to_thread(self._problem.prompt_notes, parent_view, inspirations)
        prompt = build_prompt(
            job_id=self._job.id,
            problem=self._problem.name,
            context=self._problem.description,
            proposal_index=index,
            island=island,
            parent=parent_view,
            inspirations=inspirations,
            best_cases=best_cases,
            rng=rng,
            styles=self._ledger.styles,
            render=self._renders_prompts,
            notes=notes,
        )
        settled = await self._pool.settle(prompt, rng)
        retries = DUPLICATE_RETRIES if self._proposer.cpu_bound else 0
        while retries and self._writes.copies_known(settled):
            # A copy of a known program: another draw costs nothing, a proposal would.
            settled = await self._pool.settle(prompt, rng)
            retries -= 1
        parent = sample.parent
        proposal = settled.proposal
        answer = answered(
            self._job,
            index,
            island=island,
            epoch=sample.epoch,
            parent=parent,
            settled=settled,
            prompt=prompt,
            texts=self._ledger.texts(prompt, proposal),
        )
        written = await self._writes.write(
            answer, parent_scores=dict(parent.stage_scores), seed=settled.seed, slot=slot
        )
        self.progress.proposals += 1
        self.progress.apply_failed += written is Written.RECORDED
        self.progress.duplicates += written is Written.DUPLICATE
        child = answer.child.id if answer.child and written is Written.CHILD else None
        self._ledger.settled(prompt, proposal, child=child, parent_score=parent.score)
        if written is Written.DUPLICATE and self._flights and not self._stop_proposing.is_set():
            # Nothing new came of this parent. A proposer that answers a parent the same way
            # each time (the simulated one) would spend the whole budget on copies before the
            # first result lands: this slot waits for a result, which may change the parents.
            self._landed.clear()
            await self._landed.wait()

    async def sample(self, island: int, rng: np.random.Generator) -> Sample | None:
        """A parent and inspirations drawn from the in-memory archive (see :class:`ParentCache`)."""
        return await self._parents.sample(island, rng)

    # -------------------------------------------------------------- results

    async def _consume_results(self) -> None:
        """Apply results until every proposal is resolved and nothing is in flight."""
        while not self._nothing_awaited():
            evaluations = await self._reads.next()
            if not evaluations and self._nothing_awaited():
                # A proposal broken between inserting its child and enqueueing it (a database
                # restart) leaves the child pending with no task: send it before ending.
                await self._flights.resend_pending(stranded_only=True)
            if not evaluations:
                continue
            await self._apply(evaluations)
            self._on_progress(self.progress)

    def _end_result_wait(self) -> None:
        """Stop a read that waits for results when none can come."""
        if self._nothing_awaited():
            self._reads.stop()

    def _nothing_awaited(self) -> bool:
        """The run is over and no result it waits for can come. A run that ends done waits for
        its re-measures (its report names a confirmed best); a paused, cancelled or failed one
        leaves them to the resume, which finds them in the database."""
        remeasuring = bool(self._confirmation) and self._final_state is JobState.DONE
        return self._stop_proposing.is_set() and not self._flights and not remeasuring

    async def _apply(self, evaluations: Sequence[Evaluation]) -> None:
        finals, samples = [], []
        for evaluation in evaluations:
            if evaluation.handoff is not None:  # unfinished: the next stage runs elsewhere
                lane = self._confirmation if evaluation.remeasure else self._flights
                await lane.hand_on(evaluation)
            elif evaluation.remeasure:
                samples.append(evaluation)
            else:
                finals.append(evaluation)
        if samples and await self._confirmation.apply_samples(samples):
            await self._remeasure_more()
        if finals:
            await self._apply_programs(finals)

    async def _apply_programs(self, finals: Sequence[Evaluation]) -> None:
        flights: dict[ProgramId, InFlight | None] = {}
        for evaluation in finals:  # a program twice in the batch (a duplicate delivery): land once
            if evaluation.program_id not in flights:
                flights[evaluation.program_id] = self._flights.land(evaluation.program_id)
        sent = {pid: flight.program for pid, flight in flights.items() if flight}
        applied = await self._results.apply(finals, sent)
        for result in applied:
            evaluation = result.evaluation
            self.progress.count(evaluation)
            self._ledger.evaluated(evaluation)
            seed_failed = evaluation.status is not ProgramStatus.EVALUATED
            if result.program.parent_id is None and seed_failed:
                self._fail(f"the initial program did not pass: {evaluation.error or 'rejected'}")
        if any(self._confirmation.beats_best(result.evaluation.score) for result in applied):
            await self._remeasure_more()  # before the slots go back: the run's end waits for it
        for program_id in flights:
            self._slots.landed(program_id)
        self._landed.set()

    async def _remeasure_more(self) -> None:
        """More re-measures, unless the run ends other than done (the resume starts them)."""
        if self._final_state is JobState.DONE:
            await self._confirmation.start_more()

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
            now = time.monotonic()
            save_wall = now - self._wall_saved >= WALL_SAVE_S
            async with self._store.transaction() as unit:
                job = await unit.job()
                if save_wall:
                    await unit.add_wall(now - self._wall_saved)
            if save_wall:
                self._wall_saved = now
            if job is not None and job.state in (JobState.PAUSED, JobState.CANCELLED):
                self._final_state = job.state
                self._stop_proposing.set()
        self._parents.changed.set()  # wake proposals waiting for a first elite
        self._landed.set()  # and those waiting after a duplicate

    def _fail(self, error: str) -> None:
        log.error("job %s failed: %s", self._job.id, error)
        self._final_state = JobState.FAILED
        self._error = error
        self._stop_proposing.set()
        self._parents.changed.set()
        self._landed.set()
