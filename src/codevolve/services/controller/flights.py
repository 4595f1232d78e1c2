"""The programs in flight: inserted (pending), their tasks queued, their results not applied.

A program's task is sent only after its row committed. A task that could not be sent is not in
flight: the end of the run finds the program pending and sends it then. A program in flight may
hold one of the run's proposal slots (slots.py), released when its result lands.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.job import Job
from codevolve.core.program import Evaluation, Program, ProgramId
from codevolve.core.task import Task
from codevolve.evaluator_workers.queue import TaskQueue
from codevolve.program_db.job_store import JobStore
from codevolve.services.controller.launch_reuse import KeysOf, with_stored_timings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InFlight:
    program: Program
    task: Task  # as enqueued; continued when a worker hands the program on


class Flights:
    """The job's programs in flight and the queue their tasks go to."""

    def __init__(
        self, job: Job, queue: TaskQueue, store: JobStore, *, launch_keys: KeysOf | None = None
    ) -> None:
        self._job = job
        self._queue = queue
        self._store = store
        self._launch_keys = launch_keys  # the problem's, when it keeps GPU timings per launch
        self._flying: dict[ProgramId, InFlight] = {}

    def __bool__(self) -> bool:
        return bool(self._flying)

    def __contains__(self, program_id: ProgramId) -> bool:
        return program_id in self._flying

    def get(self, program_id: ProgramId) -> InFlight | None:
        return self._flying.get(program_id)

    def land(self, program_id: ProgramId) -> InFlight | None:
        """The program's flight, now over (None: it was not in flight)."""
        return self._flying.pop(program_id, None)

    def task(self, program: Program, *, parent_scores: dict[str, float], seed: int | None) -> Task:
        """The program's task; ``seed`` None: the one derived from the job's seed."""
        config = self._job.config
        return Task(
            program_id=program.id,
            job_id=self._job.id,
            problem=config.problem,  # what workers resolve, e.g. bundle:<sha>
            source=program.source,
            seed=seed if seed is not None else derived_seed(config.seed, program),
            parent_scores=parent_scores,
            limits=config.sandbox,
            attempt=program.attempts,
            initial=program.parent_id is None,
        )

    async def resend(self, program: Program) -> None:
        """Send a program already in the database again (a resume, a lost queue): one more
        attempt counted, and its parent's stage scores for the parent-relative thresholds."""
        async with self._store.transaction() as unit:
            attempts = await unit.mark_enqueued(program.id)
            parent = None if program.parent_id is None else await unit.program(program.parent_id)
        program = dataclasses.replace(program, attempts=attempts)
        parent_scores = dict(parent.stage_scores) if parent else {}
        task = self.task(program, parent_scores=parent_scores, seed=None)
        await self.send(InFlight(program=program, task=task))

    async def resend_pending(self, *, stranded_only: bool = False) -> int:
        """Send every pending program of the job again, keeping the slot a flight holds;
        returns how many. ``stranded_only``: only those not in flight (a proposal broken
        between inserting its child and sending its task, e.g. by a database restart)."""
        async with self._store.transaction() as unit:
            pending = await unit.pending_programs()
        sent = 0
        for program in pending:
            flight = self._flying.get(program.id)
            if stranded_only and flight is not None:
                continue
            if stranded_only:
                log.warning("job %s: program %s had no task; enqueued", self._job.id, program.id)
            await self.resend(program)  # a slot it holds stays held (slots.py)
            sent += 1
        return sent

    async def send(self, flight: InFlight) -> None:
        """Queue one program's task."""
        self._flying[flight.program.id] = flight
        try:
            await self._queue.submit(flight.task)
        except BaseException:  # not queued: nothing is in flight, and the end of the run sends it
            self._flying.pop(flight.program.id, None)
            raise

    async def send_many(self, flights: Sequence[InFlight]) -> None:
        """Queue a batch of new children's tasks in one round trip."""
        for flight in flights:
            self._flying[flight.program.id] = flight
        try:
            await self._queue.submit_many([flight.task for flight in flights])
        except BaseException:  # not queued: nothing is in flight, and the end of the run sends it
            for flight in flights:
                self._flying.pop(flight.program.id, None)
            raise

    async def hand_on(self, evaluation: Evaluation) -> None:
        """Queue the rest of a cascade that a worker could not run (a GPU stage) for a worker
        with the capability it needs; the stages already run travel with the task."""
        flight = self._flying.get(evaluation.program_id)
        if flight is None or evaluation.handoff is None:
            log.info("program %s: hand-off of a task no longer in flight", evaluation.program_id)
            return
        task = dataclasses.replace(
            flight.task,
            capability=evaluation.handoff,
            start_stage=len(evaluation.stages),
            prior_stages=evaluation.stages,
        )
        task = await with_stored_timings(task, self._store, self._launch_keys)
        self._flying[evaluation.program_id] = dataclasses.replace(flight, task=task)
        await self._queue.submit(task)


def derived_seed(seed: int, program: Program) -> int:
    """The evaluation seed of a program sent again: fixed by the job's seed and its index."""
    return int(np.random.default_rng([seed, program.proposal_index + 1]).integers(2**31))
